/*
 * msda.fwd and msda.bwd: multi-scale deformable attention (Deformable DETR,
 * msda-triton) with grid_sample's bilinear sampling.
 *
 * out[b,q,h,:] = sum over levels l and points p of attn[b,q,h,l,p] *
 * bilinear(value level l, head h; loc[b,q,h,l,p]). Pixel coordinates are
 * x = loc_x * W - 0.5 (or loc_x * (W - 1) with align_corners); zeros padding
 * reads 0 outside a level, border padding clamps the coordinate to
 * [0, W - 1] (and its gradient is 0 where clamped). Padding and
 * align_corners are drawn per case, like the shape.
 *
 * The reference is float64 from the stored inputs. The plain program is what
 * ms_deform_attn_core_pytorch runs op by op in the dtype: grid = 2 * loc - 1
 * (kept in float, see msda_fsetup()), grid_sample (float inside, its output
 * rounded), products with the weights
 * and their sum; its backward is grid_sample's (corner weights times the
 * incoming gradient into dvalue, the gradient of the grid as a sum of signed
 * corner terms), each tensor rounded to the dtype, in NW_ORDERS orders. Both
 * are computed on the host or the GPU (msda_ref.c, msda_ref.cu; the sampling
 * setup both use is msda_point.h), after the inputs are uploaded and before
 * the kernel runs.
 *
 * Bilinear interpolation has kinks where a coordinate crosses a pixel centre
 * (an integer coordinate) and where padding starts (x = -1 or W for zeros,
 * 0 and W - 1 for border, which are integers too): there the derivative
 * jumps, and two correct programs that round the coordinate differently
 * disagree by O(1). A dloc element whose coordinate lies within a few ULP of
 * such a point is excluded from the comparison, and counted. out, dattn and
 * dvalue are continuous there and are always compared.
 *
 * msda.bwd accumulates dvalue with atomics on the GPU: it is declared
 * non-deterministic.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "msda.h"

static const char *const families[MSDA_FAMILIES] = {
    [MSDA_UNIFORM] = "uniform",   [MSDA_BOUNDARY] = "boundary", [MSDA_OUTSIDE] = "outside",
    [MSDA_CHANNELS] = "channels", [MSDA_LEVELS] = "levels",     [MSDA_TINY] = "tiny",
    [MSDA_EXTREME] = "extreme",
};

enum {
	STREAM_SHAPE = 0,
	STREAM_VALUE = 1,
	STREAM_LOC = 2,
	STREAM_ATTN = 3,
	STREAM_DOUT = 4,
	STREAM_KIND = 5
};

/* Caps that keep a host trial within a few milliseconds. */
#define WORK_MAX  49152 /* sampling points x channels */
#define VALUE_MAX 65536 /* value elements */

/* Kinds of extreme cases. */
enum { EXT_PEAKED, EXT_OFFSET, EXT_LARGE, EXT_DOUT_SCALE, EXT_KINDS };

static long level_pixels(const struct msda_dims *s)
{
	long S = 0;
	int l;

	for (l = 0; l < s->levels; l++)
		S += (long)s->level_h[l] * s->level_w[l];
	return S;
}

static long points_of(const struct msda_dims *s)
{
	return (long)s->batch * s->queries * s->heads * s->levels * s->points;
}

/* Shrinks a case until it fits the caps; the order of the steps is part of the derivation. */
static void fit(struct msda_dims *s, int family)
{
	for (;;) {
		long work = points_of(s) * s->channels,
		     nvalue = (long)s->batch * level_pixels(s) * s->heads * s->channels;
		int l, big = 0;

		if (work <= WORK_MAX && nvalue <= VALUE_MAX)
			return;
		if (work > WORK_MAX && s->queries > 1) {
			s->queries = (s->queries + 1) / 2;
		} else if (s->batch > 1) {
			s->batch = 1;
		} else if (s->heads > 1) {
			s->heads = (s->heads + 1) / 2;
		} else if (family != MSDA_CHANNELS && s->channels > 1) {
			s->channels = (s->channels + 1) / 2;
		} else if (nvalue > VALUE_MAX) {
			for (l = 1; l < s->levels; l++)
				if ((long)s->level_h[l] * s->level_w[l] >
				    (long)s->level_h[big] * s->level_w[big])
					big = l;
			if (s->level_h[big] >= s->level_w[big])
				s->level_h[big] = (s->level_h[big] + 1) / 2;
			else
				s->level_w[big] = (s->level_w[big] + 1) / 2;
		} else if (s->points > 1) {
			s->points--;
		} else {
			return;
		}
	}
}

