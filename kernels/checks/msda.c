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
 * (kept in float, see fsetup()), grid_sample (float inside, its output
 * rounded), products with the weights
 * and their sum; its backward is grid_sample's (corner weights times the
 * incoming gradient into dvalue, the gradient of the grid as a sum of signed
 * corner terms), each tensor rounded to the dtype, in NW_ORDERS orders.
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

/* ---- float64 sampling, and the kinks ------------------------------------------------ */

struct dpoint {
	bool any;
	double lx, ly, hx, hy, gx, gy, w[4];
	long pix[4];
	bool in[4];
	bool kink_x, kink_y;
};

/* Whether coordinate t (pixel units, before clamping) lies within a few ULP of a kink. */
static bool near_kink(double t, int n, int padding)
{
	double k = floor(t + 0.5), tol = 0x1p-20 * (double)(n + 1);
	double lo = padding == MSDA_BORDER ? 0.0 : -1.0, hi = padding == MSDA_BORDER ? n - 1.0 : (double)n;

	return fabs(t - k) <= tol && k >= lo && k <= hi;
}

static void dsetup(double locx, double locy, int W, int H, int padding, int align, struct dpoint *p)
{
	double x = align ? locx * (W - 1) : locx * W - 0.5, y = align ? locy * (H - 1) : locy * H - 0.5;
	double x0, y0;
	int k;

	memset(p, 0, sizeof(*p));
	p->kink_x = near_kink(x, W, padding);
	p->kink_y = near_kink(y, H, padding);
	p->gx = align ? W - 1.0 : (double)W;
	p->gy = align ? H - 1.0 : (double)H;
	if (padding == MSDA_BORDER) {
		if (!(x > 0.0 && x < W - 1.0))
			p->gx = 0.0;
		if (!(y > 0.0 && y < H - 1.0))
			p->gy = 0.0;
		x = fmin(fmax(x, 0.0), W - 1.0);
		y = fmin(fmax(y, 0.0), H - 1.0);
		p->any = true;
	} else {
		p->any = x > -1.0 && y > -1.0 && x < W && y < H;
	}
	if (!p->any)
		return;
	x0 = floor(x);
	y0 = floor(y);
	p->lx = x - x0;
	p->ly = y - y0;
	p->hx = 1.0 - p->lx;
	p->hy = 1.0 - p->ly;
	p->w[0] = p->hy * p->hx;
	p->w[1] = p->hy * p->lx;
	p->w[2] = p->ly * p->hx;
	p->w[3] = p->ly * p->lx;
	for (k = 0; k < 4; k++) {
		long xx = (long)x0 + (k & 1), yy = (long)y0 + (k >> 1);

		p->in[k] = xx >= 0 && xx < W && yy >= 0 && yy < H;
		p->pix[k] = p->in[k] ? yy * W + xx : 0;
	}
}

/* ---- the plain program's sampling (grid_sample in float) ------------------------------ */

struct fpoint {
	float w[4];   /* nw, ne, sw, se */
	float ix, iy; /* source coordinates */
	float x0, y0;
	float mx, my; /* d(source coordinate)/d(grid), 0 where border clamped */
	long pix[4];
	bool in[4];
};

static float unnormalize(float g, int n, int align)
{
	return align ? ((g + 1.0f) / 2.0f) * (float)(n - 1) : ((g + 1.0f) * (float)n - 1.0f) / 2.0f;
}

/* grid_sample's clip_coordinates_set_grad for border padding. */
static float clip(float c, int n, float *mult)
{
	if (c <= 0.0f) {
		*mult = 0.0f;
		return 0.0f;
	}
	if (c >= (float)(n - 1)) {
		*mult = 0.0f;
		return (float)(n - 1);
	}
	return c;
}

