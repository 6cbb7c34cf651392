/*
 * Tiled attention forward and backward, CUDA build (flash-style: scores are
 * never stored beyond one tile, the softmax is online).
 *
 * Forward and dQ: one block per tile of T query rows, one thread per row;
 * the block walks the key tiles the rows see (all of them, or up to the
 * diagonal when causal), loading each into shared memory. dK and dV: one
 * block per tile of T key rows, one thread per key, walking the query tiles
 * that see it; dK and dV accumulate in shared memory, one row per thread.
 * Everything a thread owns lives in shared memory rows of odd stride, so
 * that the threads of a warp hit different banks; tiles of the other side
 * are read by all threads at once (broadcast).
 */
#include <math.h>

#include "common.cuh"

using dl::ld;
using dl::st;

#define T DL_ATTN_TILE

/* Shared memory row stride: odd, so that thread r's row starts in bank r. */
__host__ __device__ static inline int stride_of(int D)
{
	return D | 1;
}

__device__ static inline long last_key(const dl_attn_shape &s, long i)
{
	return s.causal ? i + s.seqlen_k - s.seqlen_q : (long)s.seqlen_k - 1;
}

/* Key tiles a query tile [q0, q0 + nq) needs. */
__device__ static inline int key_tiles(const dl_attn_shape &s, int q0, int nq)
{
	int n = (s.seqlen_k + T - 1) / T;
	long last = last_key(s, q0 + nq - 1);

	if (last < 0)
		return 0;
	return (int)(last / T + 1 < n ? last / T + 1 : n);
}

/* Rows [r0, r0 + T) of a [rows, D] tensor into shared memory as float, zeros beyond 'rows'. */
template <typename E>
__device__ static void load_rows(const E *src, long base, int r0, int rows, int D, float *dst, int L)
{
	for (int idx = threadIdx.x; idx < T * D; idx += blockDim.x) {
		int r = idx / D, d = idx % D;

		dst[r * L + d] = r0 + r < rows ? ld(src, base + (long)(r0 + r) * D + d) : 0.0f;
	}
}

template <typename E> __device__ static float row_delta(const E *dout, const E *o, long row, int D)
{
	float sum = 0.0f;

	for (int d = 0; d < D; d++)
		sum += ld(dout, row * D + d) * ld(o, row * D + d);
	return sum;
}

/* ---- forward ------------------------------------------------------------------------ */

static size_t fwd_smem(int D)
{
	return (4 * (size_t)T * stride_of(D) + (size_t)T * (T + 1)) * sizeof(float);
}

template <typename E>
__global__ void __launch_bounds__(T)
    fwd_kernel(const E *q, const E *k, const E *v, E *o, float *lse, dl_attn_shape s)
{
	extern __shared__ float sm[];
	int D = s.head_dim, L = stride_of(D), r = threadIdx.x;
	float *sQ = sm, *sAcc = sQ + T * L, *sK = sAcc + T * L, *sV = sK + T * L, *sS = sV + T * L;
	long bh = blockIdx.y, qbase = bh * s.seqlen_q * D, kbase = bh * s.seqlen_k * D;
	int q0 = blockIdx.x * T, nq = min(T, s.seqlen_q - q0), nkt = key_tiles(s, q0, nq);
	float m = -INFINITY, l = 0.0f;

	load_rows(q, qbase, q0, s.seqlen_q, D, sQ, L);
	for (int d = 0; d < D; d++)
		sAcc[r * L + d] = 0.0f;
	for (int kt = 0; kt < nkt; kt++) {
		int k0 = kt * T;

		__syncthreads(); /* every thread is done with the previous tile */
		load_rows(k, kbase, k0, s.seqlen_k, D, sK, L);
		load_rows(v, kbase, k0, s.seqlen_k, D, sV, L);
		__syncthreads();
		if (r < nq) {
			long lim = last_key(s, q0 + r);
			float *srow = sS + r * (T + 1), mt = -INFINITY, mnew, alpha, psum = 0.0f;

			for (int c = 0; c < T; c++) {
				float sc = -INFINITY;

				if (k0 + c < s.seqlen_k && k0 + c <= lim) {
					float a = 0.0f;

					for (int d = 0; d < D; d++)
						a += sQ[r * L + d] * sK[c * L + d];
					sc = a * s.scale;
				}
				srow[c] = sc;
				mt = fmaxf(mt, sc);
			}
			mnew = fmaxf(m, mt);
			if (mnew != -INFINITY) {
				alpha = expf(m - mnew);
				for (int c = 0; c < T; c++) {
					float p = srow[c] == -INFINITY ? 0.0f : expf(srow[c] - mnew);

					srow[c] = p;
					psum += p;
				}
				l = l * alpha + psum;
				for (int d = 0; d < D; d++) {
					float a = sAcc[r * L + d] * alpha;

					for (int c = 0; c < T; c++)
						a += srow[c] * sV[c * L + d];
					sAcc[r * L + d] = a;
				}
				m = mnew;
			}
		}
	}
	if (r < nq) {
		long row = bh * s.seqlen_q + q0 + r;

		if (l == 0.0f) {
			for (int d = 0; d < D; d++)
				st(o, row * D + d, 0.0f);
			lse[row] = -INFINITY;
		} else {
			float inv = 1.0f / l;

			for (int d = 0; d < D; d++)
				st(o, row * D + d, sAcc[r * L + d] * inv);
			lse[row] = m + logf(l);
		}
	}
}

