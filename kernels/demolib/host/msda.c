/*
 * Multi-scale deformable attention forward and backward, host build. The
 * structure follows the CUDA build: a warp of 32 lanes per (batch, query,
 * head) group, lane l handling channels l, l + 32, ...; per sampling point
 * the lanes' partial sums of dattn and dloc are combined by the warp's xor
 * butterfly, and dvalue is accumulated in a float workspace (with atomics on
 * the GPU, in group order here) and converted once at the end.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../demolib.h"
#include "convert.h"

#define WARP 32

/* One sampling point at one level: corners, bilinear weights, coordinate gradients. */
struct point {
	bool any; /* some corner can be inside */
	float lx, ly, hx, hy;
	float gx, gy; /* d(pixel coordinate)/d(loc), 0 where border padding clamped it */
	long pix[4];  /* corner pixels (y0,x0), (y0,x0+1), (y0+1,x0), (y0+1,x0+1) in the level */
	bool in[4];
	float w[4];
};

static void setup_point(float locx, float locy, int W, int H, int padding, int align, struct point *p)
{
	float x = align ? locx * (float)(W - 1) : locx * (float)W - 0.5f;
	float y = align ? locy * (float)(H - 1) : locy * (float)H - 0.5f;
	int x0, y0, k;

	p->gx = align ? (float)(W - 1) : (float)W;
	p->gy = align ? (float)(H - 1) : (float)H;
	if (padding == DL_MSDA_BORDER) {
		if (!(x > 0.0f && x < (float)(W - 1)))
			p->gx = 0.0f;
		if (!(y > 0.0f && y < (float)(H - 1)))
			p->gy = 0.0f;
		x = fminf(fmaxf(x, 0.0f), (float)(W - 1));
		y = fminf(fmaxf(y, 0.0f), (float)(H - 1));
		p->any = true;
	} else {
		p->any = x > -1.0f && y > -1.0f && x < (float)W && y < (float)H;
	}
	if (!p->any)
		return;
	x0 = (int)floorf(x);
	y0 = (int)floorf(y);
	p->lx = x - (float)x0;
	p->ly = y - (float)y0;
	p->hx = 1.0f - p->lx;
	p->hy = 1.0f - p->ly;
	p->w[0] = p->hy * p->hx;
	p->w[1] = p->hy * p->lx;
	p->w[2] = p->ly * p->hx;
	p->w[3] = p->ly * p->lx;
	for (k = 0; k < 4; k++) {
		int xx = x0 + (k & 1), yy = y0 + (k >> 1);

		p->in[k] = xx >= 0 && xx < W && yy >= 0 && yy < H;
		p->pix[k] = p->in[k] ? (long)yy * W + xx : 0;
	}
}

static int check_args(enum dl_dtype dtype, const struct dl_msda_shape *s)
{
	int l;

	if (dtype != DL_F32 && dtype != DL_F16 && dtype != DL_BF16)
		return -EINVAL;
	if (s->batch < 0 || s->queries < 0 || s->heads < 0 || s->channels < 0 || s->levels < 1 ||
	    s->levels > DL_MSDA_MAX_LEVELS || s->points < 0 || s->channels > 4 * WARP)
		return -EINVAL;
	if (s->padding != DL_MSDA_ZEROS && s->padding != DL_MSDA_BORDER)
		return -EINVAL;
	for (l = 0; l < s->levels; l++)
		if (s->level_h[l] < 1 || s->level_w[l] < 1)
			return -EINVAL;
	return 0;
}

static long level_starts(const struct dl_msda_shape *s, long *start)
{
	long S = 0;
	int l;

	for (l = 0; l < s->levels; l++) {
		start[l] = S;
		S += (long)s->level_h[l] * s->level_w[l];
	}
	return S;
}

/* A corner's value (batch row vrow of the level's first pixel, head h, channel c), 0 outside the level. */
static float corner(enum dl_dtype t, const void *value, const struct point *p, int k, long vrow, int heads,
		    long h, int D, int c)
{
	return p->in[k] ? load(t, value, ((vrow + p->pix[k]) * heads + h) * D + c) : 0.0f;
}

