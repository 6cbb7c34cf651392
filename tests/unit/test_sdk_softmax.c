/*
 * Unit tests of the softmax checks (kernels/checks/softmax.c) against the
 * host build of the bundled demo library, and against planted bugs: a wrong
 * value, a NaN, an element never written, a write past the end, and the
 * PyTorch-style bug that is wrong only when cols > 1024 and cols % 4 != 0.
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
#include "numwatch_check.h"
#include "sdk_harness.h"
#include "softmax.h"

static enum dl_dtype dl_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static int real_fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	return dl_softmax_fwd(dl_of(d), x, y, rows, cols);
}

static int real_bwd(enum nw_dtype d, const void *y, const void *dy, void *dx, int rows, int cols)
{
	return dl_softmax_bwd(dl_of(d), y, dy, dx, rows, cols);
}

/* Commit 4 of the demo history: rows longer than 1024 lose their cols % 4 tail. */
static bool bug_shape(int cols)
{
	return cols > 1024 && cols % 4 != 0;
}

static int tail_bug_fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	size_t es = nw_dtype_size(d);
	int r;

	if (!bug_shape(cols))
		return real_fwd(d, x, y, rows, cols);
	/* Max, sum and store over whole quads only; the tail is never written. */
	for (r = 0; r < rows; r++) {
		size_t off = (size_t)r * (size_t)cols * es;

		real_fwd(d, (const char *)x + off, (char *)y + off, 1, cols - cols % 4);
	}
	return 0;
}

static int tail_bug_bwd(enum nw_dtype d, const void *y, const void *dy, void *dx, int rows, int cols)
{
	size_t es = nw_dtype_size(d);
	int r;

	if (!bug_shape(cols))
		return real_bwd(d, y, dy, dx, rows, cols);
	for (r = 0; r < rows; r++) {
		size_t off = (size_t)r * (size_t)cols * es;

		real_bwd(d, (const char *)y + off, (const char *)dy + off, (char *)dx + off, 1,
			 cols - cols % 4);
	}
	return 0;
}

/* The first finite output element: rows of -inf legitimately give NaN. */
static long first_finite(enum nw_dtype d, const void *y, int rows, int cols)
{
	long i;

	for (i = 0; i < (long)rows * cols; i++)
		if (isfinite(nw_load(d, y, (size_t)i)))
			return i;
	return -1;
}

/* Right everywhere but one element, off by 0.05 (softmax values are at most 1). */
static int off_by_some_fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	long i;

	real_fwd(d, x, y, rows, cols);
	i = first_finite(d, y, rows, cols);
	if (i >= 0)
		nw_store(d, y, (size_t)i, nw_load(d, y, (size_t)i) + 0.05f);
	return 0;
}

static int nan_fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	long i;

	real_fwd(d, x, y, rows, cols);
	i = first_finite(d, y, rows, cols);
	if (i >= 0)
		nw_store(d, y, (size_t)i, NAN);
	return 0;
}

/* Computes everything but never stores the last element (a missing bounds case). */
static int unwritten_fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	size_t n = (size_t)rows * (size_t)cols, es = nw_dtype_size(d);
	void *tmp = malloc(n * es + 1);

	if (!tmp)
		return -12;
	real_fwd(d, x, tmp, rows, cols);
	if (n > 0)
		memcpy(y, tmp, (n - 1) * es);
	free(tmp);
	return 0;
}

/* Right values, plus one store past the end of the output. */
static int overrun_fwd(enum nw_dtype d, const void *x, void *y, int rows, int cols)
{
	size_t n = (size_t)rows * (size_t)cols;

	real_fwd(d, x, y, rows, cols);
	nw_store(d, y, n, 0.5f);
	return 0;
}

static const struct softmax_kernels tail_bug = {"tail_bug_fwd", "tail_bug_bwd", tail_bug_fwd, tail_bug_bwd,
						NULL};
static const struct softmax_kernels off_by_some = {"off_by_some_fwd", "real_bwd", off_by_some_fwd, real_bwd,
						   NULL};
static const struct softmax_kernels nan_kernel = {"nan_fwd", "real_bwd", nan_fwd, real_bwd, NULL};
static const struct softmax_kernels unwritten = {"unwritten_fwd", "real_bwd", unwritten_fwd, real_bwd, NULL};
static const struct softmax_kernels overrun = {"overrun_fwd", "real_bwd", overrun_fwd, real_bwd, NULL};

