/*
 * demolib: a small GPU kernel library (softmax forward and backward) with a
 * CPU build of the same algorithms. It is the library numwatch watches in the
 * demo: its git history holds one silent numerical bug.
 *
 * Tensors are dense, row-major [rows, cols] arrays of one dtype. Every entry
 * point returns 0, or a negative errno value (-EINVAL for bad arguments,
 * -EIO when a CUDA launch failed). Empty tensors (rows or cols 0) are valid
 * and touch no memory.
 */
#ifndef DEMOLIB_H
#define DEMOLIB_H

#ifdef __cplusplus
extern "C" {
#endif

#define DL_VERSION "0.3.1"

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

#ifdef __cplusplus
}
#endif

#endif