void msda_case(int family, uint64_t seed, uint64_t index, struct msda_dims *s)
{
	static const int channel_counts[] = {1, 2, 3, 31, 32, 33, 63, 64, 65, 96, 127, 128};
	struct nw_rng r;
	int l;

	nw_rng_init(&r, "msda", seed, STREAM_SHAPE);
	memset(s, 0, sizeof(*s));
	s->padding = (int)nw_rng_range(&r, 0, 1);
	s->align_corners = (int)nw_rng_range(&r, 0, 1);
	s->batch = (int)nw_rng_range(&r, 1, 2);
	s->heads = (int)nw_rng_range(&r, 1, 4);
	s->queries = (int)nw_rng_range(&r, 1, 40);
	s->channels = (int)nw_rng_range(&r, 1, 64);
	s->levels = (int)nw_rng_range(&r, 1, MSDA_MAX_LEVELS);
	s->points = (int)nw_rng_range(&r, 1, 4);
	for (l = 0; l < MSDA_MAX_LEVELS; l++) {
		s->level_h[l] = (int)nw_rng_range(&r, 2, 20);
		s->level_w[l] = (int)nw_rng_range(&r, 2, 20);
	}
	switch (family) {
	case MSDA_BOUNDARY:
		s->queries = (int)nw_rng_range(&r, 1, 24);
		break;
	case MSDA_CHANNELS:
		s->channels = channel_counts[nw_rng_range(
		    &r, 0, sizeof(channel_counts) / sizeof(channel_counts[0]) - 1)];
		s->queries = (int)nw_rng_range(&r, 1, 16);
		s->levels = (int)nw_rng_range(&r, 1, 2);
		s->points = (int)nw_rng_range(&r, 1, 2);
		for (l = 0; l < MSDA_MAX_LEVELS; l++) {
			s->level_h[l] = (int)nw_rng_range(&r, 1, 8);
			s->level_w[l] = (int)nw_rng_range(&r, 1, 8);
		}
		break;
	case MSDA_LEVELS:
		s->levels = MSDA_MAX_LEVELS;
		for (l = 0; l < MSDA_MAX_LEVELS; l++) {
			long kh = nw_rng_range(&r, 0, 3), kw = nw_rng_range(&r, 0, 3);

			s->level_h[l] = kh < 3 ? (int)kh + 1 : (int)nw_rng_range(&r, 4, 32);
			s->level_w[l] = kw < 3 ? (int)kw + 1 : (int)nw_rng_range(&r, 4, 32);
		}
		break;
	case MSDA_TINY:
		/* A sweep: queries 0..2, channels 1..4, levels 1..2, points 1..2, level sizes 1..3. */
		s->batch = 1;
		s->heads = 1;
		s->queries = (int)(index % 3);
		s->channels = 1 + (int)(index / 3 % 4);
		s->levels = 1 + (int)(index / 12 % 2);
		s->points = 1 + (int)(index / 24 % 2);
		for (l = 0; l < MSDA_MAX_LEVELS; l++) {
			s->level_h[l] = 1 + (int)(index / 48 % 3);
			s->level_w[l] = 1 + (int)((index / 144 + (uint64_t)l) % 3);
		}
		break;
	default:
		break;
	}
	for (l = s->levels; l < MSDA_MAX_LEVELS; l++)
		s->level_h[l] = s->level_w[l] = 0;
	fit(s, family);
}

/* v stored in dtype d, then moved n units in the last place (away from zero for n > 0). */
static double nudge(enum nw_dtype d, double v, int n)
{
	unsigned char buf[4];

	nw_store(d, buf, 0, (float)v);
	if (d == NW_F32) {
		uint32_t u;

		memcpy(&u, buf, 4);
		if ((u & 0x7fffffffu) == 0 && n < 0)
			n = -n;
		u = (uint32_t)((int64_t)u + n);
		memcpy(buf, &u, 4);
	} else {
		uint16_t h;

		memcpy(&h, buf, 2);
		if ((h & 0x7fffu) == 0 && n < 0)
			n = -n;
		h = (uint16_t)((int32_t)h + n);
		memcpy(buf, &h, 2);
	}
	return (double)nw_load(d, buf, 0);
}