/* ---- families and shapes ------------------------------------------------------- */

static void test_family_comes_from_the_seed(void **state)
{
	int count[SOFTMAX_FAMILIES] = {0};
	uint64_t seed;
	int f;

	(void)state;
	assert_int_equal(softmax_fwd_check.nfamilies, SOFTMAX_FAMILIES);
	/* Consecutive seeds walk through the families. */
	for (seed = 0; seed < 50; seed++) {
		struct nw_trial t = run(&softmax_fwd_check, NW_F32, seed, -1);

		assert_int_equal(t.family, (int)(seed % SOFTMAX_FAMILIES));
		assert_int_equal(t.index, seed / SOFTMAX_FAMILIES);
		count[t.family]++;
	}
	for (f = 0; f < SOFTMAX_FAMILIES; f++)
		assert_int_equal(count[f], 10);

	/* A named family overrides the seed's. */
	{
		struct nw_trial t = run(&softmax_fwd_check, NW_F32, 0, SOFTMAX_TAIL);

		assert_int_equal(t.family, SOFTMAX_TAIL);
		assert_true(t.shape[1] % 4 != 0);
	}
}

static void test_shapes_are_deterministic_and_fit_their_family(void **state)
{
	static const long thresholds[] = {1023, 1024, 1025, 2047, 2048, 2049, 4095,
					  4096, 4097, 63,   65,   127,  129};
	bool tiny_seen[17] = {false}, threshold_seen[sizeof(thresholds) / sizeof(thresholds[0])] = {false};
	bool bug_in_tail = false, aligned_wide = false;
	uint64_t seed;
	size_t k;

	(void)state;
	for (seed = 0; seed < 5000; seed++) {
		int fam = (int)(seed % SOFTMAX_FAMILIES);
		long rows, cols, rows2, cols2;

		softmax_shape(fam, seed, seed / SOFTMAX_FAMILIES, &rows, &cols);
		softmax_shape(fam, seed, seed / SOFTMAX_FAMILIES, &rows2, &cols2);
		assert_int_equal(rows, rows2);
		assert_int_equal(cols, cols2);
		assert_true(rows >= 0 && cols >= 0);
		assert_true(rows * cols <= SOFTMAX_MAX_ELEMS || rows == 1);
		switch (fam) {
		case SOFTMAX_ALIGNED:
			assert_true(cols > 0 && cols % 4 == 0);
			aligned_wide |= cols > 1024;
			break;
		case SOFTMAX_TAIL:
			assert_true(cols % 4 != 0);
			bug_in_tail |= cols > 1024;
			break;
		case SOFTMAX_THRESHOLD:
			for (k = 0; k < sizeof(thresholds) / sizeof(thresholds[0]); k++)
				threshold_seen[k] |= cols == thresholds[k];
			break;
		case SOFTMAX_TINY:
			assert_true(cols <= 16 && rows >= 1);
			/* The first 17 tiny trials sweep every width once. */
			if (seed / SOFTMAX_FAMILIES < 17)
				tiny_seen[cols] = true;
			break;
		default:
			assert_true(rows >= 2);
			break;
		}
	}
	for (k = 0; k < 17; k++)
		assert_true(tiny_seen[k]);
	for (k = 0; k < sizeof(thresholds) / sizeof(thresholds[0]); k++)
		if (!threshold_seen[k])
			fail_msg("threshold width %ld never drawn", thresholds[k]);
	assert_true(bug_in_tail && aligned_wide);
}

/* ---- the correct library ------------------------------------------------------- */

static void expect_all_pass(const struct nw_check *c, uint64_t first, uint64_t count)
{
	size_t i;
	uint64_t seed;

	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++)
		for (seed = first; seed < first + count; seed++) {
			struct nw_trial t = run(c, all_dtypes[i], seed, -1);

			if (nw_trial_failed(&t))
				fail_msg("%s %s seed %llu shape [%ld,%ld] (%s): ratio %g, mismatch %ld, "
					 "unwritten %ld, "
					 "canary %ld",
					 c->name, nw_dtype_name(all_dtypes[i]), (unsigned long long)seed,
					 t.shape[0], t.shape[1], c->families[t.family], t.tensors[0].ratio,
					 t.tensors[0].mismatch, t.tensors[0].unwritten, t.tensors[0].canary);
			assert_int_equal(t.ntensors, 1);
		}
}

