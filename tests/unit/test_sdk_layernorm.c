/*
 * Unit tests of the layernorm checks (kernels/checks/layernorm.c) against the
 * host build of the bundled demo library, and against planted bugs: a wrong
 * value, a NaN, an element never written, a write past the end, in each
 * output tensor apart, and a one-pass variance (E[x^2] - E[x]^2) that only
 * rows with a large offset expose.
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
#include "layernorm.h"
#include "numwatch_check.h"
#include "sdk_harness.h"

static enum dl_dtype dl_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static int real_fwd(enum nw_dtype d, const void *x, const void *gamma, const void *beta, void *y, float *mean,
		    float *rstd, int rows, int cols, float eps)
{
	return dl_layernorm_fwd(dl_of(d), x, gamma, beta, y, mean, rstd, rows, cols, eps);
}

static int real_bwd(enum nw_dtype d, const void *x, const void *gamma, const float *mean, const float *rstd,
		    const void *dy, void *dx, void *dgamma, void *dbeta, int rows, int cols)
{
	return dl_layernorm_bwd(dl_of(d), x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
}

/* ---- planted bugs ------------------------------------------------------------------------ */

/* Which output a planted bug hits: fwd y, mean, rstd; bwd dx, dgamma, dbeta. */
static int target;
enum { PLANT_VALUE, PLANT_NAN, PLANT_UNWRITTEN, PLANT_OVERRUN };
static int plant;