/* The normalised location of integer pixel coordinate k on an axis of n pixels. */
static double loc_of_pixel(double k, int n, int align)
{
	if (align)
		return n > 1 ? k / (double)(n - 1) : 0.5;
	return (k + 0.5) / (double)n;
}

/* One coordinate (x or y) of a sampling point, as a normalised location. */
static double gen_loc(struct nw_rng *r, int family, enum nw_dtype d, int n, int align)
{
	long k;

	switch (family) {
	case MSDA_OUTSIDE:
		switch (nw_rng_range(r, 0, 2)) {
		case 0:
			return nw_rng_uniform(r);
		case 1:
			return 2.2 * nw_rng_uniform(r) - 0.6;
		default:
			/* Just outside: within a tenth of the image of an edge. */
			return nw_rng_range(r, 0, 1) ? 1.0 + 0.1 * nw_rng_uniform(r)
						     : -0.1 * nw_rng_uniform(r);
		}
	case MSDA_BOUNDARY:
		switch (nw_rng_range(r, 0, 3)) {
		case 0:
			return nw_rng_uniform(r);
		case 1: /* a pixel centre */
			return loc_of_pixel((double)nw_rng_range(r, 0, n - 1), n, align);
		case 2: /* where padding starts: -1, 0, n - 1, n */
			k = nw_rng_range(r, 0, 3);
			return loc_of_pixel(k == 0   ? -1.0
					    : k == 1 ? 0.0
					    : k == 2 ? n - 1.0
						     : (double)n,
					    n, align);
		default: /* a few ULP of the dtype from a centre or an edge */
			k = nw_rng_range(r, -1, n);
			return nudge(d, loc_of_pixel((double)k, n, align),
				     (int)nw_rng_range(r, 1, 4) * (nw_rng_range(r, 0, 1) ? 1 : -1));
		}
	default:
		return nw_rng_uniform(r);
	}
}

/* ---- one trial's data ---------------------------------------------------------------- */

struct msda_data {
	struct msda_dims s;
	long S, start[MSDA_MAX_LEVELS], npts, nvalue, nout;
	double *value, *loc, *attn, *dout;
	void *value_s, *loc_s, *attn_s, *dout_s;
};

static void data_free(struct msda_data *m)
{
	free(m->value);
	free(m->loc);
	free(m->attn);
	free(m->dout);
	free(m->value_s);
	free(m->loc_s);
	free(m->attn_s);
	free(m->dout_s);
}

/* Level of point pi. */
static int level_of(const struct msda_data *m, long pi)
{
	return (int)(pi / m->s.points % m->s.levels);
}

static void set_case(struct nw_trial *t, const struct msda_data *m)
{
	long dims[7] = {m->s.batch, m->s.queries, m->s.heads, m->s.channels, m->s.levels, m->s.points, m->S};
	char lv[NW_PARAM_STR_MAX] = "";
	int l;

	ck_set_shape(t, dims, 7);
	for (l = 0; l < m->s.levels; l++)
		snprintf(lv + strlen(lv), sizeof(lv) - strlen(lv), "%s%dx%d", l ? "," : "", m->s.level_h[l],
			 m->s.level_w[l]);
	nw_trial_param_str(t, "padding", m->s.padding == MSDA_BORDER ? "border" : "zeros");
	nw_trial_param_int(t, "align_corners", m->s.align_corners);
	nw_trial_param_str(t, "levels", lv);
}

