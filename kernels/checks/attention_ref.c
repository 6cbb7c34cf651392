/*
 * attention references on the host: the float64 results and the plain
 * programs' largest error per element (attention.h, struct attention_refs),
 * and the backward's inputs (the float64 forward, rounded).
 * attention_ref.cu computes the same on the GPU.
 *
 * The plain program is PyTorch's math path op by op in the dtype: S = Q K^T,
 * S * scale, the mask, softmax (float inside, rounded once), P V; its
 * backward: dV = P^T dO, dP = dO V^T, the softmax backward (float inside,
 * rounded once), times scale, dQ = dS K, dK = dS^T Q. Matrix products
 * accumulate in float and round once. The last product of each output is
 * summed in several orders (in->orders, fewer for large cases).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "common.h"

/*
 * Every product and sum rounded on its own, as C specifies without
 * contraction: attention_ref.cu repeats the scores of the float64 forward
 * bit for bit (the backward's inputs rely on it). GCC does not contract in
 * ISO C mode (-std=c11); clang does unless told.
 */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

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
 * Float64 forward of row i of one (batch, head), from its scores Srow [sk]:
 * its P (probabilities, 0 where masked; all 0 if the row sees nothing), O
 * and LSE. attention_ref.cu computes scale * S and its difference to the
 * max exactly as here.
 */
static void ref_fwd_row(const struct attn_dims *s, long i, const double *Srow, const double *v, double *Prow,
			double *orow, double *lse)
{
	long sk = s->seqlen_k, D = s->head_dim, nv = visible(s, i), j, x;
	double m = -INFINITY, l = 0.0;

	for (j = 0; j < nv; j++)
		m = fmax(m, (double)s->scale * Srow[j]);
	for (j = 0; j < sk; j++) {
		Prow[j] = j < nv ? exp((double)s->scale * Srow[j] - m) : 0.0;
		l += Prow[j];
	}
	for (x = 0; x < D; x++)
		orow[x] = 0.0;
	if (nv == 0) {
		*lse = -INFINITY;
		return;
	}
	for (j = 0; j < nv; j++) {
		Prow[j] /= l;
		for (x = 0; x < D; x++)
			orow[x] += Prow[j] * v[j * D + x];
	}
	*lse = m + log(l);
}

/*
 * Float64 forward of one (batch, head): P (probabilities, 0 where masked;
 * rows that see nothing are all 0), O and LSE. S: scratch [sq][sk].
 */
