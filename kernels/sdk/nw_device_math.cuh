/*
 * Device-side helpers of the GPU references (checks/<op>_ref.cu): reading a
 * stored element, one rounding step of a same-dtype program, float
 * operations that are never fused, and the plain error of one element. One
 * place for what every op's GPU twin does the host's way (numwatch_check.h:
 * nw_load, nw_round; metrics.c: the plain error).
 */
#ifndef NW_DEVICE_MATH_CUH
#define NW_DEVICE_MATH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

extern "C" {
#include "numwatch_check.h"
}

/* Element i of a stored buffer, as float. */
__device__ static inline float load(int d, const void *buf, long i)
{
	if (d == NW_F16)
		return __half2float(((const __half *)buf)[i]);
	if (d == NW_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)buf)[i]);
	return ((const float *)buf)[i];
}

/* One rounding step of a same-dtype program (round to nearest even, like nw_round). */
__device__ static inline float round_to(int d, float v)
{
	if (d == NW_F16)
		return __half2float(__float2half_rn(v));
	if (d == NW_BF16)
		return __bfloat162float(__float2bfloat16_rn(v));
	return v;
}

/*
 * The reduction order this thread sums in a block that sums a row in
 * 'orders' orders, or -1. Orders walk different paths (direction, stride,
 * residues), and threads of one warp on different paths run one after
 * another: so the orders go to different warps first (lane 0 of each), and
 * share a warp only when there are more orders than warps. The block must
 * have a multiple of 32 threads, at least 'orders' of them (static_assert it
 * at the launch).
 */
__device__ static inline int order_of_thread(int orders)
{
	int warps = (int)(blockDim.x / 32), lane = (int)(threadIdx.x % 32), o;

	if (warps < 1)
		return (int)threadIdx.x < orders ? (int)threadIdx.x : -1;
	o = lane * warps + (int)(threadIdx.x / 32);
	return o < orders ? o : -1;
}

/* The plain programs' float operations, each rounded on its own (never fused). */
__device__ static inline float fadd(float a, float b)
{
	return __fadd_rn(a, b);
}

__device__ static inline float fsub(float a, float b)
{
	return __fsub_rn(a, b);
}

__device__ static inline float fmul(float a, float b)
{
	return __fmul_rn(a, b);
}

__device__ static inline float fdiv(float a, float b)
{
	return __fdiv_rn(a, b);
}

/* The largest plain error so far of one element: finite plain values only (sdk/metrics.c). */
__device__ static inline void note_err(double *err, float p, double ref)
{
	if (isfinite(p) && fabs((double)p - ref) > *err)
		*err = fabs((double)p - ref);
}

#endif