static void fsetup(enum nw_dtype d, double locx, double locy, int W, int H, int padding, int align,
		   struct fpoint *p)
{
	/*
	 * The grid 2 * loc - 1 in float, not rounded to the dtype: rounded, it
	 * moves points by up to 0.06 pixel in bf16, across pixel centres where
	 * the gradient jumps, and the budget would measure the jump (a kink the
	 * comparison excludes) instead of the dtype's rounding.
	 */
	float gx = 2.0f * (float)locx - 1.0f, gy = 2.0f * (float)locy - 1.0f;
	int k;

	(void)d;
	p->mx = align ? (float)(W - 1) / 2.0f : (float)W / 2.0f;
	p->my = align ? (float)(H - 1) / 2.0f : (float)H / 2.0f;
	p->ix = unnormalize(gx, W, align);
	p->iy = unnormalize(gy, H, align);
	if (padding == MSDA_BORDER) {
		p->ix = clip(p->ix, W, &p->mx);
		p->iy = clip(p->iy, H, &p->my);
	}
	p->x0 = floorf(p->ix);
	p->y0 = floorf(p->iy);
	p->w[0] = ((p->x0 + 1.0f) - p->ix) * ((p->y0 + 1.0f) - p->iy);
	p->w[1] = (p->ix - p->x0) * ((p->y0 + 1.0f) - p->iy);
	p->w[2] = ((p->x0 + 1.0f) - p->ix) * (p->iy - p->y0);
	p->w[3] = (p->ix - p->x0) * (p->iy - p->y0);
	for (k = 0; k < 4; k++) {
		long xx = (long)p->x0 + (k & 1), yy = (long)p->y0 + (k >> 1);

		p->in[k] =
		    xx >= 0 && xx < W && yy >= 0 && yy < H && fabsf(p->ix) < 1e9f && fabsf(p->iy) < 1e9f;
		p->pix[k] = p->in[k] ? yy * W + xx : 0;
	}
}

/* ---- one trial's data ---------------------------------------------------------------- */

struct msda_data {
	struct msda_dims s;
	long S, start[MSDA_MAX_LEVELS], npts, nvalue, nout;
	double *value, *loc, *attn, *dout;
	void *value_s, *loc_s, *attn_s, *dout_s;
	struct dpoint *dp;
	struct fpoint *fp;
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
	free(m->dp);
	free(m->fp);
}

/* Level of point pi, and the value row of the level's first pixel for its batch. */
static int level_of(const struct msda_data *m, long pi)
{
	return (int)(pi / m->s.points % m->s.levels);
}

static long group_of(const struct msda_data *m, long pi)
{
	return pi / ((long)m->s.levels * m->s.points);
}

static long vrow_of(const struct msda_data *m, long pi)
{
	long g = group_of(m, pi), b = g / ((long)m->s.queries * m->s.heads);

	return b * m->S + m->start[level_of(m, pi)];
}

static long head_of(const struct msda_data *m, long pi)
{
	return group_of(m, pi) % m->s.heads;
}

/* Index of channel c of corner pixel pix (of the point's level) in value. */
static long vidx(const struct msda_data *m, long pi, long pix, int c)
{
	return ((vrow_of(m, pi) + pix) * m->s.heads + head_of(m, pi)) * m->s.channels + c;
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
	m->dp = malloc((size_t)(m->npts > 0 ? m->npts : 1) * sizeof(*m->dp));
	m->fp = malloc((size_t)(m->npts > 0 ? m->npts : 1) * sizeof(*m->fp));
	if (!m->value || !m->loc || !m->attn || !m->dout || !m->value_s || !m->loc_s || !m->attn_s ||
	    !m->dout_s || !m->dp || !m->fp)
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
	for (i = 0; i < m->nvalue; i++)
		m->value[i] = voff + vscale * nw_rng_normal(&r);
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

		for (i = 0; i < L * P; i++) {
			a[i] = sigma * nw_rng_normal(&r);
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
		for (i = 0; i < m->nout; i++)
			m->dout[i] = dscale * nw_rng_normal(&r);
		ck_store_all(d, m->dout_s, m->dout, m->nout);
	}

	for (i = 0; i < m->npts; i++) {
		l = level_of(m, i);
		dsetup(m->loc[2 * i], m->loc[2 * i + 1], m->s.level_w[l], m->s.level_h[l], m->s.padding,
		       m->s.align_corners, &m->dp[i]);
		fsetup(d, m->loc[2 * i], m->loc[2 * i + 1], m->s.level_w[l], m->s.level_h[l], m->s.padding,
		       m->s.align_corners, &m->fp[i]);
	}
	return 0;
}