int dl_msda_fwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value, const void *loc,
		const void *attn, void *out)
{
	long start[DL_MSDA_MAX_LEVELS], S, g, ngroups;
	int rc, D, l, p, c;

	rc = check_args(dtype, s);
	if (rc)
		return rc;
	S = level_starts(s, start);
	D = s->channels;
	ngroups = (long)s->batch * s->queries * s->heads;
	for (g = 0; g < ngroups; g++) {
		long b = g / ((long)s->queries * s->heads), h = g % s->heads;
		float acc[4 * WARP];

		for (c = 0; c < D; c++)
			acc[c] = 0.0f;
		for (l = 0; l < s->levels; l++)
			for (p = 0; p < s->points; p++) {
				long pi = (g * s->levels + l) * s->points + p, vrow = b * S + start[l];
				float a = load(dtype, attn, pi);
				struct point pt;

				setup_point(load(dtype, loc, 2 * pi), load(dtype, loc, 2 * pi + 1),
					    s->level_w[l], s->level_h[l], s->padding, s->align_corners, &pt);
				if (!pt.any)
					continue;
				/* Lane c % 32 handles channel c; the order per channel is the CUDA lane's. */
				for (c = 0; c < D; c++) {
					float smp =
					    pt.w[0] * corner(dtype, value, &pt, 0, vrow, s->heads, h, D, c);

					smp +=
					    pt.w[1] * corner(dtype, value, &pt, 1, vrow, s->heads, h, D, c);
					smp +=
					    pt.w[2] * corner(dtype, value, &pt, 2, vrow, s->heads, h, D, c);
					smp +=
					    pt.w[3] * corner(dtype, value, &pt, 3, vrow, s->heads, h, D, c);
					acc[c] += a * smp;
				}
			}
		for (c = 0; c < D; c++)
			store(dtype, out, g * D + c, acc[c]);
	}
	return 0;
}

/* The warp's xor butterfly over 32 lanes; every lane ends with the same sum. */
static float warp_sum(float *lane)
{
	float tmp[WARP];
	int o, l;

	for (o = WARP / 2; o > 0; o /= 2) {
		for (l = 0; l < WARP; l++)
			tmp[l] = lane[l] + lane[l ^ o];
		memcpy(lane, tmp, sizeof(tmp));
	}
	return lane[0];
}

int dl_msda_bwd(enum dl_dtype dtype, const struct dl_msda_shape *s, const void *value, const void *loc,
		const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn)
{
	long start[DL_MSDA_MAX_LEVELS], S, g, ngroups, nvalue, i;
	float *ws;
	int rc, D, l, p, c;

	rc = check_args(dtype, s);
	if (rc)
		return rc;
	S = level_starts(s, start);
	D = s->channels;
	ngroups = (long)s->batch * s->queries * s->heads;
	nvalue = (long)s->batch * S * s->heads * D;
	ws = calloc((size_t)(nvalue > 0 ? nvalue : 1), sizeof(float));
	if (!ws)
		return -ENOMEM;
	for (g = 0; g < ngroups; g++) {
		long b = g / ((long)s->queries * s->heads), h = g % s->heads;

		for (l = 0; l < s->levels; l++)
			for (p = 0; p < s->points; p++) {
				long pi = (g * s->levels + l) * s->points + p, vrow = b * S + start[l];
				float a = load(dtype, attn, pi), pd[WARP] = {0}, px[WARP] = {0},
				      py[WARP] = {0};
				/* A point without weight adds nothing to dvalue or dloc. */
				bool skip = a == 0.0f;
				struct point pt;
				int k;

				setup_point(load(dtype, loc, 2 * pi), load(dtype, loc, 2 * pi + 1),
					    s->level_w[l], s->level_h[l], s->padding, s->align_corners, &pt);
				if (pt.any)
					for (c = 0; c < D; c++) {
						float go = load(dtype, dout, g * D + c), v[4];

						for (k = 0; k < 4; k++)
							v[k] = corner(dtype, value, &pt, k, vrow, s->heads, h,
								      D, c);
						pd[c % WARP] +=
						    go *
						    (((pt.w[0] * v[0] + pt.w[1] * v[1]) + pt.w[2] * v[2]) +
						     pt.w[3] * v[3]);
						px[c % WARP] +=
						    go * (pt.hy * (v[1] - v[0]) + pt.ly * (v[3] - v[2]));
						py[c % WARP] +=
						    go * (pt.hx * (v[2] - v[0]) + pt.lx * (v[3] - v[1]));
						if (skip)
							continue;
						for (k = 0; k < 4; k++)
							if (pt.in[k])
								ws[((vrow + pt.pix[k]) * s->heads + h) * D +
								   c] += a * go * pt.w[k];
					}
				store(dtype, dattn, pi, warp_sum(pd));
				store(dtype, dloc, 2 * pi, skip ? 0.0f : a * pt.gx * warp_sum(px));
				store(dtype, dloc, 2 * pi + 1, skip ? 0.0f : a * pt.gy * warp_sum(py));
			}
	}
	for (i = 0; i < nvalue; i++)
		store(dtype, dvalue, i, ws[i]);
	free(ws);
	return 0;
}
