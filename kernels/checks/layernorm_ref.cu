/*
 * layernorm references on the GPU: the same float64 results and plain-program
 * errors as layernorm_ref.c, so that a GPU runner's trial is not bound by the
 * host CPU. One launch and one copy back per trial.
 *
 * The plain programs sum in exactly the orders of nw_order.h: a row's sums
 * in order o are one lane's serial loop, lane 0 of warp o, over the row kept
 * in shared memory; the backward's column sums are one thread per column,
 * looping over the orders. The float64 sums run first to last as on the
 * host: a row's in lane 0 of a ninth warp, alongside the plain ones, a
 * column's in its thread. Every operation is rounded on its own
 * (__fadd_rn, __dmul_rn, ...), as on the host: nvcc would otherwise
 * contract a product and a sum into an FMA (in the plain programs too,
 * where round_to() is the identity: f32). So the results are the host's to
 * the bit.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "layernorm.h"
#include "nw_device.h"
}
#include "nw_device_math.cuh"
#include "nw_order.h"

/* 9 warps: warp o sums a row in reduction order o, the last one in float64 */
#define THREADS    288
#define WARP_EXACT NW_ORDERS
static_assert(THREADS / 32 == NW_ORDERS + 1, "a warp per reduction order, and one for float64");

/* Dynamic shared memory a block may have without asking for more. */
#define SMEM_DEFAULT 49152

__device__ static double d_add(double a, double b)
{
	return __dadd_rn(a, b);
}

__device__ static double d_sub(double a, double b)
{
	return __dsub_rn(a, b);
}

__device__ static double d_mul(double a, double b)
{
	return __dmul_rn(a, b);
}

/* Per row of the forward's output buffer, after y's reference and errors. */
enum { FROW_MEAN, FROW_RSTD, FROW_MEAN_ERR, FROW_RSTD_ERR, FROW_TERMS, FROW_N };

/*
 * One block per row: the float64 statistics (lane 0 of the last warp, as
 * layernorm_stats() computes them) and y, the size of y's terms, the plain
 * mean and rstd of each order (lane 0 of warp o) and every element's
 * largest plain error. out holds y's reference [n], its plain errors [n],
 * then FROW_N values per row.
 */
__global__ static void fwd_refs(int d, const void *x, const void *gamma, const void *beta, long rows,
				long cols, double *out)
{
	extern __shared__ float xs[]; /* the row, as float */
	__shared__ float pm[NW_ORDERS], prs[NW_ORDERS];
	__shared__ double stats[2];
	long i = blockIdx.x, off = i * cols, n = rows * cols, j;
	double *ry = out, *ey = out + n, *st = out + 2 * n + FROW_N * i;
	double m, rs, terms = 0.0;
	float nf = (float)cols;
	int o = threadIdx.x / 32;

	for (j = threadIdx.x; j < cols; j += THREADS)
		xs[j] = load(d, x, off + j);
	__syncthreads();
	if (threadIdx.x % 32 == 0 && o == WARP_EXACT) {
		double s = 0.0, v = 0.0;

		for (j = 0; j < cols; j++)
			s = d_add(s, (double)xs[j]);
		m = s / (double)cols;
		for (j = 0; j < cols; j++)
			v = d_add(v, d_mul(d_sub((double)xs[j], m), d_sub((double)xs[j], m)));
		stats[0] = m;
		stats[1] = 1.0 / sqrt(d_add(v / (double)cols, (double)LAYERNORM_EPS));
	} else if (threadIdx.x % 32 == 0) {
		float sf = 0.0f, vf = 0.0f, mf, var;

		walk(o, cols, [&](long k) { sf = fadd(sf, xs[k]); });
		mf = round_to(d, fdiv(sf, nf));
		walk(o, cols, [&](long k) {
			float c = round_to(d, fsub(xs[k], mf));

			vf = fadd(vf, round_to(d, fmul(c, c)));
		});
		var = round_to(d, fdiv(vf, nf));
		pm[o] = mf;
		prs[o] = round_to(d, fdiv(1.0f, __fsqrt_rn(round_to(d, fadd(var, LAYERNORM_EPS)))));
	}
	__syncthreads();
	m = stats[0];
	rs = stats[1];

	for (j = threadIdx.x; j < cols; j += THREADS) {
		float gf = load(d, gamma, j), bf = load(d, beta, j);
		double xj = (double)xs[j], g = (double)gf, b = (double)bf, ref, err = 0.0;

		ref = d_add(d_mul(d_mul(d_sub(xj, m), rs), g), b);
		ry[off + j] = ref;
		terms = fmax(terms, d_add(d_mul(d_mul(d_add(fabs(xj), fabs(m)), rs), fabs(g)), fabs(b)));
		for (o = 0; o < NW_ORDERS; o++) {
			float xc = round_to(d, fsub(xs[j], pm[o]));
			float yg = round_to(d, fmul(round_to(d, fmul(xc, prs[o])), gf));

			note_err(&err, round_to(d, fadd(yg, bf)), ref);
		}
		ey[off + j] = err;
	}
	terms = block_reduce<double, true>(terms);
	if (threadIdx.x == 0) {
		double em = 0.0, er = 0.0;

		for (o = 0; o < NW_ORDERS; o++) {
			note_err(&em, pm[o], m);
			note_err(&er, prs[o], rs);
		}
		st[FROW_MEAN] = m;
		st[FROW_RSTD] = rs;
		st[FROW_MEAN_ERR] = em;
		st[FROW_RSTD_ERR] = er;
		st[FROW_TERMS] = terms;
	}
}

