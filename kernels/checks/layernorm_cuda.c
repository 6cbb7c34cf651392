/*
 * layernorm checks -> the library's CUDA build (dl_cuda_layernorm_*), default stream.
 * A library without layer norm (no DL_HAS_LAYERNORM) leaves the table empty
 * and the checks are not offered.
 */
#include <stddef.h>

#include "demolib.h"
#include "layernorm.h"

#ifdef DL_HAS_LAYERNORM
static enum dl_dtype dl_dtype_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static int fwd(enum nw_dtype d, const void *x, const void *gamma, const void *beta, void *y, float *mean,
	       float *rstd, int rows, int cols, float eps)
{
	return dl_cuda_layernorm_fwd(dl_dtype_of(d), x, gamma, beta, y, mean, rstd, rows, cols, eps, NULL);
}

static int bwd(enum nw_dtype d, const void *x, const void *gamma, const float *mean, const float *rstd,
	       const void *dy, void *dx, void *dgamma, void *dbeta, int rows, int cols)
{
	return dl_cuda_layernorm_bwd(dl_dtype_of(d), x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols,
				     NULL);
}

const struct layernorm_kernels layernorm_kernels = {
    .fwd_name = "dl_cuda_layernorm_fwd",
    .bwd_name = "dl_cuda_layernorm_bwd",
    .fwd = fwd,
    .bwd = bwd,
    .refs = &layernorm_refs_cuda,
};
#else
const struct layernorm_kernels layernorm_kernels = {NULL, NULL, NULL, NULL, NULL};
#endif
