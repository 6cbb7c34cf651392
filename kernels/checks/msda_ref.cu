/*
 * msda references on the GPU: the same float64 results, plain-program errors
 * and dloc kinks as msda_ref.c, so that a GPU runner's trial is not bound by
 * the host CPU. Points are set up by msda_point.h, as on the host; every
 * float operation of a plain program and of the float64 sums is rounded on
 * its own (__fadd_rn, __dmul_rn, ...), and the float64 sums run in the
 * host's order, so the results are the host's to the bit.
 *
 * msda.fwd is one launch: a thread per output element (group, channel).
 *
 * msda.bwd is five launches and one copy back:
 *   1. a thread per point: its float64 and float sampling, and its kinks;
 *   2. a thread per (point, order) for dattn and dloc (their sums run over
 *      channels: the plain program in order o, the float64 one in lane 0),
 *      and, in the same launch, a thread per value site (batch, pixel,
 *      head) counting the points whose corners read it;
 *   3. one block per list: offsets of the sites' lists (exclusive scan);
 *   4. a thread per site: its (point, corner) list, by ascending point;
 *   5. a thread per dvalue element: the float64 sum over its list, and the
 *      plain program's float sums in each order. The plain backward adds to
 *      dvalue while it visits the points in order o (msda_ref.c): an
 *      element's terms come in that order, which over an ascending list is
 *      the list reversed (order 1), or, for a stride-k order, the list's
 *      points of residue 0 mod k, then those of residue 1, ...
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "msda.h"
#include "nw_device.h"
}
#include "msda_point.h"
#include "nw_device_math.cuh"
#include "nw_order.h"

#define THREADS 256

/* Dynamic shared memory a block may have without asking for more. */
#define SMEM_DEFAULT 49152

/* Float64 bilinear sample of point p for corner values v (msda_ref.c's order of terms). */
__device__ static double dsample(const struct msda_dpoint *p, const double v[4])
{
	return MP_DADD(
	    MP_DADD(MP_DADD(MP_DMUL(p->w[0], v[0]), MP_DMUL(p->w[1], v[1])), MP_DMUL(p->w[2], v[2])),
	    MP_DMUL(p->w[3], v[3]));
}

/* The point's stored location, and both samplings of it. */
__device__ static void setup(const struct msda_geo *g, int d, const void *loc, long pi,
			     struct msda_dpoint *dp, struct msda_fpoint *fp)
{
	int l = msda_level_of(g, pi), W = g->s.level_w[l], H = g->s.level_h[l];
	float lx = load(d, loc, 2 * pi), ly = load(d, loc, 2 * pi + 1);

	msda_dsetup((double)lx, (double)ly, W, H, g->s.padding, g->s.align_corners, dp);
	msda_fsetup(lx, ly, W, H, g->s.padding, g->s.align_corners, fp);
}

static unsigned blocks_for(long n)
{
	return (unsigned)((n + THREADS - 1) / THREADS);
}

