/*
 * The sampling setup of one msda point (msda.c): its corners, bilinear
 * weights and kinks, in float64 for the reference and in float as
 * grid_sample computes it for the plain program. One definition for the
 * host references (msda_ref.c) and the GPU's (msda_ref.cu), so that both
 * pick the same corners and exclude the same dloc elements. On the device
 * every operation is rounded on its own (no FMA contraction), as on the
 * host.
 */
#ifndef NW_CHECKS_MSDA_POINT_H
#define NW_CHECKS_MSDA_POINT_H

#include <math.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "msda.h"
#ifdef __cplusplus
}
#endif
#include "nw_order.h" /* NW_HOST_DEVICE */

#ifdef __CUDA_ARCH__
#define MP_DADD(a, b) __dadd_rn(a, b)
#define MP_DSUB(a, b) __dsub_rn(a, b)
#define MP_DMUL(a, b) __dmul_rn(a, b)
#define MP_FADD(a, b) __fadd_rn(a, b)
#define MP_FSUB(a, b) __fsub_rn(a, b)
#define MP_FMUL(a, b) __fmul_rn(a, b)
#define MP_FDIV(a, b) __fdiv_rn(a, b)
#else
#define MP_DADD(a, b) ((a) + (b))
#define MP_DSUB(a, b) ((a) - (b))
#define MP_DMUL(a, b) ((a) * (b))
#define MP_FADD(a, b) ((a) + (b))
#define MP_FSUB(a, b) ((a) - (b))
#define MP_FMUL(a, b) ((a) * (b))
#define MP_FDIV(a, b) ((a) / (b))
#endif

/* Sizes of a case, and where each level starts among the value's S pixels. */
struct msda_geo {
	struct msda_dims s;
	long S, start[MSDA_MAX_LEVELS], npts, nvalue, nout;
	int LP; /* levels x points: the points of one (batch, query, head) group */
};

static inline NW_HOST_DEVICE void msda_geo_init(struct msda_geo *g, const struct msda_dims *s)
{
	int l;

	g->s = *s;
	g->S = 0;
	for (l = 0; l < MSDA_MAX_LEVELS; l++) {
		g->start[l] = g->S;
		if (l < s->levels)
			g->S += (long)s->level_h[l] * s->level_w[l];
	}
	g->LP = s->levels * s->points;
	g->npts = (long)s->batch * s->queries * s->heads * g->LP;
	g->nvalue = (long)s->batch * g->S * s->heads * s->channels;
	g->nout = (long)s->batch * s->queries * s->heads * s->channels;
}

/* Level of point pi (of [batch, queries, heads, levels, points]). */
static inline NW_HOST_DEVICE int msda_level_of(const struct msda_geo *g, long pi)
{
	return (int)(pi / g->s.points % g->s.levels);
}

/* Index in value of channel c of pixel pix (of the point's level), for point pi's batch and head. */
static inline NW_HOST_DEVICE long msda_vidx(const struct msda_geo *g, long pi, long pix, int c)
{
	long grp = pi / g->LP, b = grp / ((long)g->s.queries * g->s.heads), h = grp % g->s.heads;

	return ((b * g->S + g->start[msda_level_of(g, pi)] + pix) * g->s.heads + h) * g->s.channels + c;
}

/* Float64 sampling of a point: corner k is (x0 + (k & 1), y0 + (k >> 1)). */
struct msda_dpoint {
	bool any; /* some corner can be read (border: always) */
	double lx, ly, hx, hy, gx, gy, w[4];
	long pix[4]; /* pixel of corner k in its level, 0 outside */
	bool in[4];
	bool kink_x, kink_y;
};

/* The plain program's sampling (grid_sample in float). */
struct msda_fpoint {
	float w[4];   /* nw, ne, sw, se */
	float ix, iy; /* source coordinates */
	float x0, y0;
	float mx, my; /* d(source coordinate)/d(grid), 0 where border clamped */
	long pix[4];
	bool in[4];
};

/* Whether coordinate t (pixel units, before clamping) lies within a few ULP of a kink. */
static inline NW_HOST_DEVICE bool msda_near_kink(double t, int n, int padding)
{
	double k = floor(MP_DADD(t, 0.5)), tol = MP_DMUL(0x1p-20, (double)(n + 1));
	double lo = padding == MSDA_BORDER ? 0.0 : -1.0, hi = padding == MSDA_BORDER ? n - 1.0 : (double)n;

	return fabs(MP_DSUB(t, k)) <= tol && k >= lo && k <= hi;
}

