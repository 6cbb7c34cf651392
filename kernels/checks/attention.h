/*
 * attention checks: attention.fwd (O and LSE) and attention.bwd (dQ, dK, dV)
 * of scaled dot-product attention, causal or not, against a float64
 * reference.
 */
#ifndef NW_CHECKS_ATTENTION_H
#define NW_CHECKS_ATTENTION_H

#include "numwatch_check.h"

/*
 * A case. Q, O, dQ [batch, heads, seqlen_q, head_dim]; K, V, dK, dV [batch,
 * heads, seqlen_k, head_dim]; LSE float [batch, heads, seqlen_q]. Causal
 * masks are aligned to the bottom right (query i sees key j when
 * j <= i + seqlen_k - seqlen_q): with seqlen_q > seqlen_k the first rows see
 * no key. Such a row (and every row when seqlen_k is 0) is defined to give
 * O = 0, LSE = -inf and zero gradients.
 */
struct attn_dims {
	int batch, heads, seqlen_q, seqlen_k, head_dim;
	int causal;
	float scale; /* 1 / sqrt(head_dim), rounded to float */
};

/*
 * What the references read: the stored inputs as doubles on the host (o and
 * lse: the backward's inputs, as stored) and the same on the device of the
 * runner's backend (in the dtype; lse float). Each side reads its own; the
 * forward reads q, k, v only.
 */
struct attn_ref_in {
	const double *q, *k, *v, *dout, *o;
	const float *lse;
	const void *q_dev, *k_dev, *v_dev, *dout_dev, *o_dev;
	const float *lse_dev;
	int orders; /* reduction orders of the plain programs, 1..NW_PLAIN_MAX */
};

/*
 * The float64 references and, per element, the plain programs' largest
 * error (nw_compare_spec.plain_err), on the host (attention_ref.c) or on the
 * GPU (attention_ref.cu, CUDA builds only). Each returns 0, -ENOMEM, or -EIO
 * after a device error (nw_trial_device_error() records it).
 */
struct attention_refs {
	const char *where; /* "host" or "cuda" */
	/* O [nq] and LSE [nlse], and their plain errors. */
	int (*fwd)(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in, double *o,
		   double *lse, double *o_err, double *lse_err);
	/*
	 * The backward's inputs: the float64 forward's O stored in the dtype into
	 * o_s (o gets the stored values back) and its LSE rounded to float. They
	 * are case data: bit-identical wherever they are computed.
	 */
	int (*bwd_inputs)(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in, void *o_s,
			  double *o, float *lse);
	/*
	 * dQ [nq], dK, dV [nk], their plain errors, and the sizes of their terms
	 * (mag: the floors of their budgets, as ref_bwd_bh computes them).
	 */
	int (*bwd)(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in,
		   double *const ref[3], double *const err[3], double mag[3]);
	/*
	 * Or fwd's results left on the device, to be compared there
	 * (nw_compare_spec.ref_dev): *out is o, o_err, lse, lse_err, one after
	 * another; the caller's to nw_dev_free(). A backend gives this or fwd.
	 */
	int (*fwd_dev)(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in,
		       double **out);
};

extern const struct attention_refs attention_refs_host;
extern const struct attention_refs attention_refs_cuda;

/*
 * Row i of one (batch, head)'s float64 forward (q, k, v point at that
 * (batch, head)), exactly as attention_refs_host computes it: O into o
 * [head_dim], LSE into *lse. scratch: (head_dim + 2) * seqlen_k doubles.
 */
void attention_ref_fwd_row(const struct attn_dims *s, const double *q, const double *k, const double *v,
			   long i, double *scratch, double *o, double *lse);

/*
 * The library's entry points on device pointers (NULL when the library has
 * no attention). attention_host.c and attention_cuda.c each define
 * attention_kernels; tests build their own tables to plant bugs.
 */
struct attention_kernels {
	const char *fwd_name;
	const char *bwd_name;
	int (*fwd)(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
		   void *o, float *lse);
	int (*bwd)(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
		   const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv);
	const struct attention_refs *refs; /* where the references run; NULL: the host */
};

extern const struct attention_kernels attention_kernels;
extern const struct nw_check attention_fwd_check;
extern const struct nw_check attention_bwd_check;

/* The tile size the families are built around (the demo library's DL_ATTN_TILE). */
#define ATTN_TILE 64

enum attention_family {
	ATTN_ALIGNED,     /* seqlens multiples of the tile, head_dim 16..128 */
	ATTN_TAIL,        /* seqlen_k not a multiple of the tile: a partial last key tile */
	ATTN_TILE_EDGE,   /* seqlens 63..65 and 127..129 */
	ATTN_HEAD_DIM,    /* odd head dims: 40, 59, 80, 96, 111 (and 1, 3, 128) */
	ATTN_CROSS,       /* seqlen_q != seqlen_k: decode-like, short keys, anything */
	ATTN_MASKED_ROWS, /* causal with seqlen_q > seqlen_k: rows that see no key */
	ATTN_TINY,        /* seqlens 0..4 x 0..4, head_dim 1..4, swept over consecutive trials */
	ATTN_EXTREME,     /* peaked scores, value offsets, tied keys, zero queries, dout scales */
	ATTN_FAMILIES,
};

/* Work cap: batch * heads * seqlen_q * seqlen_k * head_dim. */
#define ATTN_WORK_MAX (1L << 21)

/* The case of a trial: a function of (family, seed, index) only, shared by fwd and bwd. */
void attention_case(int family, uint64_t seed, uint64_t index, struct attn_dims *s);

#endif
