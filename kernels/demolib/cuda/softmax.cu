/*
 * Softmax forward and backward, CUDA build. One block per row. Rows longer
 * than DL_SOFTMAX_VEC_MIN_COLS take the 4-wide path: each thread handles
 * whole quads (four loads in flight), then the tail of cols % 4 elements.
 * Loads are scalar so that rows need no 16-byte alignment.
 */
#include <errno.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../demolib.h"

#define THREADS     128
#define VEC_THREADS 256

__device__ __forceinline__ float load(const float *p, long i)
{
	return p[i];
}

__device__ __forceinline__ float load(const __half *p, long i)
{
	return __half2float(p[i]);
}

__device__ __forceinline__ float load(const __nv_bfloat16 *p, long i)
{
	return __bfloat162float(p[i]);
}

__device__ __forceinline__ void store(float *p, long i, float v)
{
	p[i] = v;
}

__device__ __forceinline__ void store(__half *p, long i, float v)
{
	p[i] = __float2half_rn(v);
}

__device__ __forceinline__ void store(__nv_bfloat16 *p, long i, float v)
{
	p[i] = __float2bfloat16_rn(v);
}

/* Block-wide reductions: warp shuffles, then one value per warp in shared memory. */
template <bool is_max> __device__ float block_reduce(float v)
{
	__shared__ float part[32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;

	for (int o = 16; o > 0; o /= 2) {
		float w = __shfl_xor_sync(0xffffffffu, v, o);

		v = is_max ? fmaxf(v, w) : v + w;
	}
	__syncthreads(); /* part[] may still be read by a previous reduction */
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = lane < nwarps ? part[lane] : (is_max ? -INFINITY : 0.0f);
	for (int o = 16; o > 0; o /= 2) {
		float w = __shfl_xor_sync(0xffffffffu, v, o);

		v = is_max ? fmaxf(v, w) : v + w;
	}
	return v;
}

template <typename T> __global__ void fwd_kernel(const T *x, T *y, int cols)
{
	long off = (long)blockIdx.x * cols;
	float m = -INFINITY, s = 0.0f, inv;

	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		m = fmaxf(m, load(x, off + i));
	m = block_reduce<true>(m);
	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		s += expf(load(x, off + i) - m);
	s = block_reduce<false>(s);
	inv = 1.0f / s;
	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		store(y, off + i, expf(load(x, off + i) - m) * inv);
}

template <typename T> __global__ void fwd_kernel_vec4(const T *x, T *y, int cols)
{
	long off = (long)blockIdx.x * cols;
	int nq = cols / 4;
	float m = -INFINITY, s = 0.0f, inv;

	for (int q = threadIdx.x; q < nq; q += blockDim.x) {
		long k = off + 4 * q;

		m = fmaxf(fmaxf(m, fmaxf(load(x, k), load(x, k + 1))), fmaxf(load(x, k + 2), load(x, k + 3)));
	}
	for (int i = 4 * nq + threadIdx.x; i < cols; i += blockDim.x)
		m = fmaxf(m, load(x, off + i));
	m = block_reduce<true>(m);

	for (int q = threadIdx.x; q < nq; q += blockDim.x) {
		long k = off + 4 * q;

		s += (expf(load(x, k) - m) + expf(load(x, k + 1) - m)) +
		     (expf(load(x, k + 2) - m) + expf(load(x, k + 3) - m));
	}
	for (int i = 4 * nq + threadIdx.x; i < cols; i += blockDim.x)
		s += expf(load(x, off + i) - m);
	s = block_reduce<false>(s);

	inv = 1.0f / s;
	for (int q = threadIdx.x; q < nq; q += blockDim.x) {
		long k = off + 4 * q;

		for (int l = 0; l < 4; l++)
			store(y, k + l, expf(load(x, k + l) - m) * inv);
	}
	for (int i = 4 * nq + threadIdx.x; i < cols; i += blockDim.x)
		store(y, off + i, expf(load(x, off + i) - m) * inv);
}

template <typename T> __global__ void bwd_kernel(const T *y, const T *dy, T *dx, int cols)
{
	long off = (long)blockIdx.x * cols;
	float dot = 0.0f;

	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		dot += load(dy, off + i) * load(y, off + i);
	dot = block_reduce<false>(dot);
	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		store(dx, off + i, load(y, off + i) * (load(dy, off + i) - dot));
}

template <typename T> __global__ void bwd_kernel_vec4(const T *y, const T *dy, T *dx, int cols)
{
	long off = (long)blockIdx.x * cols;
	int nq = cols / 4;
	float dot = 0.0f;

	for (int q = threadIdx.x; q < nq; q += blockDim.x) {
		long k = off + 4 * q;

		dot += (load(dy, k) * load(y, k) + load(dy, k + 1) * load(y, k + 1)) +
		       (load(dy, k + 2) * load(y, k + 2) + load(dy, k + 3) * load(y, k + 3));
	}
	for (int i = 4 * nq + threadIdx.x; i < cols; i += blockDim.x)
		dot += load(dy, off + i) * load(y, off + i);
	dot = block_reduce<false>(dot);

	for (int q = threadIdx.x; q < nq; q += blockDim.x) {
		long k = off + 4 * q;

		for (int l = 0; l < 4; l++)
			store(dx, k + l, load(y, k + l) * (load(dy, k + l) - dot));
	}
	for (int i = 4 * nq + threadIdx.x; i < cols; i += blockDim.x)
		store(dx, off + i, load(y, off + i) * (load(dy, off + i) - dot));
}

/* Rows longer than DL_SOFTMAX_VEC_MIN_COLS take the 4-wide path, with more threads per row. */
static bool use_vec4(int cols)
{
	return cols > DL_SOFTMAX_VEC_MIN_COLS;
}

template <typename T> static void launch_fwd(const void *x, void *y, int rows, int cols, cudaStream_t st)
{
	if (use_vec4(cols))
		fwd_kernel_vec4<T><<<rows, VEC_THREADS, 0, st>>>((const T *)x, (T *)y, cols);
	else
		fwd_kernel<T><<<rows, THREADS, 0, st>>>((const T *)x, (T *)y, cols);
}

template <typename T>
static void launch_bwd(const void *y, const void *dy, void *dx, int rows, int cols, cudaStream_t st)
{
	if (use_vec4(cols))
		bwd_kernel_vec4<T><<<rows, VEC_THREADS, 0, st>>>((const T *)y, (const T *)dy, (T *)dx, cols);
	else
		bwd_kernel<T><<<rows, THREADS, 0, st>>>((const T *)y, (const T *)dy, (T *)dx, cols);
}

static int check_args(enum dl_dtype dtype, int rows, int cols)
{
	if (dtype != DL_F32 && dtype != DL_F16 && dtype != DL_BF16)
		return -EINVAL;
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return 0;
}

extern "C" int dl_cuda_softmax_fwd(enum dl_dtype dtype, const void *x, void *y, int rows, int cols,
				   void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	int rc = check_args(dtype, rows, cols);

	if (rc)
		return rc;
	if (rows == 0 || cols == 0)
		return 0;
	if (dtype == DL_F16)
		launch_fwd<__half>(x, y, rows, cols, st);
	else if (dtype == DL_BF16)
		launch_fwd<__nv_bfloat16>(x, y, rows, cols, st);
	else
		launch_fwd<float>(x, y, rows, cols, st);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int dl_cuda_softmax_bwd(enum dl_dtype dtype, const void *y, const void *dy, void *dx, int rows,
				   int cols, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	int rc = check_args(dtype, rows, cols);

	if (rc)
		return rc;
	if (rows == 0 || cols == 0)
		return 0;
	if (dtype == DL_F16)
		launch_bwd<__half>(y, dy, dx, rows, cols, st);
	else if (dtype == DL_BF16)
		launch_bwd<__nv_bfloat16>(y, dy, dx, rows, cols, st);
	else
		launch_bwd<float>(y, dy, dx, rows, cols, st);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
