/*
 * layernorm references on the host: the float64 results and the plain
 * programs' largest error per element (layernorm.h, struct layernorm_refs).
 * layernorm_ref.cu computes the same on the GPU.
 *
 * The plain program is what a framework runs op by op: mean, x - mean,
 * squares, variance, rsqrt, products and sums, each rounded to the dtype,
 * sums accumulated in float and rounded once, in each of the NW_ORDERS
 * reduction orders (nw_order.h): over columns for the row sums, over rows
 * for the column sums of the backward.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "layernorm.h"

/* Folds one order's plain results into the largest errors. */
static void note_errs(double *plain_err, const double *plain, const double *ref, long n)
{
	long i;

	for (i = 0; i < n; i++)
		if (isfinite(plain[i]) && fabs(plain[i] - ref[i]) > plain_err[i])
			plain_err[i] = fabs(plain[i] - ref[i]);
}

static void zero(double *v, long n)
{
	long i;

	for (i = 0; i < n; i++)
		v[i] = 0.0;
}

void layernorm_stats(const double *x, long rows, long cols, double *mean, double *rstd)
{
	long i, j;

	for (i = 0; i < rows; i++) {
		const double *row = x + i * cols;
		double s = 0.0, v = 0.0, m;

		for (j = 0; j < cols; j++)
			s += row[j];
		m = s / (double)cols;
		for (j = 0; j < cols; j++)
			v += (row[j] - m) * (row[j] - m);
		mean[i] = m;
		rstd[i] = 1.0 / sqrt(v / (double)cols + (double)LAYERNORM_EPS);
	}
}

/* The plain forward, one order: every op rounded to the dtype, sums in float. */
static void plain_fwd(enum nw_dtype d, int o, const double *x, const double *gamma, const double *beta,
		      long rows, long cols, float *xc, double *y, double *mean, double *rstd)
{
	float n = (float)cols;
	long i, j, *perm = ck_perm(o, cols);

	for (i = 0; i < rows; i++) {
		const double *row = x + i * cols;
		float s = 0.0f, v = 0.0f, m, var, rs;

		for (j = 0; j < cols; j++)
			s += (float)row[ck_at(perm, o, j, cols)];
		m = nw_round(d, s / n);
		for (j = 0; j < cols; j++)
			xc[j] = nw_round(d, (float)row[j] - m);
		for (j = 0; j < cols; j++) {
			long k = ck_at(perm, o, j, cols);

			v += nw_round(d, xc[k] * xc[k]);
		}
		var = nw_round(d, v / n);
		rs = nw_round(d, 1.0f / sqrtf(nw_round(d, var + LAYERNORM_EPS)));
		for (j = 0; j < cols; j++) {
			float xn = nw_round(d, xc[j] * rs);
			float yg = nw_round(d, xn * (float)gamma[j]);

			y[i * cols + j] = nw_round(d, yg + (float)beta[j]);
		}
		mean[i] = m;
		rstd[i] = rs;
	}
	free(perm);
}

static int host_fwd(enum nw_dtype d, const struct layernorm_in *in, struct layernorm_ref_out *out)
{
	long rows = in->rows, cols = in->cols, n = rows * cols, i, j;
	double *x = ck_loaded(d, in->x, n), *gamma = ck_loaded(d, in->gamma, cols),
	       *beta = ck_loaded(d, in->beta, cols);
	double *py = ck_doubles(n), *pm = ck_doubles(rows), *prs = ck_doubles(rows);
	double *y = out->ref[0], *mean = out->ref[1], *rstd = out->ref[2], terms = 0.0;
	float *xc = ck_floats(cols);
	int rc = 0, o;

	if (!x || !gamma || !beta || !py || !pm || !prs || !xc) {
		rc = -ENOMEM;
		goto out;
	}
	layernorm_stats(x, rows, cols, mean, rstd);
	for (i = 0; i < rows; i++)
		for (j = 0; j < cols; j++)
			y[i * cols + j] = (x[i * cols + j] - mean[i]) * rstd[i] * gamma[j] + beta[j];
	/*
	 * y = (x - mean) * rstd * gamma + beta: the rounding of x - mean is at
	 * the size of x and mean (a row at 1e4 with a spread of 4), not at the
	 * size of y.
	 */
	for (i = 0; i < rows; i++)
		for (j = 0; j < cols; j++)
			terms =
			    fmax(terms, (fabs(x[i * cols + j]) + fabs(mean[i])) * rstd[i] * fabs(gamma[j]) +
					    fabs(beta[j]));
	out->terms[0] = terms;
	out->terms[1] = out->terms[2] = 0.0;
	zero(out->plain_err[0], n);
	zero(out->plain_err[1], rows);
	zero(out->plain_err[2], rows);
	for (o = 0; o < NW_ORDERS; o++) {
		plain_fwd(d, o, x, gamma, beta, rows, cols, xc, py, pm, prs);
		note_errs(out->plain_err[0], py, y, n);
		note_errs(out->plain_err[1], pm, mean, rows);
		note_errs(out->plain_err[2], prs, rstd, rows);
	}
out:
	free(x);
	free(gamma);
	free(beta);
	free(py);
	free(pm);
	free(prs);
	free(xc);
	return rc;
}

/*
 * Float64 backward from the stored inputs. Fills dx, dgamma, dbeta and the
 * sizes of the terms each is made of (for the floors of the budgets).
 */