/* ---- backward: dQ --------------------------------------------------------------------- */

static size_t dq_smem(int D)
{
	return 5 * (size_t)T * stride_of(D) * sizeof(float);
}

template <typename E>
__global__ void __launch_bounds__(T) dq_kernel(const E *q, const E *k, const E *v, const E *o,
					       const float *lse, const E *dout, E *dq, dl_attn_shape s)
{
	extern __shared__ float sm[];
	int D = s.head_dim, L = stride_of(D), r = threadIdx.x;
	float *sQ = sm, *sdO = sQ + T * L, *sAcc = sdO + T * L, *sK = sAcc + T * L, *sV = sK + T * L;
	long bh = blockIdx.y, qbase = bh * s.seqlen_q * D, kbase = bh * s.seqlen_k * D;
	int q0 = blockIdx.x * T, nq = min(T, s.seqlen_q - q0), nkt = key_tiles(s, q0, nq);
	long row = bh * s.seqlen_q + q0 + r;
	float lse_r = 0.0f, delta = 0.0f;

	load_rows(q, qbase, q0, s.seqlen_q, D, sQ, L);
	load_rows(dout, qbase, q0, s.seqlen_q, D, sdO, L);
	if (r < nq) {
		lse_r = lse[row];
		delta = row_delta(dout, o, row, D);
	}
	for (int d = 0; d < D; d++)
		sAcc[r * L + d] = 0.0f;
	for (int kt = 0; kt < nkt; kt++) {
		int k0 = kt * T;

		__syncthreads();
		load_rows(k, kbase, k0, s.seqlen_k, D, sK, L);
		load_rows(v, kbase, k0, s.seqlen_k, D, sV, L);
		__syncthreads();
		if (r < nq) {
			long lim = last_key(s, q0 + r);

			for (int c = 0; c < T; c++) {
				float sc = 0.0f, dp = 0.0f, p, ds;

				if (!(k0 + c < s.seqlen_k && k0 + c <= lim))
					continue;
				for (int d = 0; d < D; d++)
					sc += sQ[r * L + d] * sK[c * L + d];
				for (int d = 0; d < D; d++)
					dp += sdO[r * L + d] * sV[c * L + d];
				p = expf(sc * s.scale - lse_r);
				ds = p * (dp - delta);
				for (int d = 0; d < D; d++)
					sAcc[r * L + d] += ds * sK[c * L + d];
			}
		}
	}
	if (r < nq)
		for (int d = 0; d < D; d++)
			st(dq, row * D + d, sAcc[r * L + d] * s.scale);
}

/* ---- backward: dK and dV ------------------------------------------------------------- */

static size_t dkdv_smem(int D)
{
	return (6 * (size_t)T * stride_of(D) + 2 * T) * sizeof(float);
}

