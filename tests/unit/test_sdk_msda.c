/*
 * Unit tests of the msda checks (kernels/checks/msda.c) against the host build
 * of the bundled demo library, and against planted bugs: a wrong value, a
 * NaN, an element never written, a write past the end, in each output apart;
 * and msda-triton's kind of bug, a backward that drops points of small weight,
 * which fails only a few percent of seeds.
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

#include "demolib.h"
#include "msda.h"
#include "numwatch_check.h"
#include "sdk_harness.h"

static enum dl_dtype dl_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static struct dl_msda_shape shape_of(const struct msda_dims *s)
{
	struct dl_msda_shape x = {0};
	int l;

	x.batch = s->batch;
	x.queries = s->queries;
	x.heads = s->heads;
	x.channels = s->channels;
	x.levels = s->levels;
	x.points = s->points;
	for (l = 0; l < MSDA_MAX_LEVELS; l++) {
		x.level_h[l] = s->level_h[l];
		x.level_w[l] = s->level_w[l];
	}
	x.padding = s->padding == MSDA_BORDER ? DL_MSDA_BORDER : DL_MSDA_ZEROS;
	x.align_corners = s->align_corners;
	return x;
}

static long pixels(const struct msda_dims *s)
{
	long S = 0;
	int l;

	for (l = 0; l < s->levels; l++)
		S += (long)s->level_h[l] * s->level_w[l];
	return S;
}

static int real_fwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
		    const void *attn, void *out)
{
	struct dl_msda_shape x = shape_of(s);

	return dl_msda_fwd(dl_of(d), &x, value, loc, attn, out);
}

static int real_bwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
		    const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn)
{
	struct dl_msda_shape x = shape_of(s);

	return dl_msda_bwd(dl_of(d), &x, value, loc, attn, dout, dvalue, dloc, dattn);
}

/* ---- planted bugs ------------------------------------------------------------------------ */

enum { PLANT_VALUE, PLANT_NAN, PLANT_UNWRITTEN, PLANT_OVERRUN };
static int plant, target; /* fwd: 0 out; bwd: 0 dvalue, 1 dloc, 2 dattn */

/* v moved away from 0 by a quarter of itself and a quarter. */
static float off_by_a_quarter(float v)
{
	return v + copysignf(0.25f * fabsf(v) + 0.25f, v);
}

static void apply(enum nw_dtype d, void *buf, size_t n, const void *before)
{
	size_t es = nw_dtype_size(d), i, best = 0;
	float bv = -1.0f;

	if (n == 0)
		return;
	switch (plant) {
	case PLANT_VALUE: /* every element off by a quarter (some may be excluded as kinks) */
		for (i = 0; i < n; i++)
			nw_store(d, buf, i, off_by_a_quarter(nw_load(d, buf, i)));
		break;
	case PLANT_NAN:
		for (i = 0; i < n; i++)
			if (fabsf(nw_load(d, buf, i)) > bv) {
				bv = fabsf(nw_load(d, buf, i));
				best = i;
			}
		nw_store(d, buf, best, NAN);
		break;
	case PLANT_UNWRITTEN:
		memcpy((char *)buf + (n - 1) * es, (const char *)before + (n - 1) * es, es);
		break;
	default:
		nw_store(d, buf, n, 0.5f);
		break;
	}
}

static int planted_fwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
		       const void *attn, void *out)
{
	size_t n = (size_t)s->batch * s->queries * s->heads * s->channels;
	void *before = malloc(n * 4 + 4);
	int rc;

	if (!before)
		return -12;
	memcpy(before, out, n * nw_dtype_size(d));
	rc = real_fwd(d, s, value, loc, attn, out);
	apply(d, out, n, before);
	free(before);
	return rc;
}

static int planted_bwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
		       const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn)
{
	size_t npts = (size_t)s->batch * s->queries * s->heads * s->levels * s->points;
	size_t n = target == 0   ? (size_t)s->batch * pixels(s) * s->heads * s->channels
		   : target == 1 ? 2 * npts
				 : npts;
	void *out = target == 0 ? dvalue : target == 1 ? dloc : dattn, *before = malloc(n * 4 + 4);
	int rc;

	if (!before)
		return -12;
	memcpy(before, out, n * nw_dtype_size(d));
	rc = real_bwd(d, s, value, loc, attn, dout, dvalue, dloc, dattn);
	apply(d, out, n, before);
	free(before);
	return rc;
}

/*
 * The demo history's msda bug: the backward skips points whose weight is under
 * 1e-4 (their dvalue and dloc contributions), as if the weight were 0. It is
 * exactly the correct backward run on weights with those points zeroed.
 */
#define SKIP_BELOW 1e-4f

