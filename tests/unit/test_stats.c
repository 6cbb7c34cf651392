/*
 * Unit tests of the statistics module (daemon/stats.c) against known values.
 *
 * Reference values not taken from a textbook were computed with Python 3
 * (no scipy) by independent code: exact rational arithmetic
 * (fractions.Fraction, math.comb) for binomial tails, enumeration of all
 * 2^n sign patterns for the exact Wilcoxon distribution, and
 * statistics.NormalDist for the normal quantile. The script is reproduced
 * next to each value where it is not a one-liner.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "caps.h"
#include "stats.h"

#define P OUTCOME_PASS
#define F OUTCOME_FAIL
#define N OUTCOME_NONE

/* Relative closeness, printing both values when it fails. */
static void near(double got, double want, double rel, const char *what)
{
	double tol = rel * fmax(fabs(want), 1e-300);

	if (!(fabs(got - want) <= tol)) {
		print_error("%s: got %.15g, want %.15g (rel tol %g)\n", what, got, want, rel);
		fail();
	}
}

static void normal_quantile(void **state)
{
	/* statistics.NormalDist().inv_cdf(0.975) = 1.959963984540054 */
	near(stats_z_from_alpha(0.05), 1.959963984540054, 1e-12, "z(0.05)");
	assert_true(fabs(stats_normal_quantile(0.5)) < 1e-15);
	near(stats_normal_quantile(1e-10), -6.361340902404056, 1e-10, "quantile(1e-10)");
	near(stats_normal_sf(1.959963984540054), 0.025, 1e-12, "sf(1.96)");
	assert_true(isnan(stats_normal_quantile(0.0)));
	assert_true(isnan(stats_z_from_alpha(1.5)));
}

static void wilson_textbook(void **state)
{
	struct stats_interval iv;
	double z = stats_z_from_alpha(0.05);

	/*
	 * 81 successes in 263 trials at 95%: [0.2553, 0.3662], the usual worked
	 * example (Wikipedia, "Binomial proportion confidence interval"). From
	 * Wilson's closed form, (p + z^2/2n)/(1 + z^2/n) -+ z/(1 + z^2/n)
	 * sqrt(p(1-p)/n + z^2/4n^2), in Python: 0.2552885199, 0.3662095770.
	 */
	assert_int_equal(stats_wilson(81, 263, z, &iv), 0);
	near(iv.p, 81.0 / 263, 1e-15, "p");
	near(iv.lo, 0.2552885199, 1e-9, "lo 81/263");
	near(iv.hi, 0.3662095770, 1e-9, "hi 81/263");
	/* No failure in 10: the upper bound is z^2/(n + z^2) = 0.2775327999. */
	assert_int_equal(stats_wilson(0, 10, z, &iv), 0);
	assert_true(iv.lo == 0.0);
	near(iv.hi, 0.2775327999, 1e-9, "hi 0/10");
	assert_int_equal(stats_wilson(10, 10, z, &iv), 0);
	near(iv.lo, 0.7224672001, 1e-9, "lo 10/10");
	assert_true(iv.hi == 1.0);
	/* A rare failure rate, where the Wald interval would go negative. */
	assert_int_equal(stats_wilson(1, 1000, z, &iv), 0);
	near(iv.lo, 0.000176546370626078, 1e-9, "lo 1/1000");
	near(iv.hi, 0.0056425586, 1e-9, "hi 1/1000");
	assert_int_equal(stats_wilson(0, 0, z, &iv), 0);
	assert_true(iv.lo == 0.0 && iv.hi == 1.0);
	assert_int_equal(stats_wilson(5, 4, z, &iv), -EINVAL);
	assert_int_equal(stats_wilson(1, 4, 0.0, &iv), -EINVAL);
}

static void sprt_boundaries(void **state)
{
	struct sprt_params p = {.p0 = 0.002, .p1 = 0.02, .alpha = 0.05, .beta = 0.05};
	struct sprt s;
	unsigned f, n;

	/* Wald: A = log((1-beta)/alpha) = log 19 = 2.944439, B = log(beta/(1-alpha)) = -log 19. */
	assert_int_equal(sprt_init(&s, &p), 0);
	near(s.a, log(19.0), 1e-15, "A");
	near(s.a, 2.944438979166, 1e-12, "A numeric");
	near(s.b, -log(19.0), 1e-15, "B");
	near(s.inc_fail, log(10.0), 1e-15, "failure increment");
	near(s.inc_pass, log(0.98 / 0.998), 1e-12, "pass increment");
	assert_int_equal(sprt_run_lengths(&p, &f, &n), 0);
	assert_int_equal(f, 2);
	assert_int_equal(n, 162); /* ceil(2.944439 / 0.018200) = ceil(161.78) */

	/* PRODUCT.md's example reproduced exactly with alpha 0.01, beta 0.05. */
	p.alpha = 0.01;
	assert_int_equal(sprt_run_lengths(&p, &f, &n), 0);
	assert_int_equal(f, 2);
	assert_int_equal(n, 165); /* B = log(0.05/0.99) = -2.985682; 2.985682 / 0.018200 = 164.04 */
	assert_int_equal(sprt_init(&s, &p), 0);
	near(s.a, 4.553876891601, 1e-12, "A 0.01/0.05");
	near(s.b, -2.985681937700, 1e-12, "B 0.01/0.05");

	/* Bad parameters. */
	p.p1 = 0.001;
	assert_int_equal(sprt_init(&s, &p), -EINVAL);
	p.p1 = 0.02;
	p.alpha = 0.6;
	p.beta = 0.5;
	assert_int_equal(sprt_init(&s, &p), -EINVAL);
}