/* A key tile (zeros beyond seqlen_k), and the tile's dK and dV accumulators cleared. */
template <typename E>
__device__ static void load_kv(const E *k, const E *v, long kbase, int k0, int Sk, int D, int L, float *sK,
			       float *sV, float *sdK, float *sdV)
{
	for (int idx = threadIdx.x; idx < T * D; idx += blockDim.x) {
		int r = idx / D, d = idx % D;
		bool in = k0 + r < Sk;
		long g = kbase + (long)(k0 + r) * D + d;

		sK[r * L + d] = in ? ld(k, g) : 0.0f;
		sV[r * L + d] = in ? ld(v, g) : 0.0f;
		sdK[r * L + d] = 0.0f;
		sdV[r * L + d] = 0.0f;
	}
}

/* bf16: a full tile is loaded without bounds checks; the last, partial one with them. */
__device__ static void load_kv(const __nv_bfloat16 *k, const __nv_bfloat16 *v, long kbase, int k0, int Sk,
			       int D, int L, float *sK, float *sV, float *sdK, float *sdV)
{
	if (k0 + T <= Sk) {
		for (int idx = threadIdx.x; idx < T * D; idx += blockDim.x) {
			int r = idx / D, d = idx % D;
			long g = kbase + (long)(k0 + r) * D + d;

			sK[r * L + d] = ld(k, g);
			sV[r * L + d] = ld(v, g);
			sdK[r * L + d] = 0.0f;
			sdV[r * L + d] = 0.0f;
		}
	} else {
		for (int idx = threadIdx.x; idx < T * D; idx += blockDim.x) {
			int r = idx / D, d = idx % D;
			bool in = k0 + r < Sk;
			long g = kbase + (long)(k0 + r) * D + d;

			sK[r * L + d] = in ? ld(k, g) : 0.0f;
			sV[r * L + d] = in ? ld(v, g) : 0.0f;
			sdK[r * L + d] = 0.0f;
			sdV[r * L + d] = 0.0f;
		}
	}
}

template <typename E>
__global__ void __launch_bounds__(T)
    dkdv_kernel(const E *q, const E *k, const E *v, const E *o, const float *lse, const E *dout, E *dk, E *dv,
		dl_attn_shape s)
{
	extern __shared__ float sm[];
	int D = s.head_dim, L = stride_of(D), c = threadIdx.x;
	/* The accumulators first: dV at the start of shared memory. */
	float *sdV = sm, *sdK = sdV + T * L, *sK = sdK + T * L, *sV = sK + T * L, *sQ = sV + T * L,
	      *sdO = sQ + T * L, *sLse = sdO + T * L, *sDelta = sLse + T;
	long bh = blockIdx.y, qbase = bh * s.seqlen_q * D, kbase = bh * s.seqlen_k * D, first = 0;
	int k0 = blockIdx.x * T, nk = min(T, s.seqlen_k - k0);

	load_kv(k, v, kbase, k0, s.seqlen_k, D, L, sK, sV, sdK, sdV);
	/* The first query row that sees key k0. */
	if (s.causal && k0 - (s.seqlen_k - s.seqlen_q) > 0)
		first = k0 - (s.seqlen_k - s.seqlen_q);
	for (int qt = (int)(first / T); qt * T < s.seqlen_q; qt++) {
		int q0 = qt * T, nq = min(T, s.seqlen_q - q0);

		__syncthreads();
		load_rows(q, qbase, q0, s.seqlen_q, D, sQ, L);
		load_rows(dout, qbase, q0, s.seqlen_q, D, sdO, L);
		if (c < nq) {
			long row = bh * s.seqlen_q + q0 + c;

			sLse[c] = lse[row];
			sDelta[c] = row_delta(dout, o, row, D);
		}
		__syncthreads();
		if (c < nk)
			for (int r = 0; r < nq; r++) {
				float sc = 0.0f, dp = 0.0f, p, ds;

				if (k0 + c > last_key(s, q0 + r))
					continue; /* key c is not visible from row r */
				for (int d = 0; d < D; d++)
					sc += sQ[r * L + d] * sK[c * L + d];
				for (int d = 0; d < D; d++)
					dp += sdO[r * L + d] * sV[c * L + d];
				p = expf(sc * s.scale - sLse[r]);
				ds = p * (dp - sDelta[r]);
				for (int d = 0; d < D; d++) {
					sdV[c * L + d] += p * sdO[r * L + d];
					sdK[c * L + d] += ds * sQ[r * L + d];
				}
			}
	}
	if (c < nk) {
		long row = bh * s.seqlen_k + k0 + c;

		for (int d = 0; d < D; d++) {
			st(dk, row * D + d, sdK[c * L + d] * s.scale);
			st(dv, row * D + d, sdV[c * L + d]);
		}
	}
}

