/*
 * attention.fwd and attention.bwd: O = softmax(scale * Q K^T + mask) V and
 * LSE = log(sum(exp(scale * Q K^T))) per visible row; the backward's dQ, dK,
 * dV for an incoming dO, given the forward's O and LSE (the reference's,
 * rounded: O to the dtype, LSE to float). Each output tensor is judged apart.
 *
 * Rows that see no key (causal with seqlen_q > seqlen_k, or seqlen_k 0) have
 * no softmax. The reference defines them: O = 0, LSE = -inf, and no
 * gradient flows through them (dQ = 0 there, and they add nothing to dK, dV).
 *
 * The reference is float64 from the stored inputs. The plain program is
 * PyTorch's math path op by op in the dtype: S = Q K^T, S * scale, the mask,
 * softmax (float inside, rounded once), P V; its backward: dV = P^T dO,
 * dP = dO V^T, the softmax backward (float inside, rounded once), times
 * scale, dQ = dS K, dK = dS^T Q. Matrix products accumulate in float and
 * round once. The last product of each output is summed in several orders
 * (fewer for large cases, to keep trials cheap).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "common.h"

static const char *const families[ATTN_FAMILIES] = {
    [ATTN_ALIGNED] = "aligned",   [ATTN_TAIL] = "tail",       [ATTN_TILE_EDGE] = "tile_edge",
    [ATTN_HEAD_DIM] = "head_dim", [ATTN_CROSS] = "cross",     [ATTN_MASKED_ROWS] = "masked_rows",
    [ATTN_TINY] = "tiny",         [ATTN_EXTREME] = "extreme",
};

enum { STREAM_SHAPE = 0, STREAM_Q = 1, STREAM_K = 2, STREAM_V = 3, STREAM_DOUT = 4, STREAM_KIND = 5 };

enum { EXT_PEAKED, EXT_OFFSET, EXT_TIED_KEYS, EXT_ZERO_Q, EXT_DOUT_SCALE, EXT_KINDS };

static const char *const ext_names[EXT_KINDS] = {"peaked", "offset", "tied_keys", "zero_q", "dout_scale"};

static long pick(struct nw_rng *r, const long *v, size_t n)
{
	return v[nw_rng_range(r, 0, (long)n - 1)];
}

#define PICK(r, arr) pick(r, arr, sizeof(arr) / sizeof(arr[0]))

static long work_of(const struct attn_dims *s)
{
	return (long)s->batch * s->heads * s->seqlen_q * s->seqlen_k * s->head_dim;
}

void attention_case(int family, uint64_t seed, uint64_t index, struct attn_dims *s)
{
	static const long dims_aligned[] = {16, 32, 64, 128};
	static const long dims_small[] = {16, 32, 48, 64};
	static const long dims_odd[] = {40, 59, 80, 96, 111, 1, 3, 128};
	static const long edges[] = {63, 64, 65, 127, 128, 129};
	struct nw_rng r;

	nw_rng_init(&r, "attention", seed, STREAM_SHAPE);
	memset(s, 0, sizeof(*s));
	s->batch = (int)nw_rng_range(&r, 1, 2);
	s->heads = (int)nw_rng_range(&r, 1, 2);
	s->causal = (int)nw_rng_range(&r, 0, 1);
	s->head_dim = (int)PICK(&r, dims_small);
	switch (family) {
	case ATTN_ALIGNED:
		s->seqlen_q = ATTN_TILE * (int)nw_rng_range(&r, 1, 2);
		s->seqlen_k = ATTN_TILE * (int)nw_rng_range(&r, 1, 2);
		s->head_dim = (int)PICK(&r, dims_aligned);
		break;
	case ATTN_TAIL:
		s->seqlen_q = (int)nw_rng_range(&r, 1, 192);
		s->seqlen_k =
		    ATTN_TILE * (int)nw_rng_range(&r, 0, 2) + (int)nw_rng_range(&r, 1, ATTN_TILE - 1);
		break;
	case ATTN_TILE_EDGE:
		s->seqlen_q = (int)PICK(&r, edges);
		s->seqlen_k = (int)PICK(&r, edges);
		break;
	case ATTN_HEAD_DIM:
		s->head_dim = (int)PICK(&r, dims_odd);
		s->seqlen_q = (int)nw_rng_range(&r, 1, 100);
		s->seqlen_k = (int)nw_rng_range(&r, 1, 100);
		break;
	case ATTN_CROSS:
		switch (nw_rng_range(&r, 0, 2)) {
		case 0: /* decode: a few queries, many keys */
			s->seqlen_q = (int)nw_rng_range(&r, 1, 8);
			s->seqlen_k = (int)nw_rng_range(&r, 32, 256);
			break;
		case 1: /* many queries, a few keys */
			s->seqlen_q = (int)nw_rng_range(&r, 32, 256);
			s->seqlen_k = (int)nw_rng_range(&r, 1, 8);
			break;
		default:
			s->seqlen_q = (int)nw_rng_range(&r, 1, 200);
			s->seqlen_k = (int)nw_rng_range(&r, 1, 199);
			if (s->seqlen_k >= s->seqlen_q)
				s->seqlen_k++;
			break;
		}
		break;
	case ATTN_MASKED_ROWS:
		s->causal = 1;
		s->seqlen_k = (int)nw_rng_range(&r, 1, 120);
		s->seqlen_q = s->seqlen_k + (int)nw_rng_range(&r, 1, 100);
		break;
	case ATTN_TINY:
		/* A sweep of seqlens 0..4 x 0..4, head dims 1..4, causal and not. */
		s->batch = 1;
		s->heads = 1;
		s->seqlen_q = (int)(index % 5);
		s->seqlen_k = (int)(index / 5 % 5);
		s->head_dim = 1 + (int)(index / 25 % 4);
		s->causal = (int)(index / 100 % 2);
		break;
	default:
		s->seqlen_q = (int)nw_rng_range(&r, 1, 130);
		s->seqlen_k = (int)nw_rng_range(&r, 1, 130);
		break;
	}
	while (work_of(s) > ATTN_WORK_MAX) {
		if (s->batch > 1)
			s->batch = 1;
		else if (s->heads > 1)
			s->heads = 1;
		else if (family != ATTN_HEAD_DIM && s->head_dim > 16)
			s->head_dim /= 2;
		else
			break;
	}
	s->scale = (float)(1.0 / sqrt((double)s->head_dim));
}