static inline NW_HOST_DEVICE void msda_dsetup(double locx, double locy, int W, int H, int padding, int align,
					      struct msda_dpoint *p)
{
	double x = align ? MP_DMUL(locx, (double)(W - 1)) : MP_DSUB(MP_DMUL(locx, (double)W), 0.5);
	double y = align ? MP_DMUL(locy, (double)(H - 1)) : MP_DSUB(MP_DMUL(locy, (double)H), 0.5);
	double x0, y0;
	int k;

	p->any = false;
	p->lx = p->ly = p->hx = p->hy = 0.0;
	for (k = 0; k < 4; k++) {
		p->w[k] = 0.0;
		p->pix[k] = 0;
		p->in[k] = false;
	}
	p->kink_x = msda_near_kink(x, W, padding);
	p->kink_y = msda_near_kink(y, H, padding);
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
	p->lx = MP_DSUB(x, x0);
	p->ly = MP_DSUB(y, y0);
	p->hx = MP_DSUB(1.0, p->lx);
	p->hy = MP_DSUB(1.0, p->ly);
	p->w[0] = MP_DMUL(p->hy, p->hx);
	p->w[1] = MP_DMUL(p->hy, p->lx);
	p->w[2] = MP_DMUL(p->ly, p->hx);
	p->w[3] = MP_DMUL(p->ly, p->lx);
	for (k = 0; k < 4; k++) {
		long xx = (long)x0 + (k & 1), yy = (long)y0 + (k >> 1);

		p->in[k] = xx >= 0 && xx < W && yy >= 0 && yy < H;
		p->pix[k] = p->in[k] ? yy * W + xx : 0;
	}
}

static inline NW_HOST_DEVICE float msda_unnormalize(float g, int n, int align)
{
	return align ? MP_FMUL(MP_FDIV(MP_FADD(g, 1.0f), 2.0f), (float)(n - 1))
		     : MP_FDIV(MP_FSUB(MP_FMUL(MP_FADD(g, 1.0f), (float)n), 1.0f), 2.0f);
}

/* grid_sample's clip_coordinates_set_grad for border padding. */
static inline NW_HOST_DEVICE float msda_clip(float c, int n, float *mult)
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

/* locx, locy: the stored locations. */
static inline NW_HOST_DEVICE void msda_fsetup(float locx, float locy, int W, int H, int padding, int align,
					      struct msda_fpoint *p)
{
	/*
	 * The grid 2 * loc - 1 in float, not rounded to the dtype: rounded, it
	 * moves points by up to 0.06 pixel in bf16, across pixel centres where
	 * the gradient jumps, and the budget would measure the jump (a kink the
	 * comparison excludes) instead of the dtype's rounding.
	 */
	float gx = MP_FSUB(MP_FMUL(2.0f, locx), 1.0f), gy = MP_FSUB(MP_FMUL(2.0f, locy), 1.0f);
	int k;

	p->mx = align ? MP_FDIV((float)(W - 1), 2.0f) : MP_FDIV((float)W, 2.0f);
	p->my = align ? MP_FDIV((float)(H - 1), 2.0f) : MP_FDIV((float)H, 2.0f);
	p->ix = msda_unnormalize(gx, W, align);
	p->iy = msda_unnormalize(gy, H, align);
	if (padding == MSDA_BORDER) {
		p->ix = msda_clip(p->ix, W, &p->mx);
		p->iy = msda_clip(p->iy, H, &p->my);
	}
	p->x0 = floorf(p->ix);
	p->y0 = floorf(p->iy);
	p->w[0] = MP_FMUL(MP_FSUB(MP_FADD(p->x0, 1.0f), p->ix), MP_FSUB(MP_FADD(p->y0, 1.0f), p->iy));
	p->w[1] = MP_FMUL(MP_FSUB(p->ix, p->x0), MP_FSUB(MP_FADD(p->y0, 1.0f), p->iy));
	p->w[2] = MP_FMUL(MP_FSUB(MP_FADD(p->x0, 1.0f), p->ix), MP_FSUB(p->iy, p->y0));
	p->w[3] = MP_FMUL(MP_FSUB(p->ix, p->x0), MP_FSUB(p->iy, p->y0));
	for (k = 0; k < 4; k++) {
		long xx = (long)p->x0 + (k & 1), yy = (long)p->y0 + (k >> 1);

		p->in[k] =
		    xx >= 0 && xx < W && yy >= 0 && yy < H && fabsf(p->ix) < 1e9f && fabsf(p->iy) < 1e9f;
		p->pix[k] = p->in[k] ? yy * W + xx : 0;
	}
}

#endif
