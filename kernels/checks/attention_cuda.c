/*
 * attention checks -> the library's CUDA build (dl_cuda_attention_*), default stream.
 * A library without attention (no DL_HAS_ATTENTION) leaves the table empty
 * and the checks are not offered.
 */
#include <stddef.h>

#include "attention.h"
#include "demolib.h"

#ifdef DL_HAS_ATTENTION
static enum dl_dtype dl_dtype_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static struct dl_attn_shape shape_of(const struct attn_dims *s)
{
	struct dl_attn_shape x = {s->batch,    s->heads,  s->seqlen_q, s->seqlen_k,
				  s->head_dim, s->causal, s->scale};

	return x;
}

static int fwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
	       void *o, float *lse)
{
	struct dl_attn_shape x = shape_of(s);

	return dl_cuda_attention_fwd(dl_dtype_of(d), &x, q, k, v, o, lse, NULL);
}

static int bwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
	       const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv)
{
	struct dl_attn_shape x = shape_of(s);

	return dl_cuda_attention_bwd(dl_dtype_of(d), &x, q, k, v, o, lse, dout, dq, dk, dv, NULL);
}

const struct attention_kernels attention_kernels = {
    .fwd_name = "dl_cuda_attention_fwd",
    .bwd_name = "dl_cuda_attention_bwd",
    .fwd = fwd,
    .bwd = bwd,
    .refs = &attention_refs_cuda,
};
#else
const struct attention_kernels attention_kernels = {NULL, NULL, NULL, NULL, NULL};
#endif