/* ---- one trial's data ------------------------------------------------------------------ */

struct attn_data {
	struct attn_dims s;
	long nbh, nq, nk, nlse; /* elements of Q (and O), of K (and V), of LSE */
	double *q, *k, *v, *dout, *o;
	float *lse;
	void *q_s, *k_s, *v_s, *dout_s, *o_s;
	int orders;
};

static void data_free(struct attn_data *a)
{
	free(a->q);
	free(a->k);
	free(a->v);
	free(a->dout);
	free(a->o);
	free(a->lse);
	free(a->q_s);
	free(a->k_s);
	free(a->v_s);
	free(a->dout_s);
	free(a->o_s);
}

/* The last key row i sees (or -1 and below: none). */
static long last_key(const struct attn_dims *s, long i)
{
	return s->causal ? i + s->seqlen_k - s->seqlen_q : (long)s->seqlen_k - 1;
}

/* Number of keys row i sees. */
static long visible(const struct attn_dims *s, long i)
{
	long l = last_key(s, i) + 1;

	return l < 0 ? 0 : l > s->seqlen_k ? s->seqlen_k : l;
}

static int gen_data(const struct nw_check *c, struct nw_trial *t, struct attn_data *a)
{
	enum nw_dtype d = t->dtype;
	struct nw_rng r;
	double qs = 1.0, voff = 0.0;
	long i, dims[5];
	int kind = -1;

	attention_case(t->family, t->seed, t->index, &a->s);
	dims[0] = a->s.batch;
	dims[1] = a->s.heads;
	dims[2] = a->s.seqlen_q;
	dims[3] = a->s.seqlen_k;
	dims[4] = a->s.head_dim;
	ck_set_shape(t, dims, 5);
	nw_trial_param_int(t, "causal", a->s.causal);
	a->nbh = (long)a->s.batch * a->s.heads;
	a->nq = a->nbh * a->s.seqlen_q * a->s.head_dim;
	a->nk = a->nbh * a->s.seqlen_k * a->s.head_dim;
	a->nlse = a->nbh * a->s.seqlen_q;
	a->orders = work_of(&a->s) <= (1L << 16) ? 8 : work_of(&a->s) <= (1L << 18) ? 4 : 2;

	a->q = ck_doubles(a->nq);
	a->k = ck_doubles(a->nk);
	a->v = ck_doubles(a->nk);
	a->dout = ck_doubles(a->nq);
	a->o = ck_doubles(a->nq);
	a->lse = ck_floats(a->nlse);
	a->q_s = ck_buffer(d, a->nq);
	a->k_s = ck_buffer(d, a->nk);
	a->v_s = ck_buffer(d, a->nk);
	a->dout_s = ck_buffer(d, a->nq);
	a->o_s = ck_buffer(d, a->nq);
	if (!a->q || !a->k || !a->v || !a->dout || !a->o || !a->lse || !a->q_s || !a->k_s || !a->v_s ||
	    !a->dout_s || !a->o_s)
		return -ENOMEM;

	nw_rng_init(&r, c->name, t->seed, STREAM_KIND);
	if (t->family == ATTN_EXTREME) {
		kind = (int)nw_rng_range(&r, 0, EXT_KINDS - 1);
		nw_trial_param_str(t, "extreme", ext_names[kind]);
		if (kind == EXT_PEAKED)
			qs = 4.0;
		else if (kind == EXT_OFFSET)
			voff = 50.0;
	}
	nw_rng_init(&r, c->name, t->seed, STREAM_Q);
	for (i = 0; i < a->nq; i++)
		a->q[i] = kind == EXT_ZERO_Q ? 0.0 : qs * nw_rng_normal(&r);
	nw_rng_init(&r, c->name, t->seed, STREAM_K);
	for (i = 0; i < a->nk; i++)
		a->k[i] = qs * nw_rng_normal(&r);
	if (kind == EXT_TIED_KEYS) /* every key of a (batch, head) equal to its first */
		for (i = 0; i < a->nk; i++) {
			long D = a->s.head_dim, per = (long)a->s.seqlen_k * D, base = i / per * per;

			a->k[i] = a->k[base + i % D];
		}
	nw_rng_init(&r, c->name, t->seed, STREAM_V);
	for (i = 0; i < a->nk; i++)
		a->v[i] = voff + nw_rng_normal(&r);
	nw_rng_init(&r, c->name, t->seed, STREAM_DOUT);
	{
		double ds = kind == EXT_DOUT_SCALE ? (nw_rng_range(&r, 0, 1) ? 1e3 : 1e-3) : 1.0;

		for (i = 0; i < a->nq; i++)
			a->dout[i] = ds * nw_rng_normal(&r);
	}
	ck_store_all(d, a->q_s, a->q, a->nq);
	ck_store_all(d, a->k_s, a->k, a->nk);
	ck_store_all(d, a->v_s, a->v, a->nk);
	ck_store_all(d, a->dout_s, a->dout, a->nq);
	return 0;
}