/* Launches with `bytes` of dynamic shared memory need the kernel's permission beyond the default. */
static void allow_smem(const void *kernel, size_t bytes)
{
	if (bytes > SMEM_DEFAULT)
		(void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

static int cuda_fwd(enum nw_dtype d, const struct layernorm_in *in, struct layernorm_ref_out *out)
{
	long rows = in->rows, cols = in->cols, n = rows * cols, i;
	size_t count = 2 * (size_t)n + FROW_N * (size_t)rows, smem = (size_t)cols * sizeof(float);
	double *dev = NULL, *host;
	int rc;

	out->terms[0] = out->terms[1] = out->terms[2] = 0.0;
	if (rows == 0)
		return 0;
	host = (double *)malloc(count * sizeof(double));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dev, count * sizeof(double));
	if (!rc) {
		allow_smem((const void *)fwd_refs, smem);
		fwd_refs<<<(unsigned)rows, THREADS, smem>>>(d, in->x_dev, in->gamma_dev, in->beta_dev, rows,
							    cols, dev);
		rc = nw_dev_launched("layernorm reference");
	}
	if (!rc)
		rc = nw_dev_download(host, dev, count * sizeof(double));
	nw_dev_free(dev);
	if (!rc) {
		const double *st = host + 2 * n;

		memcpy(out->ref[0], host, (size_t)n * sizeof(double));
		memcpy(out->plain_err[0], host + n, (size_t)n * sizeof(double));
		for (i = 0; i < rows; i++, st += FROW_N) {
			out->ref[1][i] = st[FROW_MEAN];
			out->ref[2][i] = st[FROW_RSTD];
			out->plain_err[1][i] = st[FROW_MEAN_ERR];
			out->plain_err[2][i] = st[FROW_RSTD_ERR];
			out->terms[0] = fmax(out->terms[0], st[FROW_TERMS]);
		}
	}
	free(host);
	return rc ? -EIO : 0;
}

/*
 * The backward in one launch. Blocks 0..rows-1 take a row each: float64 dx
 * and the row's size of terms (its sums in lane 0 of the last warp); the
 * plain program's g = dy * gamma and g * xhat (rounded) in shared memory,
 * their sums in each order (lane 0 of warp o), and dx's largest plain error
 * per element. The next blocks take THREADS columns each, a thread per
 * column: float64 dgamma and dbeta, the sizes of their terms, and the plain
 * column sums in every order.
 *
 * out: dx ref [n], dx errors [n], dgamma ref [cols], errors [cols], dbeta
 * ref [cols], errors [cols], dx's size of terms per row [rows], then
 * dgamma's and dbeta's per column block [2][colblocks].
 */
__global__ static void bwd_refs(int d, const void *x, const void *gamma, const float *meanf,
				const float *rstdf, const void *dy, long rows, long cols, long colblocks,
				double *out)
{
	extern __shared__ float sh[]; /* g [cols], then g * xhat [cols] */
	long n = rows * cols, j;
	double *rdx = out, *edx = rdx + n, *rdg = edx + n, *edg = rdg + cols, *rdb = edg + cols,
	       *edb = rdb + cols;
	double *row_terms = edb + cols, *col_terms = row_terms + rows;
	int o = threadIdx.x / 32;

	if ((long)blockIdx.x < rows) {
		__shared__ float pc1[NW_ORDERS], pc2[NW_ORDERS];
		__shared__ double sums[4];
		long i = blockIdx.x, off = i * cols;
		float *gs = sh, *gx = sh + cols, mf = round_to(d, meanf[i]), rsf = round_to(d, rstdf[i]);
		float nf = (float)cols;
		double mean = (double)meanf[i], rstd = (double)rstdf[i], c1, c2, a1, a2, terms = 0.0;

		for (j = threadIdx.x; j < cols; j += THREADS) {
			float xv = load(d, x, off + j), dyv = load(d, dy, off + j), gm = load(d, gamma, j);
			float xh = round_to(d, fmul(round_to(d, fsub(xv, mf)), rsf)),
			      g = round_to(d, fmul(dyv, gm));

			gs[j] = g;
			gx[j] = round_to(d, fmul(g, xh));
		}
		__syncthreads();
		if (threadIdx.x % 32 == 0 && o == WARP_EXACT) {
			double s1 = 0.0, s2 = 0.0, m1 = 0.0, m2 = 0.0;

			for (j = 0; j < cols; j++) {
				double xhat = d_mul(d_sub((double)load(d, x, off + j), mean), rstd);
				double g = d_mul((double)load(d, dy, off + j), (double)load(d, gamma, j));

				s1 = d_add(s1, d_mul(g, xhat));
				s2 = d_add(s2, g);
				m1 = d_add(m1, fabs(d_mul(g, xhat)));
				m2 = d_add(m2, fabs(g));
			}
			sums[0] = s1 / (double)cols;
			sums[1] = s2 / (double)cols;
			sums[2] = m1 / (double)cols;
			sums[3] = m2 / (double)cols;
		} else if (threadIdx.x % 32 == 0) {
			float s1 = 0.0f, s2 = 0.0f;

			walk(o, cols, [&](long k) {
				s1 = fadd(s1, gx[k]);
				s2 = fadd(s2, gs[k]);
			});
			pc1[o] = round_to(d, fdiv(s1, nf));
			pc2[o] = round_to(d, fdiv(s2, nf));
		}
		__syncthreads();
		c1 = sums[0];
		c2 = sums[1];
		a1 = sums[2];
		a2 = sums[3];
		for (j = threadIdx.x; j < cols; j += THREADS) {
			float xv = load(d, x, off + j), dyv = load(d, dy, off + j), gm = load(d, gamma, j);
			float xh = round_to(d, fmul(round_to(d, fsub(xv, mf)), rsf)), g = gs[j];
			double xhat = d_mul(d_sub((double)xv, mean), rstd),
			       gd = d_mul((double)dyv, (double)gm);
			double ref = d_mul(rstd, d_sub(d_sub(gd, c2), d_mul(xhat, c1))), err = 0.0;

			rdx[off + j] = ref;
			terms = fmax(terms, d_mul(rstd, d_add(d_add(fabs(gd), a2), d_mul(fabs(xhat), a1))));
			for (o = 0; o < NW_ORDERS; o++) {
				float t = round_to(
				    d, fsub(round_to(d, fsub(g, pc2[o])), round_to(d, fmul(xh, pc1[o]))));

				note_err(&err, round_to(d, fmul(rsf, t)), ref);
			}
			edx[off + j] = err;
		}
		terms = block_reduce<double, true>(terms);
		if (threadIdx.x == 0)
			row_terms[i] = terms;
	} else {
		long cb = (long)blockIdx.x - rows, i;
		double ag = 0.0, ab = 0.0;

		j = cb * THREADS + threadIdx.x;
		if (j < cols) {
			double dg = 0.0, db = 0.0, eg = 0.0, eb = 0.0;

			for (i = 0; i < rows; i++) {
				double xv = (double)load(d, x, i * cols + j),
				       dyv = (double)load(d, dy, i * cols + j);
				double mean = (double)meanf[i], rstd = (double)rstdf[i];

				dg = d_add(dg, d_mul(dyv, d_mul(d_sub(xv, mean), rstd)));
				db = d_add(db, dyv);
				ag = d_add(ag, fabs(d_mul(d_mul(dyv, d_sub(xv, mean)), rstd)));
				ab = d_add(ab, fabs(dyv));
			}
			for (o = 0; o < NW_ORDERS; o++) {
				float sg = 0.0f, sb = 0.0f;

				walk(o, rows, [&](long r) {
					float xv = load(d, x, r * cols + j), dyv = load(d, dy, r * cols + j);
					float xh =
					    round_to(d, fmul(round_to(d, fsub(xv, round_to(d, meanf[r]))),
							     round_to(d, rstdf[r])));

					sg = fadd(sg, round_to(d, fmul(dyv, xh)));
					sb = fadd(sb, dyv);
				});
				note_err(&eg, round_to(d, sg), dg);
				note_err(&eb, round_to(d, sb), db);
			}
			rdg[j] = dg;
			edg[j] = eg;
			rdb[j] = db;
			edb[j] = eb;
		}
		ag = block_reduce<double, true>(ag);
		ab = block_reduce<double, true>(ab);
		if (threadIdx.x == 0) {
			col_terms[cb] = ag;
			col_terms[colblocks + cb] = ab;
		}
	}
}

static int cuda_bwd(enum nw_dtype d, const struct layernorm_in *in, struct layernorm_ref_out *out)
{
	long rows = in->rows, cols = in->cols, n = rows * cols, cb = (cols + THREADS - 1) / THREADS, i;
	size_t count = 2 * (size_t)n + 4 * (size_t)cols + (size_t)rows + 2 * (size_t)cb;
	size_t smem = 2 * (size_t)cols * sizeof(float);
	double *dev = NULL, *host;
	int rc;

	out->terms[0] = out->terms[1] = out->terms[2] = 0.0;
	if (rows + cb == 0)
		return 0;
	host = (double *)malloc(count * sizeof(double));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dev, count * sizeof(double));
	if (!rc) {
		allow_smem((const void *)bwd_refs, smem);
		bwd_refs<<<(unsigned)(rows + cb), THREADS, smem>>>(
		    d, in->x_dev, in->gamma_dev, in->mean_dev, in->rstd_dev, in->dy_dev, rows, cols, cb, dev);
		rc = nw_dev_launched("layernorm reference");
	}
	if (!rc)
		rc = nw_dev_download(host, dev, count * sizeof(double));
	nw_dev_free(dev);
	if (!rc) {
		const double *p = host;

		memcpy(out->ref[0], p, (size_t)n * sizeof(double));
		memcpy(out->plain_err[0], p += n, (size_t)n * sizeof(double));
		memcpy(out->ref[1], p += n, (size_t)cols * sizeof(double));
		memcpy(out->plain_err[1], p += cols, (size_t)cols * sizeof(double));
		memcpy(out->ref[2], p += cols, (size_t)cols * sizeof(double));
		memcpy(out->plain_err[2], p += cols, (size_t)cols * sizeof(double));
		p += cols;
		for (i = 0; i < rows; i++)
			out->terms[0] = fmax(out->terms[0], p[i]);
		p += rows;
		for (i = 0; i < cb; i++) {
			out->terms[1] = fmax(out->terms[1], p[i]);
			out->terms[2] = fmax(out->terms[2], p[cb + i]);
		}
	}
	free(host);
	return rc ? -EIO : 0;
}

const struct layernorm_refs layernorm_refs_cuda = {
    "cuda",
    cuda_fwd,
    cuda_bwd,
};
