/*
 * Unit tests of the attention checks (kernels/checks/attention.c) against the
 * host build of the bundled demo library, and against planted bugs: a wrong
 * value, a NaN, an element never written, a write past the end, in each
 * output apart; flash-dmattn's bug (dV garbage on the partial last key tile
 * in bf16, dQ, dK and the forward fine); and fully masked rows answered with
 * NaN, as a plain softmax would.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attention.h"
#include "demolib.h"
#include "numwatch_check.h"
#include "sdk_harness.h"

static enum dl_dtype dl_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static struct dl_attn_shape shape_of(const struct attn_dims *s)
{
	struct dl_attn_shape x = {s->batch,    s->heads,  s->seqlen_q, s->seqlen_k,
				  s->head_dim, s->causal, s->scale};

	return x;
}

static int real_fwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
		    void *o, float *lse)
{
	struct dl_attn_shape x = shape_of(s);

	return dl_attention_fwd(dl_of(d), &x, q, k, v, o, lse);
}

static int real_bwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k, const void *v,
		    const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv)
{
	struct dl_attn_shape x = shape_of(s);

	return dl_attention_bwd(dl_of(d), &x, q, k, v, o, lse, dout, dq, dk, dv);
}

/* ---- planted bugs ------------------------------------------------------------------------ */

enum { PLANT_VALUE, PLANT_NAN, PLANT_UNWRITTEN, PLANT_OVERRUN };
static int plant, target; /* fwd: 0 o, 1 lse; bwd: 0 dq, 1 dk, 2 dv */

/* v moved away from 0 by a quarter of itself and a quarter. */
static float off_by_a_quarter(float v)
{
	return v + copysignf(0.25f * fabsf(v) + 0.25f, v);
}

static void apply(enum nw_dtype d, void *buf, size_t n, const void *before)
{
	size_t es = nw_dtype_size(d), i;

	if (n == 0)
		return;
	switch (plant) {
	case PLANT_VALUE:
	case PLANT_NAN:
		/* The element with the largest magnitude: never one that is 0 by definition. */
		{
			size_t best = 0;
			float bv = -1.0f;

			for (i = 0; i < n; i++) {
				float v = nw_load(d, buf, i);

				if (isfinite(v) && fabsf(v) > bv) {
					bv = fabsf(v);
					best = i;
				}
			}
			if (plant == PLANT_NAN)
				nw_store(d, buf, best, NAN);
			else
				nw_store(d, buf, best, off_by_a_quarter(nw_load(d, buf, best)));
		}
		break;
	case PLANT_UNWRITTEN:
		memcpy((char *)buf + (n - 1) * es, (const char *)before + (n - 1) * es, es);
		break;
	default:
		nw_store(d, buf, n, 0.5f);
		break;
	}
}

static int planted_fwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k,
		       const void *v, void *o, float *lse)
{
	size_t nlse = (size_t)s->batch * s->heads * s->seqlen_q, n = nlse * (size_t)s->head_dim;
	void *before = malloc(n * 4 + 4);
	int rc;

	if (!before)
		return -12;
	memcpy(before, target ? (void *)lse : o, target ? nlse * 4 : n * nw_dtype_size(d));
	rc = real_fwd(d, s, q, k, v, o, lse);
	if (target)
		apply(NW_F32, lse, nlse, before);
	else
		apply(d, o, n, before);
	free(before);
	return rc;
}

static int planted_bwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k,
		       const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
		       void *dv)
{
	size_t bh = (size_t)s->batch * s->heads, n = bh * (target ? s->seqlen_k : s->seqlen_q) * s->head_dim;
	void *out = target == 0 ? dq : target == 1 ? dk : dv, *before = malloc(n * 4 + 4);
	int rc;

	if (!before)
		return -12;
	memcpy(before, out, n * nw_dtype_size(d));
	rc = real_bwd(d, s, q, k, v, o, lse, dout, dq, dk, dv);
	apply(d, out, n, before);
	free(before);
	return rc;
}

/* flash-dmattn: in bf16, the dV accumulator of a partial last key tile is never cleared (NaN garbage). */
static int dv_tail_bwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k,
		       const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
		       void *dv)
{
	int rc = real_bwd(d, s, q, k, v, o, lse, dout, dq, dk, dv);
	long bh, j, x, first = s->seqlen_k - s->seqlen_k % ATTN_TILE;

	if (d != NW_BF16)
		return rc;
	for (bh = 0; bh < (long)s->batch * s->heads; bh++)
		for (j = first; j < s->seqlen_k; j++)
			for (x = 0; x < s->head_dim; x++)
				nw_store(d, dv, (size_t)((bh * s->seqlen_k + j) * s->head_dim + x), NAN);
	return rc;
}