/* Draws the case and its inputs (stored in the dtype and read back). */
static int gen_data(const struct nw_check *c, struct nw_trial *t, struct msda_data *m, bool with_dout)
{
	/* Spreads of the weights' logits: with at most 16 points no weight falls much under 1e-3. */
	static const double sigmas[] = {0.5, 1.0};
	enum nw_dtype d = t->dtype;
	struct nw_rng r, rk;
	double sigma, voff = 0.0, vscale = 1.0, dscale = 1.0;
	int kind = -1, l, L, P;
	long i, g, ngroups;

	msda_case(t->family, t->seed, t->index, &m->s);
	L = m->s.levels;
	P = m->s.points;
	m->S = 0;
	for (l = 0; l < L; l++) {
		m->start[l] = m->S;
		m->S += (long)m->s.level_h[l] * m->s.level_w[l];
	}
	m->npts = points_of(&m->s);
	m->nvalue = (long)m->s.batch * m->S * m->s.heads * m->s.channels;
	m->nout = (long)m->s.batch * m->s.queries * m->s.heads * m->s.channels;
	set_case(t, m);

	m->value = ck_doubles(m->nvalue);
	m->loc = ck_doubles(2 * m->npts);
	m->attn = ck_doubles(m->npts);
	m->dout = ck_doubles(m->nout);
	m->value_s = ck_buffer(d, m->nvalue);
	m->loc_s = ck_buffer(d, 2 * m->npts);
	m->attn_s = ck_buffer(d, m->npts);
	m->dout_s = ck_buffer(d, m->nout);
	if (!m->value || !m->loc || !m->attn || !m->dout || !m->value_s || !m->loc_s || !m->attn_s ||
	    !m->dout_s)
		return -ENOMEM;

	nw_rng_init(&rk, c->name, t->seed, STREAM_KIND);
	sigma = sigmas[nw_rng_range(&rk, 0, 1)];
	if (t->family == MSDA_EXTREME) {
		kind = (int)nw_rng_range(&rk, 0, EXT_KINDS - 1);
		if (kind == EXT_PEAKED) /* weights from 1 down to 1e-20 */
			sigma = 6.0;
		else if (kind == EXT_OFFSET)
			voff = 100.0;
		else if (kind == EXT_LARGE)
			vscale = 1e3;
		else
			dscale = nw_rng_range(&rk, 0, 1) ? 1e3 : 1e-3;
		nw_trial_param_str(t, "extreme",
				   kind == EXT_PEAKED   ? "peaked"
				   : kind == EXT_OFFSET ? "offset"
				   : kind == EXT_LARGE  ? "large"
							: "dout_scale");
	}

	nw_rng_init(&r, c->name, t->seed, STREAM_VALUE);
	nw_rng_normals(&r, m->value, m->nvalue);
	for (i = 0; i < m->nvalue; i++)
		m->value[i] = voff + vscale * m->value[i];
	ck_store_all(d, m->value_s, m->value, m->nvalue);

	nw_rng_init(&r, c->name, t->seed, STREAM_LOC);
	for (i = 0; i < m->npts; i++) {
		l = level_of(m, i);
		m->loc[2 * i] = gen_loc(&r, t->family, d, m->s.level_w[l], m->s.align_corners);
		m->loc[2 * i + 1] = gen_loc(&r, t->family, d, m->s.level_h[l], m->s.align_corners);
	}
	ck_store_all(d, m->loc_s, m->loc, 2 * m->npts);

	/* Weights: a softmax over each group's levels x points, as the model's linear layer gives. */
	nw_rng_init(&r, c->name, t->seed, STREAM_ATTN);
	ngroups = (long)m->s.batch * m->s.queries * m->s.heads;
	for (g = 0; g < ngroups; g++) {
		double *a = m->attn + g * L * P, mx = -INFINITY, sum = 0.0;

		nw_rng_normals(&r, a, L * P);
		for (i = 0; i < L * P; i++) {
			a[i] *= sigma;
			mx = fmax(mx, a[i]);
		}
		for (i = 0; i < L * P; i++) {
			a[i] = exp(a[i] - mx);
			sum += a[i];
		}
		for (i = 0; i < L * P; i++)
			a[i] /= sum;
	}
	ck_store_all(d, m->attn_s, m->attn, m->npts);

	if (with_dout) {
		nw_rng_init(&r, c->name, t->seed, STREAM_DOUT);
		nw_rng_normals(&r, m->dout, m->nout);
		for (i = 0; i < m->nout; i++)
			m->dout[i] *= dscale;
		ck_store_all(d, m->dout_s, m->dout, m->nout);
	}
	return 0;
}

/* ---- launches -------------------------------------------------------------------------- */

struct launch_ctx {
	const struct msda_kernels *k;
	enum nw_dtype dtype;
	const struct msda_dims *s;
	const void *value, *loc, *attn, *dout;
	void *out, *dvalue, *dloc, *dattn;
};

static int launch_fwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->fwd(c->dtype, c->s, c->value, c->loc, c->attn, c->out);
}

static int launch_bwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->bwd(c->dtype, c->s, c->value, c->loc, c->attn, c->dout, c->dvalue, c->dloc, c->dattn);
}

struct devbufs {
	void *value, *loc, *attn, *dout;
};

static int upload(struct nw_trial *t, const struct msda_data *m, struct devbufs *dv, bool with_dout)
{
	size_t es = nw_dtype_size(t->dtype);
	int rc;

	if ((rc = nw_input_upload(t, &dv->value, m->value_s, (size_t)m->nvalue * es)) ||
	    (rc = nw_input_upload(t, &dv->loc, m->loc_s, (size_t)(2 * m->npts) * es)) ||
	    (rc = nw_input_upload(t, &dv->attn, m->attn_s, (size_t)m->npts * es)))
		return rc;
	if (with_dout)
		rc = nw_input_upload(t, &dv->dout, m->dout_s, (size_t)m->nout * es);
	return rc;
}