/* ---- products ---------------------------------------------------------------------------- */

/* C[m][n] = A[m][kd] B[n][kd]^T in double, each element summed over kd in order. bt: scratch [kd][n]. */
static void mm_nt_d(const double *A, const double *B, long m, long n, long kd, double *bt, double *C)
{
	long i, j, x;

	for (j = 0; j < n; j++)
		for (x = 0; x < kd; x++)
			bt[x * n + j] = B[j * kd + x];
	for (i = 0; i < m; i++) {
		double *c = C + i * n;

		for (j = 0; j < n; j++)
			c[j] = 0.0;
		for (x = 0; x < kd; x++) {
			double av = A[i * kd + x];
			const double *b = bt + x * n;

			for (j = 0; j < n; j++)
				c[j] += av * b[j];
		}
	}
}

/* The same in float, from double inputs that hold dtype values. bt: scratch [kd][n]. */
static void mm_nt_f(const double *A, const double *B, long m, long n, long kd, float *bt, float *C)
{
	long i, j, x;

	for (j = 0; j < n; j++)
		for (x = 0; x < kd; x++)
			bt[x * n + j] = (float)B[j * kd + x];
	for (i = 0; i < m; i++) {
		float *c = C + i * n;

		for (j = 0; j < n; j++)
			c[j] = 0.0f;
		for (x = 0; x < kd; x++) {
			float av = (float)A[i * kd + x];
			const float *b = bt + x * n;

			for (j = 0; j < n; j++)
				c[j] += av * b[j];
		}
	}
}

/*
 * C[m][n] = sum over x of A(i, x) B[x][n] in float, the x in order o; A(i, x)
 * is A[i * as + x * xs] (so A or its transpose). Rounded to the dtype into out.
 */
static void mm_ordered(enum nw_dtype d, const float *A, long as, long xs, const float *B, long m, long n,
		       long kd, int o, float *acc, double *out)
{
	long i, j, x, *perm = ck_perm(o, kd);

	for (i = 0; i < m; i++) {
		for (j = 0; j < n; j++)
			acc[j] = 0.0f;
		for (x = 0; x < kd; x++) {
			long xo = ck_at(perm, o, x, kd);
			float av = A[i * as + xo * xs];
			const float *b = B + xo * n;

			if (av == 0.0f)
				continue; /* adds +0 or -0 to a sum that is +0 or not: no change but the sign of 0 */
			for (j = 0; j < n; j++)
				acc[j] += av * b[j];
		}
		for (j = 0; j < n; j++)
			out[i * n + j] = nw_round(d, acc[j]);
	}
	free(perm);
}