/* A plain softmax on a row that sees no key: NaN for O (0/0) instead of the defined 0. */
static int nan_rows_fwd(enum nw_dtype d, const struct attn_dims *s, const void *q, const void *k,
			const void *v, void *o, float *lse)
{
	int rc = real_fwd(d, s, q, k, v, o, lse);
	size_t i, n = (size_t)s->batch * s->heads * s->seqlen_q;

	for (i = 0; i < n; i++)
		if (lse[i] == -INFINITY)
			nw_store(d, o, i * (size_t)s->head_dim, NAN);
	return rc;
}

static const struct attention_kernels planted = {"planted_fwd", "planted_bwd", planted_fwd, planted_bwd,
						 NULL};
static const struct attention_kernels dv_tail = {"real_fwd", "dv_tail_bwd", real_fwd, dv_tail_bwd, NULL};
static const struct attention_kernels nan_rows = {"nan_rows_fwd", "real_bwd", nan_rows_fwd, real_bwd, NULL};

/* ---- families and shapes --------------------------------------------------------------------- */

static void test_seeds_cover_every_family(void **state)
{
	static const int odd_dims[] = {40, 59, 80, 96, 111};
	static const int edges[] = {63, 64, 65, 127, 128, 129};
	bool dim_seen[5] = {false}, edge_seen[6] = {false}, tiny[5][5] = {{false}};
	int count[ATTN_FAMILIES] = {0}, f, i, j;
	uint64_t seed;

	(void)state;
	assert_int_equal(attention_fwd_check.nfamilies, ATTN_FAMILIES);
	for (seed = 0; seed < 4000; seed++) {
		int fam = (int)(seed % ATTN_FAMILIES);
		struct attn_dims s, s2;

		attention_case(fam, seed, seed / ATTN_FAMILIES, &s);
		attention_case(fam, seed, seed / ATTN_FAMILIES, &s2);
		assert_memory_equal(&s, &s2, sizeof(s));
		count[fam]++;
		assert_true((long)s.batch * s.heads * s.seqlen_q * s.seqlen_k * s.head_dim <= ATTN_WORK_MAX);
		assert_true(s.head_dim >= 1 && s.head_dim <= DL_ATTN_MAX_HEAD_DIM);
		switch (fam) {
		case ATTN_ALIGNED:
			assert_true(s.seqlen_q % ATTN_TILE == 0 && s.seqlen_k % ATTN_TILE == 0 &&
				    s.seqlen_q > 0);
			break;
		case ATTN_TAIL:
			assert_true(s.seqlen_k % ATTN_TILE != 0);
			break;
		case ATTN_TILE_EDGE:
			for (i = 0; i < 6; i++)
				edge_seen[i] |= s.seqlen_q == edges[i] || s.seqlen_k == edges[i];
			break;
		case ATTN_HEAD_DIM:
			for (i = 0; i < 5; i++)
				dim_seen[i] |= s.head_dim == odd_dims[i];
			break;
		case ATTN_CROSS:
			assert_true(s.seqlen_q != s.seqlen_k);
			break;
		case ATTN_MASKED_ROWS:
			assert_true(s.causal && s.seqlen_q > s.seqlen_k);
			break;
		case ATTN_TINY:
			assert_true(s.seqlen_q <= 4 && s.seqlen_k <= 4);
			if (seed / ATTN_FAMILIES < 25)
				tiny[s.seqlen_q][s.seqlen_k] = true;
			break;
		default:
			break;
		}
	}
	for (f = 0; f < ATTN_FAMILIES; f++)
		assert_true(count[f] > 0);
	for (i = 0; i < 5; i++)
		if (!dim_seen[i])
			fail_msg("head dim %d never drawn", odd_dims[i]);
	for (i = 0; i < 6; i++)
		assert_true(edge_seen[i]);
	/* The first 25 tiny trials sweep seqlens 0..4 x 0..4, the empty ones included. */
	for (i = 0; i < 5; i++)
		for (j = 0; j < 5; j++)
			assert_true(tiny[i][j]);
	for (seed = 0; seed < ATTN_FAMILIES; seed++) {
		struct nw_trial t = run(&attention_fwd_check, NW_F32, seed, -1);

		assert_int_equal(t.family, (int)seed);
		assert_int_equal(t.ndim, 5);
		assert_int_equal(t.nparams, 1 + (seed == ATTN_EXTREME));
	}
}