static void sprt_sequence(void **state)
{
	struct sprt_params p = {.p0 = 0.002, .p1 = 0.02, .alpha = 0.01, .beta = 0.05, .min_trials = 20};
	struct sprt s;

	/* Two quick failures flag it, even before min_trials. */
	assert_int_equal(sprt_init(&s, &p), 0);
	assert_int_equal(sprt_observe(&s, true), SPRT_CONTINUE);
	assert_int_equal(sprt_observe(&s, true), SPRT_ACCEPT_H1);
	/* Latched: later passes do not undo a crossing. */
	for (int i = 0; i < 1000; i++)
		sprt_observe(&s, false);
	assert_int_equal(sprt_decision(&s), SPRT_ACCEPT_H1);
	assert_int_equal(s.decided_at, 2);
	assert_int_equal(s.trials, 1002);

	/* 165 clean trials accept H0, 164 do not. */
	assert_int_equal(sprt_init(&s, &p), 0);
	assert_int_equal(sprt_passes_to_decide(&s), 165);
	for (int i = 0; i < 164; i++)
		assert_int_equal(sprt_observe(&s, false), SPRT_CONTINUE);
	assert_int_equal(sprt_passes_to_decide(&s), 1);
	assert_int_equal(sprt_observe(&s, false), SPRT_ACCEPT_H0);
	assert_int_equal(sprt_passes_to_decide(&s), 0);

	/* min_trials holds back H0: a larger B would otherwise be reached in 10. */
	p = (struct sprt_params){.p0 = 0.05, .p1 = 0.5, .alpha = 0.05, .beta = 0.05, .min_trials = 30};
	assert_int_equal(sprt_init(&s, &p), 0);
	for (int i = 0; i < 29; i++)
		assert_int_equal(sprt_observe(&s, false), SPRT_CONTINUE);
	assert_int_equal(sprt_observe(&s, false), SPRT_ACCEPT_H0);

	/* Truncation: undecided at max_trials, the sign-based call on request. */
	p = (struct sprt_params){.p0 = 0.01, .p1 = 0.02, .alpha = 0.01, .beta = 0.01, .max_trials = 50};
	assert_int_equal(sprt_init(&s, &p), 0);
	for (int i = 0; i < 50; i++)
		sprt_observe(&s, i == 10);
	assert_int_equal(sprt_decision(&s), SPRT_UNDECIDED);
	/* One failure in 50: log 2 + 49 log(0.98/0.99) = 0.196 > 0, leaning to H1. */
	assert_int_equal(sprt_truncated(&s), SPRT_ACCEPT_H1);
}

static void binomial_tails(void **state)
{
	/* Python: float(sum(comb(50,i) p^i (1-p)^(50-i) for i <= 3)), p = Fraction(1, 50). */
	near(stats_binom_cdf(3, 50, 0.02), 9.822419193020284e-01, 1e-12, "cdf 3/50");
	near(stats_binom_sf(10, 200, 0.02), 7.479287865361487e-03, 1e-10, "sf 10/200");
	near(stats_binom_cdf(0, 10, 0.5), 1.0 / 1024, 1e-13, "cdf 0/10");
	assert_true(stats_binom_cdf(10, 10, 0.3) == 1.0);
	assert_true(stats_binom_sf(0, 10, 0.3) == 1.0);
	assert_true(stats_binom_sf(11, 10, 0.3) == 0.0);
	assert_true(stats_binom_logpmf(1, 5, 0.0) == -INFINITY);
	assert_true(stats_binom_logpmf(0, 5, 0.0) == 0.0);
}

static void mcnemar_exact(void **state)
{
	struct stats_mcnemar m;

	/* b = 1, c = 7: 2 P(X <= 1 | 8, 1/2) = 2 * 9/256 = 0.0703125. */
	assert_int_equal(stats_mcnemar_exact(1, 7, &m), 0);
	near(m.p_two_sided, 0.0703125, 1e-13, "1,7 two-sided");
	near(m.p_worse, 255.0 / 256, 1e-13, "1,7 worse");
	near(m.p_better, 9.0 / 256, 1e-13, "1,7 better");
	/* b = 0, c = 5: 2 / 32 = 0.0625. */
	assert_int_equal(stats_mcnemar_exact(0, 5, &m), 0);
	near(m.p_two_sided, 0.0625, 1e-13, "0,5");
	/* b = 5, c = 0, candidate worse, one-sided: 1/32. */
	assert_int_equal(stats_mcnemar_exact(5, 0, &m), 0);
	near(m.p_worse, 1.0 / 32, 1e-13, "5,0 worse");
	/* b = 3, c = 12: 2 P(X <= 3 | 15) = 0.03515625; P(X >= 3) = 0.996307373046875. */
	assert_int_equal(stats_mcnemar_exact(3, 12, &m), 0);
	near(m.p_two_sided, 0.03515625, 1e-12, "3,12");
	near(m.p_worse, 0.996307373046875, 1e-12, "3,12 worse");
	/* Equal counts: 1. */
	assert_int_equal(stats_mcnemar_exact(4, 4, &m), 0);
	assert_true(m.p_two_sided == 1.0);
	assert_int_equal(stats_mcnemar_exact(0, 0, &m), 0);
	assert_true(m.p_two_sided == 1.0 && m.p_worse == 1.0);
	/*
	 * n = 100000, b = 50300: exact integer sum of comb(100000, i) for
	 * i <= 49700 by the recurrence c *= (n - i) / (i + 1), divided by 2^n
	 * as a Fraction: two-sided 5.819735311019374e-02.
	 */
	assert_int_equal(stats_mcnemar_exact(50300, 49700, &m), 0);
	near(m.p_two_sided, 5.819735311019374e-02, 1e-8, "50300,49700");
	/* A tail far below the smallest normal double's square: 2 * 2^-1000. */
	assert_int_equal(stats_mcnemar_exact(1000, 0, &m), 0);
	near(m.p_two_sided, 1.866527237006438e-301, 1e-9, "1000,0");
	near(m.p_worse, 1.866527237006438e-301 / 2, 1e-9, "1000,0 worse");
}

static void wilcoxon_exact_small(void **state)
{
	/*
	 * Wikipedia's worked example ("Wilcoxon signed-rank test"): ten pairs,
	 * one zero difference dropped, ties at |5|; W+ = 27 of 45. By
	 * enumerating the 2^9 sign patterns: P(W+ >= 27) = 0.31640625,
	 * P(W+ <= 27) = 0.705078125, two-sided 0.6328125.
	 */
	const double wiki[] = {15, -7, 5, 20, 0, -9, 17, -12, 5, -10};
	/* Ties across signs and a zero: P(W+ >= 57.5) = 0.0146484375 (2^11 patterns). */
	const double ties[] = {1, -1, 2, 2, -2, 3, 0, 4, 4, 5, -0.5, 6};
	struct stats_wilcoxon w;

	assert_int_equal(stats_wilcoxon_signed_rank(wiki, 10, &w), 0);
	assert_true(w.exact);
	assert_int_equal(w.n, 9);
	assert_int_equal(w.zeros, 1);
	near(w.w_plus, 27.0, 1e-15, "wiki W+");
	near(w.p_greater, 0.31640625, 1e-13, "wiki p>");
	near(w.p_less, 0.705078125, 1e-13, "wiki p<");
	near(w.p_two_sided, 0.6328125, 1e-13, "wiki two-sided");

	assert_int_equal(stats_wilcoxon_signed_rank(ties, 12, &w), 0);
	assert_int_equal(w.n, 11);
	near(w.w_plus, 57.5, 1e-15, "ties W+");
	near(w.p_greater, 0.0146484375, 1e-13, "ties p>");
	near(w.p_less, 0.9892578125, 1e-13, "ties p<");

	/* All zero: nothing to rank, p = 1. */
	{
		const double z[] = {0, 0, 0};

		assert_int_equal(stats_wilcoxon_signed_rank(z, 3, &w), 0);
		assert_true(w.p_two_sided == 1.0 && w.n == 0 && w.zeros == 3);
	}
	{
		const double bad[] = {1, NAN};

		assert_int_equal(stats_wilcoxon_signed_rank(bad, 2, &w), -EINVAL);
	}
}

