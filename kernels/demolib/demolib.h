/*
 * demolib: a small GPU kernel library (forward and backward passes of
 * normalisation and attention ops) with a CPU build of the same algorithms.
 * It is the library numwatch watches in the demo: its git history holds
 * silent numerical bugs.
 *
 * Tensors are dense, row-major arrays of one dtype. Every entry point
 * returns 0, or a negative errno value (-EINVAL for bad arguments, -EIO when
 * a CUDA launch failed). Empty tensors (a dimension of 0) are valid and
 * touch no memory.
 */
#ifndef DEMOLIB_H
#define DEMOLIB_H

#ifdef __cplusplus
extern "C" {
#endif

#define DL_VERSION "0.6.0"

enum dl_dtype {
	DL_F32 = 0,
	DL_F16 = 1,  /* IEEE binary16, stored as uint16_t bits */
	DL_BF16 = 2, /* bfloat16, stored as uint16_t bits */
};

/* Rows longer than this take the 4-wide path (four independent lanes). */
#define DL_SOFTMAX_VEC_MIN_COLS 1024

/*
 * Host (CPU) build. y = softmax(x) along each row; dx = y * (dy - sum(dy * y))
 * along each row. Inputs and outputs must not overlap. All arithmetic is in
 * float whatever the storage dtype, as in the CUDA build.
 */
int dl_softmax_fwd(enum dl_dtype dtype, const void *x, void *y, int rows, int cols);
int dl_softmax_bwd(enum dl_dtype dtype, const void *y, const void *dy, void *dx, int rows, int cols);

/*
 * CUDA build: the same contract on device pointers. 'stream' is a
 * cudaStream_t (NULL for the default stream). The kernels are launched
 * asynchronously; a launch error is returned as -EIO, errors during the
 * kernel surface at the caller's next synchronisation.
 */
int dl_cuda_softmax_fwd(enum dl_dtype dtype, const void *x, void *y, int rows, int cols, void *stream);
int dl_cuda_softmax_bwd(enum dl_dtype dtype, const void *y, const void *dy, void *dx, int rows, int cols,
			void *stream);

/* ---- layer normalisation ------------------------------------------------------ */

/* Ops beyond softmax announce themselves, so that a check suite can be built
 * against older versions of the library. */
#define DL_HAS_LAYERNORM 1

/*
 * y = (x - mean) * rstd * gamma + beta along each row of [rows, cols], with
 * rstd = 1 / sqrt(var + eps) (the biased variance). gamma and beta hold cols
 * elements of the same dtype; mean and rstd (float, rows elements) receive
 * the row statistics for the backward pass. Arithmetic in float.
 */
int dl_layernorm_fwd(enum dl_dtype dtype, const void *x, const void *gamma, const void *beta, void *y,
		     float *mean, float *rstd, int rows, int cols, float eps);
/*
 * Gradients for dy, from x, gamma and the forward's mean and rstd:
 * dx (as x), dgamma and dbeta (cols elements, summed over rows).
 */
int dl_layernorm_bwd(enum dl_dtype dtype, const void *x, const void *gamma, const float *mean,
		     const float *rstd, const void *dy, void *dx, void *dgamma, void *dbeta, int rows,
		     int cols);
int dl_cuda_layernorm_fwd(enum dl_dtype dtype, const void *x, const void *gamma, const void *beta, void *y,
			  float *mean, float *rstd, int rows, int cols, float eps, void *stream);
int dl_cuda_layernorm_bwd(enum dl_dtype dtype, const void *x, const void *gamma, const float *mean,
			  const float *rstd, const void *dy, void *dx, void *dgamma, void *dbeta, int rows,
			  int cols, void *stream);

/* ---- multi-scale deformable attention ------------------------------------------ */

#define DL_HAS_MSDA        1
#define DL_MSDA_MAX_LEVELS 4

enum dl_msda_padding {
	DL_MSDA_ZEROS = 0,  /* corners outside a level read as 0 */
	DL_MSDA_BORDER = 1, /* coordinates are clamped to the level's edge pixels */
};

/*
 * Deformable DETR's multi-scale deformable attention with grid_sample's
 * bilinear sampling. Tensors (dense, row-major):
 *   value [batch, S, heads, channels], S = sum of level_h * level_w; level l
 *         starts at row sum_{k<l} level_h[k] * level_w[k], row-major (y, x);
 *   loc   [batch, queries, heads, levels, points, 2]: (x, y) in [0, 1] (any
 *         value is allowed; outside [0, 1] is outside the image);
 *   attn  [batch, queries, heads, levels, points];
 *   out   [batch, queries, heads, channels].
 * Pixel coordinates: x = loc_x * W - 0.5, or loc_x * (W - 1) with
 * align_corners (y likewise).
 */
struct dl_msda_shape {
	int batch, queries, heads, channels, levels, points;
	int level_h[DL_MSDA_MAX_LEVELS], level_w[DL_MSDA_MAX_LEVELS];
	int padding; /* enum dl_msda_padding */
	int align_corners;
};

int dl_msda_fwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value, const void *loc,
		const void *attn, void *out);
/* Gradients for dout: dvalue (as value), dloc (as loc), dattn (as attn). */
int dl_msda_bwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value, const void *loc,
		const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn);
/* The CUDA backward accumulates dvalue with atomics: its bits vary from run to run. */
int dl_cuda_msda_fwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value, const void *loc,
		     const void *attn, void *out, void *stream);
int dl_cuda_msda_bwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value, const void *loc,
		     const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn, void *stream);

/* ---- attention -------------------------------------------------------------------- */

#define DL_HAS_ATTENTION 1
/* Keys (and queries) are processed in tiles of this many rows. */
#define DL_ATTN_TILE         64
#define DL_ATTN_MAX_HEAD_DIM 128

/*
 * Tiled (flash-style) attention: O = softmax(scale * Q K^T + mask) V with an
 * online softmax, and LSE = log(sum(exp(scale * Q K^T))) per query row.
 * Q, O [batch, heads, seqlen_q, head_dim]; K, V [batch, heads, seqlen_k,
 * head_dim]; LSE float [batch, heads, seqlen_q]. head_dim is 1..128.
 * Causal masks are aligned to the bottom right: query i sees key j when
 * j <= i + seqlen_k - seqlen_q, so with seqlen_q > seqlen_k the first
 * seqlen_q - seqlen_k rows see no key. A row that sees no key (or any row
 * when seqlen_k is 0) gives O = 0 and LSE = -inf, and has zero gradients.
 */
struct dl_attn_shape {
	int batch, heads, seqlen_q, seqlen_k, head_dim;
	int causal;
	float scale;
};

int dl_attention_fwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q, const void *k,
		     const void *v, void *o, float *lse);
/* Gradients for dout, from the forward's O and LSE: dq, dk, dv. Deterministic. */
int dl_attention_bwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q, const void *k,
		     const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
		     void *dv);
int dl_cuda_attention_fwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q, const void *k,
			  const void *v, void *o, float *lse, void *stream);
int dl_cuda_attention_bwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q, const void *k,
			  const void *v, const void *o, const float *lse, const void *dout, void *dq,
			  void *dk, void *dv, void *stream);

#ifdef __cplusplus
}
#endif

#endif