/* Launches with `bytes` of dynamic shared memory need the kernel's permission beyond the default. */
static void allow_smem(const void *kernel, size_t bytes)
{
	if (bytes > SMEM_DEFAULT)
		(void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Carves one device allocation into aligned pieces. */
static size_t carve(size_t *at, size_t bytes)
{
	size_t p = *at;

	*at += (bytes + 255) / 256 * 256;
	return p;
}

/* ---- msda.fwd ----------------------------------------------------------------------------- */

/*
 * A thread per output element oi = (group, channel), channel fastest: the
 * float64 sum over the group's levels x points and the size of its terms;
 * the plain program's products with the weights (prod, [LP][nout]) and
 * their sum in each order. out: ref [nout], plain errors [nout], then the
 * block's largest size of terms.
 */
__global__ static void fwd_refs(int d, struct msda_geo g, const void *value, const void *loc,
				const void *attn, float *prod, double *out)
{
	long n = g.nout, oi = (long)blockIdx.x * THREADS + threadIdx.x;
	double mag = 0.0;

	if (oi < n) {
		long grp = oi / g.s.channels;
		int ch = (int)(oi % g.s.channels), j, k, o;
		double ref = 0.0, err = 0.0;

		for (j = 0; j < g.LP; j++) {
			long pi = grp * g.LP + j;
			float a = load(d, attn, pi), acc = 0.0f;
			struct msda_dpoint dp;
			struct msda_fpoint fp;
			double s = 0.0, v;

			setup(&g, d, loc, pi, &dp, &fp);
			if (dp.any) {
				double dv[4];

				for (k = 0; k < 4; k++)
					dv[k] = dp.in[k]
						    ? (double)load(d, value, msda_vidx(&g, pi, dp.pix[k], ch))
						    : 0.0;
				s = dsample(&dp, dv);
			}
			v = MP_DMUL((double)a, s);
			ref = MP_DADD(ref, v);
			mag = MP_DADD(mag, fabs(v));
			for (k = 0; k < 4; k++)
				if (fp.in[k])
					acc = MP_FADD(
					    acc, MP_FMUL(load(d, value, msda_vidx(&g, pi, fp.pix[k], ch)),
							 fp.w[k]));
			prod[(long)j * n + oi] = round_to(d, MP_FMUL(round_to(d, acc), a));
		}
		for (o = 0; o < NW_ORDERS; o++) {
			float sum = 0.0f;

			for (j = 0; j < g.LP; j++)
				sum = MP_FADD(sum, prod[nw_order_at(o, j, g.LP) * n + oi]);
			note_err(&err, round_to(d, sum), ref);
		}
		out[oi] = ref;
		out[n + oi] = err;
	}
	mag = block_reduce<double, true>(mag);
	if (threadIdx.x == 0)
		out[2 * n + blockIdx.x] = mag;
}

static int cuda_fwd(enum nw_dtype d, const struct msda_in *in, struct msda_ref_out *out)
{
	struct msda_geo g;
	long n, nb, i;
	size_t count;
	double *dev = NULL, *host;
	float *prod = NULL;
	int rc;

	msda_geo_init(&g, in->s);
	n = g.nout;
	nb = blocks_for(n);
	count = 2 * (size_t)n + (size_t)nb;
	out->terms[0] = out->terms[1] = out->terms[2] = 0.0;
	if (n == 0)
		return 0;
	host = (double *)malloc(count * sizeof(double));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dev, count * sizeof(double));
	if (!rc)
		rc = nw_dev_alloc((void **)&prod, (size_t)g.LP * (size_t)n * sizeof(float));
	if (!rc) {
		fwd_refs<<<(unsigned)nb, THREADS>>>(d, g, in->value_dev, in->loc_dev, in->attn_dev, prod,
						    dev);
		rc = nw_dev_launched("msda reference");
	}
	if (!rc)
		rc = nw_dev_download(host, dev, count * sizeof(double));
	nw_dev_free(prod);
	nw_dev_free(dev);
	if (!rc) {
		memcpy(out->ref[0], host, (size_t)n * sizeof(double));
		memcpy(out->plain_err[0], host + n, (size_t)n * sizeof(double));
		for (i = 0; i < nb; i++)
			out->terms[0] = fmax(out->terms[0], host[2 * n + i]);
	}
	free(host);
	return rc ? -EIO : 0;
}

/* ---- msda.bwd ----------------------------------------------------------------------------- */

/* Where msda.bwd's results lie in the buffer copied back (doubles, then the kinks as bytes). */
struct bwd_layout {
	long nvalue, npts, grad_blocks, value_blocks;
	size_t dvalue, dvalue_err, dloc, dloc_err, dattn, dattn_err, value_terms, grad_terms, doubles;
};

static struct bwd_layout layout_of(const struct msda_geo *g)
{
	struct bwd_layout b;

	b.nvalue = g->nvalue;
	b.npts = g->npts;
	b.grad_blocks = blocks_for(NW_ORDERS * g->npts);
	b.value_blocks = blocks_for(g->nvalue);
	b.dvalue = 0;
	b.dvalue_err = b.dvalue + (size_t)b.nvalue;
	b.dloc = b.dvalue_err + (size_t)b.nvalue;
	b.dloc_err = b.dloc + 2 * (size_t)b.npts;
	b.dattn = b.dloc_err + 2 * (size_t)b.npts;
	b.dattn_err = b.dattn + (size_t)b.npts;
	b.value_terms = b.dattn_err + (size_t)b.npts;
	b.grad_terms = b.value_terms + (size_t)b.value_blocks; /* dloc's per block, then dattn's */
	b.doubles = b.grad_terms + 2 * (size_t)b.grad_blocks;
	return b;
}

/* 1. A thread per point: both samplings, and the kinks of its dloc elements. */
__global__ static void bwd_points(int d, struct msda_geo g, const void *loc, struct msda_dpoint *dps,
				  struct msda_fpoint *fps, unsigned char *exclude)
{
	long pi = (long)blockIdx.x * THREADS + threadIdx.x;
	struct msda_dpoint dp;
	struct msda_fpoint fp;

	if (pi >= g.npts)
		return;
	setup(&g, d, loc, pi, &dp, &fp);
	dps[pi] = dp;
	fps[pi] = fp;
	exclude[2 * pi] = dp.kink_x ? 1 : 0;
	exclude[2 * pi + 1] = dp.kink_y ? 1 : 0;
}

/*
 * The points whose corners read value site s = (batch, pixel, head), by
 * ascending point: those of the site's batch, head and level, corner k at
 * the site's pixel. f(pi, k, from_float) for the float64 sampling (where
 * the point reads anything) and for the float one.
 */
template <class F>
__device__ static void site_points(const struct msda_geo *g, const struct msda_dpoint *dps,
				   const struct msda_fpoint *fps, long s, F f)
{
	long H = g->s.heads, b = s / (g->S * H), sidx = s / H % g->S, h = s % H, pix;
	int l = 0, q, p, k;

	while (l + 1 < g->s.levels && g->start[l + 1] <= sidx)
		l++;
	pix = sidx - g->start[l];
	for (q = 0; q < g->s.queries; q++)
		for (p = 0; p < g->s.points; p++) {
			long pi = ((b * g->s.queries + q) * H + h) * g->LP + (long)l * g->s.points + p;
			const struct msda_dpoint *dp = &dps[pi];
			const struct msda_fpoint *fp = &fps[pi];

			for (k = 0; k < 4; k++) {
				if (dp->any && dp->in[k] && dp->pix[k] == pix)
					f(pi, k, false);
				if (fp->in[k] && fp->pix[k] == pix)
					f(pi, k, true);
			}
		}
}

/*
 * 2. Blocks 0..site_blocks-1: a thread per value site, counting its points
 * (dcount, fcount). The next blocks: a thread per (point, order), 8 lanes
 * per point, for dattn and dloc: lane o runs the plain program with its
 * sums over channels in order o (perm: the orders over the channels, in
 * shared memory), lane 0 also the float64 sums; the lanes' errors are
 * reduced by shuffles.
 */
__global__ static void bwd_grads(int d, struct msda_geo g, const void *value, const void *attn,
				 const void *dout, const struct msda_dpoint *dps,
				 const struct msda_fpoint *fps, long site_blocks, int *dcount, int *fcount,
				 double *out, struct bwd_layout lay)
{
	extern __shared__ int perm[]; /* [NW_ORDERS][channels] */
	int D = g.s.channels;

	if ((long)blockIdx.x < site_blocks) {
		long s = (long)blockIdx.x * THREADS + threadIdx.x;
		int nd = 0, nf = 0;

		if (s >= g.nvalue / D)
			return;
		site_points(&g, dps, fps, s, [&](long pi, int k, bool from_float) {
			if (from_float)
				nf++;
			else
				nd++;
		});
		dcount[s] = nd;
		fcount[s] = nf;
		return;
	}

	long t = ((long)blockIdx.x - site_blocks) * THREADS + threadIdx.x, pi = t / NW_ORDERS,
	     grp = pi / g.LP, i;
	int o = (int)(t % NW_ORDERS), ch, k;
	bool valid = pi < g.npts;
	double rda = 0.0, rdx = 0.0, rdy = 0.0, ma = 0.0, sl = 0.0, e[3] = {0.0, 0.0, 0.0};

	for (i = threadIdx.x; i < (long)NW_ORDERS * D; i += THREADS)
		perm[i] = (int)nw_order_at((int)(i / D), i % D, D);
	__syncthreads();
	if (valid && o == 0) {
		/* The float64 sums, in msda_ref.c's order. */
		const struct msda_dpoint *p = &dps[pi];
		double a = (double)load(d, attn, pi), gx = 0.0, gy = 0.0, mx = 0.0, my = 0.0;

		if (p->any)
			for (ch = 0; ch < D; ch++) {
				double go = (double)load(d, dout, grp * D + ch), v[4], smp;

				for (k = 0; k < 4; k++)
					v[k] = p->in[k]
						   ? (double)load(d, value, msda_vidx(&g, pi, p->pix[k], ch))
						   : 0.0;
				smp = dsample(p, v);
				rda = MP_DADD(rda, MP_DMUL(go, smp));
				ma = MP_DADD(ma, fabs(MP_DMUL(go, smp)));
				gx = MP_DADD(gx, MP_DMUL(go, MP_DADD(MP_DMUL(p->hy, MP_DSUB(v[1], v[0])),
								     MP_DMUL(p->ly, MP_DSUB(v[3], v[2])))));
				gy = MP_DADD(gy, MP_DMUL(go, MP_DADD(MP_DMUL(p->hx, MP_DSUB(v[2], v[0])),
								     MP_DMUL(p->lx, MP_DSUB(v[3], v[1])))));
				mx = MP_DADD(
				    mx, MP_DMUL(fabs(go),
						MP_DADD(MP_DMUL(p->hy, MP_DADD(fabs(v[1]), fabs(v[0]))),
							MP_DMUL(p->ly, MP_DADD(fabs(v[3]), fabs(v[2]))))));
				my = MP_DADD(
				    my, MP_DMUL(fabs(go),
						MP_DADD(MP_DMUL(p->hx, MP_DADD(fabs(v[2]), fabs(v[0]))),
							MP_DMUL(p->lx, MP_DADD(fabs(v[3]), fabs(v[1]))))));
			}
		rdx = MP_DMUL(MP_DMUL(a, p->gx), gx);
		rdy = MP_DMUL(MP_DMUL(a, p->gy), gy);
		if (!p->kink_x)
			sl = fmax(sl, MP_DMUL(MP_DMUL(fabs(a), p->gx), mx));
		if (!p->kink_y)
			sl = fmax(sl, MP_DMUL(MP_DMUL(fabs(a), p->gy), my));
	}
	/* Lane 0's float64 results to the point's other lanes. */
	rda = __shfl_sync(0xffffffffu, rda, 0, NW_ORDERS);
	rdx = __shfl_sync(0xffffffffu, rdx, 0, NW_ORDERS);
	rdy = __shfl_sync(0xffffffffu, rdy, 0, NW_ORDERS);
	if (valid) {
		/* The plain program, its sums over channels in order o. */
		const struct msda_fpoint *p = &fps[pi];
		float a = load(d, attn, pi), da = 0.0f, gix = 0.0f, giy = 0.0f;
		float ty1 = MP_FSUB(MP_FADD(p->y0, 1.0f), p->iy), ty0 = MP_FSUB(p->iy, p->y0);
		float tx1 = MP_FSUB(MP_FADD(p->x0, 1.0f), p->ix), tx0 = MP_FSUB(p->ix, p->x0);
		int j;

		for (j = 0; j < D; j++) {
			int c2 = perm[o * D + j];
			float v[4], acc = 0.0f, dv = load(d, dout, grp * D + c2),
				    go = round_to(d, MP_FMUL(dv, a));

			for (k = 0; k < 4; k++) {
				v[k] = p->in[k] ? load(d, value, msda_vidx(&g, pi, p->pix[k], c2)) : 0.0f;
				if (p->in[k])
					acc = MP_FADD(acc, MP_FMUL(v[k], p->w[k]));
			}
			da = MP_FADD(da, round_to(d, MP_FMUL(dv, round_to(d, acc))));
			/* grid_sampler_2d_backward: nw, ne, sw, se */
			gix = MP_FSUB(gix, MP_FMUL(MP_FMUL(v[0], ty1), go));
			gix = MP_FADD(gix, MP_FMUL(MP_FMUL(v[1], ty1), go));
			gix = MP_FSUB(gix, MP_FMUL(MP_FMUL(v[2], ty0), go));
			gix = MP_FADD(gix, MP_FMUL(MP_FMUL(v[3], ty0), go));
			giy = MP_FSUB(giy, MP_FMUL(MP_FMUL(v[0], tx1), go));
			giy = MP_FSUB(giy, MP_FMUL(MP_FMUL(v[1], tx0), go));
			giy = MP_FADD(giy, MP_FMUL(MP_FMUL(v[2], tx1), go));
			giy = MP_FADD(giy, MP_FMUL(MP_FMUL(v[3], tx0), go));
		}
		note_err(&e[0], round_to(d, da), rda);
		note_err(&e[1], round_to(d, MP_FMUL(2.0f, round_to(d, MP_FMUL(p->mx, gix)))), rdx);
		note_err(&e[2], round_to(d, MP_FMUL(2.0f, round_to(d, MP_FMUL(p->my, giy)))), rdy);
	}
	for (k = NW_ORDERS / 2; k > 0; k /= 2)
		for (i = 0; i < 3; i++)
			e[i] = fmax(e[i], __shfl_xor_sync(0xffffffffu, e[i], k, NW_ORDERS));
	if (valid && o == 0) {
		out[lay.dattn + pi] = rda;
		out[lay.dattn_err + pi] = e[0];
		out[lay.dloc + 2 * pi] = rdx;
		out[lay.dloc + 2 * pi + 1] = rdy;
		out[lay.dloc_err + 2 * pi] = e[1];
		out[lay.dloc_err + 2 * pi + 1] = e[2];
	}
	sl = block_reduce<double, true>(sl);
	ma = block_reduce<double, true>(ma);
	if (threadIdx.x == 0) {
		long gb = (long)blockIdx.x - site_blocks;

		out[lay.grad_terms + gb] = sl;
		out[lay.grad_terms + lay.grad_blocks + gb] = ma;
	}
}

/*
 * 3. One block per count array (dcount, then fcount): in place, the
 * exclusive prefix sums of n counts, and the total after them.
 */
__global__ static void bwd_scan(int *dcount, int *fcount, long n)
{
	__shared__ long part[THREADS];
	int *a = blockIdx.x ? fcount : dcount;
	long chunk = (n + THREADS - 1) / THREADS, lo = threadIdx.x * chunk,
	     hi = lo + chunk < n ? lo + chunk : n;
	long s = 0, i;

	for (i = lo; i < hi; i++)
		s += a[i];
	part[threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		long run = 0, v;

		for (i = 0; i < THREADS; i++) {
			v = part[i];
			part[i] = run;
			run += v;
		}
		a[n] = (int)run;
	}
	__syncthreads();
	s = part[threadIdx.x];
	for (i = lo; i < hi; i++) {
		long v = a[i];

		a[i] = (int)s;
		s += v;
	}
}

/* 4. A thread per value site: its lists, entries pi * 4 + corner, by ascending point. */
__global__ static void bwd_lists(struct msda_geo g, const struct msda_dpoint *dps,
				 const struct msda_fpoint *fps, const int *doff, const int *foff, int *dlist,
				 int *flist)
{
	long s = (long)blockIdx.x * THREADS + threadIdx.x;
	int nd, nf;

	if (s >= g.nvalue / g.s.channels)
		return;
	nd = doff[s];
	nf = foff[s];
	site_points(&g, dps, fps, s, [&](long pi, int k, bool from_float) {
		if (from_float)
			flist[nf++] = (int)(pi * 4 + k);
		else
			dlist[nd++] = (int)(pi * 4 + k);
	});
}

/*
 * 5. A thread per dvalue element vi = (site, channel), channel fastest: the
 * float64 sum over the site's list (by ascending point, as the host adds),
 * the size of its terms, and the plain program's float sum in each order.
 */
__global__ static void bwd_dvalue(int d, struct msda_geo g, const void *attn, const void *dout,
				  const struct msda_dpoint *dps, const struct msda_fpoint *fps,
				  const int *doff, const int *foff, const int *dlist, const int *flist,
				  double *out, struct bwd_layout lay)
{
	long vi = (long)blockIdx.x * THREADS + threadIdx.x;
	int D = g.s.channels;
	double mag = 0.0;

	if (vi < g.nvalue) {
		long s = vi / D, e;
		int c = (int)(vi % D), o;
		double ref = 0.0, err = 0.0;

		for (e = doff[s]; e < doff[s + 1]; e++) {
			long pi = dlist[e] >> 2;
			double a = (double)load(d, attn, pi), go = (double)load(d, dout, pi / g.LP * D + c);
			double t = MP_DMUL(MP_DMUL(a, go), dps[pi].w[dlist[e] & 3]);

			ref = MP_DADD(ref, t);
			mag = MP_DADD(mag, fabs(t));
		}
		for (o = 0; o < NW_ORDERS; o++) {
			long k = nw_order_stride(o), lo = foff[s], hi = foff[s + 1], r;
			float acc = 0.0f;
			auto add = [&](long at) {
				long pi = flist[at] >> 2;
				float go =
				    round_to(d, MP_FMUL(load(d, dout, pi / g.LP * D + c), load(d, attn, pi)));

				acc = MP_FADD(acc, MP_FMUL(fps[pi].w[flist[at] & 3], go));
			};

			if (k < 0) {
				for (e = hi - 1; e >= lo; e--)
					add(e);
			} else if (k == 1 || g.npts <= k) {
				for (e = lo; e < hi; e++)
					add(e);
			} else {
				for (r = 0; r < k; r++)
					for (e = lo; e < hi; e++)
						if ((flist[e] >> 2) % k == r)
							add(e);
			}
			note_err(&err, round_to(d, acc), ref);
		}
		out[lay.dvalue + vi] = ref;
		out[lay.dvalue_err + vi] = err;
	}
	mag = block_reduce<double, true>(mag);
	if (threadIdx.x == 0)
		out[lay.value_terms + blockIdx.x] = mag;
}

static int cuda_bwd(enum nw_dtype d, const struct msda_in *in, struct msda_ref_out *out)
{
	struct msda_geo g;
	struct bwd_layout lay;
	long nsite, site_blocks, i;
	size_t at = 0, o_dp, o_fp, o_dcount, o_fcount, o_dlist, o_flist, smem, bytes;
	unsigned char *scratch = NULL, *dev = NULL, *host;
	double *res;
	int rc;

	msda_geo_init(&g, in->s);
	lay = layout_of(&g);
	nsite = g.s.channels > 0 ? g.nvalue / g.s.channels : 0;
	site_blocks = blocks_for(nsite);
	out->terms[0] = out->terms[1] = out->terms[2] = 0.0;
	if (nsite == 0 && g.npts == 0)
		return 0;
	o_dp = carve(&at, (size_t)g.npts * sizeof(struct msda_dpoint));
	o_fp = carve(&at, (size_t)g.npts * sizeof(struct msda_fpoint));
	o_dcount = carve(&at, (size_t)(nsite + 1) * sizeof(int));
	o_fcount = carve(&at, (size_t)(nsite + 1) * sizeof(int));
	o_dlist = carve(&at, 4 * (size_t)g.npts * sizeof(int));
	o_flist = carve(&at, 4 * (size_t)g.npts * sizeof(int));
	bytes = lay.doubles * sizeof(double) + 2 * (size_t)g.npts;
	host = (unsigned char *)malloc(bytes);
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&scratch, at);
	if (!rc)
		rc = nw_dev_alloc((void **)&dev, bytes);
	if (!rc) {
		struct msda_dpoint *dps = (struct msda_dpoint *)(scratch + o_dp);
		struct msda_fpoint *fps = (struct msda_fpoint *)(scratch + o_fp);
		int *dcount = (int *)(scratch + o_dcount), *fcount = (int *)(scratch + o_fcount);
		int *dlist = (int *)(scratch + o_dlist), *flist = (int *)(scratch + o_flist);
		double *o = (double *)dev;

		if (g.npts > 0)
			bwd_points<<<blocks_for(g.npts), THREADS>>>(d, g, in->loc_dev, dps, fps,
								    dev + lay.doubles * sizeof(double));
		smem = (size_t)NW_ORDERS * (size_t)g.s.channels * sizeof(int);
		allow_smem((const void *)bwd_grads, smem);
		if (site_blocks + lay.grad_blocks > 0)
			bwd_grads<<<(unsigned)(site_blocks + lay.grad_blocks), THREADS, smem>>>(
			    d, g, in->value_dev, in->attn_dev, in->dout_dev, dps, fps, site_blocks, dcount,
			    fcount, o, lay);
		if (nsite > 0) {
			bwd_scan<<<2, THREADS>>>(dcount, fcount, nsite);
			bwd_lists<<<(unsigned)site_blocks, THREADS>>>(g, dps, fps, dcount, fcount, dlist,
								      flist);
		}
		if (lay.value_blocks > 0)
			bwd_dvalue<<<(unsigned)lay.value_blocks, THREADS>>>(
			    d, g, in->attn_dev, in->dout_dev, dps, fps, dcount, fcount, dlist, flist, o, lay);
		rc = nw_dev_launched("msda reference");
	}
	if (!rc)
		rc = nw_dev_download(host, dev, bytes);
	nw_dev_free(dev);
	nw_dev_free(scratch);
	if (!rc) {
		res = (double *)host;
		memcpy(out->ref[0], res + lay.dvalue, (size_t)g.nvalue * sizeof(double));
		memcpy(out->plain_err[0], res + lay.dvalue_err, (size_t)g.nvalue * sizeof(double));
		memcpy(out->ref[1], res + lay.dloc, 2 * (size_t)g.npts * sizeof(double));
		memcpy(out->plain_err[1], res + lay.dloc_err, 2 * (size_t)g.npts * sizeof(double));
		memcpy(out->ref[2], res + lay.dattn, (size_t)g.npts * sizeof(double));
		memcpy(out->plain_err[2], res + lay.dattn_err, (size_t)g.npts * sizeof(double));
		memcpy(out->exclude, host + lay.doubles * sizeof(double), 2 * (size_t)g.npts);
		for (i = 0; i < lay.value_blocks; i++)
			out->terms[0] = fmax(out->terms[0], res[lay.value_terms + i]);
		for (i = 0; i < lay.grad_blocks; i++) {
			out->terms[1] = fmax(out->terms[1], res[lay.grad_terms + i]);
			out->terms[2] = fmax(out->terms[2], res[lay.grad_terms + lay.grad_blocks + i]);
		}
	}
	free(host);
	return rc ? -EIO : 0;
}

const struct msda_refs msda_refs_cuda = {
    "cuda",
    cuda_fwd,
    cuda_bwd,
};