static void wilcoxon_normal(void **state)
{
	/*
	 * n >= 20: normal approximation, tie-corrected variance
	 * n(n+1)(2n+1)/24 - sum(t^3 - t)/48, continuity correction 1/2, the same
	 * as R's wilcox.test(exact = FALSE, correct = TRUE). Reference values by
	 * the Python formulas in the header comment of this file: d25 has 2 zeros
	 * and several ties (23 ranked, W+ = 185, z = 1.43232); d40 is heavily
	 * tied integers (34 ranked, W+ = 404.5, z = 1.88180).
	 */
	const double d25[] = {0.0, 0.8, 0.1, -0.0, -0.6, 0.1,  1.4,  0.7, 1.3, 0.5, 0.7,  0.5, -1.4,
			      1.2, 0.8, 0.8, -1.4, -1.4, -0.6, -0.2, 0.6, 0.3, 0.8, -0.3, 0.6};
	const double d40[] = {0, 1, 3, 2, -1, -2, 1, 1, 2, -1, 0,  -2, 1,  2, -2, 1,  -2, 1, -1, 1,
			      2, 1, 1, 3, 0,  1,  1, 1, 0, 0,  -1, 3,  -1, 2, 3,  -1, -2, 1, 0,  1};
	struct stats_wilcoxon w;

	assert_int_equal(stats_wilcoxon_signed_rank(d25, 25, &w), 0);
	assert_false(w.exact);
	assert_int_equal(w.n, 23);
	assert_int_equal(w.zeros, 2);
	near(w.w_plus, 185.0, 1e-15, "d25 W+");
	near(w.z, 1.4323211923805912, 1e-10, "d25 z");
	near(w.p_greater, 0.07822922397911246, 1e-9, "d25 p>");
	near(w.p_less, 0.9261297389679825, 1e-9, "d25 p<");

	assert_int_equal(stats_wilcoxon_signed_rank(d40, 40, &w), 0);
	assert_int_equal(w.n, 34);
	near(w.w_plus, 404.5, 1e-15, "d40 W+");
	near(w.z, 1.8817959512975195, 1e-10, "d40 z");
	near(w.p_greater, 0.03053401903782798, 1e-9, "d40 p>");
}

static void drift(void **state)
{
	double cand[40], base[40];
	struct stats_drift d;

	/* The candidate's error is 3x the baseline's on every seed, with noise. */
	for (int i = 0; i < 40; i++) {
		base[i] = 0.1 + 0.01 * i;
		cand[i] = base[i] * (3.0 + 0.05 * ((i * 7) % 5 - 2));
	}
	assert_int_equal(stats_drift_test(cand, base, 40, 2.0, 0.001, &d), 0);
	assert_int_equal(d.pairs, 40);
	near(d.median_log_ratio, log(3.0), 0.02, "median log ratio");
	assert_true(d.w.p_greater < 1e-6);
	assert_true(d.drift);
	/* The same growth below the factor is not drift, however significant. */
	assert_int_equal(stats_drift_test(cand, base, 40, 4.0, 0.001, &d), 0);
	assert_false(d.drift);
	/* And the reverse direction is an improvement, not drift. */
	assert_int_equal(stats_drift_test(base, cand, 40, 2.0, 0.001, &d), 0);
	assert_false(d.drift);
	assert_true(d.improved);
	/* Non-finite ratios are skipped; exact zeros on both sides are ties at 0. */
	cand[0] = NAN;
	base[1] = INFINITY;
	cand[2] = base[2] = 0.0;
	assert_int_equal(stats_drift_test(cand, base, 40, 2.0, 0.001, &d), 0);
	assert_int_equal(d.pairs, 38);
	assert_int_equal(d.w.zeros, 1);
}

/* ---------------------------------------------------------------------------
 * Verdict v2
 */

static struct stats_seed seed(int64_t s, enum outcome cf, enum outcome cr, enum outcome bf, enum outcome br)
{
	return (struct stats_seed){.seed = s,
				   .cand_first = cf,
				   .cand_rerun = cr,
				   .base_first = bf,
				   .base_rerun = br,
				   .cand_ratio = NAN,
				   .base_ratio = NAN};
}

static enum verdict decide(const struct stats_seed *s, unsigned n, bool det, struct stats_evidence *ev)
{
	struct stats_verdict_input in = {.deterministic = det, .seeds = s, .nseeds = n};

	assert_int_equal(stats_verdict(&in, NULL, ev), 0);
	return ev->verdict;
}

static void det_regressed(void **state)
{
	struct stats_seed s[4] = {seed(10, P, N, P, N), seed(11, F, F, P, N), seed(12, N, N, N, N),
				  seed(13, P, N, P, N)};
	struct stats_evidence ev;

	/* Decided at once, with a seed still to run. */
	assert_int_equal(decide(s, 4, true, &ev), VERDICT_REGRESSED);
	assert_int_equal(ev.test, STATS_TEST_PAIRED);
	assert_int_equal(ev.nseeds, 1);
	assert_int_equal(ev.seeds[0], 11);
	/* Fails twice but also failed on the baseline twice: the library's, flaky. */
	s[1] = seed(11, F, F, F, F);
	s[2] = seed(12, P, N, P, N);
	assert_int_equal(decide(s, 4, true, &ev), VERDICT_FLAKY);
	assert_int_equal(ev.both_fail_seeds, 1);
}

static void det_pending(void **state)
{
	struct stats_seed s[3] = {seed(0, P, N, P, N), seed(1, F, N, P, N), seed(2, P, N, P, N)};
	struct stats_evidence ev;

	assert_int_equal(decide(s, 3, true, &ev), VERDICT_PENDING);
	assert_int_equal(ev.needs_trials, 1);
	assert_string_equal(ev.reason, "needs more trials: 1");
	/* Confirmed here, but the baseline never ran that seed. */
	s[1] = seed(1, F, F, N, N);
	assert_int_equal(decide(s, 3, true, &ev), VERDICT_PENDING);
	assert_int_equal(ev.needs_baseline, 1);
	/* Infrastructure errors are not results. */
	s[1] = seed(1, OUTCOME_INFRA_ERROR, N, P, N);
	assert_int_equal(decide(s, 3, true, &ev), VERDICT_PENDING);
	assert_int_equal(decide(NULL, 0, true, &ev), VERDICT_PENDING);
}

