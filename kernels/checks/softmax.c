/*
 * softmax.fwd and softmax.bwd.
 *
 * Inputs are stored in the trial's dtype. The reference is computed in
 * float64 from the stored inputs, with the plain same-dtype programs, on the
 * host or the GPU (softmax_ref.c, softmax_ref.cu). The kernel passes when its largest error is within twice the plain
 * program's plus a floor of 4 eps at the tensor's scale (sdk/metrics.c).
 *
 * A row of -inf only has no softmax: exp(-inf - -inf) is NaN, and the
 * reference (like PyTorch) answers NaN for the whole row. The kernel must
 * then give NaN there too, and finite values everywhere else.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nw_device.h"
#include "softmax.h"

static const char *const families[SOFTMAX_FAMILIES] = {
    [SOFTMAX_ALIGNED] = "aligned", [SOFTMAX_TAIL] = "tail",       [SOFTMAX_THRESHOLD] = "threshold",
    [SOFTMAX_TINY] = "tiny",       [SOFTMAX_EXTREME] = "extreme",
};

/* Dispatch thresholds and tile sizes, each with its neighbours (PRODUCT.md "Shape families"). */
static const long threshold_cols[] = {63,  64,   65,   127,  128,  129,  255,  256,  257,  511, 512,
				      513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097};

/* Generator streams: the shape is keyed by op, the data by check. */
enum { STREAM_SHAPE = 0, STREAM_X = 1, STREAM_DY = 2 };

/* How an extreme-family row is drawn. */
enum row_kind {
	ROW_NORMAL,
	ROW_PLUS_1E4, /* large offsets: exp(x) overflows without the max shift */
	ROW_MINUS_1E4,
	ROW_SOME_NEGINF, /* about a third of the row -inf, at least one finite */
	ROW_ONE_FINITE,  /* a one-hot row: all -inf but one */
	ROW_WIDE,        /* spread of 40: most exp() underflow */
	ROW_CONSTANT,    /* exact ties */
	ROW_ALL_NEGINF,  /* no softmax: NaN (forward only) */
	ROW_KINDS,
};

static long rows_for(struct nw_rng *r, long cols, long min_rows)
{
	long cap = cols > 0 ? SOFTMAX_MAX_ELEMS / cols : 16;

	if (cap > 16)
		cap = 16;
	if (cap < min_rows)
		cap = min_rows;
	return nw_rng_range(r, min_rows, cap);
}