static void devbufs_release(struct devbufs *dv)
{
	nw_input_release(dv->value);
	nw_input_release(dv->loc);
	nw_input_release(dv->attn);
	nw_input_release(dv->dout);
}

/* The backend's references (msda.h); tests with their own kernel tables get the host's. */
static const struct msda_refs *refs_of(const struct msda_kernels *k)
{
	return k->refs ? k->refs : &msda_refs_host;
}

static struct msda_in inputs_of(const struct msda_data *m, const struct devbufs *dv)
{
	return (struct msda_in){.s = &m->s,
				.value = m->value_s,
				.loc = m->loc_s,
				.attn = m->attn_s,
				.dout = m->dout_s,
				.value_dev = dv->value,
				.loc_dev = dv->loc,
				.attn_dev = dv->attn,
				.dout_dev = dv->dout};
}

/* ---- msda.fwd ----------------------------------------------------------------------------- */

static int fwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct msda_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct msda_data m = {0};
	struct devbufs dv = {0};
	struct nw_output out = {0};
	struct msda_ref_out ro;
	struct msda_in in;
	struct launch_ctx ctx;
	double *ref = NULL, *plain_err = NULL, t0;
	int rc;

	rc = gen_data(c, t, &m, false);
	if (rc)
		goto out;
	ref = ck_doubles(m.nout);
	plain_err = ck_doubles(m.nout);
	if (!ref || !plain_err) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = upload(t, &m, &dv, false)))
		goto out;
	/* Before the kernel runs: a kernel that scribbles on its input cannot bend the reference. */
	in = inputs_of(&m, &dv);
	ro = (struct msda_ref_out){.ref = {ref}, .plain_err = {plain_err}};
	t0 = nw_now();
	rc = nw_reference_done(t, refs_of(k)->fwd(d, &in, &ro), t0);
	if (rc)
		goto out;
	if ((rc = nw_output_init(t, &out, "out", d, (size_t)m.nout)))
		goto out;
	ctx = (struct launch_ctx){
	    .k = k, .dtype = d, .s = &m.s, .value = dv.value, .loc = dv.loc, .attn = dv.attn, .out = out.dev};
	rc = nw_run_kernel(t, &out, 1, k->fwd_name, launch_fwd, &ctx);
	if (rc)
		goto out;
	{
		long dims[4] = {m.s.batch, m.s.queries, m.s.heads, m.s.channels};
		struct ck_tensor tt = {.name = "out",
				       .out = &out,
				       .ref = ref,
				       .plain_err = plain_err,
				       .factor = c->budget_factor,
				       .floor_scale = ck_floor_scale(d, ck_max_abs(ref, m.nout), ro.terms[0]),
				       .dims = dims,
				       .ndim = 4,
				       .tail_width = 32};

		ck_compare(t, &tt);
	}
out:
	nw_output_release(&out);
	devbufs_release(&dv);
	free(ref);
	free(plain_err);
	data_free(&m);
	return rc;
}

/* ---- msda.bwd ----------------------------------------------------------------------------- */