static void det_improved_and_flaky(void **state)
{
	struct stats_seed s[4] = {seed(0, P, N, F, F), seed(1, P, N, P, N), seed(2, P, N, F, F),
				  seed(3, P, N, P, N)};
	struct stats_evidence ev;

	assert_int_equal(decide(s, 4, true, &ev), VERDICT_IMPROVED);
	assert_int_equal(ev.improved_seeds, 2);
	assert_int_equal(ev.seeds_total, 2);
	/*
	 * One baseline failure failed only once there (its rerun passed: garbage
	 * that differs run to run, as a GPU fix's baseline showed): it passes here
	 * too, and the confirmed one is fixed: improved.
	 */
	s[2] = seed(2, P, N, F, P);
	assert_int_equal(decide(s, 4, true, &ev), VERDICT_IMPROVED);
	assert_int_equal(ev.improved_seeds, 1);
	assert_string_equal(ev.reason,
			    "all 2 baseline failure(s) pass here (1 of them failed there only once)");
	/* Only a baseline flake passing here is no improvement. */
	s[0] = seed(0, P, N, P, N);
	assert_int_equal(decide(s, 4, true, &ev), VERDICT_CLEAN);
	/* Nor is a confirmed failure fixed while another still fails (once) here. */
	s[0] = seed(0, P, N, F, F);
	s[2] = seed(2, F, P, F, P);
	assert_int_not_equal(decide(s, 4, true, &ev), VERDICT_IMPROVED);
}

static void det_nondeterminism_judged_by_rates(void **state)
{
	static struct stats_seed s[300];
	struct stats_evidence ev;
	json_t *j;

	/*
	 * Seeds that fail, then pass on the rerun: the check is not deterministic
	 * here, and the failure rate against the baseline's decides. One such
	 * seed in 8 is undecided (more trials); in 300 it is the library's
	 * flakiness; 5 in 64 against a clean baseline is a race this commit
	 * brought.
	 */
	for (int i = 0; i < 300; i++)
		s[i] = seed(i, P, N, P, N);
	s[3] = seed(3, F, P, P, N);
	assert_int_equal(decide(s, 8, true, &ev), VERDICT_PENDING);
	assert_true(ev.needs_trials > 0);
	assert_int_equal(decide(s, 300, true, &ev), VERDICT_FLAKY);
	assert_int_equal(ev.nondeterministic_seeds, 1);
	assert_int_equal(ev.test, STATS_TEST_SPRT);
	assert_int_equal(ev.seeds[0], 3);
	for (int i = 10; i < 14; i++)
		s[i] = seed(i, F, P, P, N);
	assert_int_equal(decide(s, 64, true, &ev), VERDICT_REGRESSED);
	assert_int_equal(ev.test, STATS_TEST_SPRT);
	assert_int_equal(ev.nondeterministic_seeds, 5);
	assert_int_equal(ev.seeds_total, 5);
	j = stats_evidence_json(&ev);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "nondeterministic_seeds")), 5);
	json_decref(j);
	/* The same rate on the baseline: the library's, flaky. */
	for (int i = 20; i < 25; i++)
		s[i] = seed(i, P, N, F, P);
	assert_int_equal(decide(s, 64, true, &ev), VERDICT_FLAKY);
}

