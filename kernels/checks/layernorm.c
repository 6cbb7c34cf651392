/*
 * layernorm.fwd and layernorm.bwd.
 *
 * Forward: y = (x - mean) * rstd * gamma + beta along rows, rstd = 1 /
 * sqrt(var + eps) with the biased variance, eps = 1e-5; the kernel also
 * returns mean and rstd (float), judged as tensors of their own. Backward:
 * from x, gamma, dy and the forward's float mean and rstd (the reference's,
 * rounded to float), dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
 * g = dy * gamma and xhat = (x - mean) * rstd; dgamma = sum over rows of
 * dy * xhat, dbeta = sum of dy. Each gradient is judged apart.
 *
 * The reference is float64 from the stored inputs (and the stored mean and
 * rstd). The plain program is what a framework runs op by op: mean, x - mean,
 * squares, variance, rsqrt, products and sums, each rounded to the dtype,
 * sums accumulated in float and rounded once, in NW_ORDERS orders. Both are
 * computed on the host or the GPU (layernorm_ref.c, layernorm_ref.cu), after
 * the inputs are uploaded and before the kernel runs.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "layernorm.h"

static const char *const families[LN_FAMILIES] = {
    [LN_ALIGNED] = "aligned", [LN_TAIL] = "tail",       [LN_THRESHOLD] = "threshold",
    [LN_TINY] = "tiny",       [LN_EXTREME] = "extreme",
};

/* Both sides of multiples of the CUDA block (128 threads) and of common tile sizes. */
static const long threshold_cols[] = {63,  64,  65,  127,  128,  129,  255,  256,  257,  383,  384,  385,
				      511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097};

enum { STREAM_SHAPE = 0, STREAM_X = 1, STREAM_AFFINE = 2, STREAM_DY = 3 };

/* How an extreme-family row is drawn. */
enum row_kind {
	ROW_NORMAL,
	ROW_OFFSET_1E3, /* 1e3 + N(0, 1): the mean dominates, the variance is small */
	ROW_OFFSET_1E4, /* -1e4 + N(0, 4): in 16-bit types most elements are equal */
	ROW_CONSTANT,   /* variance 0: rstd = 1 / sqrt(eps) */
	ROW_NARROW,     /* mu + 1e-3 N(0, 1): variance near eps */
	ROW_WIDE,       /* 1e3 N(0, 1) */
	ROW_ONE_HOT,    /* zeros and one 100 */
	ROW_KINDS,
};

static long rows_for(struct nw_rng *r, long cols, long min_rows)
{
	long cap = cols > 0 ? LAYERNORM_MAX_ELEMS / cols : 64;

	if (cap > 64)
		cap = 64;
	if (cap < min_rows)
		cap = min_rows;
	return nw_rng_range(r, min_rows, cap);
}

void layernorm_shape(int family, uint64_t seed, uint64_t index, long *rows, long *cols)
{
	struct nw_rng r;

	nw_rng_init(&r, "layernorm", seed, STREAM_SHAPE);
	switch (family) {
	case LN_ALIGNED:
		*cols = 4 * nw_rng_range(&r, 1, 1200);
		*rows = rows_for(&r, *cols, 1);
		break;
	case LN_TAIL:
		*cols = 4 * nw_rng_range(&r, 0, 1200) + nw_rng_range(&r, 1, 3);
		*rows = rows_for(&r, *cols, 1);
		break;
	case LN_THRESHOLD:
		*cols = threshold_cols[nw_rng_range(&r, 0,
						    sizeof(threshold_cols) / sizeof(threshold_cols[0]) - 1)];
		*rows = rows_for(&r, *cols, 1);
		break;
	case LN_TINY:
		/* Consecutive tiny trials sweep every width, the empty row included; rows may be 0. */
		*cols = (long)(index % 17);
		*rows = nw_rng_range(&r, 0, 8);
		break;
	default:
		switch (nw_rng_range(&r, 0, 2)) {
		case 0:
			*cols = nw_rng_range(&r, 1, 16);
			break;
		case 1:
			*cols = nw_rng_range(&r, 17, 1024);
			break;
		default:
			*cols = nw_rng_range(&r, 1025, 4097);
			break;
		}
		*rows = rows_for(&r, *cols, 2);
		break;
	}
}

