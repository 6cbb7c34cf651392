/*
 * Layer normalisation forward and backward, CUDA build. One block of
 * THREADS threads per row: each thread sums a strided share of the row, and
 * block_sum() combines the shares (warp butterflies, one value per warp in
 * shared memory, a butterfly over those). dgamma and dbeta are column sums:
 * one block per COLS columns, ROW_LANES rows in flight per column, the lanes'
 * sums added in lane order, so the result is the same on every run.
 */
#include "common.cuh"

using dl::ld;
using dl::st;

#define THREADS   128
#define COLS      32
#define ROW_LANES 8

/* The sum of v over the block; every thread gets it. */
static __device__ float block_sum(float v)
{
	__shared__ float part[32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;

	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads(); /* part[] may still be read by the previous reduction */
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = lane < nwarps ? part[lane] : 0.0f;
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename T>
__global__ void fwd_kernel(const T *x, const T *gamma, const T *beta, T *y, float *mean, float *rstd,
			   int cols, float eps)
{
	long off = (long)blockIdx.x * cols;
	float s = 0.0f, m, var, rs;

	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		s += ld(x, off + i);
	m = block_sum(s) / (float)cols;
	s = 0.0f;
	for (int i = threadIdx.x; i < cols; i += blockDim.x) {
		float d = ld(x, off + i) - m;

		s += d * d;
	}
	var = block_sum(s) / (float)cols;
	rs = 1.0f / sqrtf(var + eps);
	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		st(y, off + i, (ld(x, off + i) - m) * rs * ld(gamma, i) + ld(beta, i));
	if (threadIdx.x == 0) {
		mean[blockIdx.x] = m;
		rstd[blockIdx.x] = rs;
	}
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
template <typename T>
__global__ void bwd_row_kernel(const T *x, const T *gamma, const float *mean, const float *rstd, const T *dy,
			       T *dx, int cols)
{
	long off = (long)blockIdx.x * cols;
	float m = mean[blockIdx.x], rs = rstd[blockIdx.x], a = 0.0f, b = 0.0f, c1, c2;

	for (int i = threadIdx.x; i < cols; i += blockDim.x) {
		float xhat = (ld(x, off + i) - m) * rs;
		float g = ld(dy, off + i) * ld(gamma, i);

		a += g * xhat;
		b += g;
	}
	c1 = block_sum(a) / (float)cols;
	c2 = block_sum(b) / (float)cols;
	for (int i = threadIdx.x; i < cols; i += blockDim.x) {
		float xhat = (ld(x, off + i) - m) * rs;
		float g = ld(dy, off + i) * ld(gamma, i);

		st(dx, off + i, rs * ((g - c2) - xhat * c1));
	}
}

/* dgamma = sum over rows of dy * xhat, dbeta = sum of dy; block (COLS, ROW_LANES). */
template <typename T>
__global__ void bwd_col_kernel(const T *x, const float *mean, const float *rstd, const T *dy, T *dgamma,
			       T *dbeta, int rows, int cols)
{
	__shared__ float sg[ROW_LANES][COLS + 1], sb[ROW_LANES][COLS + 1];
	int j = blockIdx.x * COLS + threadIdx.x, k = threadIdx.y;
	float ag = 0.0f, ab = 0.0f;

	if (j < cols)
		for (int r = k; r < rows; r += ROW_LANES) {
			long i = (long)r * cols + j;
			float d = ld(dy, i);

			ag += d * ((ld(x, i) - mean[r]) * rstd[r]);
			ab += d;
		}
	sg[k][threadIdx.x] = ag;
	sb[k][threadIdx.x] = ab;
	__syncthreads();
	if (k == 0 && j < cols) {
		float g = 0.0f, b = 0.0f;

		for (int l = 0; l < ROW_LANES; l++) {
			g += sg[l][threadIdx.x];
			b += sb[l][threadIdx.x];
		}
		st(dgamma, j, g);
		st(dbeta, j, b);
	}
}

template <typename T>
static void launch_fwd(const void *x, const void *gamma, const void *beta, void *y, float *mean, float *rstd,
		       int rows, int cols, float eps, cudaStream_t cs)
{
	fwd_kernel<T><<<rows, THREADS, 0, cs>>>((const T *)x, (const T *)gamma, (const T *)beta, (T *)y, mean,
						rstd, cols, eps);
}

template <typename T>
static void launch_bwd(const void *x, const void *gamma, const float *mean, const float *rstd, const void *dy,
		       void *dx, void *dgamma, void *dbeta, int rows, int cols, cudaStream_t cs)
{
	if (rows > 0)
		bwd_row_kernel<T><<<rows, THREADS, 0, cs>>>((const T *)x, (const T *)gamma, mean, rstd,
							    (const T *)dy, (T *)dx, cols);
	bwd_col_kernel<T><<<(cols + COLS - 1) / COLS, dim3(COLS, ROW_LANES), 0, cs>>>(
	    (const T *)x, mean, rstd, (const T *)dy, (T *)dgamma, (T *)dbeta, rows, cols);
}

extern "C" int dl_cuda_layernorm_fwd(enum dl_dtype dtype, const void *x, const void *gamma, const void *beta,
				     void *y, float *mean, float *rstd, int rows, int cols, float eps,
				     void *stream)
{
	cudaStream_t cs = (cudaStream_t)stream;

	if (!dl::dtype_ok(dtype) || rows < 0 || cols < 0)
		return -EINVAL;
	/* An empty row still has statistics: mean and rstd are NaN (0 / 0). */
	if (rows == 0)
		return 0;
	if (dtype == DL_F16)
		launch_fwd<__half>(x, gamma, beta, y, mean, rstd, rows, cols, eps, cs);
	else if (dtype == DL_BF16)
		launch_fwd<__nv_bfloat16>(x, gamma, beta, y, mean, rstd, rows, cols, eps, cs);
	else
		launch_fwd<float>(x, gamma, beta, y, mean, rstd, rows, cols, eps, cs);
	return dl::launched();
}

extern "C" int dl_cuda_layernorm_bwd(enum dl_dtype dtype, const void *x, const void *gamma, const float *mean,
				     const float *rstd, const void *dy, void *dx, void *dgamma, void *dbeta,
				     int rows, int cols, void *stream)
{
	cudaStream_t cs = (cudaStream_t)stream;

	if (!dl::dtype_ok(dtype) || rows < 0 || cols < 0)
		return -EINVAL;
	if (cols == 0)
		return 0;
	if (dtype == DL_F16)
		launch_bwd<__half>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols, cs);
	else if (dtype == DL_BF16)
		launch_bwd<__nv_bfloat16>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols, cs);
	else
		launch_bwd<float>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols, cs);
	return dl::launched();
}