static void det_drift(void **state)
{
	struct stats_seed s[30];
	struct stats_evidence ev;

	for (int i = 0; i < 30; i++) {
		s[i] = seed(i, P, N, P, N);
		s[i].base_ratio = 0.05 + 0.001 * i;
		s[i].cand_ratio = s[i].base_ratio * (i % 3 ? 2.6 : 2.2);
	}
	assert_int_equal(decide(s, 30, true, &ev), VERDICT_REGRESSED);
	assert_int_equal(ev.test, STATS_TEST_DRIFT);
	assert_true(ev.drift_used && ev.drift.drift);
	/* Growth of 1.5x is below the default factor of 2. */
	for (int i = 0; i < 30; i++)
		s[i].cand_ratio = s[i].base_ratio * 1.5;
	assert_int_equal(decide(s, 30, true, &ev), VERDICT_CLEAN);
	assert_true(ev.drift_used && !ev.drift.drift);

	/* As the daemon judges: from the clean state (sql/045's reference), not from the baseline. */
	{
		struct stats_verdict_input in = {
		    .deterministic = true, .seeds = s, .nseeds = 30, .drift_from_clean = true};

		/* A creep: 1.5x the baseline, which was 1.5x the clean state: 2.25x, drift. */
		for (int i = 0; i < 30; i++)
			s[i].clean_ratio = s[i].base_ratio / 1.5;
		assert_int_equal(stats_verdict(&in, NULL, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_REGRESSED);
		assert_int_equal(ev.test, STATS_TEST_DRIFT);
		/* The drift fixed: back at the clean state, 2.5x below a baseline that had drifted. */
		for (int i = 0; i < 30; i++) {
			s[i].clean_ratio = s[i].base_ratio / 2.5;
			s[i].cand_ratio = s[i].clean_ratio * (i % 2 ? 1.05 : 0.95);
		}
		assert_int_equal(stats_verdict(&in, NULL, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_IMPROVED);
		assert_int_equal(ev.test, STATS_TEST_DRIFT);
		assert_non_null(strstr(ev.reason, "median error ratio fell 2."));
		/* Only 1.5x below the baseline: clean. */
		for (int i = 0; i < 30; i++)
			s[i].cand_ratio = s[i].base_ratio / 1.5;
		assert_int_equal(stats_verdict(&in, NULL, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_CLEAN);
	}
}

/* n seeds; the candidate fails the seeds in cf[], the baseline those in bf[]. */
static void fill(struct stats_seed *s, unsigned n, const int *cf, unsigned ncf, const int *bf, unsigned nbf,
		 unsigned base_n)
{
	for (unsigned i = 0; i < n; i++)
		s[i] = seed(i, P, N, i < base_n ? P : N, N);
	for (unsigned i = 0; i < ncf; i++)
		s[cf[i]].cand_first = F;
	for (unsigned i = 0; i < nbf; i++)
		s[bf[i]].base_first = F;
}

static void nondet_sprt(void **state)
{
	static struct stats_seed s[512];
	struct stats_evidence ev;
	const int two[] = {0, 1};

	/* Baseline clean in 200; the candidate's first two seeds fail: flagged. */
	fill(s, 2, two, 2, NULL, 0, 200);
	assert_int_equal(decide(s, 2, false, &ev), VERDICT_REGRESSED);
	assert_int_equal(ev.test, STATS_TEST_SPRT);
	assert_int_equal(ev.sprt.decided_at, 2);
	near(ev.sprt.par.p0, 0.002, 1e-15, "p0 floor");
	near(ev.sprt.par.p1, 0.02, 1e-15, "p1");
	assert_int_equal(ev.seeds_total, 2);

	/*
	 * Two failures, but after three passes: 2 log 10 + 3 log(0.98/0.998) =
	 * 4.5506 < A = 4.5539, so no flag. The test then needs passes down to
	 * B: pending in 200, and once those have run, H0: a rate of 1% is the
	 * library's flakiness, not shown to be a regression.
	 */
	{
		const int late[] = {3, 4};
		unsigned more;

		fill(s, 512, late, 2, NULL, 0, 512);
		assert_int_equal(decide(s, 200, false, &ev), VERDICT_PENDING);
		more = ev.needs_trials;
		/* (4.5506 + 2.9857) / 0.018200 = 414.1 passes after the fifth trial. */
		assert_int_equal(5 + 415, 200 + more);
		assert_int_equal(decide(s, 200 + more, false, &ev), VERDICT_FLAKY);
		assert_int_equal(sprt_decision(&ev.sprt), SPRT_ACCEPT_H0);
		assert_int_equal(ev.sprt.decided_at, 200 + more);
	}

	/* 100 clean trials: pending, 65 more would accept. */
	fill(s, 200, NULL, 0, NULL, 0, 200);
	assert_int_equal(decide(s, 100, false, &ev), VERDICT_PENDING);
	assert_int_equal(ev.needs_trials, 65);
	assert_string_equal(ev.reason, "needs more trials: 65");
	/* 165: clean. */
	assert_int_equal(decide(s, 165, false, &ev), VERDICT_CLEAN);
	assert_int_equal(ev.sprt.decided_at, 165);
}

static void nondet_flaky_mcnemar_improved(void **state)
{
	static struct stats_seed s[200];
	int base_f[10], cand_f[30];
	struct stats_evidence ev;

	for (int i = 0; i < 10; i++)
		base_f[i] = cand_f[i] = 20 * i;
	/* Both fail the same 5% of seeds: p0 = 0.05, p1 = 0.15, H0 accepted, flaky. */
	fill(s, 200, cand_f, 10, base_f, 10, 200);
	assert_int_equal(decide(s, 200, false, &ev), VERDICT_FLAKY);
	assert_int_equal(ev.test, STATS_TEST_SPRT);
	near(ev.sprt.par.p0, 0.05, 1e-15, "p0 = baseline rate");
	near(ev.sprt.par.p1, 0.15, 1e-12, "p1 = 3 p0");
	assert_int_equal(ev.mcnemar.b + ev.mcnemar.c, 0);

	/* 20 more seeds fail only on the candidate: regressed (b = 20, c = 0). */
	for (int i = 10; i < 30; i++)
		cand_f[i] = 2 * i + 1;
	fill(s, 200, cand_f, 30, base_f, 10, 200);
	assert_int_equal(decide(s, 200, false, &ev), VERDICT_REGRESSED);
	assert_int_equal(ev.mcnemar.b, 20);
	assert_int_equal(ev.mcnemar.c, 0);
	assert_int_equal(ev.seeds_total, 20);

	/* The baseline's failures are gone on the candidate: improved by McNemar. */
	fill(s, 200, NULL, 0, base_f, 10, 200);
	assert_int_equal(decide(s, 200, false, &ev), VERDICT_IMPROVED);
	assert_int_equal(ev.test, STATS_TEST_MCNEMAR);
	near(ev.mcnemar.p_better, 1.0 / 1024, 1e-12, "p better");

	/* No baseline at all: ask for one. */
	fill(s, 50, NULL, 0, NULL, 0, 0);
	assert_int_equal(decide(s, 50, false, &ev), VERDICT_PENDING);
	assert_true(ev.needs_baseline >= 50);
}

/*
 * The rate tests take the baseline's rate pooled over the last commits not
 * regressed where the caller gives it. A 2% flake that passed all 165 paired
 * seeds at the baseline commit made a candidate failing 8 of 256 (3%) a
 * regression against the floor; against 22 of 1686 over eight commits it is
 * the library's rate: flaky.
 */
static void nondet_pooled_baseline(void **state)
{
	static struct stats_seed s[400];
	const int cf[] = {16, 48, 80, 112, 144, 176, 208, 240};
	struct stats_verdict_params par;
	struct stats_verdict_input in = {.seeds = s, .nseeds = 256};
	struct stats_evidence ev;
	struct stats_interval w;
	json_t *j;

	stats_verdict_params_default(&par);
	par.max_trials = 256;
	fill(s, 256, cf, 8, NULL, 0, 165);
	assert_int_equal(stats_verdict(&in, &par, &ev), 0);
	assert_int_equal(ev.verdict, VERDICT_REGRESSED);
	near(ev.sprt.par.p0, 0.002, 1e-15, "p0 floor");
	in.pool_trials = 1686;
	in.pool_failures = 22;
	assert_int_equal(stats_verdict(&in, &par, &ev), 0);
	assert_int_equal(ev.verdict, VERDICT_FLAKY);
	/* p0: the top of the pool's one-sigma Wilson interval, 0.01612 (the rate is 0.01305). */
	assert_int_equal(stats_wilson(22, 1686, 1.0, &w), 0);
	near(ev.sprt.par.p0, w.hi, 1e-12, "p0 pooled");
	assert_true(ev.sprt.par.p0 > 0.0161 && ev.sprt.par.p0 < 0.0162);
	near(ev.sprt.par.p1, 3 * w.hi, 1e-12, "p1 = 3 p0");
	assert_int_equal(ev.mcnemar.b, 5);
	assert_string_equal(ev.reason, "fails at a low rate: 8/256, baseline 22/1686 pooled");
	j = stats_evidence_json(&ev);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "baseline_pool"), "trials")),
			 1686);
	json_decref(j);
	/* A clear regression still is one: 40 of 256. */
	{
		int many[40];

		for (int i = 0; i < 40; i++)
			many[i] = 6 * i + 3;
		fill(s, 256, many, 40, NULL, 0, 165);
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_REGRESSED);
		assert_string_equal(ev.reason,
				    "failure rate 40/256, baseline 22/1686 pooled (SPRT, p0 0.0161)");
	}
	/*
	 * A fix inside the pool: 36 of 512 failed before it, the baseline commit
	 * passes the 100 seeds of the candidate, which fails 9 of them (a
	 * revert). The pooled 7% would put p1 at 21% and call 9% the library's
	 * rate; the baseline's 0 of 100 make 7% 1470 times less likely than its
	 * own rate, so the pool is dropped and the revert is a regression. At 0
	 * of 64 (odds 106) the pool stands: 6 of 64 are then the library's rate.
	 */
	{
		const int revert[] = {5, 15, 25, 35, 45, 55, 65, 75, 85};

		fill(s, 100, revert, 9, NULL, 0, 100);
		in.nseeds = 100;
		in.pool_trials = 512;
		in.pool_failures = 36;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_REGRESSED);
		assert_int_equal(ev.pool.trials, 0);
		near(ev.sprt.par.p0, 0.002, 1e-15, "p0: the baseline's own, floored");
		fill(s, 64, revert, 6, NULL, 0, 64);
		in.nseeds = 64;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.pool.trials, 512);
		assert_int_equal(stats_wilson(36, 512, 1.0, &w), 0);
		near(ev.sprt.par.p0, w.hi, 1e-12, "p0 pooled");
		assert_int_not_equal(ev.verdict, VERDICT_REGRESSED); /* more trials at the library's rate */
		/* A baseline failing more often than the pool (6 of 64 against 2%) keeps it: 9 of 64 regress. */
		{
			const int base6[] = {1, 11, 21, 31, 41, 51},
				  cand9[] = {2, 9, 16, 23, 30, 37, 44, 51, 58};

			fill(s, 64, cand9, 9, base6, 6, 64);
			in.pool_trials = 1000;
			in.pool_failures = 20;
			assert_int_equal(stats_verdict(&in, &par, &ev), 0);
			assert_int_equal(ev.pool.trials, 1000);
			assert_int_equal(ev.verdict, VERDICT_REGRESSED);
		}
	}
	/*
	 * A fix judged by rate against the pool (7%; the baseline commit failed 4
	 * of 96, no paired evidence of a fix yet), as a probability ratio between
	 * the bottom of the pool's two-sigma Wilson interval, p = 0.0509 for
	 * 36/512, and p / 4: each pass adds log((1 - p/4) / (1 - p)) = 0.0394.
	 * 0 of 48 give log odds 1.89, past log 2: more trials, the passes to
	 * reach 1000 ((6.908 - 1.892) / 0.0394 = 128), a round of at most as
	 * many as it has (48). 0 of 96 (odds 44) are not a fix yet (80 more
	 * would be), nor 0 of 126; 0 of 176 (odds 1000 and a little) are.
	 */
	{
		const int base_fails[] = {7, 23, 39, 55}; /* the flaky baseline: the pool fits it */

		fill(s, 176, NULL, 0, base_fails, 4, 176);
		in.nseeds = 48;
		in.pool_trials = 512;
		in.pool_failures = 36;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_PENDING);
		assert_int_equal(ev.needs_trials, 48);
		assert_string_equal(ev.reason, "needs more trials: 48 (below the baseline's rate?)");
		/* At [trials] max there are no more to ask for: judged as it stands. */
		par.max_trials = 48;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_CLEAN);
		par.max_trials = 256;
		in.nseeds = 96;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_PENDING);
		assert_int_equal(ev.needs_trials, 80);
		in.nseeds = 126;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_PENDING);
		in.nseeds = 176;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_IMPROVED);
		assert_string_equal(ev.reason, "failure rate 0/176, below the baseline's 36/512 pooled");
	}
	/*
	 * A 5% race still there: 6 of 336 (1.8%) after more trials is 0.003 of
	 * the way to a fix at p / 4 (log odds -5.6), not a fix (a likelihood
	 * ratio against the rate the trials showed called it one: odds 1100).
	 */
	{
		static const int six[] = {3, 60, 117, 174, 231, 288};
		int base17[17];

		for (int i = 0; i < 17; i++)
			base17[i] = 10 + 19 * i; /* the baseline at the race's 5% */
		fill(s, 336, six, 6, base17, 17, 336);
		in.nseeds = 336;
		in.pool_trials = 600;
		in.pool_failures = 30;
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.pool.trials, 600);
		assert_int_not_equal(ev.verdict, VERDICT_IMPROVED);
	}
}