/* Applies the planted bug to buffer buf of n elements (dtype d); 'before' holds what the SDK armed. */
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
	case PLANT_VALUE: /* the largest element, a quarter off */
	{
		size_t best = 0;
		float bv = -1.0f;

		for (i = 0; i < n; i++)
			if (isfinite(nw_load(d, buf, i)) && fabsf(nw_load(d, buf, i)) > bv) {
				bv = fabsf(nw_load(d, buf, i));
				best = i;
			}
		nw_store(d, buf, best, off_by_a_quarter(nw_load(d, buf, best)));
	} break;
	case PLANT_NAN:
		for (i = 0; i < n; i++)
			if (isfinite(nw_load(d, buf, i))) {
				nw_store(d, buf, i, NAN);
				return;
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

static int planted_fwd(enum nw_dtype d, const void *x, const void *gamma, const void *beta, void *y,
		       float *mean, float *rstd, int rows, int cols, float eps)
{
	size_t n = (size_t)rows * (size_t)cols;
	void *before;
	int rc;

	/* Invalid shapes go straight to the library, which must refuse them. */
	if (rows < 0 || cols < 0)
		return real_fwd(d, x, gamma, beta, y, mean, rstd, rows, cols, eps);
	before = malloc((n + (size_t)rows) * 4 + 4);
	if (!before)
		return -12;
	/* The poison the SDK armed, to put back where the kernel "forgot" to write. */
	if (target == 0)
		memcpy(before, y, n * nw_dtype_size(d));
	else
		memcpy(before, target == 1 ? mean : rstd, (size_t)rows * 4);
	rc = real_fwd(d, x, gamma, beta, y, mean, rstd, rows, cols, eps);
	if (target == 0)
		apply(d, y, n, before);
	else
		apply(NW_F32, target == 1 ? (void *)mean : (void *)rstd, (size_t)rows, before);
	free(before);
	return rc;
}

static int planted_bwd(enum nw_dtype d, const void *x, const void *gamma, const float *mean,
		       const float *rstd, const void *dy, void *dx, void *dgamma, void *dbeta, int rows,
		       int cols)
{
	size_t n = target == 0 ? (size_t)rows * (size_t)cols : (size_t)cols;
	void *out = target == 0 ? dx : target == 1 ? dgamma : dbeta;
	void *before = malloc(n * 4 + 4);
	int rc;

	if (!before)
		return -12;
	memcpy(before, out, n * nw_dtype_size(d));
	rc = real_bwd(d, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
	apply(d, out, n, before);
	free(before);
	return rc;
}

/* A one-pass variance: mean(x^2) - mean(x)^2, which cancels catastrophically on offset rows. */
static int one_pass_fwd(enum nw_dtype d, const void *x, const void *gamma, const void *beta, void *y,
			float *mean, float *rstd, int rows, int cols, float eps)
{
	int r, j;

	for (r = 0; r < rows; r++) {
		float s = 0.0f, s2 = 0.0f, m, var;

		for (j = 0; j < cols; j++) {
			float v = nw_load(d, x, (size_t)r * cols + j);

			s += v;
			s2 += v * v;
		}
		m = s / (float)cols;
		var = fmaxf(s2 / (float)cols - m * m, 0.0f);
		mean[r] = m;
		rstd[r] = 1.0f / sqrtf(var + eps);
		for (j = 0; j < cols; j++) {
			size_t i = (size_t)r * cols + j;

			nw_store(d, y, i,
				 (nw_load(d, x, i) - m) * rstd[r] * nw_load(d, gamma, (size_t)j) +
				     nw_load(d, beta, (size_t)j));
		}
	}
	return 0;
}

static const struct layernorm_kernels planted = {"planted_fwd", "planted_bwd", planted_fwd, planted_bwd,
						 NULL};
static const struct layernorm_kernels one_pass = {"one_pass_fwd", "real_bwd", one_pass_fwd, real_bwd, NULL};

/* ---- families and shapes --------------------------------------------------------------------- */

static void test_seeds_cover_every_family(void **state)
{
	static const long thresholds[] = {127, 128, 129, 1023, 1024, 1025, 4095, 4096, 4097};
	bool seen_threshold[sizeof(thresholds) / sizeof(thresholds[0])] = {false}, tiny[17] = {false};
	bool empty_rows = false;
	int count[LN_FAMILIES] = {0};
	uint64_t seed;
	size_t k;
	int f;

	(void)state;
	assert_int_equal(layernorm_fwd_check.nfamilies, LN_FAMILIES);
	assert_int_equal(layernorm_bwd_check.nfamilies, LN_FAMILIES);
	for (seed = 0; seed < 5000; seed++) {
		int fam = (int)(seed % LN_FAMILIES);
		long rows, cols, rows2, cols2;

		count[fam]++;
		layernorm_shape(fam, seed, seed / LN_FAMILIES, &rows, &cols);
		layernorm_shape(fam, seed, seed / LN_FAMILIES, &rows2, &cols2);
		assert_int_equal(rows, rows2);
		assert_int_equal(cols, cols2);
		assert_true(rows * cols <= LAYERNORM_MAX_ELEMS || rows <= 2);
		switch (fam) {
		case LN_ALIGNED:
			assert_true(cols > 0 && cols % 4 == 0);
			break;
		case LN_TAIL:
			assert_true(cols % 4 != 0);
			break;
		case LN_THRESHOLD:
			for (k = 0; k < sizeof(thresholds) / sizeof(thresholds[0]); k++)
				seen_threshold[k] |= cols == thresholds[k];
			break;
		case LN_TINY:
			assert_true(cols <= 16);
			if (seed / LN_FAMILIES < 17)
				tiny[cols] = true;
			empty_rows |= rows == 0;
			break;
		default:
			assert_true(rows >= 2);
			break;
		}
	}
	for (f = 0; f < LN_FAMILIES; f++)
		assert_true(count[f] > 0);
	for (k = 0; k < 17; k++)
		assert_true(tiny[k]);
	for (k = 0; k < sizeof(seen_threshold); k++)
		if (!seen_threshold[k])
			fail_msg("threshold width %ld never drawn", thresholds[k]);
	assert_true(empty_rows);
	/* Through the runner: consecutive seeds walk the families, and name them. */
	for (seed = 0; seed < 2 * LN_FAMILIES; seed++) {
		struct nw_trial t = run(&layernorm_bwd_check, NW_F32, seed, -1);

		assert_int_equal(t.family, (int)(seed % LN_FAMILIES));
		assert_int_equal(t.ntensors, 3);
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
					fail_msg("%s %s seed %llu shape [%ld,%ld] (%s): %s ratio %g, "
						 "mismatch %ld, "
						 "unwritten %ld, canary %ld",
						 c->name, nw_dtype_name(all_dtypes[i]),
						 (unsigned long long)seed, t.shape[0], t.shape[1],
						 c->families[t.family], t.tensors[k].name, t.tensors[k].ratio,
						 t.tensors[k].mismatch, t.tensors[k].unwritten,
						 t.tensors[k].canary);
		}
}

static void test_correct_library_passes_every_family(void **state)
{
	(void)state;
	/* 5 trials of each family, per dtype (the false-alarm sweep in README.md runs 2000). */
	expect_all_pass(&layernorm_fwd_check, 25);
	expect_all_pass(&layernorm_bwd_check, 25);
}

static void test_empty_rows_give_nan_statistics(void **state)
{
	/* tiny family, index 0: zero columns; the mean of nothing is NaN in both. */
	struct nw_trial t = run(&layernorm_fwd_check, NW_F32, LN_TINY, -1);

	(void)state;
	assert_int_equal(t.shape[1], 0);
	assert_false(nw_trial_failed(&t));
	assert_int_equal(t.tensors[1].ref_nonfinite, t.shape[0]);
	assert_int_equal(t.tensors[1].nonfinite, t.shape[0]);
}

/* ---- planted bugs ------------------------------------------------------------------------------ */

/* Each planted bug, in each tensor, is caught in that tensor and no other. */
static void expect_caught(const struct nw_check *base, int kind,
			  bool (*check)(const struct nw_tensor_result *))
{
	struct nw_check c = with_kernels(base, &planted);
	size_t i;

	plant = kind;
	for (target = 0; target < 3; target++)
		for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++) {
			uint64_t seed;
			int ran = 0;

			for (seed = 0; ran < 3; seed++) {
				struct nw_trial t = run(&c, all_dtypes[i], seed, -1);
				unsigned k;

				/* Skip empty outputs, and empty rows' NaN statistics. */
				if (t.shape[0] == 0 || t.shape[1] == 0 || t.tensors[target].ref_nonfinite)
					continue;
				/* Extreme cases' budgets can exceed a planted quarter: leave them to NaNs and such. */
				if (kind == PLANT_VALUE && t.family == LN_EXTREME)
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
	expect_caught(&layernorm_fwd_check, PLANT_VALUE, ratio_over_one);
	expect_caught(&layernorm_bwd_check, PLANT_VALUE, ratio_over_one);
}

static void test_planted_nan_is_caught(void **state)
{
	(void)state;
	expect_caught(&layernorm_fwd_check, PLANT_NAN, nonfinite_mismatch);
	expect_caught(&layernorm_bwd_check, PLANT_NAN, nonfinite_mismatch);
}

static void test_planted_unwritten_element_is_caught(void **state)
{
	(void)state;
	expect_caught(&layernorm_fwd_check, PLANT_UNWRITTEN, one_unwritten);
	expect_caught(&layernorm_bwd_check, PLANT_UNWRITTEN, one_unwritten);
}

static void test_planted_overrun_is_caught(void **state)
{
	(void)state;
	expect_caught(&layernorm_fwd_check, PLANT_OVERRUN, canary_broken);
	expect_caught(&layernorm_bwd_check, PLANT_OVERRUN, canary_broken);
}

/* The one-pass variance cancels: it fails the extreme family's rows at 1e3 and 1e4. */
static void test_one_pass_variance_is_caught_on_offset_rows(void **state)
{
	struct nw_check c = with_kernels(&layernorm_fwd_check, &one_pass);
	int caught = 0;
	uint64_t seed;

	(void)state;
	for (seed = LN_EXTREME; seed < 200; seed += LN_FAMILIES) {
		struct nw_trial t = run(&c, NW_F32, seed, -1);

		caught += nw_trial_failed(&t) ? 1 : 0;
	}
	print_message("one-pass variance: %d of 40 extreme trials fail\n", caught);
	assert_true(caught >= 30);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_seeds_cover_every_family),
	    cmocka_unit_test(test_correct_library_passes_every_family),
	    cmocka_unit_test(test_empty_rows_give_nan_statistics),
	    cmocka_unit_test(test_planted_wrong_value_is_caught),
	    cmocka_unit_test(test_planted_nan_is_caught),
	    cmocka_unit_test(test_planted_unwritten_element_is_caught),
	    cmocka_unit_test(test_planted_overrun_is_caught),
	    cmocka_unit_test(test_one_pass_variance_is_caught_on_offset_rows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