static void test_correct_library_passes_every_family(void **state)
{
	(void)state;
	/* 40 trials of each family, per dtype. */
	expect_all_pass(&softmax_fwd_check, 0, 200);
	expect_all_pass(&softmax_bwd_check, 0, 200);
}

static void test_rows_of_neg_inf_are_nan_in_both(void **state)
{
	uint64_t seed;
	int seen = 0;

	(void)state;
	/* The extreme family draws rows of -inf; the reference says NaN, and so must the kernel. */
	for (seed = SOFTMAX_EXTREME; seed < 2000 && seen < 3; seed += SOFTMAX_FAMILIES) {
		struct nw_trial t = run(&softmax_fwd_check, NW_BF16, seed, -1);

		if (t.tensors[0].ref_nonfinite == 0)
			continue;
		seen++;
		assert_int_equal(t.tensors[0].nonfinite, t.tensors[0].ref_nonfinite);
		assert_int_equal(t.tensors[0].mismatch, 0);
		assert_false(nw_trial_failed(&t));
	}
	assert_true(seen == 3);
}

static void test_repeats_give_one_digest(void **state)
{
	struct nw_trial t = {.dtype = NW_F16, .seed = 11, .family = -1, .repeats = 5};
	struct nw_trial u = {.dtype = NW_F16, .seed = 11, .family = -1, .repeats = 1};

	(void)state;
	assert_int_equal(nw_trial_run(&softmax_bwd_check, &t), 0);
	assert_int_equal(nw_trial_run(&softmax_bwd_check, &u), 0);
	assert_int_equal(t.digests_differ, 0);
	assert_true(t.digest == u.digest);
}

/* ---- planted bugs ----------------------------------------------------------------- */

/* Runs seeds 0.. until 'want' non-empty trials per dtype have run; each must fail. */
static void expect_caught(const struct softmax_kernels *k, const char *what, int want,
			  bool (*check)(const struct nw_tensor_result *))
{
	struct nw_check c = with_kernels(&softmax_fwd_check, k);
	size_t i;

	for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++) {
		uint64_t seed;
		int ran = 0;

		for (seed = 0; ran < want; seed++) {
			struct nw_trial t = run(&c, all_dtypes[i], seed, -1);

			if (t.shape[0] * t.shape[1] == 0)
				continue;
			ran++;
			if (!nw_trial_failed(&t) || !check(&t.tensors[0]))
				fail_msg("%s not caught: %s seed %llu shape [%ld,%ld]", what,
					 nw_dtype_name(all_dtypes[i]), (unsigned long long)seed, t.shape[0],
					 t.shape[1]);
		}
	}
}

static void test_planted_wrong_value_is_caught(void **state)
{
	(void)state;
	expect_caught(&off_by_some, "an element off by 0.05", 25, ratio_over_one);
}

static void test_planted_nan_is_caught(void **state)
{
	(void)state;
	expect_caught(&nan_kernel, "a NaN where the reference is finite", 25, nonfinite_mismatch);
}

static void test_planted_unwritten_element_is_caught(void **state)
{
	(void)state;
	expect_caught(&unwritten, "an element never written", 25, one_unwritten);
}

static void test_planted_overrun_is_caught(void **state)
{
	(void)state;
	expect_caught(&overrun, "a store past the end", 25, canary_broken);
}