/* ---- the correct library --------------------------------------------------------------------- */

static void expect_all_pass(const struct nw_check *c, uint64_t first, uint64_t count)
{
	size_t i;
	unsigned k;
	uint64_t seed;

	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
		for (seed = first; seed < first + count; seed++) {
			struct nw_trial t = run(c, all_dtypes[i], seed, -1);

			for (k = 0; k < t.ntensors; k++)
				if (nw_tensor_failed(&t.tensors[k]))
					fail_msg(
					    "%s %s seed %llu shape [%ld,%ld,%ld,%ld,%ld] (%s): %s ratio %g, "
					    "mismatch %ld, unwritten %ld, canary %ld",
					    c->name, nw_dtype_name(all_dtypes[i]), (unsigned long long)seed,
					    t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.shape[4],
					    c->families[t.family], t.tensors[k].name, t.tensors[k].ratio,
					    t.tensors[k].mismatch, t.tensors[k].unwritten,
					    t.tensors[k].canary);
		}
}

static void test_correct_library_passes_every_family(void **state)
{
	(void)state;
	/* 2 trials of each family, per dtype (the false-alarm sweep in README.md runs 2000). */
	expect_all_pass(&attention_fwd_check, 0, 16);
	expect_all_pass(&attention_bwd_check, 0, 16);
}

/* Rows that see no key: O = 0 and LSE = -inf in reference and kernel alike; gradients 0. */
static void test_fully_masked_rows(void **state)
{
	uint64_t seed = ATTN_MASKED_ROWS;
	struct nw_trial f = run(&attention_fwd_check, NW_BF16, seed, -1);
	struct nw_trial b = run(&attention_bwd_check, NW_BF16, seed, -1);
	long masked = f.shape[0] * f.shape[1] * (f.shape[2] - f.shape[3]);

	(void)state;
	assert_true(masked > 0);
	assert_int_equal(f.tensors[1].ref_nonfinite, masked);
	assert_int_equal(f.tensors[1].nonfinite, masked);
	assert_false(nw_trial_failed(&f));
	assert_false(nw_trial_failed(&b));
	/* seqlen_k 0 with seqlen_q 1 (tiny, index 1): every row masked. */
	{
		struct nw_trial t = run(&attention_fwd_check, NW_F32, ATTN_TINY + ATTN_FAMILIES, -1);

		assert_int_equal(t.shape[3], 0);
		assert_int_equal(t.tensors[1].nonfinite, t.shape[2]);
		assert_false(nw_trial_failed(&t));
	}
	/* A kernel that answers such rows with NaN, as a plain softmax does, fails. */
	{
		struct nw_check c = with_kernels(&attention_fwd_check, &nan_rows);
		struct nw_trial t = run(&c, NW_BF16, seed, -1);

		assert_true(nw_trial_failed(&t));
		assert_true(t.tensors[0].mismatch > 0);
	}
}

/* ---- planted bugs ------------------------------------------------------------------------------ */

/* Whether a seed's case is small (the planted bugs need no large case, and the tests run under ASan too). */
static bool cheap(uint64_t seed)
{
	struct attn_dims s;

	attention_case((int)(seed % ATTN_FAMILIES), seed, seed / ATTN_FAMILIES, &s);
	return (long)s.batch * s.heads * s.seqlen_q * s.seqlen_k * s.head_dim <= (1L << 17);
}

