/*
 * Multi-scale deformable attention forward and backward, CUDA build. One
 * warp per (batch, query, head) group, lane l handling channels l, l + 32,
 * ...; the sampling setup of a point is computed by every lane alike. In the
 * backward pass the lanes' partial sums of dattn and dloc are combined with
 * an xor butterfly, and dvalue is accumulated with float atomics in a
 * workspace, then converted to the dtype: its bits depend on the order in
 * which the atomics land.
 */
#include <math.h>

#include "common.cuh"

using dl::ld;
using dl::st;

#define WARP    32
#define THREADS 128
#define MAX_CH  (4 * WARP)

struct levels {
	long start[DL_MSDA_MAX_LEVELS];
	long S;
};

struct point {
	bool any;
	float lx, ly, hx, hy, gx, gy;
	long pix[4];
	bool in[4];
	float w[4];
};

__device__ static void setup_point(float locx, float locy, int W, int H, int padding, int align, point &p)
{
	float x = align ? locx * (float)(W - 1) : locx * (float)W - 0.5f;
	float y = align ? locy * (float)(H - 1) : locy * (float)H - 0.5f;

	p.gx = align ? (float)(W - 1) : (float)W;
	p.gy = align ? (float)(H - 1) : (float)H;
	if (padding == DL_MSDA_BORDER) {
		if (!(x > 0.0f && x < (float)(W - 1)))
			p.gx = 0.0f;
		if (!(y > 0.0f && y < (float)(H - 1)))
			p.gy = 0.0f;
		x = fminf(fmaxf(x, 0.0f), (float)(W - 1));
		y = fminf(fmaxf(y, 0.0f), (float)(H - 1));
		p.any = true;
	} else {
		p.any = x > -1.0f && y > -1.0f && x < (float)W && y < (float)H;
	}
	if (!p.any)
		return;
	int x0 = (int)floorf(x), y0 = (int)floorf(y);

	p.lx = x - (float)x0;
	p.ly = y - (float)y0;
	p.hx = 1.0f - p.lx;
	p.hy = 1.0f - p.ly;
	p.w[0] = p.hy * p.hx;
	p.w[1] = p.hy * p.lx;
	p.w[2] = p.ly * p.hx;
	p.w[3] = p.ly * p.lx;
	for (int k = 0; k < 4; k++) {
		int xx = x0 + (k & 1), yy = y0 + (k >> 1);

		p.in[k] = xx >= 0 && xx < W && yy >= 0 && yy < H;
		p.pix[k] = p.in[k] ? (long)yy * W + xx : 0;
	}
}

template <typename E>
__device__ static inline float corner(const E *value, const point &p, int k, long vrow, int heads, long h,
				      int D, int c)
{
	return p.in[k] ? ld(value, ((vrow + p.pix[k]) * heads + h) * D + c) : 0.0f;
}