static void evidence_json(void **state)
{
	static struct stats_seed s[200];
	const int two[] = {0, 1};
	struct stats_evidence ev;
	json_t *j, *x;

	fill(s, 200, two, 2, NULL, 0, 200);
	assert_int_equal(decide(s, 200, false, &ev), VERDICT_REGRESSED);
	j = stats_evidence_json(&ev);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "verdict")), "regressed");
	assert_string_equal(json_string_value(json_object_get(j, "test")), "sprt");
	x = json_object_get(j, "seeds");
	assert_int_equal(json_array_size(x), 2);
	assert_int_equal(json_integer_value(json_array_get(x, 1)), 1);
	/* The baseline's side has its own key: the daemon adds the baseline's sha as "baseline". */
	assert_non_null(json_object_get(json_object_get(j, "baseline_rate"), "wilson95"));
	x = json_object_get(json_object_get(j, "candidate"), "wilson95");
	assert_int_equal(json_array_size(x), 2);
	assert_true(json_real_value(json_array_get(x, 0)) > 0.0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "sprt"), "decision")),
			    "accept_h1");
	assert_non_null(json_object_get(j, "mcnemar"));
	json_decref(j);
}

/*
 * Issue 13, scale: every probability and statistic stays finite however long
 * the history and however many trials, in log space where a plain product
 * would underflow. The values are checked for range (a probability in [0, 1],
 * an interval around its estimate), not against references.
 */
static void finite_in(double x, double lo, double hi, const char *what)
{
	if (!(isfinite(x) && x >= lo && x <= hi)) {
		print_error("%s: %.17g not finite in [%g, %g]\n", what, x, lo, hi);
		fail();
	}
}

static void scale_wilson(void **state)
{
	const unsigned ns[] = {1, 256, NW_TRIALS_MAX, 1000000, 1000000000, UINT32_MAX};
	const double zs[] = {1.0, 1.959963984540054, 6.0};

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		const unsigned n = ns[i], ks[] = {0, 1, n / 1000, n / 2, n - 1, n};

		for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
			for (size_t z = 0; z < sizeof(zs) / sizeof(zs[0]); z++) {
				struct stats_interval w;

				assert_int_equal(stats_wilson(ks[j], n, zs[z], &w), 0);
				finite_in(w.p, 0.0, 1.0, "wilson p");
				finite_in(w.lo, 0.0, w.p, "wilson lo");
				finite_in(w.hi, w.p, 1.0, "wilson hi");
			}
		}
	}
}