static int skip_small_bwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
			  const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn)
{
	size_t npts = (size_t)s->batch * s->queries * s->heads * s->levels * s->points, i;
	void *a = malloc(npts * 4 + 4);
	int rc;

	if (!a)
		return -12;
	memcpy(a, attn, npts * nw_dtype_size(d));
	for (i = 0; i < npts; i++)
		if (nw_load(d, a, i) < SKIP_BELOW)
			nw_store(d, a, i, 0.0f);
	rc = real_bwd(d, s, value, loc, a, dout, dvalue, dloc, dattn);
	free(a);
	return rc;
}

static const struct msda_kernels planted = {"planted_fwd", "planted_bwd", planted_fwd, planted_bwd, NULL};
static const struct msda_kernels skip_small = {"real_fwd", "skip_small_bwd", real_fwd, skip_small_bwd, NULL};

/* ---- families and shapes --------------------------------------------------------------------- */

static void test_seeds_cover_every_family(void **state)
{
	static const int channels[] = {1, 31, 32, 33, 63, 64, 65, 128};
	bool ch_seen[8] = {false}, one_sized = false, no_queries = false, options[2][2] = {{false}};
	int count[MSDA_FAMILIES] = {0}, f, i;
	uint64_t seed;

	(void)state;
	assert_int_equal(msda_fwd_check.nfamilies, MSDA_FAMILIES);
	assert_false(msda_bwd_check.deterministic);
	assert_true(msda_fwd_check.deterministic);
	for (seed = 0; seed < 4000; seed++) {
		int fam = (int)(seed % MSDA_FAMILIES), l;
		struct msda_dims s, s2;

		msda_case(fam, seed, seed / MSDA_FAMILIES, &s);
		msda_case(fam, seed, seed / MSDA_FAMILIES, &s2);
		assert_memory_equal(&s, &s2, sizeof(s));
		count[fam]++;
		assert_true(s.levels >= 1 && s.levels <= MSDA_MAX_LEVELS && s.channels >= 1 &&
			    s.channels <= 128);
		for (l = 0; l < s.levels; l++)
			assert_true(s.level_h[l] >= 1 && s.level_w[l] >= 1);
		options[s.padding][s.align_corners] = true;
		if (fam == MSDA_CHANNELS)
			for (i = 0; i < 8; i++)
				ch_seen[i] |= s.channels == channels[i];
		if (fam == MSDA_LEVELS) {
			assert_int_equal(s.levels, MSDA_MAX_LEVELS);
			for (l = 0; l < s.levels; l++)
				one_sized |= s.level_h[l] == 1 || s.level_w[l] == 1;
		}
		if (fam == MSDA_TINY)
			no_queries |= s.queries == 0;
	}
	for (f = 0; f < MSDA_FAMILIES; f++)
		assert_true(count[f] > 0);
	for (i = 0; i < 8; i++)
		if (!ch_seen[i])
			fail_msg("channel count %d never drawn", channels[i]);
	assert_true(one_sized && no_queries);
	assert_true(options[0][0] && options[0][1] && options[1][0] && options[1][1]);
	for (seed = 0; seed < MSDA_FAMILIES; seed++) {
		struct nw_trial t = run(&msda_fwd_check, NW_F32, seed, -1);

		assert_int_equal(t.family, (int)seed);
		assert_int_equal(t.ndim, 7);
		assert_true(t.nparams >= 3); /* padding, align_corners, levels */
	}
}

/* ---- the correct library --------------------------------------------------------------------- */

static void expect_all_pass(const struct nw_check *c, uint64_t count)
{
	size_t i;
	unsigned k;
	uint64_t seed;

	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
		for (seed = 0; seed < count; seed++) {
			struct nw_trial t = run(c, all_dtypes[i], seed, -1);

			for (k = 0; k < t.ntensors; k++)
				if (nw_tensor_failed(&t.tensors[k]))
					fail_msg(
					    "%s %s seed %llu (%s): %s ratio %g, mismatch %ld, unwritten %ld, "
					    "canary %ld",
					    c->name, nw_dtype_name(all_dtypes[i]), (unsigned long long)seed,
					    c->families[t.family], t.tensors[k].name, t.tensors[k].ratio,
					    t.tensors[k].mismatch, t.tensors[k].unwritten,
					    t.tensors[k].canary);
		}
}

static void test_correct_library_passes_every_family(void **state)
{
	(void)state;
	/* 3 trials of each family, per dtype (the false-alarm sweep in README.md runs 2000). */
	expect_all_pass(&msda_fwd_check, 21);
	expect_all_pass(&msda_bwd_check, 21);
}