static void ref_bwd(const double *x, const double *gamma, const double *mean, const double *rstd,
		    const double *dy, long rows, long cols, double *dx, double *dgamma, double *dbeta,
		    double scale[3])
{
	long i, j;

	scale[0] = scale[1] = scale[2] = 0.0;
	for (j = 0; j < cols; j++)
		dgamma[j] = dbeta[j] = 0.0;
	for (i = 0; i < rows; i++) {
		const double *xr = x + i * cols, *dyr = dy + i * cols;
		double c1 = 0.0, c2 = 0.0, a1 = 0.0, a2 = 0.0;

		for (j = 0; j < cols; j++) {
			double xhat = (xr[j] - mean[i]) * rstd[i], g = dyr[j] * gamma[j];

			c1 += g * xhat;
			c2 += g;
			a1 += fabs(g * xhat);
			a2 += fabs(g);
		}
		c1 /= (double)cols;
		c2 /= (double)cols;
		a1 /= (double)cols;
		a2 /= (double)cols;
		for (j = 0; j < cols; j++) {
			double xhat = (xr[j] - mean[i]) * rstd[i], g = dyr[j] * gamma[j];

			dx[i * cols + j] = rstd[i] * (g - c2 - xhat * c1);
			scale[0] = fmax(scale[0], rstd[i] * (fabs(g) + a2 + fabs(xhat) * a1));
			dgamma[j] += dyr[j] * xhat;
			dbeta[j] += dyr[j];
		}
	}
	for (j = 0; j < cols; j++) {
		double ag = 0.0, ab = 0.0;

		for (i = 0; i < rows; i++) {
			ag += fabs(dy[i * cols + j] * (x[i * cols + j] - mean[i]) * rstd[i]);
			ab += fabs(dy[i * cols + j]);
		}
		scale[1] = fmax(scale[1], ag);
		scale[2] = fmax(scale[2], ab);
	}
}

/* The plain backward, one order (over columns for the row sums, over rows for the column sums). */
static void plain_bwd(enum nw_dtype d, int o, const double *x, const double *gamma, const float *meanf,
		      const float *rstdf, const double *dy, long rows, long cols, double *dx, double *dgamma,
		      double *dbeta)
{
	float n = (float)cols;
	long i, j, *pc = ck_perm(o, cols), *pr = ck_perm(o, rows);

	for (i = 0; i < rows; i++) {
		float m = nw_round(d, meanf[i]), rs = nw_round(d, rstdf[i]), c1 = 0.0f, c2 = 0.0f;

		for (j = 0; j < cols; j++) {
			long k = i * cols + ck_at(pc, o, j, cols);
			float xhat = nw_round(d, nw_round(d, (float)x[k] - m) * rs);
			float g = nw_round(d, (float)dy[k] * (float)gamma[k - i * cols]);

			c1 += nw_round(d, g * xhat);
			c2 += g;
		}
		c1 = nw_round(d, c1 / n);
		c2 = nw_round(d, c2 / n);
		for (j = 0; j < cols; j++) {
			long k = i * cols + j;
			float xhat = nw_round(d, nw_round(d, (float)x[k] - m) * rs);
			float g = nw_round(d, (float)dy[k] * (float)gamma[j]);
			float t = nw_round(d, nw_round(d, g - c2) - nw_round(d, xhat * c1));

			dx[k] = nw_round(d, rs * t);
		}
	}
	for (j = 0; j < cols; j++) {
		float sg = 0.0f, sb = 0.0f;

		for (i = 0; i < rows; i++) {
			long r = ck_at(pr, o, i, rows), k = r * cols + j;
			float m = nw_round(d, meanf[r]), rs = nw_round(d, rstdf[r]);
			float xhat = nw_round(d, nw_round(d, (float)x[k] - m) * rs);

			sg += nw_round(d, (float)dy[k] * xhat);
			sb += (float)dy[k];
		}
		dgamma[j] = nw_round(d, sg);
		dbeta[j] = nw_round(d, sb);
	}
	free(pc);
	free(pr);
}

static int host_bwd(enum nw_dtype d, const struct layernorm_in *in, struct layernorm_ref_out *out)
{
	long rows = in->rows, cols = in->cols, n = rows * cols, i;
	double *x = ck_loaded(d, in->x, n), *gamma = ck_loaded(d, in->gamma, cols),
	       *dy = ck_loaded(d, in->dy, n);
	double *mean = ck_doubles(rows), *rstd = ck_doubles(rows);
	double *pdx = ck_doubles(n), *pdg = ck_doubles(cols), *pdb = ck_doubles(cols);
	int rc = 0, o;

	if (!x || !gamma || !dy || !mean || !rstd || !pdx || !pdg || !pdb) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < rows; i++) {
		mean[i] = in->mean[i];
		rstd[i] = in->rstd[i];
	}
	ref_bwd(x, gamma, mean, rstd, dy, rows, cols, out->ref[0], out->ref[1], out->ref[2], out->terms);
	zero(out->plain_err[0], n);
	zero(out->plain_err[1], cols);
	zero(out->plain_err[2], cols);
	for (o = 0; o < NW_ORDERS; o++) {
		plain_bwd(d, o, x, gamma, in->mean, in->rstd, dy, rows, cols, pdx, pdg, pdb);
		note_errs(out->plain_err[0], pdx, out->ref[0], n);
		note_errs(out->plain_err[1], pdg, out->ref[1], cols);
		note_errs(out->plain_err[2], pdb, out->ref[2], cols);
	}
out:
	free(x);
	free(gamma);
	free(dy);
	free(mean);
	free(rstd);
	free(pdx);
	free(pdg);
	free(pdb);
	return rc;
}

const struct layernorm_refs layernorm_refs_host = {
    .where = "host",
    .fwd = host_fwd,
    .bwd = host_bwd,
};