/* Corner values of a point for channel c: double reference, and for the plain program. */
static void dcorners(const struct msda_data *m, long pi, int c, double v[4])
{
	const struct dpoint *p = &m->dp[pi];
	int k;

	for (k = 0; k < 4; k++)
		v[k] = p->in[k] ? m->value[vidx(m, pi, p->pix[k], c)] : 0.0;
}

static void fcorners(const struct msda_data *m, long pi, int c, float v[4])
{
	const struct fpoint *p = &m->fp[pi];
	int k;

	for (k = 0; k < 4; k++)
		v[k] = p->in[k] ? (float)m->value[vidx(m, pi, p->pix[k], c)] : 0.0f;
}

static double dsample(const struct msda_data *m, long pi, int c)
{
	const struct dpoint *p = &m->dp[pi];
	double v[4];

	if (!p->any)
		return 0.0;
	dcorners(m, pi, c, v);
	return p->w[0] * v[0] + p->w[1] * v[1] + p->w[2] * v[2] + p->w[3] * v[3];
}

/* grid_sample's output for channel c, rounded to the dtype. */
static float fsample(enum nw_dtype d, const struct msda_data *m, long pi, int c)
{
	const struct fpoint *p = &m->fp[pi];
	float v[4], acc = 0.0f;
	int k;

	fcorners(m, pi, c, v);
	for (k = 0; k < 4; k++)
		if (p->in[k])
			acc += v[k] * p->w[k];
	return nw_round(d, acc);
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

/* ---- msda.fwd ----------------------------------------------------------------------------- */

static int fwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct msda_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct msda_data m = {0};
	struct devbufs dv = {0};
	struct nw_output out = {0};
	struct ck_plain plain = {0};
	struct launch_ctx ctx;
	double *ref = NULL, *mag = NULL, scale = 0.0;
	float *prod = NULL;
	long g, ngroups, i;
	int rc, o, ch, LP;

	rc = gen_data(c, t, &m, false);
	if (rc)
		goto out;
	LP = m.s.levels * m.s.points;
	ngroups = (long)m.s.batch * m.s.queries * m.s.heads;
	ref = ck_doubles(m.nout);
	mag = ck_doubles(m.nout);
	prod = ck_floats((long)LP);
	if (!ref || !mag || !prod || ck_plain_alloc(&plain, NW_ORDERS, m.nout)) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < m.nout; i++)
		ref[i] = mag[i] = 0.0;
	for (g = 0; g < ngroups; g++)
		for (ch = 0; ch < m.s.channels; ch++) {
			long oi = g * m.s.channels + ch;
			int j;

			for (j = 0; j < LP; j++) {
				long pi = g * LP + j;
				double v = m.attn[pi] * dsample(&m, pi, ch);

				ref[oi] += v;
				mag[oi] += fabs(v);
				prod[j] = nw_round(d, fsample(d, &m, pi, ch) * (float)m.attn[pi]);
			}
			scale = fmax(scale, mag[oi]);
			for (o = 0; o < NW_ORDERS; o++) {
				float sum = 0.0f;

				for (j = 0; j < LP; j++)
					sum += prod[nw_order_index(o, j, LP)];
				plain.p[o][oi] = nw_round(d, sum);
			}
		}

	if ((rc = upload(t, &m, &dv, false)) || (rc = nw_output_init(t, &out, "out", d, (size_t)m.nout)))
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
				       .plain = &plain,
				       .factor = c->budget_factor,
				       .floor_scale = ck_floor_scale(d, ck_max_abs(ref, m.nout), scale),
				       .dims = dims,
				       .ndim = 4,
				       .tail_width = 32};

		ck_compare(t, &tt);
	}