/* Points on pixel centres and edges: their dloc is excluded (a kink), counted, and the rest compared. */
static void test_boundary_points_are_excluded_and_counted(void **state)
{
	long excluded = 0, compared_trials = 0;
	uint64_t seed;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
		for (seed = MSDA_BOUNDARY; seed < 8 * MSDA_FAMILIES; seed += MSDA_FAMILIES) {
			struct nw_trial t = run(&msda_bwd_check, all_dtypes[i], seed, -1);

			assert_int_equal(t.tensors[0].excluded, 0); /* dvalue */
			assert_int_equal(t.tensors[2].excluded, 0); /* dattn */
			excluded += t.tensors[1].excluded;
			compared_trials += t.tensors[1].excluded <
					   2 * t.shape[0] * t.shape[1] * t.shape[2] * t.shape[4] * t.shape[5];
			assert_false(nw_trial_failed(&t));
		}
	print_message("boundary family: %ld dloc elements excluded in 24 trials\n", excluded);
	assert_true(excluded > 24);
	assert_true(compared_trials == 24);
	/* Uniform points are almost never on a kink. */
	{
		struct nw_trial t = run(&msda_bwd_check, NW_F32, MSDA_UNIFORM, -1);

		assert_true(t.tensors[1].excluded <= 1);
	}
}

/* ---- planted bugs ------------------------------------------------------------------------------ */

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

			for (seed = 0; ran < 3; seed++) {
				struct nw_trial t = run(&c, all_dtypes[i], seed, -1);
				unsigned k;

				if (t.shape[1] == 0 || t.shape[3] == 0)
					continue; /* no queries or no channels: nothing to plant in */
				/* Extreme cases' budgets can exceed a planted quarter: leave them to NaNs and such. */
				if (kind == PLANT_VALUE && t.family == MSDA_EXTREME)
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
	expect_caught(&msda_fwd_check, 1, PLANT_VALUE, ratio_over_one);
	expect_caught(&msda_bwd_check, 3, PLANT_VALUE, ratio_over_one);
}

static void test_planted_nan_is_caught(void **state)
{
	(void)state;
	/* The NaN goes to the largest element, which may be an excluded dloc: still caught. */
	expect_caught(&msda_fwd_check, 1, PLANT_NAN, nonfinite_mismatch);
	expect_caught(&msda_bwd_check, 3, PLANT_NAN, nonfinite_mismatch);
}

static void test_planted_unwritten_element_is_caught(void **state)
{
	(void)state;
	expect_caught(&msda_fwd_check, 1, PLANT_UNWRITTEN, one_unwritten);
	expect_caught(&msda_bwd_check, 3, PLANT_UNWRITTEN, one_unwritten);
}

static void test_planted_overrun_is_caught(void **state)
{
	(void)state;
	expect_caught(&msda_fwd_check, 1, PLANT_OVERRUN, canary_broken);
	expect_caught(&msda_bwd_check, 3, PLANT_OVERRUN, canary_broken);
}

/*
 * Skipping points of weight under 1e-4 is invisible in bf16 and f16 and fails
 * f32 on the cases with such weights: the peaked kind of the extreme family,
 * a few percent of all seeds. Other families' weights stay above 1e-3, so
 * only extreme seeds are run.
 */
static void test_skipping_small_weights_fails_a_few_percent_in_f32(void **state)
{
	struct nw_check c = with_kernels(&msda_bwd_check, &skip_small);
	int fails[3] = {0, 0, 0};
	uint64_t seed;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
		for (seed = MSDA_EXTREME; seed < 40 * MSDA_FAMILIES; seed += MSDA_FAMILIES) {
			struct nw_trial t = run(&c, all_dtypes[i], seed, -1);

			if (!nw_trial_failed(&t))
				continue;
			fails[i]++;
			assert_false(
			    nw_tensor_failed(&t.tensors[2])); /* dattn does not depend on the weight */
		}
	print_message(
	    "skipping weights under 1e-4: %d, %d, %d of 40 extreme seeds (of 280) fail in f32, f16, "
	    "bf16\n",
	    fails[0], fails[1], fails[2]);
	assert_true(fails[0] >= 3 && fails[0] <= 28);
	assert_int_equal(fails[1], 0);
	assert_int_equal(fails[2], 0);
	/* The other families' weights stay clear of the threshold: a sample of them passes. */
	for (seed = 0; seed < 2 * MSDA_FAMILIES; seed++) {
		struct nw_trial t;

		if (seed % MSDA_FAMILIES == MSDA_EXTREME)
			continue;
		t = run(&c, NW_F32, seed, -1);
		assert_false(nw_trial_failed(&t));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_seeds_cover_every_family),
	    cmocka_unit_test(test_correct_library_passes_every_family),
	    cmocka_unit_test(test_boundary_points_are_excluded_and_counted),
	    cmocka_unit_test(test_planted_wrong_value_is_caught),
	    cmocka_unit_test(test_planted_nan_is_caught),
	    cmocka_unit_test(test_planted_unwritten_element_is_caught),
	    cmocka_unit_test(test_planted_overrun_is_caught),
	    cmocka_unit_test(test_skipping_small_weights_fails_a_few_percent_in_f32),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