/* ---- entry points ------------------------------------------------------------------- */

static int check_args(enum dl_dtype dtype, const struct dl_attn_shape *s)
{
	if (!dl::dtype_ok(dtype))
		return -EINVAL;
	if (s->batch < 0 || s->heads < 0 || s->seqlen_q < 0 || s->seqlen_k < 0 || s->head_dim < 1 ||
	    s->head_dim > DL_ATTN_MAX_HEAD_DIM)
		return -EINVAL;
	return 0;
}

template <typename E>
static int launch_fwd(const dl_attn_shape &s, const void *q, const void *k, const void *v, void *o,
		      float *lse, cudaStream_t cs)
{
	size_t bytes = fwd_smem(s.head_dim);
	dim3 grid((s.seqlen_q + T - 1) / T, s.batch * s.heads);

	if (cudaFuncSetAttribute(fwd_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
	    cudaSuccess)
		return -EIO;
	fwd_kernel<E><<<grid, T, bytes, cs>>>((const E *)q, (const E *)k, (const E *)v, (E *)o, lse, s);
	return dl::launched();
}

template <typename E>
static int launch_bwd(const dl_attn_shape &s, const void *q, const void *k, const void *v, const void *o,
		      const float *lse, const void *dout, void *dq, void *dk, void *dv, cudaStream_t cs)
{
	size_t qbytes = dq_smem(s.head_dim), kbytes = dkdv_smem(s.head_dim);
	int nbh = s.batch * s.heads;

	if (cudaFuncSetAttribute(dq_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)qbytes) !=
		cudaSuccess ||
	    cudaFuncSetAttribute(dkdv_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kbytes) !=
		cudaSuccess)
		return -EIO;
	if (s.seqlen_q > 0)
		dq_kernel<E><<<dim3((s.seqlen_q + T - 1) / T, nbh), T, qbytes, cs>>>(
		    (const E *)q, (const E *)k, (const E *)v, (const E *)o, lse, (const E *)dout, (E *)dq, s);
	if (s.seqlen_k > 0)
		dkdv_kernel<E><<<dim3((s.seqlen_k + T - 1) / T, nbh), T, kbytes, cs>>>(
		    (const E *)q, (const E *)k, (const E *)v, (const E *)o, lse, (const E *)dout, (E *)dk,
		    (E *)dv, s);
	return dl::launched();
}

extern "C" int dl_cuda_attention_fwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q,
				     const void *k, const void *v, void *o, float *lse, void *stream)
{
	cudaStream_t cs = (cudaStream_t)stream;
	int rc = check_args(dtype, s);

	if (rc)
		return rc;
	if (s->batch * s->heads == 0 || s->seqlen_q == 0)
		return 0;
	if (dtype == DL_F16)
		return launch_fwd<__half>(*s, q, k, v, o, lse, cs);
	if (dtype == DL_BF16)
		return launch_fwd<__nv_bfloat16>(*s, q, k, v, o, lse, cs);
	return launch_fwd<float>(*s, q, k, v, o, lse, cs);
}

extern "C" int dl_cuda_attention_bwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q,
				     const void *k, const void *v, const void *o, const float *lse,
				     const void *dout, void *dq, void *dk, void *dv, void *stream)
{
	cudaStream_t cs = (cudaStream_t)stream;
	int rc = check_args(dtype, s);

	if (rc)
		return rc;
	if (s->batch * s->heads == 0)
		return 0;
	if (dtype == DL_F16)
		return launch_bwd<__half>(*s, q, k, v, o, lse, dout, dq, dk, dv, cs);
	if (dtype == DL_BF16)
		return launch_bwd<__nv_bfloat16>(*s, q, k, v, o, lse, dout, dq, dk, dv, cs);
	return launch_bwd<float>(*s, q, k, v, o, lse, dout, dq, dk, dv, cs);
}