static void ref_fwd_bh(const struct attn_dims *s, const double *q, const double *k, const double *v,
		       double *bt, double *S, double *P, double *o, double *lse)
{
	long sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, i;

	mm_nt_d(q, k, sq, sk, D, bt, S);
	for (i = 0; i < sq; i++)
		ref_fwd_row(s, i, S + i * sk, v, P + i * sk, o + i * D, lse + i);
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
	double sc = (double)s->scale, mq = ck_max_abs(q, sq * D), mk = ck_max_abs(k, sk * D),
	       mdo = ck_max_abs(dout, sq * D);
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

/* ---- per element, the plain programs' largest error ------------------------------------------ */

/* err[i] = max(err[i], |plain[i] - ref[i]|) where plain[i] is finite. */
static void fold_err(double *err, const double *plain, const double *ref, long n)
{
	long i;

	for (i = 0; i < n; i++)
		if (isfinite(plain[i]) && fabs(plain[i] - ref[i]) > err[i])
			err[i] = fabs(plain[i] - ref[i]);
}

static void zero(double *x, long n)
{
	long i;

	for (i = 0; i < n; i++)
		x[i] = 0.0;
}

static int orders_of(const struct attn_ref_in *in)
{
	return in->orders < 1 ? 1 : in->orders > NW_PLAIN_MAX ? NW_PLAIN_MAX : in->orders;
}

static int host_fwd(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in, double *o,
		    double *lse, double *o_err, double *lse_err)
{
	long nbh = (long)s->batch * s->heads, sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, bh;
	double *po = ck_doubles(sq * D), *pl = ck_doubles(sq);
	struct work w = {0};
	int orders = orders_of(in), ord, rc = -ENOMEM;

	if (!po || !pl || work_alloc(&w, s))
		goto out;
	zero(o_err, nbh * sq * D);
	zero(lse_err, nbh * sq);
	for (bh = 0; bh < nbh; bh++) {
		long qo = bh * sq * D, ko = bh * sk * D;

		ref_fwd_bh(s, in->q + qo, in->k + ko, in->v + ko, w.bt, w.S, w.P, o + qo, lse + bh * sq);
		plain_scores(d, s, in->q + qo, in->k + ko, w.fbt, w.Sf);
		to_floats(in->v + ko, sk * D, w.vf);
		for (ord = 0; ord < orders; ord++) {
			plain_fwd_bh(d, s, w.Sf, w.vf, ord, w.Pf, w.acc, po, pl);
			fold_err(o_err + qo, po, o + qo, sq * D);
			fold_err(lse_err + bh * sq, pl, lse + bh * sq, sq);
		}
	}
	rc = 0;
out:
	free(po);
	free(pl);
	work_free(&w);
	return rc;
}

static int host_bwd_inputs(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in,
			   void *o_s, double *o, float *lse)
{
	long nbh = (long)s->batch * s->heads, sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, bh, i;
	double *ref_lse = ck_doubles(nbh * sq);
	struct work w = {0};
	int rc = -ENOMEM;

	if (!ref_lse || work_alloc(&w, s))
		goto out;
	for (bh = 0; bh < nbh; bh++)
		ref_fwd_bh(s, in->q + bh * sq * D, in->k + bh * sk * D, in->v + bh * sk * D, w.bt, w.S, w.P,
			   o + bh * sq * D, ref_lse + bh * sq);
	ck_store_all(d, o_s, o, nbh * sq * D);
	for (i = 0; i < nbh * sq; i++)
		lse[i] = (float)ref_lse[i];
	rc = 0;
out:
	free(ref_lse);
	work_free(&w);
	return rc;
}

static int host_bwd(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in,
		    double *const ref[3], double *const err[3], double mag[3])
{
	long nbh = (long)s->batch * s->heads, sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim, bh;
	double *pq = ck_doubles(sq * D), *pk = ck_doubles(sk * D), *pv = ck_doubles(sk * D);
	struct work w = {0};
	int orders = orders_of(in), ord, rc = -ENOMEM;

	mag[0] = mag[1] = mag[2] = 0.0;
	if (!pq || !pk || !pv || work_alloc(&w, s))
		goto out;
	zero(err[0], nbh * sq * D);
	zero(err[1], nbh * sk * D);
	zero(err[2], nbh * sk * D);
	for (bh = 0; bh < nbh; bh++) {
		long qo = bh * sq * D, ko = bh * sk * D;

		ref_bwd_bh(s, in->q + qo, in->k + ko, in->v + ko, in->dout + qo, in->o + qo,
			   in->lse + bh * sq, &w, ref[0] + qo, ref[1] + ko, ref[2] + ko, mag);
		/* The plain forward's P; its O and LSE land in pq, overwritten below. */
		plain_scores(d, s, in->q + qo, in->k + ko, w.fbt, w.Sf);
		to_floats(in->v + ko, sk * D, w.vf);
		plain_fwd_bh(d, s, w.Sf, w.vf, 0, w.Pf, w.acc, pq, pq);
		for (ord = 0; ord < orders; ord++) {
			plain_bwd_bh(d, s, in->q + qo, in->k + ko, in->v + ko, in->dout + qo, ord, &w, pq, pk,
				     pv);
			fold_err(err[0] + qo, pq, ref[0] + qo, sq * D);
			fold_err(err[1] + ko, pk, ref[1] + ko, sk * D);
			fold_err(err[2] + ko, pv, ref[2] + ko, sk * D);
		}
	}
	rc = 0;
out:
	free(pq);
	free(pk);
	free(pv);
	work_free(&w);
	return rc;
}

void attention_ref_fwd_row(const struct attn_dims *s, const double *q, const double *k, const double *v,
			   long i, double *scratch, double *o, double *lse)
{
	long sk = s->seqlen_k, D = s->head_dim;
	double *S = scratch + D * sk, *P = S + sk;

	/* One row of ref_fwd_bh's product: the same code, so the same roundings. */
	mm_nt_d(q + i * D, k, 1, sk, D, scratch, S);
	ref_fwd_row(s, i, S, v, P, o, lse);
}

const struct attention_refs attention_refs_host = {
    .where = "host",
    .fwd = host_fwd,
    .bwd_inputs = host_bwd_inputs,
    .bwd = host_bwd,
};
