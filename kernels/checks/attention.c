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
 * (fewer for large cases, to keep trials cheap). Both are computed on the
 * host or on the GPU (attention_ref.c, attention_ref.cu; the kernel table's
 * refs), after the inputs are uploaded and before the kernel runs; the
 * plain programs' errors come back reduced per element.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "common.h"
#include "nw_device.h"

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
	double v_max_abs; /* the forward's floor scale, found while preparing */
};

static void data_free(struct attn_data *a)
{
	free(a->q);
	free(a->k);
	free(a->v);
	free(a->dout);
	free(a->o);
	free(a->lse);
	nw_dev_unpin(a->q_s);
	nw_dev_unpin(a->k_s);
	nw_dev_unpin(a->v_s);
	free(a->dout_s);
	free(a->o_s);
}

static int gen_data(const struct nw_check *c, struct nw_trial *t, struct attn_data *a, bool with_dout)
{
	enum nw_dtype d = t->dtype;
	struct nw_rng r;
	double qs = 1.0, voff = 0.0, ds = 1.0;
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
	/* Page-locked: uploaded from where they are (nw_dev_upload). */
	a->q_s = nw_dev_pinned((size_t)(a->nq > 0 ? a->nq : 1) * nw_dtype_size(d));
	a->k_s = nw_dev_pinned((size_t)(a->nk > 0 ? a->nk : 1) * nw_dtype_size(d));
	a->v_s = nw_dev_pinned((size_t)(a->nk > 0 ? a->nk : 1) * nw_dtype_size(d));
	if (!a->q || !a->k || !a->v || !a->q_s || !a->k_s || !a->v_s)
		return -ENOMEM;
	if (with_dout) { /* the backward's: dout, and the forward's O and LSE */
		a->dout = ck_doubles(a->nq);
		a->o = ck_doubles(a->nq);
		a->lse = ck_floats(a->nlse);
		a->dout_s = ck_buffer(d, a->nq);
		a->o_s = ck_buffer(d, a->nq);
		if (!a->dout || !a->o || !a->lse || !a->dout_s || !a->o_s)
			return -ENOMEM;
	}

	nw_rng_init(&r, c->name, t->seed, STREAM_KIND);
	if (t->family == ATTN_EXTREME) {
		kind = (int)nw_rng_range(&r, 0, EXT_KINDS - 1);
		nw_trial_param_str(t, "extreme", ext_names[kind]);
		if (kind == EXT_PEAKED)
			qs = 4.0;
		else if (kind == EXT_OFFSET)
			voff = 50.0;
	}
	nw_rng_init(&r, c->name, t->seed, STREAM_DOUT);
	if (kind == EXT_DOUT_SCALE)
		ds = nw_rng_range(&r, 0, 1) ? 1e3 : 1e-3;
	{
		/* The four streams are independent: drawn in parallel (nw_rng_fill_normals). */
		struct nw_normals jobs[] = {
		    {c->name, t->seed, STREAM_Q, 0, a->q, kind == EXT_ZERO_Q ? 0 : a->nq, qs, 0.0},
		    {c->name, t->seed, STREAM_K, 0, a->k, a->nk, qs, 0.0},
		    {c->name, t->seed, STREAM_V, 0, a->v, a->nk, 1.0, voff},
		    /* dout's stream starts after the scale's draw; the forward needs no dout. */
		    {c->name, t->seed, STREAM_DOUT, r.ctr, a->dout, with_dout ? a->nq : 0, ds, 0.0},
		};

		if (kind == EXT_ZERO_Q)
			for (i = 0; i < a->nq; i++)
				a->q[i] = 0.0;
		nw_rng_fill_normals(jobs, sizeof(jobs) / sizeof(jobs[0]));
	}
	if (kind == EXT_TIED_KEYS) /* every key of a (batch, head) equal to its first */
		for (i = 0; i < a->nk; i++) {
			long D = a->s.head_dim, per = (long)a->s.seqlen_k * D, base = i / per * per;

			a->k[i] = a->k[base + i % D];
		}
	ck_store_all(d, a->q_s, a->q, a->nq);
	ck_store_all(d, a->k_s, a->k, a->nk);
	ck_store_all(d, a->v_s, a->v, a->nk);
	if (with_dout)
		ck_store_all(d, a->dout_s, a->dout, a->nq);
	return 0;
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

/* The backend's references (attention.h); tests with their own kernel tables get the host's. */
static const struct attention_refs *refs_of(const struct attention_kernels *k)
{
	return k->refs ? k->refs : &attention_refs_host;
}

static int upload(struct nw_trial *t, void **dev, const void *host, long n, enum nw_dtype d)
{
	return nw_input_upload(t, dev, host, (size_t)n * nw_dtype_size(d));
}

/* The forward's host part (nw_check.prepare): the case and its stored inputs, hashed in upload order. */
static int fwd_prepare(const struct nw_check *c, struct nw_trial *t, void **prepared)
{
	struct attn_data *a = calloc(1, sizeof(*a));
	enum nw_dtype d = t->dtype;
	int rc;

	if (!a)
		return -ENOMEM;
	rc = gen_data(c, t, a, false);
	if (rc) {
		data_free(a);
		free(a);
		return rc;
	}
	nw_input_hash(t, a->q_s, (size_t)a->nq * nw_dtype_size(d));
	nw_input_hash(t, a->k_s, (size_t)a->nk * nw_dtype_size(d));
	nw_input_hash(t, a->v_s, (size_t)a->nk * nw_dtype_size(d));
	a->v_max_abs = ck_max_abs(a->v, a->nk);
	*prepared = a;
	return 0;
}

static void fwd_release(void *prepared)
{
	data_free(prepared);
	free(prepared);
}

static int fwd_run(const struct nw_check *c, struct nw_trial *t, void *prepared)
{
	const struct attention_kernels *k = c->kernels;
	enum nw_dtype d = t->dtype;
	struct attn_data a = *(struct attn_data *)prepared;
	struct attn_ref_in in = {0};
	struct nw_output out[2] = {{0}};
	struct launch_ctx ctx;
	const struct attention_refs *refs = refs_of(k);
	double *ref_o = NULL, *ref_lse = NULL, *err_o = NULL, *err_lse = NULL, *ref_dev = NULL, t0;
	void *q_dev = NULL, *k_dev = NULL, *v_dev = NULL;
	long D, sq;
	int rc, i;

	D = a.s.head_dim;
	sq = a.s.seqlen_q;
	if (!refs->fwd_dev) {
		ref_o = ck_doubles(a.nq);
		ref_lse = ck_doubles(a.nlse);
		err_o = ck_doubles(a.nq);
		err_lse = ck_doubles(a.nlse);
		if (!ref_o || !ref_lse || !err_o || !err_lse) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if ((rc = upload(t, &q_dev, a.q_s, a.nq, d)) || (rc = upload(t, &k_dev, a.k_s, a.nk, d)) ||
	    (rc = upload(t, &v_dev, a.v_s, a.nk, d)))
		goto out;
	/* Before the kernel runs: a kernel that scribbles on its inputs cannot bend the reference. */
	in = (struct attn_ref_in){
	    .q = a.q, .k = a.k, .v = a.v, .q_dev = q_dev, .k_dev = k_dev, .v_dev = v_dev, .orders = a.orders};
	t0 = nw_now();
	rc = nw_reference_done(t,
			       refs->fwd_dev ? refs->fwd_dev(d, &a.s, &in, &ref_dev)
					     : refs->fwd(d, &a.s, &in, ref_o, ref_lse, err_o, err_lse),
			       t0);
	if (rc)
		goto out;
	if ((rc = nw_output_init(t, &out[0], "o", d, (size_t)a.nq)) ||
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
		struct ck_tensor both[2] = {{.name = "o",
					     .out = &out[0],
					     .ref = ref_o,
					     .plain_err = err_o,
					     .ref_dev = ref_dev,
					     .plain_err_dev = ref_dev ? ref_dev + a.nq : NULL,
					     .factor = c->budget_factor,
					     .floor_scale = ck_floor_scale(d, a.v_max_abs, 0.0),
					     .dims = odims,
					     .ndim = 4,
					     .tail_width = ATTN_TILE,
					     .tail_axis = 1},
					    {.name = "lse",
					     .out = &out[1],
					     .ref = ref_lse,
					     .plain_err = err_lse,
					     .ref_dev = ref_dev ? ref_dev + 2 * a.nq : NULL,
					     .plain_err_dev = ref_dev ? ref_dev + 2 * a.nq + a.nlse : NULL,
					     .factor = c->budget_factor,
					     .dims = ldims,
					     .ndim = 3,
					     .tail_width = ATTN_TILE}};

		rc = ck_compare_n(t, both, 2);
		if (rc)
			goto out;
	}
out:
	for (i = 0; i < 2; i++)
		nw_output_release(&out[i]);
	nw_dev_free(ref_dev);
	nw_input_release(q_dev);
	nw_input_release(k_dev);
	nw_input_release(v_dev);
	free(ref_o);
	free(ref_lse);
	free(err_o);
	free(err_lse);
	return rc;
}

/*
 * The backward's reference is the gradient formula on the backward's inputs
 * (attention_ref.c, ref_bwd_bh), the forward's O and LSE among them: the
 * float64 forward's, rounded (attention_refs.bwd_inputs).
 */
static int bwd_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct attention_kernels *k = c->kernels;
	const struct attention_refs *refs = refs_of(k);
	enum nw_dtype d = t->dtype;
	struct attn_data a = {0};
	struct attn_ref_in in = {0};
	struct nw_output out[3] = {{0}};
	struct launch_ctx ctx;
	double *ref[3] = {NULL}, *err[3] = {NULL}, mag[3] = {0.0, 0.0, 0.0}, t0;
	void *q_dev = NULL, *k_dev = NULL, *v_dev = NULL, *o_dev = NULL, *dout_dev = NULL, *lse_dev = NULL;
	long D, sq, sk, j;
	int rc, i;

	rc = gen_data(c, t, &a, true);
	if (rc)
		goto out;
	D = a.s.head_dim;
	sq = a.s.seqlen_q;
	sk = a.s.seqlen_k;
	for (i = 0; i < 3; i++) {
		ref[i] = ck_doubles(i ? a.nk : a.nq);
		err[i] = ck_doubles(i ? a.nk : a.nq);
		if (!ref[i] || !err[i]) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if ((rc = upload(t, &q_dev, a.q_s, a.nq, d)) || (rc = upload(t, &k_dev, a.k_s, a.nk, d)) ||
	    (rc = upload(t, &v_dev, a.v_s, a.nk, d)) || (rc = upload(t, &dout_dev, a.dout_s, a.nq, d)))
		goto out;
	in = (struct attn_ref_in){.q = a.q,
				  .k = a.k,
				  .v = a.v,
				  .dout = a.dout,
				  .o = a.o,
				  .lse = a.lse,
				  .q_dev = q_dev,
				  .k_dev = k_dev,
				  .v_dev = v_dev,
				  .dout_dev = dout_dev,
				  .orders = a.orders};
	/* The forward's O (rounded to the dtype) and LSE (float): inputs of the backward. */
	t0 = nw_now();
	rc = nw_reference_done(t, refs->bwd_inputs(d, &a.s, &in, a.o_s, a.o, a.lse), t0);
	if (rc)
		goto out;
	if ((rc = upload(t, &o_dev, a.o_s, a.nq, d)) ||
	    (rc = nw_input_upload(t, &lse_dev, a.lse, (size_t)a.nlse * sizeof(float))))
		goto out;
	in.o_dev = o_dev;
	in.lse_dev = lse_dev;
	for (;;) {
		double f;

		t0 = nw_now();
		rc = nw_reference_done(t, refs->bwd(d, &a.s, &in, ref, err, mag), t0);
		if (rc)
			goto out;
		/* Keep the gradients inside the dtype's range (f16 with dout 1e3). */
		f = ck_shrink(d, fmax(ck_max_abs(ref[0], a.nq),
				      fmax(ck_max_abs(ref[1], a.nk), ck_max_abs(ref[2], a.nk))));
		if (f == 1.0)
			break;
		for (j = 0; j < a.nq; j++)
			a.dout[j] *= f;
		ck_store_all(d, a.dout_s, a.dout, a.nq);
		nw_input_release(dout_dev);
		dout_dev = NULL;
		if ((rc = upload(t, &dout_dev, a.dout_s, a.nq, d)))
			goto out;
		in.dout_dev = dout_dev;
	}

	if ((rc = nw_output_init(t, &out[0], "dq", d, (size_t)a.nq)) ||
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
			    .plain_err = err[i],
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
		free(ref[i]);
		free(err[i]);
	}
	nw_input_release(q_dev);
	nw_input_release(k_dev);
	nw_input_release(v_dev);
	nw_input_release(o_dev);
	nw_input_release(dout_dev);
	nw_input_release(lse_dev);
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
    .prepare = fwd_prepare,
    .run_prepared = fwd_run,
    .release_prepared = fwd_release,
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