/* Each planted bug, in each output, is caught there and nowhere else. */
static void expect_caught(const struct nw_check *base, int ntargets, int kind,
			  bool (*check)(const struct nw_tensor_result *))
{
	struct nw_check c = with_kernels(base, &planted);
	size_t i;

	plant = kind;
	for (target = 0; target < ntargets; target++)
		for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++) {
			uint64_t seed;
			int ran = 0;

			for (seed = 0; ran < 2; seed++) {
				struct nw_trial t;
				unsigned k;

				if (!cheap(seed))
					continue;
				t = run(&c, all_dtypes[i], seed, -1);

				/* Outputs that are empty, or all 0 or -inf by definition, have nothing to plant in. */
				if (t.tensors[target].ref_nonfinite ||
				    t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3] * t.shape[4] == 0)
					continue;
				/* Extreme cases' budgets can exceed a planted quarter: leave them to NaNs and such. */
				if (kind == PLANT_VALUE && t.family == ATTN_EXTREME)
					continue;
				ran++;
				if (!check(&t.tensors[target]))
					fail_msg("%s: planted bug %d in %s not caught: %s seed %llu (ratio "
						 "%g, mismatch "
						 "%ld, unwritten %ld, canary %ld)",
						 c.name, kind, t.tensors[target].name,
						 nw_dtype_name(all_dtypes[i]), (unsigned long long)seed,
						 t.tensors[target].ratio, t.tensors[target].mismatch,
						 t.tensors[target].unwritten, t.tensors[target].canary);
				for (k = 0; k < t.ntensors; k++)
					if ((int)k != target && nw_tensor_failed(&t.tensors[k]))
						fail_msg("%s: a bug in %s blamed on %s", c.name,
							 t.tensors[target].name, t.tensors[k].name);
			}
		}
}

static void test_planted_wrong_value_is_caught(void **state)
{
	(void)state;
	expect_caught(&attention_fwd_check, 2, PLANT_VALUE, ratio_over_one);
	expect_caught(&attention_bwd_check, 3, PLANT_VALUE, ratio_over_one);
}

static void test_planted_nan_is_caught(void **state)
{
	(void)state;
	expect_caught(&attention_fwd_check, 2, PLANT_NAN, nonfinite_mismatch);
	expect_caught(&attention_bwd_check, 3, PLANT_NAN, nonfinite_mismatch);
}

static void test_planted_unwritten_element_is_caught(void **state)
{
	(void)state;
	expect_caught(&attention_fwd_check, 2, PLANT_UNWRITTEN, one_unwritten);
	expect_caught(&attention_bwd_check, 3, PLANT_UNWRITTEN, one_unwritten);
}

static void test_planted_overrun_is_caught(void **state)
{
	(void)state;
	expect_caught(&attention_fwd_check, 2, PLANT_OVERRUN, canary_broken);
	expect_caught(&attention_bwd_check, 3, PLANT_OVERRUN, canary_broken);
}

/*
 * flash-dmattn's bug: dV of the partial last key tile is NaN in bf16. Every
 * bf16 trial with such a tile fails in dV alone, with the worst element in the
 * tail tile; dQ and dK pass, f32 and f16 pass, and the tail family finds it at
 * once.
 */
static void test_dv_tail_tile_bug_is_found_in_dv_only(void **state)
{
	struct nw_check c = with_kernels(&attention_bwd_check, &dv_tail);
	int fails = 0;
	uint64_t seed, first = UINT64_MAX;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
		for (seed = 0; seed < 16; seed++) {
			struct nw_trial t = run(&c, all_dtypes[i], seed, -1);
			bool bug = all_dtypes[i] == NW_BF16 && t.shape[3] % ATTN_TILE != 0 &&
				   t.shape[0] * t.shape[1] > 0;

			if (nw_trial_failed(&t) != bug)
				fail_msg("%s seed %llu seqlen_k %ld: %s", nw_dtype_name(all_dtypes[i]),
					 (unsigned long long)seed, t.shape[3],
					 bug ? "the bug was missed" : "a correct case failed");
			if (!bug)
				continue;
			fails++;
			if (first == UINT64_MAX)
				first = seed;
			assert_false(nw_tensor_failed(&t.tensors[0])); /* dq */
			assert_false(nw_tensor_failed(&t.tensors[1])); /* dk */
			assert_true(t.tensors[2].mismatch > 0);        /* dv */
			assert_true(t.tensors[2].tail);
		}
	print_message("dV tail-tile bug: first seen at seed %llu, %d of 16 bf16 seeds fail\n",
		      (unsigned long long)first, fails);
	assert_true(first <= ATTN_TAIL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_seeds_cover_every_family),
	    cmocka_unit_test(test_correct_library_passes_every_family),
	    cmocka_unit_test(test_fully_masked_rows),
	    cmocka_unit_test(test_planted_wrong_value_is_caught),
	    cmocka_unit_test(test_planted_nan_is_caught),
	    cmocka_unit_test(test_planted_unwritten_element_is_caught),
	    cmocka_unit_test(test_planted_overrun_is_caught),
	    cmocka_unit_test(test_dv_tail_tile_bug_is_found_in_dv_only),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
