/*
 * msda references on the host: the float64 results, the plain programs'
 * largest error per element and the kinks of dloc (msda.h, struct
 * msda_refs). msda_ref.cu computes the same on the GPU; msda_point.h holds
 * the sampling setup both use.
 *
 * The plain program is what ms_deform_attn_core_pytorch runs op by op in
 * the dtype (msda.c): grid_sample (float inside, its output rounded),
 * products with the weights and their sum over levels x points; its
 * backward is grid_sample's (corner weights times the incoming gradient
 * dout * attn into dvalue, the gradient of the grid as a sum of signed
 * corner terms), each tensor rounded to the dtype, in NW_ORDERS orders: over
 * levels x points for out, over channels for dattn and dloc, over all points
 * for dvalue.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "msda_point.h"

/* One trial's inputs as doubles, and every point's sampling. */
struct ctx {
	struct msda_geo g;
	double *value, *loc, *attn, *dout;
	struct msda_dpoint *dp;
	struct msda_fpoint *fp;
};

static void ctx_free(struct ctx *m)
{
	free(m->value);
	free(m->loc);
	free(m->attn);
	free(m->dout);
	free(m->dp);
	free(m->fp);
}

static int ctx_init(struct ctx *m, enum nw_dtype d, const struct msda_in *in, bool with_dout)
{
	long i;
	int l;

	memset(m, 0, sizeof(*m));
	msda_geo_init(&m->g, in->s);
	m->value = ck_loaded(d, in->value, m->g.nvalue);
	m->loc = ck_loaded(d, in->loc, 2 * m->g.npts);
	m->attn = ck_loaded(d, in->attn, m->g.npts);
	m->dout = with_dout ? ck_loaded(d, in->dout, m->g.nout) : ck_doubles(1);
	m->dp = malloc((size_t)(m->g.npts > 0 ? m->g.npts : 1) * sizeof(*m->dp));
	m->fp = malloc((size_t)(m->g.npts > 0 ? m->g.npts : 1) * sizeof(*m->fp));
	if (!m->value || !m->loc || !m->attn || !m->dout || !m->dp || !m->fp)
		return -ENOMEM;
	for (i = 0; i < m->g.npts; i++) {
		const struct msda_dims *s = &m->g.s;

		l = msda_level_of(&m->g, i);
		msda_dsetup(m->loc[2 * i], m->loc[2 * i + 1], s->level_w[l], s->level_h[l], s->padding,
			    s->align_corners, &m->dp[i]);
		msda_fsetup((float)m->loc[2 * i], (float)m->loc[2 * i + 1], s->level_w[l], s->level_h[l],
			    s->padding, s->align_corners, &m->fp[i]);
	}
	return 0;
}

static void zero(double *v, long n)
{
	long i;

	for (i = 0; i < n; i++)
		v[i] = 0.0;
}

/* Folds one order's plain results into the largest errors. */
static void note_errs(double *plain_err, const double *plain, const double *ref, long n)
{
	long i;

	for (i = 0; i < n; i++)
		if (isfinite(plain[i]) && fabs(plain[i] - ref[i]) > plain_err[i])
			plain_err[i] = fabs(plain[i] - ref[i]);
}

/* Corner values of a point for channel c: double reference, and for the plain program. */
static void dcorners(const struct ctx *m, long pi, int c, double v[4])
{
	const struct msda_dpoint *p = &m->dp[pi];
	int k;

	for (k = 0; k < 4; k++)
		v[k] = p->in[k] ? m->value[msda_vidx(&m->g, pi, p->pix[k], c)] : 0.0;
}

static void fcorners(const struct ctx *m, long pi, int c, float v[4])
{
	const struct msda_fpoint *p = &m->fp[pi];
	int k;

	for (k = 0; k < 4; k++)
		v[k] = p->in[k] ? (float)m->value[msda_vidx(&m->g, pi, p->pix[k], c)] : 0.0f;
}

static double dsample(const struct ctx *m, long pi, int c)
{
	const struct msda_dpoint *p = &m->dp[pi];
	double v[4];

	if (!p->any)
		return 0.0;
	dcorners(m, pi, c, v);
	return p->w[0] * v[0] + p->w[1] * v[1] + p->w[2] * v[2] + p->w[3] * v[3];
}

/* grid_sample's output for channel c, rounded to the dtype. */
static float fsample(enum nw_dtype d, const struct ctx *m, long pi, int c)
{
	const struct msda_fpoint *p = &m->fp[pi];
	float v[4], acc = 0.0f;
	int k;

	fcorners(m, pi, c, v);
	for (k = 0; k < 4; k++)
		if (p->in[k])
			acc += v[k] * p->w[k];
	return nw_round(d, acc);
}

/* ---- msda.fwd ----------------------------------------------------------------------------- */

