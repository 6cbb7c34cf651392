/*
 * Loads and stores of one element as float, and argument checks, shared by
 * the CUDA build's kernels (softmax.cu keeps its own copies).
 */
#ifndef DEMOLIB_CUDA_COMMON_CUH
#define DEMOLIB_CUDA_COMMON_CUH

#include <errno.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../demolib.h"

namespace dl
{

__device__ __forceinline__ float ld(const float *p, long i)
{
	return p[i];
}

__device__ __forceinline__ float ld(const __half *p, long i)
{
	return __half2float(p[i]);
}

__device__ __forceinline__ float ld(const __nv_bfloat16 *p, long i)
{
	return __bfloat162float(p[i]);
}

__device__ __forceinline__ void st(float *p, long i, float v)
{
	p[i] = v;
}

__device__ __forceinline__ void st(__half *p, long i, float v)
{
	p[i] = __float2half_rn(v);
}

__device__ __forceinline__ void st(__nv_bfloat16 *p, long i, float v)
{
	p[i] = __float2bfloat16_rn(v);
}

static inline bool dtype_ok(enum dl_dtype dtype)
{
	return dtype == DL_F32 || dtype == DL_F16 || dtype == DL_BF16;
}

static inline int launched(void)
{
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

} // namespace dl

#endif