void softmax_shape(int family, uint64_t seed, uint64_t index, long *rows, long *cols)
{
	struct nw_rng r;

	nw_rng_init(&r, "softmax", seed, STREAM_SHAPE);
	switch (family) {
	case SOFTMAX_ALIGNED:
		*cols = 4 * nw_rng_range(&r, 1, 1200);
		*rows = rows_for(&r, *cols, 1);
		break;
	case SOFTMAX_TAIL:
		*cols = 4 * nw_rng_range(&r, 0, 1200) + nw_rng_range(&r, 1, 3);
		*rows = rows_for(&r, *cols, 1);
		break;
	case SOFTMAX_THRESHOLD:
		*cols = threshold_cols[nw_rng_range(&r, 0,
						    sizeof(threshold_cols) / sizeof(threshold_cols[0]) - 1)];
		*rows = rows_for(&r, *cols, 1);
		break;
	case SOFTMAX_TINY:
		/* Consecutive tiny trials sweep every width, the empty row included. */
		*cols = (long)(index % 17);
		*rows = nw_rng_range(&r, 1, 8);
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

/* Logits as doubles: row offsets and spreads vary; the extreme family mixes row kinds. */
static void gen_logits(struct nw_rng *r, int family, bool allow_nan_rows, long rows, long cols, double *x)
{
	static const double sigmas[] = {0.5, 1.0, 2.0, 4.0};
	double sigma = sigmas[nw_rng_range(r, 0, 3)];
	long i, j;

	for (i = 0; i < rows; i++) {
		double *row = x + i * cols, mu = 8.0 * nw_rng_uniform(r) - 4.0;
		int kind = family == SOFTMAX_EXTREME ? (int)nw_rng_range(r, 0, ROW_KINDS - 1) : ROW_NORMAL;
		long keep;

		if (kind == ROW_ALL_NEGINF && !allow_nan_rows)
			kind = ROW_ONE_FINITE;
		/* Rows but one draw only their normals: all at once, then shaped in place. */
		if (kind != ROW_SOME_NEGINF)
			nw_rng_normals(r, row, cols);
		for (j = 0; j < cols; j++) {
			double n = kind == ROW_SOME_NEGINF ? nw_rng_normal(r) : row[j];

			switch (kind) {
			case ROW_PLUS_1E4:
				row[j] = 1e4 + 2.0 * n;
				break;
			case ROW_MINUS_1E4:
				row[j] = -1e4 + 2.0 * n;
				break;
			case ROW_SOME_NEGINF:
				row[j] = nw_rng_range(r, 0, 2) == 0 ? -INFINITY : mu + n;
				break;
			case ROW_ONE_FINITE:
			case ROW_ALL_NEGINF:
				row[j] = -INFINITY;
				break;
			case ROW_WIDE:
				row[j] = 40.0 * n;
				break;
			case ROW_CONSTANT:
				row[j] = mu;
				break;
			default:
				row[j] = mu + sigma * n;
				break;
			}
		}
		if ((kind == ROW_SOME_NEGINF || kind == ROW_ONE_FINITE) && cols > 0) {
			keep = nw_rng_range(r, 0, cols - 1);
			row[keep] = mu + nw_rng_normal(r);
		}
	}
}

/* The backend's references (softmax.h); tests with their own kernel tables get the host's. */
static const struct softmax_refs *refs_of(const struct softmax_kernels *k)
{
	return k->refs ? k->refs : &softmax_refs_host;
}

struct launch_ctx {
	const struct softmax_kernels *k;
	enum nw_dtype dtype;
	const void *in0, *in1;
	void *out;
	int rows, cols;
};

static int launch_fwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->fwd(c->dtype, c->in0, c->out, c->rows, c->cols);
}

static int launch_bwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->bwd(c->dtype, c->in0, c->in1, c->out, c->rows, c->cols);
}

static void set_shape(struct nw_trial *t, long rows, long cols)
{
	t->shape[0] = rows;
	t->shape[1] = cols;
	t->ndim = 2;
}

/* A trial's host part (nw_check.prepare): the shape and the stored inputs, hashed. */
struct prepared {
	long rows, cols, n;
	void *in[2]; /* x; or y and dy */
};

static void release(void *arg)
{
	struct prepared *p = arg;

	nw_dev_unpin(p->in[0]);
	nw_dev_unpin(p->in[1]);
	free(p);
}

static struct prepared *prepared_new(struct nw_trial *t, unsigned ninputs, double **scratch)
{
	struct prepared *p = calloc(1, sizeof(*p));
	size_t n;
	unsigned i;

	if (!p)
		return NULL;
	softmax_shape(t->family, t->seed, t->index, &p->rows, &p->cols);
	set_shape(t, p->rows, p->cols);
	p->n = p->rows * p->cols;
	n = (size_t)(p->n ? p->n : 1);
	*scratch = malloc(n * sizeof(**scratch));
	/* Page-locked: uploaded from where they are (nw_dev_upload). */
	for (i = 0; i < ninputs; i++)
		p->in[i] = nw_dev_pinned(n * nw_dtype_size(t->dtype));
	if (!*scratch || !p->in[0] || (ninputs > 1 && !p->in[1])) {
		free(*scratch);
		release(p);
		return NULL;
	}
	return p;
}

static int fwd_prepare(const struct nw_check *c, struct nw_trial *t, void **out)
{
	double *logits;
	struct nw_rng r;
	struct prepared *p = prepared_new(t, 1, &logits);

	if (!p)
		return nw_trial_error(t, false, "out of memory");
	nw_rng_init(&r, c->name, t->seed, STREAM_X);
	gen_logits(&r, t->family, true, p->rows, p->cols, logits);
	nw_store_n(t->dtype, p->in[0], logits, (size_t)p->n);
	free(logits);
	nw_input_hash(t, p->in[0], (size_t)p->n * nw_dtype_size(t->dtype));
	*out = p;
	return 0;
}