static int host_fwd(enum nw_dtype d, const struct msda_in *in, struct msda_ref_out *out)
{
	struct ctx m;
	double *ref = out->ref[0], *plain_err = out->plain_err[0], *mag = NULL, scale = 0.0;
	float *prod = NULL;
	long grp, ngroups, i;
	int rc, o, ch, LP;

	rc = ctx_init(&m, d, in, false);
	if (rc)
		goto out;
	LP = m.g.LP;
	ngroups = (long)m.g.s.batch * m.g.s.queries * m.g.s.heads;
	mag = ck_doubles(m.g.nout);
	prod = ck_floats((long)LP);
	if (!mag || !prod) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < m.g.nout; i++)
		ref[i] = mag[i] = plain_err[i] = 0.0;
	for (grp = 0; grp < ngroups; grp++)
		for (ch = 0; ch < m.g.s.channels; ch++) {
			long oi = grp * m.g.s.channels + ch;
			int j;

			for (j = 0; j < LP; j++) {
				long pi = grp * LP + j;
				double v = m.attn[pi] * dsample(&m, pi, ch);

				ref[oi] += v;
				mag[oi] += fabs(v);
				prod[j] = nw_round(d, fsample(d, &m, pi, ch) * (float)m.attn[pi]);
			}
			scale = fmax(scale, mag[oi]);
			for (o = 0; o < NW_ORDERS; o++) {
				float sum = 0.0f;
				double p;

				for (j = 0; j < LP; j++)
					sum += prod[nw_order_index(o, j, LP)];
				p = nw_round(d, sum);
				if (isfinite(p) && fabs(p - ref[oi]) > plain_err[oi])
					plain_err[oi] = fabs(p - ref[oi]);
			}
		}
	out->terms[0] = scale;
	out->terms[1] = out->terms[2] = 0.0;
out:
	free(mag);
	free(prod);
	ctx_free(&m);
	return rc;
}

/* ---- msda.bwd ----------------------------------------------------------------------------- */

struct bwd_ref {
	double *dvalue, *dloc, *dattn, *vmag;
	unsigned char *exclude;
	double *scale;
};

/* Float64 gradients, and the size of the terms each is made of. */
static void ref_bwd(const struct ctx *m, struct bwd_ref *r)
{
	int D = m->g.s.channels, LP = m->g.LP, ch, k;
	long pi, i;

	for (i = 0; i < m->g.nvalue; i++)
		r->dvalue[i] = r->vmag[i] = 0.0;
	r->scale[0] = r->scale[1] = r->scale[2] = 0.0;
	for (pi = 0; pi < m->g.npts; pi++) {
		const struct msda_dpoint *p = &m->dp[pi];
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
						long vi = msda_vidx(&m->g, pi, p->pix[k], ch);

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
	for (i = 0; i < m->g.nvalue; i++)
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

static int pre_alloc(struct plain_pre *q, const struct ctx *m)
{
	long n = m->g.npts * m->g.s.channels;

	q->v = ck_floats(4 * n);
	q->smp = ck_floats(n);
	q->gout = ck_floats(n);
	q->base = malloc((size_t)(4 * m->g.npts > 0 ? 4 * m->g.npts : 1) * sizeof(long));
	q->acc = ck_floats(m->g.nvalue);
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

static void pre_fill(enum nw_dtype d, const struct ctx *m, struct plain_pre *q)
{
	int D = m->g.s.channels, LP = m->g.LP, ch, k;
	long pi;

	for (pi = 0; pi < m->g.npts; pi++) {
		const struct msda_fpoint *p = &m->fp[pi];
		long g = pi / LP;
		float a = (float)m->attn[pi];

		for (k = 0; k < 4; k++)
			q->base[4 * pi + k] = p->in[k] ? msda_vidx(&m->g, pi, p->pix[k], 0) : -1;
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
static void plain_bwd(enum nw_dtype d, const struct ctx *m, const struct plain_pre *q, int o, double *dvalue,
		      double *dloc, double *dattn)
{
	int D = m->g.s.channels, LP = m->g.LP, ch, k;
	long pi, j, i, *pp = ck_perm(o, m->g.npts), *pc = ck_perm(o, D);

	for (i = 0; i < m->g.nvalue; i++)
		q->acc[i] = 0.0f;
	for (j = 0; j < m->g.npts; j++) {
		const struct msda_fpoint *p;
		long g;
		float da = 0.0f, gix = 0.0f, giy = 0.0f;

		pi = ck_at(pp, o, j, m->g.npts);
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
	for (i = 0; i < m->g.nvalue; i++)
		dvalue[i] = nw_round(d, q->acc[i]);
	free(pp);
	free(pc);
}

static int host_bwd(enum nw_dtype d, const struct msda_in *in, struct msda_ref_out *out)
{
	struct ctx m;
	struct bwd_ref r = {0};
	struct plain_pre pre = {0};
	double *pl[3] = {NULL, NULL, NULL};
	long cnt[3];
	int rc, o, i;

	rc = ctx_init(&m, d, in, true);
	if (rc)
		goto out;
	cnt[0] = m.g.nvalue;
	cnt[1] = 2 * m.g.npts;
	cnt[2] = m.g.npts;
	r = (struct bwd_ref){.dvalue = out->ref[0],
			     .dloc = out->ref[1],
			     .dattn = out->ref[2],
			     .vmag = ck_doubles(m.g.nvalue),
			     .exclude = out->exclude,
			     .scale = out->terms};
	for (i = 0; i < 3; i++)
		pl[i] = ck_doubles(cnt[i]);
	if (!r.vmag || !pl[0] || !pl[1] || !pl[2] || pre_alloc(&pre, &m)) {
		rc = -ENOMEM;
		goto out;
	}
	ref_bwd(&m, &r);
	pre_fill(d, &m, &pre);
	for (i = 0; i < 3; i++)
		zero(out->plain_err[i], cnt[i]);
	for (o = 0; o < NW_ORDERS; o++) {
		plain_bwd(d, &m, &pre, o, pl[0], pl[1], pl[2]);
		for (i = 0; i < 3; i++)
			note_errs(out->plain_err[i], pl[i], out->ref[i], cnt[i]);
	}
out:
	for (i = 0; i < 3; i++)
		free(pl[i]);
	free(r.vmag);
	pre_free(&pre);
	ctx_free(&m);
	return rc;
}

const struct msda_refs msda_refs_host = {
    .where = "host",
    .fwd = host_fwd,
    .bwd = host_bwd,
};