static void scale_binomial_tails(void **state)
{
	const unsigned ns[] = {NW_TRIALS_MAX, 10 * NW_TRIALS_MAX};
	const double ps[] = {1e-300, 1e-9, 0.002, 0.5, 0.98, 1.0 - 1e-12};

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		const unsigned n = ns[i], ks[] = {0, 1, 20, n / 50, n / 2, n - 1, n};

		for (size_t j = 0; j < sizeof(ps) / sizeof(ps[0]); j++) {
			for (size_t k = 0; k < sizeof(ks) / sizeof(ks[0]); k++) {
				double cdf = stats_binom_cdf(ks[k], n, ps[j]);
				double sf = ks[k] < n ? stats_binom_sf(ks[k] + 1, n, ps[j]) : 0.0;
				double lp = stats_binom_logpmf(ks[k], n, ps[j]);

				finite_in(cdf, 0.0, 1.0, "binomial cdf");
				finite_in(sf, 0.0, 1.0, "binomial sf");
				/* The two tails are computed apart, each around its largest term. */
				assert_true(fabs(cdf + sf - 1.0) < 1e-9 || cdf < 1e-300 || sf < 1e-300);
				assert_true(lp == -INFINITY || (isfinite(lp) && lp <= 0.0));
			}
		}
	}
	/* A billion trials: the log pmf alone (the sums run over every term). */
	finite_in(-stats_binom_logpmf(20000000, 1000000000, 0.02), 0.0, 20.0, "log pmf at the mode");
	finite_in(-stats_binom_logpmf(1, 1000000000, 0.02), 1e7, 1e8, "log pmf far in the tail");
	/* McNemar at the cap on both sides. */
	{
		struct stats_mcnemar m;

		assert_int_equal(stats_mcnemar_exact(NW_TRIALS_MAX, NW_TRIALS_MAX, &m), 0);
		finite_in(m.p_two_sided, 0.99, 1.0, "mcnemar two-sided, balanced");
		assert_int_equal(stats_mcnemar_exact(NW_TRIALS_MAX, 0, &m), 0);
		finite_in(m.p_worse, 0.0, 1e-300, "mcnemar worse, one-sided");
		finite_in(m.p_better, 0.99, 1.0, "mcnemar better, one-sided");
		assert_int_equal(stats_mcnemar_exact(NW_TRIALS_MAX + 1, 0, &m), -EINVAL);
	}
}

static void scale_sprt(void **state)
{
	/* From the rates a pool of a billion trials gives, to those near 1. */
	const double p0s[] = {1e-9, 1e-6, 0.002, 0.02, 0.33, 0.99};

	for (size_t i = 0; i < sizeof(p0s) / sizeof(p0s[0]); i++) {
		struct sprt_params par = {.p0 = p0s[i],
					  .p1 = fmin(fmax(0.02, 3.0 * p0s[i]), 0.999),
					  .alpha = 0.01,
					  .beta = 0.05,
					  .min_trials = 20,
					  .max_trials = 0};
		unsigned fails = 0, passes = 0;
		struct sprt pass, fail;

		if (par.p1 <= par.p0)
			par.p1 = fmin(0.999, (par.p0 + 1.0) / 2.0);
		assert_int_equal(sprt_init(&pass, &par), 0);
		assert_int_equal(sprt_init(&fail, &par), 0);
		assert_int_equal(sprt_run_lengths(&par, &fails, &passes), 0);
		assert_true(fails >= 1 && passes >= 1);
		/* A million passes, and a million failures: the log-likelihood ratio stays finite. */
		for (unsigned t = 0; t < 1000000; t++) {
			sprt_observe(&pass, false);
			sprt_observe(&fail, true);
		}
		finite_in(pass.llr, -1e12, 0.0, "sprt llr after passes");
		finite_in(fail.llr, 0.0, 1e12, "sprt llr after failures");
		assert_int_equal(sprt_decision(&fail), SPRT_ACCEPT_H1);
		/* What a test with no decision yet would need is a count, whatever the rates. */
		{
			struct sprt fresh;

			assert_int_equal(sprt_init(&fresh, &par), 0);
			assert_true(sprt_passes_to_decide(&fresh) >= 1);
		}
	}
	/* Rates so close that H0 takes more passes than an unsigned holds: clamped, not undefined. */
	{
		struct sprt_params par = {.p0 = 1e-12, .p1 = 3e-12, .alpha = 0.01, .beta = 0.05};
		unsigned fails = 0, passes = 0;

		assert_int_equal(sprt_run_lengths(&par, &fails, &passes), 0);
		assert_int_equal(fails, 5);
		assert_int_equal(passes, UINT_MAX);
	}
}

static void scale_wilcoxon(void **state)
{
	static double d[NW_TRIALS_MAX + 1];
	struct stats_wilcoxon w;
	struct stats_drift dr;

	/* The exact path at its limit: 19 non-zero differences, all positive, then all tied. */
	for (unsigned i = 0; i < STATS_WILCOXON_EXACT_MAX - 1; i++)
		d[i] = 1.0 + i;
	assert_int_equal(stats_wilcoxon_signed_rank(d, STATS_WILCOXON_EXACT_MAX - 1, &w), 0);
	assert_true(w.exact);
	near(w.p_greater, ldexp(1.0, -(STATS_WILCOXON_EXACT_MAX - 1)), 1e-12, "exact p, all positive");
	finite_in(w.p_less, 0.0, 1.0, "exact p_less");
	for (unsigned i = 0; i < STATS_WILCOXON_EXACT_MAX - 1; i++)
		d[i] = i % 2 ? 2.5 : -2.5;
	assert_int_equal(stats_wilcoxon_signed_rank(d, STATS_WILCOXON_EXACT_MAX - 1, &w), 0);
	assert_true(w.exact);
	finite_in(w.p_two_sided, 0.5, 1.0, "exact p, all tied");
	/* One more: the normal approximation takes over, and stays finite. */
	for (unsigned i = 0; i < STATS_WILCOXON_EXACT_MAX; i++)
		d[i] = 1.0 + i;
	assert_int_equal(stats_wilcoxon_signed_rank(d, STATS_WILCOXON_EXACT_MAX, &w), 0);
	assert_false(w.exact);
	finite_in(w.p_greater, 0.0, 1e-3, "normal p, all positive");
	/* NW_TRIALS_MAX differences, all tied in magnitude (the tie correction at its largest), then distinct. */
	for (unsigned i = 0; i < NW_TRIALS_MAX; i++)
		d[i] = i % 3 ? 0.7 : -0.7;
	assert_int_equal(stats_wilcoxon_signed_rank(d, NW_TRIALS_MAX, &w), 0);
	finite_in(w.z, 10.0, 1000.0, "z, all tied");
	finite_in(w.p_greater, 0.0, 1e-20, "p, all tied");
	for (unsigned i = 0; i < NW_TRIALS_MAX; i++)
		d[i] = (i % 2 ? 1.0 : -1.0) * (1.0 + i);
	assert_int_equal(stats_wilcoxon_signed_rank(d, NW_TRIALS_MAX, &w), 0);
	finite_in(w.p_two_sided, 0.0, 1.0, "p, alternating");
	/* And beyond: refused, not computed wrong. */
	assert_int_equal(stats_wilcoxon_signed_rank(d, NW_TRIALS_MAX + 1, &w), -E2BIG);
	/* Drift between ratios at the ends of what a double holds. */
	{
		static double cand[NW_TRIALS_MAX], base[NW_TRIALS_MAX];

		for (unsigned i = 0; i < NW_TRIALS_MAX; i++) {
			cand[i] = i % 2 ? 1e300 : 0.0;
			base[i] = i % 2 ? 1e-320 : 1e300;
		}
		assert_int_equal(stats_drift_test(cand, base, NW_TRIALS_MAX, 2.0, 0.001, &dr), 0);
		finite_in(dr.median_log_ratio, -2000.0, 2000.0, "median log ratio");
		finite_in(dr.w.p_greater, 0.0, 1.0, "drift p");
	}
}