static int bwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct msda_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct msda_data m = {0};
	struct devbufs dv = {0};
	struct nw_output out[3] = {{0}};
	struct msda_ref_out ro;
	struct msda_in in;
	struct launch_ctx ctx;
	double *ref[3] = {NULL, NULL, NULL}, *plain_err[3] = {NULL, NULL, NULL}, t0;
	unsigned char *exclude = NULL;
	long cnt[3];
	int rc, i;

	rc = gen_data(c, t, &m, true);
	if (rc)
		goto out;
	cnt[0] = m.nvalue;
	cnt[1] = 2 * m.npts;
	cnt[2] = m.npts;
	for (i = 0; i < 3; i++) {
		ref[i] = ck_doubles(cnt[i]);
		plain_err[i] = ck_doubles(cnt[i]);
	}
	exclude = malloc((size_t)(2 * m.npts > 0 ? 2 * m.npts : 1));
	if (!ref[0] || !ref[1] || !ref[2] || !plain_err[0] || !plain_err[1] || !plain_err[2] || !exclude) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = upload(t, &m, &dv, true)))
		goto out;
	in = inputs_of(&m, &dv);
	ro = (struct msda_ref_out){.ref = {ref[0], ref[1], ref[2]},
				   .plain_err = {plain_err[0], plain_err[1], plain_err[2]},
				   .exclude = exclude};
	t0 = nw_now();
	rc = nw_reference_done(t, refs_of(k)->bwd(d, &in, &ro), t0);
	if (rc)
		goto out;
	{
		/* Keep the gradients inside the dtype's range (f16 with values or dout of 1e3). */
		double mx = fmax(ck_max_abs(ref[0], cnt[0]),
				 fmax(ck_max_abs(ref[1], cnt[1]), ck_max_abs(ref[2], cnt[2])));
		double f = ck_shrink(d, mx);
		long j;

		if (f < 1.0) {
			for (j = 0; j < m.nout; j++)
				m.dout[j] *= f;
			ck_store_all(d, m.dout_s, m.dout, m.nout);
			nw_input_release(dv.dout);
			dv.dout = NULL;
			if ((rc = nw_input_upload(t, &dv.dout, m.dout_s, (size_t)m.nout * nw_dtype_size(d))))
				goto out;
			in.dout_dev = dv.dout;
			t0 = nw_now();
			rc = nw_reference_done(t, refs_of(k)->bwd(d, &in, &ro), t0);
			if (rc)
				goto out;
		}
	}

	if ((rc = nw_output_init(t, &out[0], "dvalue", d, (size_t)m.nvalue)) ||
	    (rc = nw_output_init(t, &out[1], "dloc", d, (size_t)(2 * m.npts))) ||
	    (rc = nw_output_init(t, &out[2], "dattn", d, (size_t)m.npts)))
		goto out;
	ctx = (struct launch_ctx){.k = k,
				  .dtype = d,
				  .s = &m.s,
				  .value = dv.value,
				  .loc = dv.loc,
				  .attn = dv.attn,
				  .dout = dv.dout,
				  .dvalue = out[0].dev,
				  .dloc = out[1].dev,
				  .dattn = out[2].dev};
	rc = nw_run_kernel(t, out, 3, k->bwd_name, launch_bwd, &ctx);
	if (rc)
		goto out;
	{
		long vdims[4] = {m.s.batch, m.S, m.s.heads, m.s.channels};
		long ldims[6] = {m.s.batch, m.s.queries, m.s.heads, m.s.levels, m.s.points, 2};
		struct ck_tensor dvt = {.name = "dvalue",
					.out = &out[0],
					.ref = ref[0],
					.plain_err = plain_err[0],
					.factor = c->budget_factor,
					.floor_scale =
					    ck_floor_scale(d, ck_max_abs(ref[0], cnt[0]), ro.terms[0]),
					.dims = vdims,
					.ndim = 4,
					.tail_width = 32};
		struct ck_tensor dlt = {.name = "dloc",
					.out = &out[1],
					.ref = ref[1],
					.plain_err = plain_err[1],
					.factor = c->budget_factor,
					.floor_scale =
					    ck_floor_scale(d, ck_max_abs(ref[1], cnt[1]), ro.terms[1]),
					.exclude = exclude,
					.dims = ldims,
					.ndim = 6};
		struct ck_tensor dat = {.name = "dattn",
					.out = &out[2],
					.ref = ref[2],
					.plain_err = plain_err[2],
					.factor = c->budget_factor,
					.floor_scale =
					    ck_floor_scale(d, ck_max_abs(ref[2], cnt[2]), ro.terms[2]),
					.dims = ldims,
					.ndim = 5};

		ck_compare(t, &dvt);
		ck_compare(t, &dlt);
		ck_compare(t, &dat);
	}
out:
	for (i = 0; i < 3; i++) {
		nw_output_release(&out[i]);
		free(ref[i]);
		free(plain_err[i]);
	}
	devbufs_release(&dv);
	free(exclude);
	data_free(&m);
	return rc;
}

const struct nw_check msda_fwd_check = {
    .name = "msda.fwd",
    .op = "msda",
    .pass = "fwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = MSDA_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &msda_kernels,
    .run = fwd_run,
};

const struct nw_check msda_bwd_check = {
    .name = "msda.bwd",
    .op = "msda",
    .pass = "bwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = MSDA_FAMILIES,
    .deterministic = false,
    .budget_factor = 2.0,
    .kernels = &msda_kernels,
    .run = bwd_run,
};