/* x as doubles, row by row; the extreme family mixes row kinds. */
static void gen_x(struct nw_rng *r, int family, long rows, long cols, double *x)
{
	static const double sigmas[] = {0.5, 1.0, 2.0, 4.0};
	double sigma = sigmas[nw_rng_range(r, 0, 3)];
	long i, j;

	for (i = 0; i < rows; i++) {
		double *row = x + i * cols, mu = 8.0 * nw_rng_uniform(r) - 4.0;
		int kind = family == LN_EXTREME ? (int)nw_rng_range(r, 0, ROW_KINDS - 1) : ROW_NORMAL;
		long hot = cols > 0 ? nw_rng_range(r, 0, cols - 1) : 0;

		nw_rng_normals(r, row, cols); /* then shaped in place */
		for (j = 0; j < cols; j++) {
			double n = row[j];

			switch (kind) {
			case ROW_OFFSET_1E3:
				row[j] = 1e3 + n;
				break;
			case ROW_OFFSET_1E4:
				row[j] = -1e4 + 4.0 * n;
				break;
			case ROW_CONSTANT:
				row[j] = mu;
				break;
			case ROW_NARROW:
				row[j] = mu + 1e-3 * n;
				break;
			case ROW_WIDE:
				row[j] = 1e3 * n;
				break;
			case ROW_ONE_HOT:
				row[j] = j == hot ? 100.0 : 0.0;
				break;
			default:
				row[j] = mu + sigma * n;
				break;
			}
		}
	}
}

static void gen_affine(struct nw_rng *r, long cols, double *gamma, double *beta)
{
	long j;

	for (j = 0; j < cols; j++) {
		gamma[j] = ck_normal(r, 1.0, 0.5);
		beta[j] = ck_normal(r, 0.0, 0.5);
	}
}

/* The backend's references (layernorm.h); tests with their own kernel tables get the host's. */
static const struct layernorm_refs *refs_of(const struct layernorm_kernels *k)
{
	return k->refs ? k->refs : &layernorm_refs_host;
}

struct launch_ctx {
	const struct layernorm_kernels *k;
	enum nw_dtype dtype;
	const void *x, *gamma, *beta, *dy;
	const float *mean_in, *rstd_in;
	void *y, *dx, *dgamma, *dbeta;
	float *mean, *rstd;
	int rows, cols;
};

static int launch_fwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->fwd(c->dtype, c->x, c->gamma, c->beta, c->y, c->mean, c->rstd, c->rows, c->cols,
			 LAYERNORM_EPS);
}

static int launch_bwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->bwd(c->dtype, c->x, c->gamma, c->mean_in, c->rstd_in, c->dy, c->dx, c->dgamma, c->dbeta,
			 c->rows, c->cols);
}

/* Everything one trial holds; freed by release(). */
struct bufs {
	double *x, *gamma, *beta, *dy, *ref[3], *plain_err[3], *mean, *rstd;
	void *xs, *gs, *bs, *dys;
	float *meanf, *rstdf;
	void *x_dev, *g_dev, *b_dev, *dy_dev, *mean_dev, *rstd_dev;
	struct nw_output out[3];
};

static void release(struct bufs *b)
{
	int i;

	for (i = 0; i < 3; i++) {
		free(b->ref[i]);
		free(b->plain_err[i]);
		nw_output_release(&b->out[i]);
	}
	free(b->x);
	free(b->gamma);
	free(b->beta);
	free(b->dy);
	free(b->mean);
	free(b->rstd);
	free(b->xs);
	free(b->gs);
	free(b->bs);
	free(b->dys);
	free(b->meanf);
	free(b->rstdf);
	nw_input_release(b->x_dev);
	nw_input_release(b->g_dev);
	nw_input_release(b->b_dev);
	nw_input_release(b->dy_dev);
	nw_input_release(b->mean_dev);
	nw_input_release(b->rstd_dev);
}

