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
#include "nw_order.h"

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

/*
 * Block-wide reduction (sum, or a max that ignores NaN like fmax) of one
 * value into every thread's return value; all threads of the block call it.
 * Float64 sums may add in any order: they are exact far below any dtype's
 * rounding.
 */
template <typename T, bool MAX> __device__ static T block_reduce(T v)
{
	__shared__ T part[32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32, w;

	for (w = 16; w > 0; w /= 2) {
		T o = __shfl_xor_sync(0xffffffffu, v, w);

		v = MAX ? fmax(v, o) : v + o;
	}
	__syncthreads(); /* part[] may still be read from the last call */
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = part[0];
	for (w = 1; w < nwarps; w++)
		v = MAX ? fmax(v, part[w]) : v + part[w];
	return v;
}

/*
 * Calls f(j) for j over [0, n) in reduction order o: the residue loops of
 * nw_order_stride() visit exactly nw_order_at()'s sequence.
 */
template <class F> __device__ static __forceinline__ void walk(int o, long n, F f)
{
	long k = nw_order_stride(o), r, j;

	if (k < 0) {
		for (j = n - 1; j >= 0; j--)
			f(j);
	} else if (k == 1 || n <= k) {
		for (j = 0; j < n; j++)
			f(j);
	} else {
		for (r = 0; r < k; r++)
			for (j = r; j < n; j += k)
				f(j);
	}
}

#endif