/* The rare-shape bug: found within 64 seeds at every dtype, and never blamed on another shape. */
static void test_tail_bug_is_found_within_64_seeds(void **state)
{
	const struct nw_check *checks[] = {&softmax_fwd_check, &softmax_bwd_check};
	size_t i, j;

	(void)state;
	for (j = 0; j < 2; j++) {
		struct nw_check c = with_kernels(checks[j], &tail_bug);

		for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++) {
			uint64_t seed, first = UINT64_MAX;
			int fails = 0;

			for (seed = 0; seed < 64; seed++) {
				struct nw_trial t = run(&c, all_dtypes[i], seed, -1);
				bool bug = t.shape[0] > 0 && bug_shape((int)t.shape[1]);

				if (nw_trial_failed(&t) != bug)
					fail_msg("%s %s seed %llu shape [%ld,%ld]: %s", c.name,
						 nw_dtype_name(all_dtypes[i]), (unsigned long long)seed,
						 t.shape[0], t.shape[1],
						 bug ? "bug shape passed" : "correct shape failed");
				if (!bug)
					continue;
				fails++;
				if (first == UINT64_MAX)
					first = seed;
				/* The tail is what goes wrong, and the report says so. */
				assert_true(t.tensors[0].unwritten > 0);
				assert_true(t.tensors[0].tail);
			}
			if (fails == 0)
				fail_msg("%s %s: the tail bug was not found in 64 seeds", c.name,
					 nw_dtype_name(all_dtypes[i]));
			print_message("%s %s: tail bug first seen at seed %llu, %d of 64 seeds fail\n",
				      c.name, nw_dtype_name(all_dtypes[i]), (unsigned long long)first, fails);
		}
	}
}

/*
 * The case digest is the inputs' identity: a library with a bug answers
 * differently on the same inputs, so its cases keep their digests (the
 * daemon pairs the seeds of two commits by them).
 */
static void test_case_digest_does_not_depend_on_the_library(void **state)
{
	const struct nw_check *checks[] = {&softmax_fwd_check, &softmax_bwd_check};
	size_t i, j;
	int failed = 0;

	(void)state;
	for (j = 0; j < 2; j++) {
		struct nw_check c = with_kernels(checks[j], &tail_bug);

		for (i = 0; i < sizeof(all_dtypes) / sizeof(all_dtypes[0]); i++) {
			uint64_t seed;

			for (seed = 0; seed < 64; seed++) {
				struct nw_trial good = run(checks[j], all_dtypes[i], seed, -1);
				struct nw_trial bad = run(&c, all_dtypes[i], seed, -1);

				failed += nw_trial_failed(&bad) && !nw_trial_failed(&good);
				if (good.case_digest != bad.case_digest)
					fail_msg(
					    "%s %s seed %llu: case digest %016llx with the library's bug, "
					    "%016llx without",
					    c.name, nw_dtype_name(all_dtypes[i]), (unsigned long long)seed,
					    (unsigned long long)bad.case_digest,
					    (unsigned long long)good.case_digest);
			}
		}
	}
	/* Not vacuous: the bug changed some verdicts. */
	assert_true(failed > 0);
}

/*
 * Trials prepared ahead (sdk/prepare.c; this test runs with
 * NW_PREPARE_AHEAD=1) belong to a check, not to the address of its struct:
 * a caller that rewrites one struct with another check between trials (as
 * tests/gpu/gpu_refs does with its twins) gets every answer as if nothing
 * had been prepared.
 */
static void test_prepared_ahead_follows_the_check_not_its_address(void **state)
{
	uint64_t seed;

	(void)state;
	for (seed = 0; seed < 24; seed++) {
		const struct nw_check *orig = seed % 2 ? &softmax_bwd_check : &softmax_fwd_check;
		struct nw_check twin = *orig;
		struct nw_trial a = run(&twin, NW_F32, seed, -1), b;

		twin = softmax_fwd_check; /* rewritten while the worker may still read it */
		b = run(orig, NW_F32, seed, -1);
		assert_false(a.error);
		assert_int_equal(a.case_digest, b.case_digest);
		assert_int_equal(a.digest, b.digest);
		assert_true(a.tensors[0].ratio == b.tensors[0].ratio);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_family_comes_from_the_seed),
	    cmocka_unit_test(test_shapes_are_deterministic_and_fit_their_family),
	    cmocka_unit_test(test_correct_library_passes_every_family),
	    cmocka_unit_test(test_rows_of_neg_inf_are_nan_in_both),
	    cmocka_unit_test(test_repeats_give_one_digest),
	    cmocka_unit_test(test_planted_wrong_value_is_caught),
	    cmocka_unit_test(test_planted_nan_is_caught),
	    cmocka_unit_test(test_planted_unwritten_element_is_caught),
	    cmocka_unit_test(test_planted_overrun_is_caught),
	    cmocka_unit_test(test_tail_bug_is_found_within_64_seeds),
	    cmocka_unit_test(test_case_digest_does_not_depend_on_the_library),
	    cmocka_unit_test(test_prepared_ahead_follows_the_check_not_its_address),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