out:
	nw_output_release(&out);
	devbufs_release(&dv);
	ck_plain_free(&plain);
	free(ref);
	free(mag);
	free(prod);
	data_free(&m);
	return rc;
}

/* ---- msda.bwd ----------------------------------------------------------------------------- */

struct bwd_ref {
	double *dvalue, *dloc, *dattn, *vmag;
	unsigned char *exclude;
	double scale[3];
};

/* Float64 gradients, and the size of the terms each is made of. */
static void ref_bwd(const struct msda_data *m, struct bwd_ref *r)
{
	int D = m->s.channels, LP = m->s.levels * m->s.points, ch, k;
	long pi, i;

	for (i = 0; i < m->nvalue; i++)
		r->dvalue[i] = r->vmag[i] = 0.0;
	r->scale[0] = r->scale[1] = r->scale[2] = 0.0;
	for (pi = 0; pi < m->npts; pi++) {
		const struct dpoint *p = &m->dp[pi];
		long g = pi / LP;
		double a = m->attn[pi], da = 0.0, ma = 0.0, gx = 0.0, gy = 0.0, mx = 0.0, my = 0.0;

		r->exclude[2 * pi] = p->kink_x;
		r->exclude[2 * pi + 1] = p->kink_y;
		if (p->any)
			for (ch = 0; ch < D; ch++) {
				double go = m->dout[g * D + ch], v[4], smp;

				dcorners(m, pi, ch, v);
				smp = p->w[0] * v[0] + p->w[1] * v[1] + p->w[2] * v[2] + p->w[3] * v[3];
				da += go * smp;
				ma += fabs(go * smp);
				gx += go * (p->hy * (v[1] - v[0]) + p->ly * (v[3] - v[2]));
				gy += go * (p->hx * (v[2] - v[0]) + p->lx * (v[3] - v[1]));
				mx += fabs(go) *
				      (p->hy * (fabs(v[1]) + fabs(v[0])) + p->ly * (fabs(v[3]) + fabs(v[2])));
				my += fabs(go) *
				      (p->hx * (fabs(v[2]) + fabs(v[0])) + p->lx * (fabs(v[3]) + fabs(v[1])));
				for (k = 0; k < 4; k++)
					if (p->in[k]) {
						long vi = vidx(m, pi, p->pix[k], ch);

						r->dvalue[vi] += a * go * p->w[k];
						r->vmag[vi] += fabs(a * go * p->w[k]);
					}
			}
		r->dattn[pi] = da;
		r->dloc[2 * pi] = a * p->gx * gx;
		r->dloc[2 * pi + 1] = a * p->gy * gy;
		r->scale[2] = fmax(r->scale[2], ma);
		if (!p->kink_x)
			r->scale[1] = fmax(r->scale[1], fabs(a) * p->gx * mx);
		if (!p->kink_y)
			r->scale[1] = fmax(r->scale[1], fabs(a) * p->gy * my);
	}
	for (i = 0; i < m->nvalue; i++)
		r->scale[0] = fmax(r->scale[0], r->vmag[i]);
}

/* What the plain backward reads per point and channel, computed once for all orders. */
struct plain_pre {
	float *v;    /* [npts][D][4] corner values, 0 outside */
	float *smp;  /* [npts][D] grid_sample's output, rounded */
	float *gout; /* [npts][D] incoming gradient dout * attn, rounded */
	long *base;  /* [npts][4] value index of channel 0 of each corner, -1 outside */
	float *acc;  /* [nvalue] dvalue accumulator */
};

