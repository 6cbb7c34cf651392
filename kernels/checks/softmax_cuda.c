/* softmax checks -> the library's CUDA build (dl_cuda_softmax_*), default stream. */
#include <stddef.h>

#include "demolib.h"
#include "softmax.h"

static enum dl_dtype dl_dtype_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static int fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	return dl_cuda_softmax_fwd(dl_dtype_of(d), x, y, rows, cols, NULL);
}

static int bwd(enum nw_dtype d, const void *y, const void *dy, void *dx, int rows, int cols)
{
	return dl_cuda_softmax_bwd(dl_dtype_of(d), y, dy, dx, rows, cols, NULL);
}

const struct softmax_kernels softmax_kernels = {
    .fwd_name = "dl_cuda_softmax_fwd",
    .bwd_name = "dl_cuda_softmax_bwd",
    .fwd = fwd,
    .bwd = bwd,
    .refs = &softmax_refs_cuda,
};