/* ---- the forward: reference and plain ------------------------------------------------------- */

/*
 * Float64 forward of one (batch, head): P (probabilities, 0 where masked;
 * rows that see nothing are all 0), O and LSE. S: scratch [sq][sk].
 */
static void ref_fwd_bh(const struct attn_dims *s, const double *q, const double *k, const double *v,
		       double *bt, double *S, double *P, double *o, double *lse)
{
	long sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, i, j, x;

	mm_nt_d(q, k, sq, sk, D, bt, S);
	for (i = 0; i < sq; i++) {
		long nv = visible(s, i);
		double m = -INFINITY, l = 0.0;

		for (j = 0; j < nv; j++)
			m = fmax(m, (double)s->scale * S[i * sk + j]);
		for (j = 0; j < sk; j++) {
			P[i * sk + j] = j < nv ? exp((double)s->scale * S[i * sk + j] - m) : 0.0;
			l += P[i * sk + j];
		}
		for (x = 0; x < D; x++)
			o[i * D + x] = 0.0;
		if (nv == 0) {
			lse[i] = -INFINITY;
			continue;
		}
		for (j = 0; j < nv; j++) {
			P[i * sk + j] /= l;
			for (x = 0; x < D; x++)
				o[i * D + x] += P[i * sk + j] * v[j * D + x];
		}
		lse[i] = m + log(l);
	}
}

/*
 * The plain forward of one (batch, head), order o: P rounded (into Pf), O and
 * LSE. Sf: scores already rounded and scaled [sq][sk].
 */
static void plain_fwd_bh(enum nw_dtype d, const struct attn_dims *s, const float *Sf, const float *vf, int o,
			 float *Pf, float *acc, double *out, double *lse)
{
	long sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, i, j;

	for (i = 0; i < sq; i++) {
		long nv = visible(s, i);
		float m = -INFINITY, sum = 0.0f;

		for (j = 0; j < nv; j++)
			m = fmaxf(m, Sf[i * sk + j]);
		for (j = 0; j < nv; j++)
			sum += expf(Sf[i * sk + nw_order_index(o, j, nv)] - m);
		for (j = 0; j < sk; j++)
			Pf[i * sk + j] = j < nv ? nw_round(d, expf(Sf[i * sk + j] - m) / sum) : 0.0f;
		/* softmax of nothing is NaN in the plain program: left out of the budget */
		lse[i] = nv ? (double)(m + logf(sum)) : NAN;
	}
	mm_ordered(d, Pf, sk, 1, vf, sq, D, sk, o, acc, out);
	for (i = 0; i < sq; i++)
		if (visible(s, i) == 0)
			for (j = 0; j < D; j++)
				out[i * D + j] = NAN;
}

/* Scores of the plain program: round(round(Q K^T) * scale), one (batch, head). */
static void plain_scores(enum nw_dtype d, const struct attn_dims *s, const double *q, const double *k,
			 float *bt, float *Sf)
{
	long n = (long)s->seqlen_q * s->seqlen_k, i;

	mm_nt_f(q, k, s->seqlen_q, s->seqlen_k, s->head_dim, bt, Sf);
	for (i = 0; i < n; i++)
		Sf[i] = nw_round(d, nw_round(d, Sf[i]) * s->scale);
}

/* Everything the references and plain programs of one trial need as scratch. */
struct work {
	double *bt, *S, *P, *dP;
	float *fbt, *Sf, *Pf, *vf, *acc, *dSf, *kf, *qf, *dof;
};

static void work_free(struct work *w)
{
	free(w->bt);
	free(w->S);
	free(w->P);
	free(w->dP);
	free(w->fbt);
	free(w->Sf);
	free(w->Pf);
	free(w->vf);
	free(w->acc);
	free(w->dSf);
	free(w->kf);
	free(w->qf);
	free(w->dof);
}