static int pre_alloc(struct plain_pre *q, const struct msda_data *m)
{
	long n = m->npts * m->s.channels;

	q->v = ck_floats(4 * n);
	q->smp = ck_floats(n);
	q->gout = ck_floats(n);
	q->base = malloc((size_t)(4 * m->npts > 0 ? 4 * m->npts : 1) * sizeof(long));
	q->acc = ck_floats(m->nvalue);
	return q->v && q->smp && q->gout && q->base && q->acc ? 0 : -ENOMEM;
}

static void pre_free(struct plain_pre *q)
{
	free(q->v);
	free(q->smp);
	free(q->gout);
	free(q->base);
	free(q->acc);
}

static void pre_fill(enum nw_dtype d, const struct msda_data *m, struct plain_pre *q)
{
	int D = m->s.channels, LP = m->s.levels * m->s.points, ch, k;
	long pi;

	for (pi = 0; pi < m->npts; pi++) {
		const struct fpoint *p = &m->fp[pi];
		long g = pi / LP;
		float a = (float)m->attn[pi];

		for (k = 0; k < 4; k++)
			q->base[4 * pi + k] = p->in[k] ? vidx(m, pi, p->pix[k], 0) : -1;
		for (ch = 0; ch < D; ch++) {
			long n = pi * D + ch;

			fcorners(m, pi, ch, q->v + 4 * n);
			q->smp[n] = fsample(d, m, pi, ch);
			q->gout[n] = nw_round(d, (float)m->dout[g * D + ch] * a);
		}
	}
}

/*
 * The plain backward in order o: grid_sample's backward with the incoming
 * gradient dout * attn rounded to the dtype; sums over channels (dattn, the
 * grid gradient) and over points (dvalue) in order o.
 */
static void plain_bwd(enum nw_dtype d, const struct msda_data *m, const struct plain_pre *q, int o,
		      double *dvalue, double *dloc, double *dattn)
{
	int D = m->s.channels, LP = m->s.levels * m->s.points, ch, k;
	long pi, j, i, *pp = ck_perm(o, m->npts), *pc = ck_perm(o, D);

	for (i = 0; i < m->nvalue; i++)
		q->acc[i] = 0.0f;
	for (j = 0; j < m->npts; j++) {
		const struct fpoint *p;
		long g;
		float da = 0.0f, gix = 0.0f, giy = 0.0f;

		pi = ck_at(pp, o, j, m->npts);
		p = &m->fp[pi];
		g = pi / LP;
		for (ch = 0; ch < D; ch++) {
			long c2 = ck_at(pc, o, ch, D), n = pi * D + c2;
			const float *v = q->v + 4 * n;
			float go = q->gout[n];

			da += nw_round(d, (float)m->dout[g * D + c2] * q->smp[n]);
			/* grid_sampler_2d_backward: nw, ne, sw, se */
			gix -= v[0] * ((p->y0 + 1.0f) - p->iy) * go;
			gix += v[1] * ((p->y0 + 1.0f) - p->iy) * go;
			gix -= v[2] * (p->iy - p->y0) * go;
			gix += v[3] * (p->iy - p->y0) * go;
			giy -= v[0] * ((p->x0 + 1.0f) - p->ix) * go;
			giy -= v[1] * (p->ix - p->x0) * go;
			giy += v[2] * ((p->x0 + 1.0f) - p->ix) * go;
			giy += v[3] * (p->ix - p->x0) * go;
			for (k = 0; k < 4; k++)
				if (q->base[4 * pi + k] >= 0)
					q->acc[q->base[4 * pi + k] + c2] += p->w[k] * go;
		}
		dattn[pi] = nw_round(d, da);
		dloc[2 * pi] = nw_round(d, 2.0f * nw_round(d, p->mx * gix));
		dloc[2 * pi + 1] = nw_round(d, 2.0f * nw_round(d, p->my * giy));
	}
	for (i = 0; i < m->nvalue; i++)
		dvalue[i] = nw_round(d, q->acc[i]);
	free(pp);
	free(pc);
}