template <typename E>
__global__ void __launch_bounds__(THREADS)
    fwd_kernel(const E *value, const E *loc, const E *attn, E *out, dl_msda_shape s, levels lv, long ngroups)
{
	long g = ((long)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
	int lane = threadIdx.x % WARP, D = s.channels;
	float acc[MAX_CH / WARP] = {0.0f, 0.0f, 0.0f, 0.0f};

	if (g >= ngroups)
		return;
	long b = g / ((long)s.queries * s.heads), h = g % s.heads;

	for (int l = 0; l < s.levels; l++)
		for (int p = 0; p < s.points; p++) {
			long pi = (g * s.levels + l) * s.points + p, vrow = b * lv.S + lv.start[l];
			float a = ld(attn, pi);
			point pt;

			setup_point(ld(loc, 2 * pi), ld(loc, 2 * pi + 1), s.level_w[l], s.level_h[l],
				    s.padding, s.align_corners, pt);
			if (!pt.any)
				continue;
#pragma unroll
			for (int j = 0; j < MAX_CH / WARP; j++) {
				int c = lane + j * WARP;

				if (c < D) {
					float smp = pt.w[0] * corner(value, pt, 0, vrow, s.heads, h, D, c);

					smp += pt.w[1] * corner(value, pt, 1, vrow, s.heads, h, D, c);
					smp += pt.w[2] * corner(value, pt, 2, vrow, s.heads, h, D, c);
					smp += pt.w[3] * corner(value, pt, 3, vrow, s.heads, h, D, c);
					acc[j] += a * smp;
				}
			}
		}
#pragma unroll
	for (int j = 0; j < MAX_CH / WARP; j++) {
		int c = lane + j * WARP;

		if (c < D)
			st(out, g * D + c, acc[j]);
	}
}

__device__ static inline float warp_sum(float v)
{
	for (int o = WARP / 2; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename E>
__global__ void __launch_bounds__(THREADS)
    bwd_kernel(const E *value, const E *loc, const E *attn, const E *dout, float *ws, E *dloc, E *dattn,
	       dl_msda_shape s, levels lv, long ngroups)
{
	long g = ((long)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
	int lane = threadIdx.x % WARP, D = s.channels;

	/* Whole warps leave together: the butterflies below need all 32 lanes. */
	if (g >= ngroups)
		return;
	long b = g / ((long)s.queries * s.heads), h = g % s.heads;

	for (int l = 0; l < s.levels; l++)
		for (int p = 0; p < s.points; p++) {
			long pi = (g * s.levels + l) * s.points + p, vrow = b * lv.S + lv.start[l];
			float a = ld(attn, pi), pd = 0.0f, px = 0.0f, py = 0.0f;
			/* A point without weight adds nothing to dvalue or dloc. */
			bool skip = a == 0.0f;
			point pt;

			setup_point(ld(loc, 2 * pi), ld(loc, 2 * pi + 1), s.level_w[l], s.level_h[l],
				    s.padding, s.align_corners, pt);
			if (pt.any)
				for (int c = lane; c < D; c += WARP) {
					float go = ld(dout, g * D + c), v[4];

					for (int k = 0; k < 4; k++)
						v[k] = corner(value, pt, k, vrow, s.heads, h, D, c);
					pd += go * (((pt.w[0] * v[0] + pt.w[1] * v[1]) + pt.w[2] * v[2]) +
						    pt.w[3] * v[3]);
					px += go * (pt.hy * (v[1] - v[0]) + pt.ly * (v[3] - v[2]));
					py += go * (pt.hx * (v[2] - v[0]) + pt.lx * (v[3] - v[1]));
					if (skip)
						continue;
					for (int k = 0; k < 4; k++)
						if (pt.in[k])
							atomicAdd(
							    ws + ((vrow + pt.pix[k]) * s.heads + h) * D + c,
							    a * go * pt.w[k]);
				}
			pd = warp_sum(pd);
			px = warp_sum(px);
			py = warp_sum(py);
			if (lane == 0) {
				st(dattn, pi, pd);
				st(dloc, 2 * pi, skip ? 0.0f : a * pt.gx * px);
				st(dloc, 2 * pi + 1, skip ? 0.0f : a * pt.gy * py);
			}
		}
}

template <typename E> __global__ void convert_kernel(const float *ws, E *dvalue, long n)
{
	long i = (long)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		st(dvalue, i, ws[i]);
}

static int check_args(enum dl_dtype dtype, const struct dl_msda_shape *s)
{
	if (!dl::dtype_ok(dtype))
		return -EINVAL;
	if (s->batch < 0 || s->queries < 0 || s->heads < 0 || s->channels < 0 || s->levels < 1 ||
	    s->levels > DL_MSDA_MAX_LEVELS || s->points < 0 || s->channels > MAX_CH)
		return -EINVAL;
	if (s->padding != DL_MSDA_ZEROS && s->padding != DL_MSDA_BORDER)
		return -EINVAL;
	for (int l = 0; l < s->levels; l++)
		if (s->level_h[l] < 1 || s->level_w[l] < 1)
			return -EINVAL;
	return 0;
}

static levels levels_of(const struct dl_msda_shape *s)
{
	levels lv = {};

	for (int l = 0; l < s->levels; l++) {
		lv.start[l] = lv.S;
		lv.S += (long)s->level_h[l] * s->level_w[l];
	}
	return lv;
}

template <typename E>
static void launch_fwd(const dl_msda_shape &s, const void *value, const void *loc, const void *attn,
		       void *out, long ngroups, cudaStream_t cs)
{
	long blocks = (ngroups * WARP + THREADS - 1) / THREADS;

	fwd_kernel<E><<<(unsigned)blocks, THREADS, 0, cs>>>((const E *)value, (const E *)loc, (const E *)attn,
							    (E *)out, s, levels_of(&s), ngroups);
}

template <typename E>
static void launch_bwd(const dl_msda_shape &s, const void *value, const void *loc, const void *attn,
		       const void *dout, float *ws, void *dvalue, void *dloc, void *dattn, long ngroups,
		       long nvalue, cudaStream_t cs)
{
	if (ngroups > 0)
		bwd_kernel<E><<<(unsigned)((ngroups * WARP + THREADS - 1) / THREADS), THREADS, 0, cs>>>(
		    (const E *)value, (const E *)loc, (const E *)attn, (const E *)dout, ws, (E *)dloc,
		    (E *)dattn, s, levels_of(&s), ngroups);
	if (nvalue > 0)
		convert_kernel<E><<<(unsigned)((nvalue + 255) / 256), 256, 0, cs>>>(ws, (E *)dvalue, nvalue);
}

extern "C" int dl_cuda_msda_fwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value,
				const void *loc, const void *attn, void *out, void *stream)
{
	cudaStream_t cs = (cudaStream_t)stream;
	long ngroups;
	int rc = check_args(dtype, s);

	if (rc)
		return rc;
	ngroups = (long)s->batch * s->queries * s->heads;
	if (ngroups == 0 || s->channels == 0)
		return 0;
	if (dtype == DL_F16)
		launch_fwd<__half>(*s, value, loc, attn, out, ngroups, cs);
	else if (dtype == DL_BF16)
		launch_fwd<__nv_bfloat16>(*s, value, loc, attn, out, ngroups, cs);
	else
		launch_fwd<float>(*s, value, loc, attn, out, ngroups, cs);
	return dl::launched();
}

extern "C" int dl_cuda_msda_bwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value,
				const void *loc, const void *attn, const void *dout, void *dvalue, void *dloc,
				void *dattn, void *stream)
{
	cudaStream_t cs = (cudaStream_t)stream;
	long ngroups, nvalue;
	float *ws = NULL;
	int rc = check_args(dtype, s);

	if (rc)
		return rc;
	ngroups = (long)s->batch * s->queries * s->heads;
	nvalue = (long)s->batch * levels_of(s).S * s->heads * s->channels;
	if (nvalue > 0) {
		if (cudaMallocAsync((void **)&ws, (size_t)nvalue * sizeof(float), cs) != cudaSuccess)
			return -ENOMEM;
		if (cudaMemsetAsync(ws, 0, (size_t)nvalue * sizeof(float), cs) != cudaSuccess) {
			cudaFreeAsync(ws, cs);
			return -EIO;
		}
	}
	if (dtype == DL_F16)
		launch_bwd<__half>(*s, value, loc, attn, dout, ws, dvalue, dloc, dattn, ngroups, nvalue, cs);
	else if (dtype == DL_BF16)
		launch_bwd<__nv_bfloat16>(*s, value, loc, attn, dout, ws, dvalue, dloc, dattn, ngroups,
					  nvalue, cs);
	else
		launch_bwd<float>(*s, value, loc, attn, dout, ws, dvalue, dloc, dattn, ngroups, nvalue, cs);
	rc = dl::launched();
	if (ws)
		cudaFreeAsync(ws, cs);
	return rc;
}