static int work_alloc(struct work *w, const struct attn_dims *s)
{
	long sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, mx = sq > sk ? sq : sk;
	long bt = D * mx > 3 * mx ? D * mx : 3 * mx, ss = sq * sk;

	w->bt = ck_doubles(bt > ss ? bt : ss);
	w->S = ck_doubles(ss);
	w->P = ck_doubles(ss);
	w->dP = ck_doubles(ss);
	w->fbt = ck_floats(bt > ss ? bt : ss);
	w->Sf = ck_floats(ss);
	w->Pf = ck_floats(ss);
	w->vf = ck_floats(sk * D);
	w->acc = ck_floats(mx > D ? mx : D);
	w->dSf = ck_floats(ss);
	w->kf = ck_floats(sk * D);
	w->qf = ck_floats(sq * D);
	w->dof = ck_floats(sq * D);
	return w->bt && w->S && w->P && w->dP && w->fbt && w->Sf && w->Pf && w->vf && w->acc && w->dSf &&
		       w->kf && w->qf && w->dof
		   ? 0
		   : -ENOMEM;
}

static void to_floats(const double *x, long n, float *f)
{
	long i;

	for (i = 0; i < n; i++)
		f[i] = (float)x[i];
}

/* ---- launches ---------------------------------------------------------------------------- */

struct launch_ctx {
	const struct attention_kernels *k;
	enum nw_dtype dtype;
	const struct attn_dims *s;
	const void *q, *kk, *v, *o, *dout;
	const float *lse_in;
	void *out, *dq, *dk, *dv;
	float *lse;
};

static int launch_fwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->fwd(c->dtype, c->s, c->q, c->kk, c->v, c->out, c->lse);
}

static int launch_bwd(void *arg)
{
	struct launch_ctx *c = arg;

	return c->k->bwd(c->dtype, c->s, c->q, c->kk, c->v, c->o, c->lse_in, c->dout, c->dq, c->dk, c->dv);
}

static double max_abs(const double *x, long n)
{
	double m = 0.0;
	long i;

	for (i = 0; i < n; i++)
		m = fmax(m, fabs(x[i]));
	return m;
}

static int fwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct attention_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct attn_data a = {0};
	struct work w = {0};
	struct ck_plain plain[2];
	struct nw_output out[2] = {{0}};
	struct launch_ctx ctx;
	double *ref_o = NULL, *ref_lse = NULL;
	void *q_dev = NULL, *k_dev = NULL, *v_dev = NULL;
	long bh, D, sq, sk;
	int rc, o, i;

	memset(plain, 0, sizeof(plain));
	rc = gen_data(c, t, &a);
	if (rc)
		goto out;
	D = a.s.head_dim;
	sq = a.s.seqlen_q;
	sk = a.s.seqlen_k;
	ref_o = ck_doubles(a.nq);
	ref_lse = ck_doubles(a.nlse);
	if (!ref_o || !ref_lse || work_alloc(&w, &a.s) ||
	    ck_plain_alloc(&plain[0], (unsigned)a.orders, a.nq) ||
	    ck_plain_alloc(&plain[1], (unsigned)a.orders, a.nlse)) {
		rc = -ENOMEM;
		goto out;
	}
	for (bh = 0; bh < a.nbh; bh++) {
		long qo = bh * sq * D, ko = bh * sk * D;

		ref_fwd_bh(&a.s, a.q + qo, a.k + ko, a.v + ko, w.bt, w.S, w.P, ref_o + qo, ref_lse + bh * sq);
		plain_scores(d, &a.s, a.q + qo, a.k + ko, w.fbt, w.Sf);
		to_floats(a.v + ko, sk * D, w.vf);
		for (o = 0; o < a.orders; o++)
			plain_fwd_bh(d, &a.s, w.Sf, w.vf, o, w.Pf, w.acc, plain[0].p[o] + qo,
				     plain[1].p[o] + bh * sq);
	}

	if ((rc = nw_input_upload(t, &q_dev, a.q_s, (size_t)a.nq * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &k_dev, a.k_s, (size_t)a.nk * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &v_dev, a.v_s, (size_t)a.nk * nw_dtype_size(d))) ||
	    (rc = nw_output_init(t, &out[0], "o", d, (size_t)a.nq)) ||
	    (rc = nw_output_init(t, &out[1], "lse", NW_F32, (size_t)a.nlse)))
		goto out;
	ctx = (struct launch_ctx){.k = k,
				  .dtype = d,
				  .s = &a.s,
				  .q = q_dev,
				  .kk = k_dev,
				  .v = v_dev,
				  .out = out[0].dev,
				  .lse = out[1].dev};
	rc = nw_run_kernel(t, out, 2, k->fwd_name, launch_fwd, &ctx);
	if (rc)
		goto out;
	{
		long odims[4] = {a.s.batch, a.s.heads, sq, D}, ldims[3] = {a.s.batch, a.s.heads, sq};
		struct ck_tensor ot = {.name = "o",
				       .out = &out[0],
				       .ref = ref_o,
				       .plain = &plain[0],
				       .factor = c->budget_factor,
				       .floor_scale = ck_floor_scale(d, max_abs(a.v, a.nk), 0.0),
				       .dims = odims,
				       .ndim = 4,
				       .tail_width = ATTN_TILE,
				       .tail_axis = 1};
		struct ck_tensor lt = {.name = "lse",
				       .out = &out[1],
				       .ref = ref_lse,
				       .plain = &plain[1],
				       .factor = c->budget_factor,
				       .dims = ldims,
				       .ndim = 3,
				       .tail_width = ATTN_TILE};

		ck_compare(t, &ot);
		ck_compare(t, &lt);
	}