static int bwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct msda_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct msda_data m = {0};
	struct devbufs dv = {0};
	struct nw_output out[3] = {{0}};
	struct ck_plain plain[3];
	struct bwd_ref r = {0};
	struct launch_ctx ctx;
	struct plain_pre pre = {0};
	int rc, o, i;

	memset(plain, 0, sizeof(plain));
	rc = gen_data(c, t, &m, true);
	if (rc)
		goto out;
	r.dvalue = ck_doubles(m.nvalue);
	r.vmag = ck_doubles(m.nvalue);
	r.dloc = ck_doubles(2 * m.npts);
	r.dattn = ck_doubles(m.npts);
	r.exclude = malloc((size_t)(2 * m.npts > 0 ? 2 * m.npts : 1));
	if (!r.dvalue || !r.vmag || !r.dloc || !r.dattn || !r.exclude || pre_alloc(&pre, &m) ||
	    ck_plain_alloc(&plain[0], NW_ORDERS, m.nvalue) ||
	    ck_plain_alloc(&plain[1], NW_ORDERS, 2 * m.npts) ||
	    ck_plain_alloc(&plain[2], NW_ORDERS, m.npts)) {
		rc = -ENOMEM;
		goto out;
	}
	ref_bwd(&m, &r);
	{
		/* Keep the gradients inside the dtype's range (f16 with values or dout of 1e3). */
		double mx = fmax(ck_max_abs(r.dvalue, m.nvalue),
				 fmax(ck_max_abs(r.dloc, 2 * m.npts), ck_max_abs(r.dattn, m.npts)));
		double f = ck_shrink(d, mx);
		long j;

		if (f < 1.0) {
			for (j = 0; j < m.nout; j++)
				m.dout[j] *= f;
			ck_store_all(d, m.dout_s, m.dout, m.nout);
			ref_bwd(&m, &r);
		}
	}
	pre_fill(d, &m, &pre);
	for (o = 0; o < NW_ORDERS; o++)
		plain_bwd(d, &m, &pre, o, plain[0].p[o], plain[1].p[o], plain[2].p[o]);

	if ((rc = upload(t, &m, &dv, true)) ||
	    (rc = nw_output_init(t, &out[0], "dvalue", d, (size_t)m.nvalue)) ||
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
					.ref = r.dvalue,
					.plain = &plain[0],
					.factor = c->budget_factor,
					.floor_scale =
					    ck_floor_scale(d, ck_max_abs(r.dvalue, m.nvalue), r.scale[0]),
					.dims = vdims,
					.ndim = 4,
					.tail_width = 32};
		struct ck_tensor dlt = {.name = "dloc",
					.out = &out[1],
					.ref = r.dloc,
					.plain = &plain[1],
					.factor = c->budget_factor,
					.floor_scale =
					    ck_floor_scale(d, ck_max_abs(r.dloc, 2 * m.npts), r.scale[1]),
					.exclude = r.exclude,
					.dims = ldims,
					.ndim = 6};
		struct ck_tensor dat = {.name = "dattn",
					.out = &out[2],
					.ref = r.dattn,
					.plain = &plain[2],
					.factor = c->budget_factor,
					.floor_scale =
					    ck_floor_scale(d, ck_max_abs(r.dattn, m.npts), r.scale[2]),
					.dims = ldims,
					.ndim = 5};

		ck_compare(t, &dvt);
		ck_compare(t, &dlt);
		ck_compare(t, &dat);
	}
out:
	for (i = 0; i < 3; i++) {
		nw_output_release(&out[i]);
		ck_plain_free(&plain[i]);
	}
	devbufs_release(&dv);
	free(r.dvalue);
	free(r.vmag);
	free(r.dloc);
	free(r.dattn);
	free(r.exclude);
	pre_free(&pre);
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