/* Result arrays of the three outputs: n0, n1 and n2 elements. */
static int alloc_refs(struct bufs *b, long n0, long n1, long n2)
{
	long n[3] = {n0, n1, n2};
	int i;

	for (i = 0; i < 3; i++) {
		b->ref[i] = ck_doubles(n[i]);
		b->plain_err[i] = ck_doubles(n[i]);
		if (!b->ref[i] || !b->plain_err[i])
			return -ENOMEM;
	}
	return 0;
}

/* Draws the shape and x, gamma, beta (stored in the dtype and read back). */
static int setup(const struct nw_check *c, struct nw_trial *t, struct bufs *b, long *rows, long *cols)
{
	enum nw_dtype d = t->dtype;
	struct nw_rng r;
	long n, dims[2];

	layernorm_shape(t->family, t->seed, t->index, rows, cols);
	dims[0] = *rows;
	dims[1] = *cols;
	ck_set_shape(t, dims, 2);
	n = *rows * *cols;
	b->x = ck_doubles(n);
	b->gamma = ck_doubles(*cols);
	b->beta = ck_doubles(*cols);
	b->xs = ck_buffer(d, n);
	b->gs = ck_buffer(d, *cols);
	b->bs = ck_buffer(d, *cols);
	if (!b->x || !b->gamma || !b->beta || !b->xs || !b->gs || !b->bs)
		return -ENOMEM;
	nw_rng_init(&r, c->name, t->seed, STREAM_X);
	gen_x(&r, t->family, *rows, *cols, b->x);
	nw_rng_init(&r, c->name, t->seed, STREAM_AFFINE);
	gen_affine(&r, *cols, b->gamma, b->beta);
	ck_store_all(d, b->xs, b->x, n);
	ck_store_all(d, b->gs, b->gamma, *cols);
	ck_store_all(d, b->bs, b->beta, *cols);
	return 0;
}

static int fwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct layernorm_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct bufs b = {0};
	struct launch_ctx ctx = {0};
	struct layernorm_in in = {0};
	struct layernorm_ref_out ro;
	long rows, cols, n;
	double t0;
	int rc;

	rc = setup(c, t, &b, &rows, &cols);
	if (rc)
		goto out;
	n = rows * cols;
	rc = alloc_refs(&b, n, rows, rows);
	if (rc)
		goto out;

	if ((rc = nw_input_upload(t, &b.x_dev, b.xs, (size_t)n * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &b.g_dev, b.gs, (size_t)cols * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &b.b_dev, b.bs, (size_t)cols * nw_dtype_size(d))))
		goto out;
	/* Before the kernel runs: a kernel that scribbles on its input cannot bend the reference. */
	in = (struct layernorm_in){.x = b.xs,
				   .gamma = b.gs,
				   .beta = b.bs,
				   .x_dev = b.x_dev,
				   .gamma_dev = b.g_dev,
				   .beta_dev = b.b_dev,
				   .rows = rows,
				   .cols = cols};
	ro = (struct layernorm_ref_out){.ref = {b.ref[0], b.ref[1], b.ref[2]},
					.plain_err = {b.plain_err[0], b.plain_err[1], b.plain_err[2]}};
	t0 = nw_now();
	rc = nw_reference_done(t, refs_of(k)->fwd(d, &in, &ro), t0);
	if (rc)
		goto out;
	if ((rc = nw_output_init(t, &b.out[0], "y", d, (size_t)n)) ||
	    (rc = nw_output_init(t, &b.out[1], "mean", NW_F32, (size_t)rows)) ||
	    (rc = nw_output_init(t, &b.out[2], "rstd", NW_F32, (size_t)rows)))
		goto out;
	ctx = (struct launch_ctx){.k = k,
				  .dtype = d,
				  .x = b.x_dev,
				  .gamma = b.g_dev,
				  .beta = b.b_dev,
				  .y = b.out[0].dev,
				  .mean = b.out[1].dev,
				  .rstd = b.out[2].dev,
				  .rows = (int)rows,
				  .cols = (int)cols};
	rc = nw_run_kernel(t, b.out, 3, k->fwd_name, launch_fwd, &ctx);
	if (rc)
		goto out;
	{
		long ydims[2] = {rows, cols};
		struct ck_tensor y = {.name = "y",
				      .out = &b.out[0],
				      .ref = b.ref[0],
				      .plain_err = b.plain_err[0],
				      .factor = c->budget_factor,
				      .floor_scale = ck_floor_scale(d, ck_max_abs(b.ref[0], n), ro.terms[0]),
				      .dims = ydims,
				      .ndim = 2,
				      .tail_width = 4};
		struct ck_tensor m = y, s = y;

		ck_compare(t, &y);
		m.name = "mean";
		m.out = &b.out[1];
		m.ref = b.ref[1];
		m.plain_err = b.plain_err[1];
		m.ndim = 1;
		m.tail_width = 0;
		/* The mean is a sum with cancellation: its rounding scales with the row's magnitude. */
		m.floor_scale = ck_floor_scale(NW_F32, ck_max_abs(b.ref[1], rows), ck_max_abs(b.x, n));
		ck_compare(t, &m);
		s.floor_scale = 0.0;
		s.name = "rstd";
		s.out = &b.out[2];
		s.ref = b.ref[2];
		s.plain_err = b.plain_err[2];
		s.ndim = 1;
		s.tail_width = 0;
		ck_compare(t, &s);
	}