out:
	for (i = 0; i < 2; i++) {
		nw_output_release(&out[i]);
		ck_plain_free(&plain[i]);
	}
	nw_input_release(q_dev);
	nw_input_release(k_dev);
	nw_input_release(v_dev);
	free(ref_o);
	free(ref_lse);
	work_free(&w);
	data_free(&a);
	return rc;
}

/* ---- the backward: reference and plain ----------------------------------------------------- */

/*
 * Float64 backward of one (batch, head), as a function of the backward's
 * inputs: P = exp(scale * Q K^T - LSE) with the given LSE (0 where masked),
 * dV = P^T dO, dP = dO V^T, dS = P (dP - delta) with delta = rowsum(dO * O)
 * of the given O, dQ = scale dS K, dK = scale dS^T Q. With the exact O and
 * LSE this is the gradient of attention; with the stored ones it is what a
 * kernel that is handed them can be asked for (their rounding is not the
 * kernel's error). mag[0..2] grow to the sizes of the terms of dQ, dK, dV
 * (the floors of their budgets).
 */
static void ref_bwd_bh(const struct attn_dims *s, const double *q, const double *k, const double *v,
		       const double *dout, const double *o, const float *lse, struct work *w, double *dq,
		       double *dk, double *dv, double mag[3])
{

	long sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, i, j, x;
	double sc = (double)s->scale, mq = max_abs(q, sq * D), mk = max_abs(k, sk * D),
	       mdo = max_abs(dout, sq * D);
	/* bt is free after the products */
	double *S = w->S, *dP = w->dP, *colabs = w->bt, *colp = w->bt + sk;

	mm_nt_d(q, k, sq, sk, D, w->bt, S);
	mm_nt_d(dout, v, sq, sk, D, w->bt, dP);
	for (x = 0; x < sk * D; x++)
		dk[x] = dv[x] = 0.0;
	for (j = 0; j < sk; j++)
		colabs[j] = colp[j] = 0.0;
	for (i = 0; i < sq; i++) {
		const double *dpr = dP + i * sk;
		long nv = visible(s, i);
		double delta = 0.0, rowabs = 0.0;

		for (x = 0; x < D; x++) {
			delta += dout[i * D + x] * o[i * D + x];
			dq[i * D + x] = 0.0;
		}
		for (j = 0; j < nv; j++) {
			double p = exp(sc * S[i * sk + j] - (double)lse[i]), ds = p * (dpr[j] - delta);
			/*
			 * A kernel recomputes p = exp(scale * s - LSE) from a float score
			 * and the float LSE: its rounding grows with the size of the two,
			 * not with p.
			 */
			double grow = 1.0 + fabs(sc * S[i * sk + j]) + fabs((double)lse[i]);
			double dsa = p * (fabs(dpr[j]) + fabs(delta)) * grow;

			rowabs += dsa;
			colabs[j] += dsa;
			colp[j] += p * grow;
			for (x = 0; x < D; x++) {
				dq[i * D + x] += ds * k[j * D + x];
				dk[j * D + x] += ds * q[i * D + x];
				dv[j * D + x] += p * dout[i * D + x];
			}
		}
		for (x = 0; x < D; x++)
			dq[i * D + x] *= sc;
		mag[0] = fmax(mag[0], sc * rowabs * mk);
	}
	for (j = 0; j < sk; j++) {
		for (x = 0; x < D; x++)
			dk[j * D + x] *= sc;
		mag[1] = fmax(mag[1], sc * colabs[j] * mq);
		mag[2] = fmax(mag[2], colp[j] * mdo);
	}
}

/*
 * The plain backward of one (batch, head) in order o, from the plain forward's
 * P (Pf, rounded): dV = P^T dO; dP = dO V^T; dS = softmax backward, times
 * scale; dQ = dS K; dK = dS^T Q. Everything but the last products is the same
 * for every order: computed when o is 0 into dSf.
 */