/* Every number the evidence holds is finite: stats_evidence_json writes null for one that is not. */
static void evidence_all_finite(const struct stats_evidence *ev, const char *what)
{
	json_t *j = stats_evidence_json(ev), *side, *v;
	const char *sides[] = {"candidate", "baseline_rate", "baseline_pool"}, *key;

	assert_non_null(j);
	for (size_t i = 0; i < 3; i++) {
		side = json_object_get(j, sides[i]);
		if (!side)
			continue;
		finite_in(json_number_value(json_object_get(side, "rate")), 0.0, 1.0, what);
		finite_in(json_number_value(json_array_get(json_object_get(side, "wilson95"), 0)), 0.0, 1.0,
			  what);
		finite_in(json_number_value(json_array_get(json_object_get(side, "wilson95"), 1)), 0.0, 1.0,
			  what);
	}
	json_object_foreach(json_object_get(j, "sprt"), key, v)
	{
		if (!json_is_string(v) && !json_is_number(v)) {
			print_error("%s: sprt.%s is not a number\n", what, key);
			fail();
		}
	}
	json_object_foreach(json_object_get(j, "mcnemar"), key, v)
	{
		assert_true(json_is_number(v));
		finite_in(json_number_value(v), 0.0, NW_TRIALS_MAX, what);
	}
	json_decref(j);
}

static void scale_verdict_pools(void **state)
{
	static struct stats_seed s[NW_TRIALS_MAX];
	/* Pooled baselines of a million to a billion trials, at rates from none to every trial. */
	const unsigned pools[] = {1000000, 100000000, 1000000000, UINT32_MAX};
	const double rates[] = {0.0, 1e-9, 0.002, 0.02, 0.5, 1.0};
	const unsigned counts[] = {256, NW_TRIALS_MAX};
	struct stats_verdict_params par;
	struct stats_evidence ev;
	char what[96];

	stats_verdict_params_default(&par);
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		for (size_t p = 0; p < sizeof(pools) / sizeof(pools[0]); p++) {
			for (size_t r = 0; r < sizeof(rates) / sizeof(rates[0]); r++) {
				for (int cand = 0; cand < 3; cand++) {
					const unsigned n = counts[c];
					struct stats_verdict_input in = {.deterministic = false,
									 .seeds = s,
									 .nseeds = n,
									 .pool_trials = pools[p],
									 .pool_failures =
									     (unsigned)(rates[r] * pools[p])};

					/* The candidate passes everything, fails 3%, or fails everything. */
					for (unsigned i = 0; i < n; i++) {
						bool f = cand == 2 || (cand == 1 && i % 33 == 7);

						s[i] = seed(i, f ? F : P, N, i % 50 == 3 ? F : P, N);
						s[i].cand_ratio = f ? 2.0 : 0.3;
						s[i].base_ratio = s[i].clean_ratio = i % 50 == 3 ? 2.0 : 0.3;
					}
					snprintf(what, sizeof(what), "%u seeds, pool %u at %g, candidate %d",
						 n, pools[p], rates[r], cand);
					assert_int_equal(stats_verdict(&in, &par, &ev), 0);
					assert_true(ev.verdict != VERDICT_PENDING ||
						    ev.needs_trials <= NW_TRIALS_MAX);
					evidence_all_finite(&ev, what);
					if (ev.pool.trials) {
						finite_in(ev.sprt.par.p0, 1e-12, 0.99, what);
						finite_in(ev.sprt.par.p1, ev.sprt.par.p0, 0.999, what);
					}
					finite_in(ev.sprt.llr, -1e9, 1e9, what);
				}
			}
		}
	}
	/* The deterministic rule at the cap, drift measured from the last clean state. */
	{
		struct stats_verdict_input in = {
		    .deterministic = true, .seeds = s, .nseeds = NW_TRIALS_MAX, .drift_from_clean = true};

		for (unsigned i = 0; i < NW_TRIALS_MAX; i++) {
			s[i] = seed(i, i % 8 == 3 ? F : P, i % 8 == 3 ? F : N, P, N);
			s[i].cand_ratio = i % 8 == 3 ? 3.5 : 0.25 * (1.0 + i % 7);
			s[i].base_ratio = s[i].clean_ratio = 0.25;
		}
		assert_int_equal(stats_verdict(&in, &par, &ev), 0);
		assert_int_equal(ev.verdict, VERDICT_REGRESSED);
		assert_int_equal(ev.seeds_total, NW_TRIALS_MAX / 8);
		evidence_all_finite(&ev, "deterministic at the cap");
	}
}

/* A run by hand is cut into parts of 64 seeds, and into at most 64 parts once it is larger. */
static void run_parts(void **state)
{
	(void)state;
	assert_int_equal(nw_run_part_seeds(150), 64);
	assert_int_equal(nw_run_part_seeds(4096), 64);
	assert_int_equal(nw_run_part_seeds(4097), 65);
	assert_int_equal(nw_run_part_seeds(10000), 157);
	assert_true((10000 + nw_run_part_seeds(10000) - 1) / nw_run_part_seeds(10000) <= NW_RUN_PARTS_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(normal_quantile),
	    cmocka_unit_test(wilson_textbook),
	    cmocka_unit_test(sprt_boundaries),
	    cmocka_unit_test(sprt_sequence),
	    cmocka_unit_test(binomial_tails),
	    cmocka_unit_test(mcnemar_exact),
	    cmocka_unit_test(wilcoxon_exact_small),
	    cmocka_unit_test(wilcoxon_normal),
	    cmocka_unit_test(drift),
	    cmocka_unit_test(det_regressed),
	    cmocka_unit_test(det_pending),
	    cmocka_unit_test(det_improved_and_flaky),
	    cmocka_unit_test(det_nondeterminism_judged_by_rates),
	    cmocka_unit_test(det_drift),
	    cmocka_unit_test(nondet_sprt),
	    cmocka_unit_test(nondet_flaky_mcnemar_improved),
	    cmocka_unit_test(nondet_pooled_baseline),
	    cmocka_unit_test(evidence_json),
	    cmocka_unit_test(scale_wilson),
	    cmocka_unit_test(scale_binomial_tails),
	    cmocka_unit_test(scale_sprt),
	    cmocka_unit_test(scale_wilcoxon),
	    cmocka_unit_test(scale_verdict_pools),
	    cmocka_unit_test(run_parts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