static int fwd_run(const struct nw_check *c, struct nw_trial *t, void *arg)
{
	const struct softmax_kernels *k = c->kernels;
	const struct prepared *p = arg;
	enum nw_dtype d = t->dtype;
	struct nw_output y = {0};
	struct launch_ctx ctx = {0};
	struct nw_compare_spec spec = {0};
	const struct softmax_refs *refs = refs_of(k);
	double *ref = NULL, *plain_err = NULL, *ref_dev = NULL, t0;
	void *x = p->in[0], *x_dev = NULL;
	long rows = p->rows, cols = p->cols, n = p->n;
	int rc;

	if (!refs->fwd_dev) {
		ref = malloc((size_t)(n ? n : 1) * sizeof(*ref));
		plain_err = malloc((size_t)(n ? n : 1) * sizeof(*plain_err));
		if (!ref || !plain_err) {
			rc = nw_trial_error(t, false, "out of memory");
			goto out;
		}
	}
	rc = nw_input_upload(t, &x_dev, x, (size_t)n * nw_dtype_size(d));
	if (rc)
		goto out;
	/* Before the kernel runs: a kernel that scribbles on its input cannot bend the reference. */
	t0 = nw_now();
	rc = nw_reference_done(t,
			       refs->fwd_dev ? refs->fwd_dev(d, x_dev, rows, cols, &ref_dev)
					     : refs->fwd(d, x, x_dev, rows, cols, ref, plain_err),
			       t0);
	if (rc)
		goto out;
	rc = nw_output_init(t, &y, "y", d, (size_t)n);
	if (rc)
		goto out;
	ctx = (struct launch_ctx){
	    .k = k, .dtype = d, .in0 = x_dev, .out = y.dev, .rows = (int)rows, .cols = (int)cols};
	rc = nw_run_kernel(t, &y, 1, k->fwd_name, launch_fwd, &ctx);
	if (rc)
		goto out;

	spec = (struct nw_compare_spec){.out = &y,
					.ref = ref,
					.plain_err = plain_err,
					.ref_dev = ref_dev,
					.plain_err_dev = ref_dev ? ref_dev + n : NULL,
					.factor = c->budget_factor,
					.dims = t->shape,
					.ndim = 2,
					.tail_width = 4};
	if (nw_compare(&t->tensors[0], "y", &spec)) {
		rc = nw_trial_device_error(t);
		goto out;
	}
	t->ntensors = 1;
out:
	nw_output_release(&y);
	nw_input_release(x_dev);
	nw_dev_free(ref_dev);
	free(ref);
	free(plain_err);
	return rc;
}

static int bwd_prepare(const struct nw_check *c, struct nw_trial *t, void **out)
{
	static const double dy_scales[] = {1.0, 1e-3, 1e3};
	enum nw_dtype d = t->dtype;
	double *logits;
	struct nw_rng r;
	struct prepared *p = prepared_new(t, 2, &logits);
	long rows, cols, i, j;

	if (!p)
		return nw_trial_error(t, false, "out of memory");
	rows = p->rows;
	cols = p->cols;
	/* y is a softmax output (rounded to the dtype), as a backward pass receives it. */
	nw_rng_init(&r, c->name, t->seed, STREAM_X);
	gen_logits(&r, t->family, false, rows, cols, logits);
	for (i = 0; i < rows; i++) {
		double m = -INFINITY, s = 0.0;

		for (j = 0; j < cols; j++)
			m = fmax(m, logits[i * cols + j]);
		/* Each exp once (logits is not needed after this): the same values, half the libm calls. */
		for (j = 0; j < cols; j++) {
			logits[i * cols + j] = exp(logits[i * cols + j] - m);
			s += logits[i * cols + j];
		}
		for (j = 0; j < cols; j++)
			logits[i * cols + j] /= s;
		nw_store_n(d, (char *)p->in[0] + i * cols * (long)nw_dtype_size(d), logits + i * cols,
			   (size_t)cols);
	}
	nw_rng_init(&r, c->name, t->seed, STREAM_DY);
	for (i = 0; i < rows; i++) {
		double dy_scale = t->family == SOFTMAX_EXTREME ? dy_scales[nw_rng_range(&r, 0, 2)] : 1.0;
		double *row = logits + i * cols; /* free again: y is stored */

		nw_rng_normals(&r, row, cols);
		for (j = 0; j < cols; j++)
			row[j] *= dy_scale;
		nw_store_n(d, (char *)p->in[1] + i * cols * (long)nw_dtype_size(d), row, (size_t)cols);
	}
	free(logits);
	nw_input_hash(t, p->in[0], (size_t)p->n * nw_dtype_size(d));
	nw_input_hash(t, p->in[1], (size_t)p->n * nw_dtype_size(d));
	*out = p;
	return 0;
}