static void plain_bwd_bh(enum nw_dtype d, const struct attn_dims *s, const double *q, const double *k,
			 const double *v, const double *dout, int o, struct work *w, double *dq, double *dk,
			 double *dv)
{
	long sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, i, j;

	if (o == 0) {
		float *dPf = w->Sf; /* the scores are not needed any more */

		mm_nt_f(dout, v, sq, sk, D, w->fbt, dPf);
		for (i = 0; i < sq * sk; i++)
			dPf[i] = nw_round(d, dPf[i]);
		for (i = 0; i < sq; i++) {
			float dot = 0.0f;

			for (j = 0; j < sk; j++)
				dot += w->Pf[i * sk + j] * dPf[i * sk + j];
			for (j = 0; j < sk; j++) {
				float ds = nw_round(d, w->Pf[i * sk + j] * (dPf[i * sk + j] - dot));

				w->dSf[i * sk + j] = nw_round(d, ds * s->scale);
			}
		}
		to_floats(k, sk * D, w->kf);
		to_floats(q, sq * D, w->qf);
		to_floats(dout, sq * D, w->dof);
	}
	/* dV[j] = sum_i P[i][j] dO[i]; dQ[i] = sum_j dS[i][j] K[j]; dK[j] = sum_i dS[i][j] Q[i]. */
	mm_ordered(d, w->Pf, 1, sk, w->dof, sk, D, sq, o, w->acc, dv);
	mm_ordered(d, w->dSf, sk, 1, w->kf, sq, D, sk, o, w->acc, dq);
	mm_ordered(d, w->dSf, 1, sk, w->qf, sk, D, sq, o, w->acc, dk);
	/* rows that see nothing: the plain program gives NaN (softmax of nothing) */
	for (i = 0; i < sq; i++)
		if (visible(s, i) == 0)
			for (j = 0; j < D; j++)
				dq[i * D + j] = NAN;
}

