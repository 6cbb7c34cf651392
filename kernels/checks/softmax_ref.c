/*
 * softmax references on the host: the float64 result and the plain
 * programs' largest error per element (softmax.h, struct softmax_refs).
 * softmax_ref.cu computes the same on the GPU.
 *
 * The plain program is what a framework would run op by op: every
 * intermediate tensor rounded to the dtype, reductions accumulated in float
 * (as torch.sum does for half types) and rounded once, in each of the
 * NW_ORDERS reduction orders (nw_order.h): on a given row one order can be
 * exact by luck, and in f32, where kernel and plain round alike, one lucky
 * plain program would make a correct kernel fail.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "nw_order.h"
#include "softmax.h"

static void note_err(double *plain_err, long i, float p, double ref)
{
	if (isfinite(p) && fabs((double)p - ref) > plain_err[i])
		plain_err[i] = fabs((double)p - ref);
}

/* Float64 softmax of stored values, row by row. An all -inf row comes out NaN. */
static void ref_fwd(enum nw_dtype d, const void *x, long rows, long cols, double *y)
{
	long i, j;

	for (i = 0; i < rows; i++) {
		double m = -INFINITY, s = 0.0;
		long off = i * cols;

		for (j = 0; j < cols; j++)
			m = fmax(m, (double)nw_load(d, x, off + j));
		for (j = 0; j < cols; j++)
			s += exp((double)nw_load(d, x, off + j) - m);
		for (j = 0; j < cols; j++)
			y[off + j] = exp((double)nw_load(d, x, off + j) - m) / s;
	}
}

/* The plain program: x - max, exp, sum, divide, each result rounded to the dtype. */
static void plain_fwd(enum nw_dtype d, const void *x, long rows, long cols, float *e, const double *ref,
		      double *plain_err)
{
	long i, j;
	int o;

	for (i = 0; i < rows; i++) {
		float m = -INFINITY;
		long off = i * cols;

		for (j = 0; j < cols; j++)
			m = fmaxf(m, nw_load(d, x, off + j));
		for (j = 0; j < cols; j++)
			e[j] = nw_round(d, expf(nw_round(d, nw_load(d, x, off + j) - m)));
		for (o = 0; o < NW_ORDERS; o++) {
			float s = 0.0f;

			for (j = 0; j < cols; j++)
				s += e[nw_order_at(o, j, cols)];
			s = nw_round(d, s);
			for (j = 0; j < cols; j++)
				note_err(plain_err, off + j, nw_round(d, e[j] / s), ref[off + j]);
		}
	}
}

static int host_fwd(enum nw_dtype d, const void *x, const void *x_dev, long rows, long cols, double *ref,
		    double *plain_err)
{
	float *e = malloc((size_t)(cols ? cols : 1) * sizeof(*e));
	long i;

	(void)x_dev;
	if (!e)
		return -ENOMEM;
	for (i = 0; i < rows * cols; i++)
		plain_err[i] = 0.0;
	ref_fwd(d, x, rows, cols, ref);
	plain_fwd(d, x, rows, cols, e, ref, plain_err);
	free(e);
	return 0;
}

/* Float64 backward from stored y and dy, and the size of its terms (softmax.h). */
static double ref_bwd(enum nw_dtype d, const void *y, const void *dy, long rows, long cols, double *dx)
{
	double scale = 0.0;
	long i, j;

	for (i = 0; i < rows; i++) {
		double dot = 0.0, mag = 0.0;
		long off = i * cols;

		for (j = 0; j < cols; j++) {
			double t = (double)nw_load(d, dy, off + j) * (double)nw_load(d, y, off + j);

			dot += t;
			mag += fabs(t);
		}
		for (j = 0; j < cols; j++) {
			double yj = (double)nw_load(d, y, off + j), dyj = (double)nw_load(d, dy, off + j);

			dx[off + j] = yj * (dyj - dot);
			scale = fmax(scale, fabs(yj) * (fabs(dyj) + mag));
		}
	}
	return scale;
}

/* The plain program: dy * y, sum, dy - sum, y * that, each result rounded to the dtype. */
static void plain_bwd(enum nw_dtype d, const void *y, const void *dy, long rows, long cols, const double *ref,
		      double *plain_err)
{
	long i, j;
	int o;

	for (i = 0; i < rows; i++) {
		long off = i * cols;

		for (o = 0; o < NW_ORDERS; o++) {
			float dot = 0.0f;

			for (j = 0; j < cols; j++) {
				long k = off + nw_order_at(o, j, cols);

				dot += nw_round(d, nw_load(d, dy, k) * nw_load(d, y, k));
			}
			dot = nw_round(d, dot);
			for (j = 0; j < cols; j++)
				note_err(plain_err, off + j,
					 nw_round(d, nw_load(d, y, off + j) *
							 nw_round(d, nw_load(d, dy, off + j) - dot)),
					 ref[off + j]);
		}
	}
}

static int host_bwd(enum nw_dtype d, const void *y, const void *dy, const void *y_dev, const void *dy_dev,
		    long rows, long cols, double *ref, double *plain_err, double *scale)
{
	long i;

	(void)y_dev;
	(void)dy_dev;
	for (i = 0; i < rows * cols; i++)
		plain_err[i] = 0.0;
	*scale = ref_bwd(d, y, dy, rows, cols, ref);
	plain_bwd(d, y, dy, rows, cols, ref, plain_err);
	return 0;
}

const struct softmax_refs softmax_refs_host = {
    .where = "host",
    .fwd = host_fwd,
    .bwd = host_bwd,
};