static int bwd_run(const struct nw_check *c, struct nw_trial *t, void *arg)
{
	const struct softmax_kernels *k = c->kernels;
	const struct prepared *p = arg;
	enum nw_dtype d = t->dtype;
	struct nw_output dx = {0};
	struct launch_ctx ctx = {0};
	struct nw_compare_spec spec = {0};
	const struct softmax_refs *refs = refs_of(k);
	double *ref = NULL, *plain_err = NULL, *ref_dev = NULL, scale = 0.0, t0;
	void *y = p->in[0], *dy = p->in[1], *y_dev = NULL, *dy_dev = NULL;
	long rows = p->rows, cols = p->cols, n = p->n;
	int rc;

	if (!refs->bwd_dev) {
		ref = malloc((size_t)(n ? n : 1) * sizeof(*ref));
		plain_err = malloc((size_t)(n ? n : 1) * sizeof(*plain_err));
		if (!ref || !plain_err) {
			rc = nw_trial_error(t, false, "out of memory");
			goto out;
		}
	}
	rc = nw_input_upload(t, &y_dev, y, (size_t)n * nw_dtype_size(d));
	if (rc)
		goto out;
	rc = nw_input_upload(t, &dy_dev, dy, (size_t)n * nw_dtype_size(d));
	if (rc)
		goto out;
	t0 = nw_now();
	rc = nw_reference_done(t,
			       refs->bwd_dev
				   ? refs->bwd_dev(d, y_dev, dy_dev, rows, cols, &ref_dev)
				   : refs->bwd(d, y, dy, y_dev, dy_dev, rows, cols, ref, plain_err, &scale),
			       t0);
	if (rc)
		goto out;
	rc = nw_output_init(t, &dx, "dx", d, (size_t)n);
	if (rc)
		goto out;
	ctx = (struct launch_ctx){.k = k,
				  .dtype = d,
				  .in0 = y_dev,
				  .in1 = dy_dev,
				  .out = dx.dev,
				  .rows = (int)rows,
				  .cols = (int)cols};
	rc = nw_run_kernel(t, &dx, 1, k->bwd_name, launch_bwd, &ctx);
	if (rc)
		goto out;

	spec = (struct nw_compare_spec){.out = &dx,
					.ref = ref,
					.plain_err = plain_err,
					.ref_dev = ref_dev,
					.plain_err_dev = ref_dev ? ref_dev + n : NULL,
					.floor_scale_dev = ref_dev ? ref_dev + 2 * n : NULL,
					.floor_scale_count = n ? (size_t)rows : 0,
					.factor = c->budget_factor,
					.floor_scale = scale,
					.dims = t->shape,
					.ndim = 2,
					.tail_width = 4};
	if (nw_compare(&t->tensors[0], "dx", &spec)) {
		rc = nw_trial_device_error(t);
		goto out;
	}
	t->ntensors = 1;
out:
	nw_output_release(&dx);
	nw_dev_free(ref_dev);
	nw_input_release(y_dev);
	nw_input_release(dy_dev);
	free(ref);
	free(plain_err);
	return rc;
}

const struct nw_check softmax_fwd_check = {
    .name = "softmax.fwd",
    .op = "softmax",
    .pass = "fwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = SOFTMAX_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &softmax_kernels,
    .prepare = fwd_prepare,
    .run_prepared = fwd_run,
    .release_prepared = release,
};

const struct nw_check softmax_bwd_check = {
    .name = "softmax.bwd",
    .op = "softmax",
    .pass = "bwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = SOFTMAX_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &softmax_kernels,
    .prepare = bwd_prepare,
    .run_prepared = bwd_run,
    .release_prepared = release,
};