static int bwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct attention_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct attn_data a = {0};
	struct work w = {0};
	struct ck_plain plain[3];
	struct nw_output out[3] = {{0}};
	struct launch_ctx ctx;
	double *ref[3] = {NULL}, *ref_lse = NULL, mag[3] = {0.0, 0.0, 0.0};
	void *q_dev = NULL, *k_dev = NULL, *v_dev = NULL, *o_dev = NULL, *dout_dev = NULL, *lse_dev = NULL;
	long bh, D, sq, sk;
	int rc, o, i;

	memset(plain, 0, sizeof(plain));
	rc = gen_data(c, t, &a);
	if (rc)
		goto out;
	D = a.s.head_dim;
	sq = a.s.seqlen_q;
	sk = a.s.seqlen_k;
	ref[0] = ck_doubles(a.nq);
	ref[1] = ck_doubles(a.nk);
	ref[2] = ck_doubles(a.nk);
	ref_lse = ck_doubles(a.nlse);
	if (!ref[0] || !ref[1] || !ref[2] || !ref_lse || work_alloc(&w, &a.s) ||
	    ck_plain_alloc(&plain[0], (unsigned)a.orders, a.nq) ||
	    ck_plain_alloc(&plain[1], (unsigned)a.orders, a.nk) ||
	    ck_plain_alloc(&plain[2], (unsigned)a.orders, a.nk)) {
		rc = -ENOMEM;
		goto out;
	}
	/* The forward's O (rounded to the dtype) and LSE (float): inputs of the backward. */
	for (bh = 0; bh < a.nbh; bh++)
		ref_fwd_bh(&a.s, a.q + bh * sq * D, a.k + bh * sk * D, a.v + bh * sk * D, w.bt, w.S, w.P,
			   a.o + bh * sq * D, ref_lse + bh * sq);
	ck_store_all(d, a.o_s, a.o, a.nq);
	for (i = 0; i < a.nlse; i++)
		a.lse[i] = (float)ref_lse[i];
	for (;;) {
		double f;

		for (bh = 0; bh < a.nbh; bh++) {
			long qo = bh * sq * D, ko = bh * sk * D;

			ref_bwd_bh(&a.s, a.q + qo, a.k + ko, a.v + ko, a.dout + qo, a.o + qo, a.lse + bh * sq,
				   &w, ref[0] + qo, ref[1] + ko, ref[2] + ko, mag);
		}
		/* Keep the gradients inside the dtype's range (f16 with dout 1e3). */
		f = ck_shrink(d, fmax(ck_max_abs(ref[0], a.nq),
				      fmax(ck_max_abs(ref[1], a.nk), ck_max_abs(ref[2], a.nk))));
		if (f == 1.0)
			break;
		for (bh = 0; bh < a.nq; bh++)
			a.dout[bh] *= f;
		ck_store_all(d, a.dout_s, a.dout, a.nq);
		mag[0] = mag[1] = mag[2] = 0.0;
	}
	for (bh = 0; bh < a.nbh; bh++) {
		long qo = bh * sq * D, ko = bh * sk * D;

		/* The plain forward's P; its O and LSE land in dQ's plain array, overwritten below. */
		plain_scores(d, &a.s, a.q + qo, a.k + ko, w.fbt, w.Sf);
		to_floats(a.v + ko, sk * D, w.vf);
		plain_fwd_bh(d, &a.s, w.Sf, w.vf, 0, w.Pf, w.acc, plain[0].p[0] + qo, plain[0].p[0] + qo);
		for (o = 0; o < a.orders; o++)
			plain_bwd_bh(d, &a.s, a.q + qo, a.k + ko, a.v + ko, a.dout + qo, o, &w,
				     plain[0].p[o] + qo, plain[1].p[o] + ko, plain[2].p[o] + ko);
	}

	if ((rc = nw_input_upload(t, &q_dev, a.q_s, (size_t)a.nq * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &k_dev, a.k_s, (size_t)a.nk * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &v_dev, a.v_s, (size_t)a.nk * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &o_dev, a.o_s, (size_t)a.nq * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &dout_dev, a.dout_s, (size_t)a.nq * nw_dtype_size(d))) ||
	    (rc = nw_input_upload(t, &lse_dev, a.lse, (size_t)a.nlse * sizeof(float))) ||
	    (rc = nw_output_init(t, &out[0], "dq", d, (size_t)a.nq)) ||
	    (rc = nw_output_init(t, &out[1], "dk", d, (size_t)a.nk)) ||
	    (rc = nw_output_init(t, &out[2], "dv", d, (size_t)a.nk)))
		goto out;
	ctx = (struct launch_ctx){.k = k,
				  .dtype = d,
				  .s = &a.s,
				  .q = q_dev,
				  .kk = k_dev,
				  .v = v_dev,
				  .o = o_dev,
				  .dout = dout_dev,
				  .lse_in = lse_dev,
				  .dq = out[0].dev,
				  .dk = out[1].dev,
				  .dv = out[2].dev};
	rc = nw_run_kernel(t, out, 3, k->bwd_name, launch_bwd, &ctx);
	if (rc)
		goto out;
	{
		static const char *const names[3] = {"dq", "dk", "dv"};
		long qdims[4] = {a.s.batch, a.s.heads, sq, D}, kdims[4] = {a.s.batch, a.s.heads, sk, D};

		for (i = 0; i < 3; i++) {
			struct ck_tensor tt = {
			    .name = names[i],
			    .out = &out[i],
			    .ref = ref[i],
			    .plain = &plain[i],
			    .factor = c->budget_factor,
			    .floor_scale = ck_floor_scale(d, ck_max_abs(ref[i], i ? a.nk : a.nq), mag[i]),
			    .dims = i ? kdims : qdims,
			    .ndim = 4,
			    .tail_width = ATTN_TILE,
			    .tail_axis = 1};

			ck_compare(t, &tt);
		}
	}
out:
	for (i = 0; i < 3; i++) {
		nw_output_release(&out[i]);
		ck_plain_free(&plain[i]);
		free(ref[i]);
	}
	nw_input_release(q_dev);
	nw_input_release(k_dev);
	nw_input_release(v_dev);
	nw_input_release(o_dev);
	nw_input_release(dout_dev);
	nw_input_release(lse_dev);
	free(ref_lse);
	work_free(&w);
	data_free(&a);
	return rc;
}

const struct nw_check attention_fwd_check = {
    .name = "attention.fwd",
    .op = "attention",
    .pass = "fwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = ATTN_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &attention_kernels,
    .run = fwd_run,
};

const struct nw_check attention_bwd_check = {
    .name = "attention.bwd",
    .op = "attention",
    .pass = "bwd",
    .dtypes = NW_DTYPE_BIT(NW_F32) | NW_DTYPE_BIT(NW_F16) | NW_DTYPE_BIT(NW_BF16),
    .families = families,
    .nfamilies = ATTN_FAMILIES,
    .deterministic = true,
    .budget_factor = 2.0,
    .kernels = &attention_kernels,
    .run = bwd_run,
};