out:
	release(&b);
	return rc;
}

static int bwd_run(const struct nw_check *c, struct nw_trial *t)
{
	static const double dy_scales[] = {1.0, 1e-3, 1e3};
	const struct layernorm_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct bufs b = {0};
	struct launch_ctx ctx = {0};
	struct layernorm_in in = {0};
	struct layernorm_ref_out ro;
	long rows, cols, n, i, j;
	double t0;
	struct nw_rng r;
	int rc;

	rc = setup(c, t, &b, &rows, &cols);
	if (rc)
		goto out;
	n = rows * cols;
	b.dy = ck_doubles(n);
	b.dys = ck_buffer(d, n);
	b.mean = ck_doubles(rows);
	b.rstd = ck_doubles(rows);
	b.meanf = ck_floats(rows);
	b.rstdf = ck_floats(rows);
	if (!b.dy || !b.dys || !b.mean || !b.rstd || !b.meanf || !b.rstdf || alloc_refs(&b, n, cols, cols)) {
		rc = -ENOMEM;
		goto out;
	}
	nw_rng_init(&r, c->name, t->seed, STREAM_DY);
	for (i = 0; i < rows; i++) {
		double s = t->family == LN_EXTREME ? dy_scales[nw_rng_range(&r, 0, 2)] : 1.0;

		nw_rng_normals(&r, b.dy + i * cols, cols);
		for (j = 0; j < cols; j++)
			b.dy[i * cols + j] *= s;
	}
	ck_store_all(d, b.dys, b.dy, n);
	/* The forward's statistics, as the kernel would have returned them (float). */
	layernorm_stats(b.x, rows, cols, b.mean, b.rstd);
	for (i = 0; i < rows; i++) {
		b.meanf[i] = (float)b.mean[i];
		b.rstdf[i] = (float)b.rstd[i];
	}

	if ((rc = nw_input_upload(t, &b.x_dev, b.xs, (size_t)n * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &b.g_dev, b.gs, (size_t)cols * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &b.dy_dev, b.dys, (size_t)n * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &b.mean_dev, b.meanf, (size_t)rows * sizeof(float))) ||
	    (rc = nw_input_upload(t, &b.rstd_dev, b.rstdf, (size_t)rows * sizeof(float))))
		goto out;
	in = (struct layernorm_in){.x = b.xs,
				   .gamma = b.gs,
				   .dy = b.dys,
				   .mean = b.meanf,
				   .rstd = b.rstdf,
				   .x_dev = b.x_dev,
				   .gamma_dev = b.g_dev,
				   .dy_dev = b.dy_dev,
				   .mean_dev = b.mean_dev,
				   .rstd_dev = b.rstd_dev,
				   .rows = rows,
				   .cols = cols};
	ro = (struct layernorm_ref_out){.ref = {b.ref[0], b.ref[1], b.ref[2]},
					.plain_err = {b.plain_err[0], b.plain_err[1], b.plain_err[2]}};
	t0 = nw_now();
	rc = nw_reference_done(t, refs_of(k)->bwd(d, &in, &ro), t0);
	if (rc)
		goto out;
	{
		/* Keep the gradients inside the dtype's range (f16 with dy 1e3 on a constant row). */
		double m = fmax(ck_max_abs(b.ref[0], n),
				fmax(ck_max_abs(b.ref[1], cols), ck_max_abs(b.ref[2], cols)));
		double f = ck_shrink(d, m);

		if (f < 1.0) {
			for (i = 0; i < n; i++)
				b.dy[i] *= f;
			ck_store_all(d, b.dys, b.dy, n);
			nw_input_release(b.dy_dev);
			b.dy_dev = NULL;
			rc = nw_input_upload(t, &b.dy_dev, b.dys, (size_t)n * nw_dtype_size(d));
			if (rc)
				goto out;
			in.dy_dev = b.dy_dev;
			t0 = nw_now();
			rc = nw_reference_done(t, refs_of(k)->bwd(d, &in, &ro), t0);
			if (rc)
				goto out;
		}
	}
	if ((rc = nw_output_init(t, &b.out[0], "dx", d, (size_t)n)) ||
	    (rc = nw_output_init(t, &b.out[1], "dgamma", d, (size_t)cols)) ||
	    (rc = nw_output_init(t, &b.out[2], "dbeta", d, (size_t)cols)))
		goto out;
	ctx = (struct launch_ctx){.k = k,
				  .dtype = d,
				  .x = b.x_dev,
				  .gamma = b.g_dev,
				  .dy = b.dy_dev,
				  .mean_in = b.mean_dev,
				  .rstd_in = b.rstd_dev,
				  .dx = b.out[0].dev,
				  .dgamma = b.out[1].dev,
				  .dbeta = b.out[2].dev,
				  .rows = (int)rows,
				  .cols = (int)cols};
	rc = nw_run_kernel(t, b.out, 3, k->bwd_name, launch_bwd, &ctx);
	if (rc)
		goto out;
	{
		long xdims[2] = {rows, cols}, cdims[1] = {cols};
		struct ck_tensor dx = {.name = "dx",
				       .out = &b.out[0],
				       .ref = b.ref[0],
				       .plain_err = b.plain_err[0],
				       .factor = c->budget_factor,
				       .floor_scale = ck_floor_scale(d, ck_max_abs(b.ref[0], n), ro.terms[0]),
				       .dims = xdims,
				       .ndim = 2,
				       .tail_width = 4};
		struct ck_tensor dg = dx, db = dx;

		ck_compare(t, &dx);
		dg.name = "dgamma";
		dg.out = &b.out[1];
		dg.ref = b.ref[1];
		dg.plain_err = b.plain_err[1];
		dg.floor_scale = ck_floor_scale(d, ck_max_abs(b.ref[1], cols), ro.terms[1]);
		dg.dims = cdims;
		dg.ndim = 1;
		ck_compare(t, &dg);
		db.name = "dbeta";
		db.out = &b.out[2];
		db.ref = b.ref[2];
		db.plain_err = b.plain_err[2];
		db.floor_scale = ck_floor_scale(d, ck_max_abs(b.ref[2], cols), ro.terms[2]);
		db.dims = cdims;
		db.ndim = 1;
		ck_compare(t, &db);
	}
out:
	release(&b);
	return rc;
}

const struct nw_check layernorm_fwd_check = {
    .name = "layernorm.fwd",
    .op = "layernorm",
    .pass = "fwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = LN_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &layernorm_kernels,
    .run = fwd_run,
};

const struct nw_check layernorm_bwd_check = {
    .name = "layernorm.bwd",
    .op = "layernorm",
    .pass = "bwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = LN_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &layernorm_kernels,
    .run = bwd_run,
};
