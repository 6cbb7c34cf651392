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

/* The library's entry points on device pointers (NULL when the library has no attention). */
struct attention_kernels {
	const char *fwd_name;
	const char *bwd_name;
	int (*fwd)(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
		   void *o, float *lse);
	int (*bwd)(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
		   const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv);
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
