/* stats: Wilson, SPRT, McNemar, Wilcoxon and the version-2 verdict. */
#include "stats.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"

/* ---------------------------------------------------------------------------
 * Normal distribution
 */

double stats_normal_sf(double z)
{
	/* erfc keeps its relative accuracy in the upper tail, 1 - Phi would not. */
	return 0.5 * erfc(z / sqrt(2.0));
}

double stats_normal_quantile(double p)
{
	/*
	 * Acklam's rational approximation (relative error 1.15e-9), then one
	 * Halley step on erfc, which brings it to full double precision.
	 */
	static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
				   1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
	static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
				   6.680131188771972e+01, -1.328068155288572e+01};
	static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
				   -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
	static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
				   3.754408661907416e+00};
	const double plow = 0.02425;
	double q, r, x;

	if (!(p > 0.0 && p < 1.0))
		return NAN;
	if (p < plow) {
		q = sqrt(-2 * log(p));
		x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		    ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
	} else if (p <= 1 - plow) {
		q = p - 0.5;
		r = q * q;
		x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
		    (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
	} else {
		q = sqrt(-2 * log1p(-p));
		x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		    ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
	}
	{
		double e = 0.5 * erfc(-x / sqrt(2.0)) - p;
		double u = e * sqrt(2 * M_PI) * exp(x * x / 2);

		x = x - u / (1 + x * u / 2);
	}
	return x;
}

double stats_z_from_alpha(double alpha)
{
	if (!(alpha > 0.0 && alpha < 1.0))
		return NAN;
	return -stats_normal_quantile(alpha / 2);
}

/* ---------------------------------------------------------------------------
 * Wilson
 */

int stats_wilson(unsigned k, unsigned n, double z, struct stats_interval *out)
{
	double p, z2, denom, centre, half;

	if (!out || k > n || !(z > 0.0) || !isfinite(z))
		return -EINVAL;
	if (n == 0) {
		*out = (struct stats_interval){.p = 0.0, .lo = 0.0, .hi = 1.0};
		return 0;
	}
	p = (double)k / n;
	z2 = z * z;
	denom = 1.0 + z2 / n;
	centre = (p + z2 / (2.0 * n)) / denom;
	half = z / denom * sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * (double)n));
	out->p = p;
	/* At k == 0 and k == n the bound is exactly 0 or 1; rounding must not leave it outside. */
	out->lo = k == 0 ? 0.0 : fmax(0.0, centre - half);
	out->hi = k == n ? 1.0 : fmin(1.0, centre + half);
	return 0;
}

/* ---------------------------------------------------------------------------
 * Binomial tails
 */

double stats_binom_logpmf(unsigned k, unsigned n, double p)
{
	double lc;

	if (k > n || !(p >= 0.0 && p <= 1.0))
		return -INFINITY;
	if (p == 0.0)
		return k == 0 ? 0.0 : -INFINITY;
	if (p == 1.0)
		return k == n ? 0.0 : -INFINITY;
	lc = lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0);
	return lc + k * log(p) + (n - k) * log1p(-p);
}

/*
 * Sum of pmf(i) for i in [lo, hi], summed in log space around the largest
 * term so that neither the tiny tails of n = 100000 nor lgamma's large
 * values overflow or underflow.
 */
static double binom_sum(unsigned lo, unsigned hi, unsigned n, double p)
{
	unsigned mode, top;
	double lmax, s = 0.0;

	if (lo > hi)
		return 0.0;
	/* The pmf is unimodal: its largest term in [lo, hi] is the mode clamped there. */
	mode = (unsigned)fmin((double)n, floor((n + 1.0) * p));
	top = mode < lo ? lo : mode > hi ? hi : mode;
	lmax = stats_binom_logpmf(top, n, p);
	if (lmax == -INFINITY)
		return 0.0;
	for (unsigned i = lo;; i++) {
		double l = stats_binom_logpmf(i, n, p);

		/* Terms below e^-745 relative to the largest cannot change a double. */
		if (l - lmax > -745.0)
			s += exp(l - lmax);
		if (i == hi)
			break;
	}
	return fmin(1.0, s * exp(lmax));
}

double stats_binom_cdf(unsigned k, unsigned n, double p)
{
	if (k >= n)
		return 1.0;
	return binom_sum(0, k, n, p);
}

double stats_binom_sf(unsigned k, unsigned n, double p)
{
	if (k == 0)
		return 1.0;
	if (k > n)
		return 0.0;
	return binom_sum(k, n, n, p);
}

/* ---------------------------------------------------------------------------
 * SPRT
 *
 * PRODUCT.md's example, H0 p = 0.2% against H1 p = 2%: a failure adds
 * log(0.02 / 0.002) = log 10 = 2.3026 and a pass log(0.98 / 0.998) =
 * -0.018200. With alpha = 0.01 and beta = 0.05, A = log(0.95 / 0.01) = 4.5539
 * and B = log(0.05 / 0.99) = -2.9857: two failures (4.6052 >= A) flag it and
 * ceil(2.9857 / 0.018200) = ceil(164.04) = 165 clean trials accept H0, which
 * is the brief's "two quick failures flag it, about 165 clean trials accept".
 * With alpha = beta = 0.05 (A = -B = log 19 = 2.9444) it would be two
 * failures and 162 passes; alpha = 0.01 is the better choice anyway, since
 * a false alarm costs a bisection and an email.
 */

static bool sprt_params_ok(const struct sprt_params *p)
{
	return p && p->p0 > 0.0 && p->p0 < p->p1 && p->p1 < 1.0 && p->alpha > 0.0 && p->beta > 0.0 &&
	       p->alpha + p->beta < 1.0 && (p->max_trials == 0 || p->min_trials <= p->max_trials);
}

int sprt_init(struct sprt *s, const struct sprt_params *p)
{
	if (!s || !sprt_params_ok(p))
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->par = *p;
	s->a = log((1.0 - p->beta) / p->alpha);
	s->b = log(p->beta / (1.0 - p->alpha));
	s->inc_fail = log(p->p1 / p->p0);
	s->inc_pass = log1p(-p->p1) - log1p(-p->p0);
	s->decided = SPRT_CONTINUE;
	return 0;
}

static enum sprt_decision sprt_evaluate(const struct sprt *s)
{
	/*
	 * min_trials holds back only the acceptance of H0: failures reaching A
	 * are strong evidence at any point ("two quick failures flag it"),
	 * while calling a commit clean after a handful of passes would rest
	 * p0 on a sample too small to have seen the library's own flakes.
	 */
	if (s->llr >= s->a)
		return SPRT_ACCEPT_H1;
	if (s->trials < s->par.min_trials)
		return SPRT_CONTINUE;
	if (s->llr <= s->b)
		return SPRT_ACCEPT_H0;
	if (s->par.max_trials && s->trials >= s->par.max_trials)
		return SPRT_UNDECIDED;
	return SPRT_CONTINUE;
}

enum sprt_decision sprt_observe(struct sprt *s, bool failed)
{
	s->trials++;
	if (failed)
		s->failures++;
	if (s->decided != SPRT_CONTINUE)
		return s->decided;
	s->llr += failed ? s->inc_fail : s->inc_pass;
	s->decided = sprt_evaluate(s);
	if (s->decided != SPRT_CONTINUE)
		s->decided_at = s->trials;
	return s->decided;
}

enum sprt_decision sprt_decision(const struct sprt *s)
{
	return s->decided;
}

enum sprt_decision sprt_truncated(const struct sprt *s)
{
	if (s->decided == SPRT_ACCEPT_H0 || s->decided == SPRT_ACCEPT_H1)
		return s->decided;
	return s->llr > 0.0 ? SPRT_ACCEPT_H1 : SPRT_ACCEPT_H0;
}

unsigned sprt_passes_to_decide(const struct sprt *s)
{
	double need;
	unsigned n, min_more;

	if (s->decided != SPRT_CONTINUE)
		return 0;
	/* The log-likelihood ratio falls by |inc_pass| per pass until it reaches B. */
	need = ceil((s->llr - s->b) / -s->inc_pass - 1e-9);
	n = need < 1.0 ? 1 : need > 1e9 ? 1000000000u : (unsigned)need;
	min_more = s->trials < s->par.min_trials ? s->par.min_trials - s->trials : 0;
	if (n < min_more)
		n = min_more;
	if (s->par.max_trials && s->trials + n > s->par.max_trials)
		n = s->par.max_trials - s->trials;
	return n;
}

/* ceil(x), at least 0 and at most UINT_MAX. */
static unsigned run_length(double x)
{
	x = ceil(x - 1e-9);
	return !(x > 0.0) ? 0 : x >= (double)UINT_MAX ? UINT_MAX : (unsigned)x;
}

int sprt_run_lengths(const struct sprt_params *p, unsigned *fails_to_h1, unsigned *passes_to_h0)
{
	struct sprt s;
	int rc = sprt_init(&s, p);

	if (rc)
		return rc;
	/*
	 * The small epsilon keeps an exact landing on a boundary (k * inc == A) a
	 * crossing. Rates very close together (a pooled rate of 1e-12 against 3e-12)
	 * take more passes than an unsigned holds: clamped, as a cast would not be.
	 */
	if (fails_to_h1)
		*fails_to_h1 = run_length(s.a / s.inc_fail);
	if (passes_to_h0)
		*passes_to_h0 = run_length(s.b / s.inc_pass);
	return 0;
}

const char *sprt_decision_name(enum sprt_decision d)
{
	switch (d) {
	case SPRT_CONTINUE:
		return "continue";
	case SPRT_ACCEPT_H0:
		return "accept_h0";
	case SPRT_ACCEPT_H1:
		return "accept_h1";
	case SPRT_UNDECIDED:
		return "undecided";
	}
	return "unknown";
}

/* ---------------------------------------------------------------------------
 * McNemar
 */

int stats_mcnemar_exact(unsigned b, unsigned c, struct stats_mcnemar *out)
{
	unsigned n, k;

	if (!out || b > NW_TRIALS_MAX || c > NW_TRIALS_MAX)
		return -EINVAL;
	out->b = b;
	out->c = c;
	n = b + c;
	if (n == 0) {
		out->p_two_sided = out->p_worse = out->p_better = 1.0;
		return 0;
	}
	/* Under H0 a discordant seed is equally likely to fail on either side. */
	k = b < c ? b : c;
	out->p_two_sided = fmin(1.0, 2.0 * stats_binom_cdf(k, n, 0.5));
	out->p_worse = stats_binom_sf(b, n, 0.5);
	out->p_better = stats_binom_cdf(b, n, 0.5);
	return 0;
}

/* ---------------------------------------------------------------------------
 * Wilcoxon signed-rank
 */

struct ranked {
	double mag;
	bool pos;
};

static int cmp_ranked(const void *a, const void *b)
{
	double x = ((const struct ranked *)a)->mag, y = ((const struct ranked *)b)->mag;

	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * Exact null distribution of the sum of doubled ranks: average ranks of tied
 * groups are multiples of 1/2, so doubled they are integers and a subset-sum
 * count over 2^n equally likely sign patterns is exact, ties included.
 */
static int wilcoxon_exact(const unsigned *rank2, unsigned n, unsigned w2, double *p_ge, double *p_le)
{
	unsigned total = 0;
	double *cnt, all, ge = 0.0, le = 0.0;

	for (unsigned i = 0; i < n; i++)
		total += rank2[i];
	cnt = calloc(total + 1, sizeof(*cnt));
	if (!cnt)
		return -ENOMEM;
	cnt[0] = 1.0;
	for (unsigned i = 0, reach = 0; i < n; i++) {
		reach += rank2[i];
		for (unsigned s = reach; s >= rank2[i]; s--) {
			cnt[s] += cnt[s - rank2[i]];
			if (s == rank2[i])
				break;
		}
	}
	all = ldexp(1.0, (int)n);
	for (unsigned s = 0; s <= total; s++) {
		if (s >= w2)
			ge += cnt[s];
		if (s <= w2)
			le += cnt[s];
	}
	*p_ge = ge / all;
	*p_le = le / all;
	free(cnt);
	return 0;
}

int stats_wilcoxon_signed_rank(const double *d, unsigned n, struct stats_wilcoxon *out)
{
	struct ranked *r = NULL;
	unsigned *rank2 = NULL;
	unsigned m = 0;
	/* Doubled ranks sum to m (m + 1): past 65535 differences that overflows an unsigned. */
	uint64_t w2 = 0;
	double tie_term = 0.0;
	int rc = 0;

	if (!out || (n && !d))
		return -EINVAL;
	if (n > NW_TRIALS_MAX)
		return -E2BIG;
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < n; i++)
		if (!isfinite(d[i]))
			return -EINVAL;
	r = malloc((n ? n : 1) * sizeof(*r));
	rank2 = malloc((n ? n : 1) * sizeof(*rank2));
	if (!r || !rank2) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		if (d[i] == 0.0) {
			out->zeros++;
			continue;
		}
		r[m].mag = fabs(d[i]);
		r[m].pos = d[i] > 0.0;
		m++;
	}
	out->n = m;
	if (m == 0) {
		out->p_greater = out->p_less = out->p_two_sided = 1.0;
		out->exact = true;
		goto out;
	}
	qsort(r, m, sizeof(*r), cmp_ranked);
	for (unsigned i = 0; i < m;) {
		unsigned j = i;

		while (j + 1 < m && r[j + 1].mag == r[i].mag)
			j++;
		/* Ranks i+1 .. j+1 share their average; doubled: i + j + 2. */
		for (unsigned k = i; k <= j; k++) {
			rank2[k] = i + j + 2;
			if (r[k].pos)
				w2 += rank2[k];
		}
		{
			double t = j - i + 1.0;

			tie_term += t * t * t - t;
		}
		i = j + 1;
	}
	out->w_plus = (double)w2 / 2.0;
	if (m < STATS_WILCOXON_EXACT_MAX) {
		rc = wilcoxon_exact(rank2, m, (unsigned)w2, &out->p_greater, &out->p_less);
		if (rc)
			goto out;
		out->exact = true;
	} else {
		double mean = m * (m + 1.0) / 4.0;
		double var = m * (m + 1.0) * (2.0 * m + 1.0) / 24.0 - tie_term / 48.0;
		double sd = sqrt(var);

		out->z = (out->w_plus - mean) / sd;
		out->p_greater = stats_normal_sf((out->w_plus - mean - 0.5) / sd);
		out->p_less = stats_normal_sf(-(out->w_plus - mean + 0.5) / sd);
	}
	out->p_greater = fmin(1.0, out->p_greater);
	out->p_less = fmin(1.0, out->p_less);
	out->p_two_sided = fmin(1.0, 2.0 * fmin(out->p_greater, out->p_less));
out:
	free(r);
	free(rank2);
	return rc;
}

int stats_drift_test(const double *cand, const double *base, unsigned n, double factor, double alpha,
		     struct stats_drift *out)
{
	double *lr = NULL, *sorted = NULL;
	unsigned m = 0;
	int rc;

	if (!out || (n && (!cand || !base)) || !(factor > 1.0) || !(alpha > 0.0 && alpha < 1.0))
		return -EINVAL;
	if (n > NW_TRIALS_MAX)
		return -E2BIG;
	memset(out, 0, sizeof(*out));
	lr = calloc(n ? n : 1, sizeof(*lr));
	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	if (!lr || !sorted) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		if (!isfinite(cand[i]) || !isfinite(base[i]))
			continue;
		lr[m++] = log(fmax(cand[i], 1e-300)) - log(fmax(base[i], 1e-300));
	}
	out->pairs = m;
	rc = stats_wilcoxon_signed_rank(lr, m, &out->w);
	if (rc)
		goto out;
	if (m > 0) {
		memcpy(sorted, lr, m * sizeof(*lr));
		qsort(sorted, m, sizeof(*sorted), cmp_double);
		out->median_log_ratio = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
	}
	out->drift = m > 0 && out->median_log_ratio > log(factor) && out->w.p_greater < alpha;
	out->improved = m > 0 && out->median_log_ratio < -log(factor) && out->w.p_less < alpha;
out:
	free(lr);
	free(sorted);
	return rc;
}

/* ---------------------------------------------------------------------------
 * Verdict, version 2
 */

void stats_verdict_params_default(struct stats_verdict_params *p)
{
	*p = (struct stats_verdict_params){
	    .p0_floor = 0.002,
	    .p1 = 0.02,
	    .p1_factor = 3.0,
	    .alpha = 0.01,
	    .beta = 0.05,
	    .min_trials = 20,
	    .max_trials = NW_TRIALS_MAX,
	    .mcnemar_alpha = 0.01,
	    .drift_factor = 2.0,
	    .drift_alpha = 0.001,
	    .drift_min_pairs = 20,
	};
}

const char *stats_test_name(enum stats_test t)
{
	switch (t) {
	case STATS_TEST_NONE:
		return "none";
	case STATS_TEST_PAIRED:
		return "paired";
	case STATS_TEST_SPRT:
		return "sprt";
	case STATS_TEST_MCNEMAR:
		return "mcnemar";
	case STATS_TEST_DRIFT:
		return "drift";
	case STATS_TEST_TRUNCATED:
		return "truncated";
	}
	return "unknown";
}

/* What one seed did on one side, from its first run and its rerun. */
enum side_state {
	SIDE_NOT_RUN,     /* no usable result: not run, or an infrastructure error */
	SIDE_PASS,        /* first run passed */
	SIDE_NEEDS_RERUN, /* failed, rerun still to come */
	SIDE_CONFIRMED,   /* failed twice */
	SIDE_UNCONFIRMED, /* failed, then passed: non-determinism */
};

static enum side_state classify(enum outcome first, enum outcome rerun)
{
	if (first == OUTCOME_NONE || first == OUTCOME_INFRA_ERROR)
		return SIDE_NOT_RUN;
	if (!outcome_is_failure(first))
		return SIDE_PASS;
	if (outcome_is_failure(rerun))
		return SIDE_CONFIRMED;
	if (rerun == OUTCOME_PASS)
		return SIDE_UNCONFIRMED;
	return SIDE_NEEDS_RERUN;
}

static void add_seed(struct stats_evidence *ev, int64_t seed)
{
	if (ev->nseeds < STATS_EVIDENCE_SEEDS_MAX)
		ev->seeds[ev->nseeds++] = seed;
	ev->seeds_total++;
}

static bool verdict_params_ok(const struct stats_verdict_params *p)
{
	return p->p0_floor > 0.0 && p->p0_floor < 0.5 && p->p1 > p->p0_floor && p->p1 < 1.0 &&
	       p->p1_factor >= 1.0 && p->alpha > 0.0 && p->beta > 0.0 && p->alpha + p->beta < 1.0 &&
	       (p->max_trials == 0 || p->min_trials <= p->max_trials) && p->mcnemar_alpha > 0.0 &&
	       p->mcnemar_alpha < 1.0 && p->drift_factor > 1.0 && p->drift_alpha > 0.0 &&
	       p->drift_alpha < 1.0;
}

/* Runs the drift test over the seeds both sides ran; sets ev->drift_used. */
/* The drift test of the candidate's ratios against the clean state's ('from_clean') or the baseline's. */
static int run_drift(const struct stats_verdict_input *in, const struct stats_verdict_params *p,
		     bool from_clean, struct stats_drift *out, bool *used)
{
	double *c = NULL, *b = NULL;
	unsigned m = 0;
	int rc = 0;

	c = malloc((in->nseeds ? in->nseeds : 1) * sizeof(*c));
	b = malloc((in->nseeds ? in->nseeds : 1) * sizeof(*b));
	if (!c || !b) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < in->nseeds; i++) {
		const struct stats_seed *s = &in->seeds[i];

		if (classify(s->cand_first, OUTCOME_NONE) == SIDE_NOT_RUN ||
		    classify(s->base_first, OUTCOME_NONE) == SIDE_NOT_RUN)
			continue;
		double base = from_clean ? s->clean_ratio : s->base_ratio;

		if (!isfinite(s->cand_ratio) || !isfinite(base))
			continue;
		c[m] = s->cand_ratio;
		b[m] = base;
		m++;
	}
	if (m < p->drift_min_pairs || m == 0)
		goto out;
	rc = stats_drift_test(c, b, m, p->drift_factor, p->drift_alpha, out);
	if (rc == 0)
		*used = true;
out:
	free(c);
	free(b);
	return rc;
}

/* A verdict that would be clean or flaky becomes regressed when the ratios drifted. */
static int apply_drift(const struct stats_verdict_input *in, const struct stats_verdict_params *p,
		       struct stats_evidence *ev)
{
	struct stats_drift back;
	bool back_used = false;
	int rc = run_drift(in, p, in->drift_from_clean, &ev->drift, &ev->drift_used);

	if (rc)
		return rc;
	if (ev->drift_used && ev->drift.drift) {
		ev->verdict = VERDICT_REGRESSED;
		ev->test = STATS_TEST_DRIFT;
		ev->nseeds = ev->seeds_total = 0;
		snprintf(ev->reason, sizeof(ev->reason), "median error ratio grew %.2fx (p=%.2g)",
			 exp(ev->drift.median_log_ratio), ev->drift.w.p_greater);
		return 0;
	}
	if (!in->drift_from_clean || ev->verdict != VERDICT_CLEAN)
		return 0;
	/*
	 * Not drifted from the clean state, but far below the baseline: the fix of
	 * a drift (the baseline had drifted) or a gain in precision. Improved, so
	 * that a regression of precision alone is closed where it is fixed.
	 */
	rc = run_drift(in, p, false, &back, &back_used);
	if (rc)
		return rc;
	if (back_used && back.improved) {
		ev->drift = back;
		ev->verdict = VERDICT_IMPROVED;
		ev->test = STATS_TEST_DRIFT;
		snprintf(ev->reason, sizeof(ev->reason),
			 "median error ratio fell %.2fx below the baseline's (p=%.2g)",
			 exp(-back.median_log_ratio), back.w.p_less);
	}
	return 0;
}

/*
 * log L(own) - log L(other) of 'failures' in 'trials' (trials > 0), own
 * their own rate: how much likelier it makes them than 'other' does
 * (0 log 0 = 0).
 */
static double own_rate_llr(unsigned failures, unsigned trials, double other)
{
	double own = (double)failures / trials;

	return (failures ? failures * (log(own) - log(other)) : 0.0) +
	       (trials - failures ? (trials - failures) * (log1p(-own) - log1p(-other)) : 0.0);
}

/*
 * Whether the pooled baseline rate (stats_verdict_input) stands for the
 * library's: unless the baseline commit fails less often and its own trials
 * make the pooled rate POOL_ODDS times less likely than their own rate
 * does. A stable flake whose failures happened not to show at the baseline
 * (0 of 165 at 2%: odds 28) keeps the pool; a fix inside it (0 of 100 after
 * 7%: odds 1470) does not, so that its revert is judged against the fixed
 * rate. A baseline failing more often than the pool keeps it too: that is
 * what the candidate is measured against, not a reason to raise the bar.
 * The odds are high because most commits change nothing: a 2% flake passes
 * 228 trials in a row at 1% of commits, 342 at 0.1%.
 */
#define POOL_ODDS 1000.0
/*
 * A candidate failing less often than the pool by these odds (against p / 4,
 * below) may be a fix: more trials tell, a round at a time. Low, since a fix
 * missed leaves a regression open at every commit after it and the pool of
 * an open race is itself an estimate: 0 of 64 against a pooled 5% race that
 * showed 20 of 640 (3.1%) is odds 4.5 (the old trigger, 8, let that fix go
 * by); a stable 1% flake's 64 passes (odds 1.6) are not worth a round.
 */
#define FIX_ODDS 2.0
static bool pool_fits_baseline(const struct stats_verdict_input *in, const struct stats_side *base)
{
	double pool;

	if (in->pool_trials == 0 || in->pool_failures > in->pool_trials)
		return false;
	if (base->trials == 0)
		return true;
	pool = (double)in->pool_failures / in->pool_trials;
	if ((double)base->failures / base->trials >= pool)
		return true;
	return !(own_rate_llr(base->failures, base->trials, pool) >= log(POOL_ODDS));
}

/*
 * A fix: the candidate's trials tested, as a sequential probability ratio,
 * against the pooled baseline rate p and a fixed lower rate p / FIX_FACTOR
 * (log odds; 0 without a pool). POOL_ODDS of it is an improvement (a fix:
 * the next commits' pool starts there); FIX_ODDS asks for more trials first.
 * A fixed alternative, not the candidate's own rate: with more trials asked
 * for until the odds are reached, a likelihood ratio against the rate the
 * trials happened to show closed a 5% race that was still there (6 of 336
 * failing after an extension, odds of 1100 against 5%), once in some 40
 * commits; Wald's bound holds for this one whenever it is looked at.
 */
#define FIX_FACTOR 4.0
/*
 * The pooled rate a fix is measured against: the bottom of its two-sigma
 * Wilson interval, not its middle. A young pool is an estimate: a 30% race
 * pooled at 25 of 64 (39%) called a commit whose first seeds failed 14 of 82
 * (17%, the race's seeds running low there) a fix at odds of 1000 against
 * 39% / 4, though both rates fit it badly; against 27% it is not one.
 */
static double fix_pool(const struct stats_evidence *ev)
{
	struct stats_interval w;

	if (stats_wilson(ev->pool.failures, ev->pool.trials, 2.0, &w) < 0)
		return 0.0;
	return w.lo;
}

static double fix_step(const struct stats_evidence *ev, bool failed)
{
	double pool = fix_pool(ev), fixed = pool / FIX_FACTOR;

	return failed ? log(fixed) - log(pool) : log1p(-fixed) - log1p(-pool);
}

static double below_pool(const struct stats_evidence *ev)
{
	if (!ev->pool.trials || !ev->cand.trials || ev->pool.failures == 0 || !(fix_pool(ev) > 0.0))
		return 0.0;
	return ev->cand.failures * fix_step(ev, true) +
	       (ev->cand.trials - ev->cand.failures) * fix_step(ev, false);
}

static int verdict_nondeterministic(const struct stats_verdict_input *in,
				    const struct stats_verdict_params *p, struct stats_evidence *ev);

static int verdict_deterministic(const struct stats_verdict_input *in, const struct stats_verdict_params *p,
				 struct stats_evidence *ev)
{
	unsigned not_run = 0, needs_rerun = 0, needs_base = 0, base_failures = 0, base_flakes_pass = 0;

	for (unsigned i = 0; i < in->nseeds; i++) {
		const struct stats_seed *s = &in->seeds[i];
		enum side_state c = classify(s->cand_first, s->cand_rerun);
		enum side_state b = classify(s->base_first, s->base_rerun);

		if (c == SIDE_NOT_RUN)
			not_run++;
		else if (c == SIDE_NEEDS_RERUN)
			needs_rerun++;
		if (b != SIDE_NOT_RUN && b != SIDE_PASS)
			base_failures++;
		if (c == SIDE_CONFIRMED && b == SIDE_PASS)
			ev->regressed_seeds++;
		/* A confirmed failure is only a regression if the baseline passes that seed. */
		if (c == SIDE_CONFIRMED && (b == SIDE_NOT_RUN || b == SIDE_NEEDS_RERUN))
			needs_base++;
		/* Improvement needs every baseline failure confirmed there. */
		if (c == SIDE_PASS && b == SIDE_NEEDS_RERUN)
			needs_base++;
		if (c == SIDE_UNCONFIRMED)
			ev->nondeterministic_seeds++;
		if (b == SIDE_CONFIRMED && c == SIDE_PASS)
			ev->improved_seeds++;
		if (b == SIDE_UNCONFIRMED && c == SIDE_PASS)
			base_flakes_pass++;
		if (c == SIDE_CONFIRMED && (b == SIDE_CONFIRMED || b == SIDE_UNCONFIRMED))
			ev->both_fail_seeds++;
	}
	ev->test = STATS_TEST_PAIRED;
	/* A confirmed regression decides at once, even with seeds still to run. */
	if (ev->regressed_seeds) {
		ev->verdict = VERDICT_REGRESSED;
		for (unsigned i = 0; i < in->nseeds; i++) {
			const struct stats_seed *s = &in->seeds[i];

			if (classify(s->cand_first, s->cand_rerun) == SIDE_CONFIRMED &&
			    classify(s->base_first, s->base_rerun) == SIDE_PASS)
				add_seed(ev, s->seed);
		}
		snprintf(ev->reason, sizeof(ev->reason),
			 "%u seed(s) fail twice here and pass on the baseline", ev->regressed_seeds);
		return 0;
	}
	if (in->nseeds == 0 || not_run || needs_rerun || needs_base) {
		ev->verdict = VERDICT_PENDING;
		ev->test = STATS_TEST_NONE;
		ev->needs_trials = not_run + needs_rerun;
		ev->needs_baseline = needs_base;
		if (in->nseeds == 0)
			snprintf(ev->reason, sizeof(ev->reason), "no seeds planned");
		else if (ev->needs_trials)
			snprintf(ev->reason, sizeof(ev->reason), "needs more trials: %u", ev->needs_trials);
		else
			snprintf(ev->reason, sizeof(ev->reason), "needs baseline runs: %u", needs_base);
		return 0;
	}
	if (ev->nondeterministic_seeds) {
		/*
		 * A seed that failed and then passed: the check is not deterministic
		 * here (a race, or a one-off fault). Whether that is the library's
		 * old flakiness or a race this commit brought is a question of
		 * rates, decided as for a non-deterministic check: SPRT and McNemar
		 * against the baseline, with more trials while undecided. (Calling
		 * it flaky at once left a new rare race unflagged at its commit.)
		 */
		return verdict_nondeterministic(in, p, ev);
	}
	/*
	 * Improved: every seed the baseline failed passes here, and some of them
	 * failed there twice. The baseline's failures that passed their rerun
	 * (a bug whose garbage differs run to run: an uncleared accumulator on
	 * the GPU) pass here too, but are no evidence either way: requiring them
	 * confirmed left such a regression open at its fix and every commit after.
	 */
	if (ev->improved_seeds && ev->improved_seeds + base_flakes_pass == base_failures) {
		ev->verdict = VERDICT_IMPROVED;
		for (unsigned i = 0; i < in->nseeds; i++)
			if (classify(in->seeds[i].base_first, in->seeds[i].base_rerun) == SIDE_CONFIRMED &&
			    classify(in->seeds[i].cand_first, in->seeds[i].cand_rerun) == SIDE_PASS)
				add_seed(ev, in->seeds[i].seed);
		if (base_flakes_pass)
			snprintf(ev->reason, sizeof(ev->reason),
				 "all %u baseline failure(s) pass here (%u of them failed there only once)",
				 base_failures, base_flakes_pass);
		else
			snprintf(ev->reason, sizeof(ev->reason), "all %u baseline failure(s) pass here",
				 base_failures);
	} else if (ev->both_fail_seeds) {
		ev->verdict = VERDICT_FLAKY;
		for (unsigned i = 0; i < in->nseeds; i++)
			if (classify(in->seeds[i].cand_first, in->seeds[i].cand_rerun) == SIDE_CONFIRMED)
				add_seed(ev, in->seeds[i].seed);
		snprintf(ev->reason, sizeof(ev->reason), "%u seed(s) fail on both sides (rate %.3g)",
			 ev->both_fail_seeds, ev->cand.rate.p);
	} else {
		ev->verdict = VERDICT_CLEAN;
		snprintf(ev->reason, sizeof(ev->reason), "no failure");
	}
	return apply_drift(in, p, ev);
}

static int verdict_nondeterministic(const struct stats_verdict_input *in,
				    const struct stats_verdict_params *p, struct stats_evidence *ev)
{
	struct sprt_params sp;
	const struct stats_side *rate;
	unsigned b = 0, c = 0, unpaired_fail = 0;
	enum sprt_decision dec;
	double p0;
	int rc;

	if (ev->base.trials == 0) {
		ev->verdict = VERDICT_PENDING;
		ev->needs_baseline = ev->cand.trials > p->min_trials ? ev->cand.trials : p->min_trials;
		snprintf(ev->reason, sizeof(ev->reason), "needs baseline runs: %u", ev->needs_baseline);
		return 0;
	}
	/*
	 * p0 is the baseline's observed rate, floored: the SPRT then asks whether
	 * the candidate fails clearly more often than the library already did.
	 * Capping p0 below p1 keeps the test defined when the baseline fails often.
	 */
	if (pool_fits_baseline(in, &ev->base)) {
		ev->pool.trials = in->pool_trials;
		ev->pool.failures = in->pool_failures;
		stats_wilson(ev->pool.failures, ev->pool.trials, stats_z_from_alpha(0.05), &ev->pool.rate);
	}
	rate = ev->pool.trials ? &ev->pool : &ev->base;
	p0 = (double)rate->failures / rate->trials;
	/*
	 * A pool's rate is an estimate: the SPRT takes the top of its one-sigma
	 * Wilson interval, so that a pool of few trials whose flakes happened
	 * to be rare (3 of 242 at 2%) does not flag the next commits, each of
	 * them then left out of the pool that would correct it.
	 */
	if (ev->pool.trials) {
		struct stats_interval w;

		if (stats_wilson(rate->failures, rate->trials, 1.0, &w) == 0)
			p0 = w.hi;
	}
	p0 = fmax(p0, p->p0_floor);
	p0 = fmin(p0, 0.99);
	sp = (struct sprt_params){
	    .p0 = p0,
	    .p1 = fmin(fmax(p->p1, p->p1_factor * p0), 0.999),
	    .alpha = p->alpha,
	    .beta = p->beta,
	    .min_trials = p->min_trials,
	    .max_trials = p->max_trials,
	};
	if (sp.p1 <= sp.p0)
		sp.p1 = fmin(0.999, (sp.p0 + 1.0) / 2.0);
	rc = sprt_init(&ev->sprt, &sp);
	if (rc)
		return rc;
	ev->sprt_used = true;
	for (unsigned i = 0; i < in->nseeds; i++) {
		const struct stats_seed *s = &in->seeds[i];
		enum side_state cs = classify(s->cand_first, OUTCOME_NONE);
		enum side_state bs = classify(s->base_first, OUTCOME_NONE);
		bool cf = outcome_is_failure(s->cand_first), bf = outcome_is_failure(s->base_first);

		if (cs != SIDE_NOT_RUN)
			sprt_observe(&ev->sprt, cf);
		if (cs == SIDE_NOT_RUN)
			continue;
		if (bs == SIDE_NOT_RUN) {
			unpaired_fail += cf;
			continue;
		}
		b += cf && !bf;
		c += bf && !cf;
	}
	rc = stats_mcnemar_exact(b, c, &ev->mcnemar);
	if (rc)
		return rc;
	dec = sprt_decision(&ev->sprt);
	if (dec == SPRT_ACCEPT_H1 && b > c) {
		ev->verdict = VERDICT_REGRESSED;
		ev->test = STATS_TEST_SPRT;
		snprintf(ev->reason, sizeof(ev->reason),
			 "failure rate %u/%u, baseline %u/%u%s (SPRT, p0 %.3g)", ev->cand.failures,
			 ev->cand.trials, rate->failures, rate->trials, ev->pool.trials ? " pooled" : "",
			 sp.p0);
	} else if (dec == SPRT_ACCEPT_H1 && unpaired_fail) {
		/* The failing seeds may fail on the baseline too: run them there first. */
		ev->verdict = VERDICT_PENDING;
		ev->test = STATS_TEST_SPRT;
		ev->needs_baseline = unpaired_fail;
		snprintf(ev->reason, sizeof(ev->reason), "needs baseline runs: %u", unpaired_fail);
		return 0;
	} else if (ev->mcnemar.p_worse < p->mcnemar_alpha) {
		ev->verdict = VERDICT_REGRESSED;
		ev->test = STATS_TEST_MCNEMAR;
		snprintf(ev->reason, sizeof(ev->reason),
			 "%u seed(s) fail only here, %u only on the baseline (p=%.2g)", b, c,
			 ev->mcnemar.p_worse);
	} else if (ev->mcnemar.p_better < p->mcnemar_alpha && !ev->pool.trials) {
		/*
		 * Where the library's rate is pooled, discordant seeds are not a fix:
		 * at a 5% race one commit's failing seeds pass at the next one now
		 * and then (7 of 7 at p < 0.01, once in some 40 commits), which would
		 * close a regression that is still there. The pool decides (below).
		 */
		ev->verdict = VERDICT_IMPROVED;
		ev->test = STATS_TEST_MCNEMAR;
		snprintf(ev->reason, sizeof(ev->reason),
			 "%u seed(s) fail only on the baseline, %u only here (p=%.2g)", c, b,
			 ev->mcnemar.p_better);
	} else if (dec == SPRT_CONTINUE) {
		ev->verdict = VERDICT_PENDING;
		ev->test = STATS_TEST_SPRT;
		ev->needs_trials = sprt_passes_to_decide(&ev->sprt);
		snprintf(ev->reason, sizeof(ev->reason), "needs more trials: %u", ev->needs_trials);
		return 0;
	} else if (below_pool(ev) >= log(POOL_ODDS)) {
		/* Clearly below the library's pooled rate: a fix, though no paired seed shows it yet. */
		ev->verdict = VERDICT_IMPROVED;
		ev->test = STATS_TEST_SPRT;
		snprintf(ev->reason, sizeof(ev->reason),
			 "failure rate %u/%u, below the baseline's %u/%u pooled", ev->cand.failures,
			 ev->cand.trials, ev->pool.failures, ev->pool.trials);
	} else if (below_pool(ev) >= log(FIX_ODDS) && dec != SPRT_UNDECIDED &&
		   (p->max_trials == 0 || ev->cand.trials < p->max_trials)) {
		/*
		 * Perhaps a fix: more trials tell it from a flake that happened not to
		 * show, so that a later revert is judged against the fixed rate. The
		 * passes that would reach POOL_ODDS (each adds fix_step()), at most
		 * as many as it has: a flake that happened not to show fails again
		 * within a round or two, and the rounds stop there.
		 */
		double step = fix_step(ev, false);
		unsigned to_odds = (unsigned)ceil((log(POOL_ODDS) - below_pool(ev)) / step);

		ev->verdict = VERDICT_PENDING;
		ev->test = STATS_TEST_SPRT;
		ev->needs_trials = to_odds < ev->cand.trials ? to_odds : ev->cand.trials;
		snprintf(ev->reason, sizeof(ev->reason), "needs more trials: %u (below the baseline's rate?)",
			 ev->needs_trials);
		return 0;
	} else {
		/*
		 * H0 accepted, or H1 accepted while the paired seeds show the baseline
		 * failing as often, or truncated: the candidate is not shown worse than
		 * its baseline. Failures at such a rate are the library's: flaky.
		 */
		ev->test = dec == SPRT_UNDECIDED ? STATS_TEST_TRUNCATED : STATS_TEST_SPRT;
		ev->verdict = ev->cand.failures ? VERDICT_FLAKY : VERDICT_CLEAN;
		if (ev->cand.failures)
			snprintf(ev->reason, sizeof(ev->reason),
				 "fails at a low rate: %u/%u, baseline %u/%u%s", ev->cand.failures,
				 ev->cand.trials, rate->failures, rate->trials,
				 ev->pool.trials ? " pooled" : "");
		else
			snprintf(ev->reason, sizeof(ev->reason), "no failure in %u trials", ev->cand.trials);
	}
	for (unsigned i = 0; i < in->nseeds; i++) {
		const struct stats_seed *s = &in->seeds[i];
		bool cf = outcome_is_failure(s->cand_first), bf = outcome_is_failure(s->base_first);

		/* Name the seeds behind the verdict: the discordant ones, or all failing ones. */
		if (ev->verdict == VERDICT_IMPROVED ? (bf && !cf)
						    : (cf && (ev->verdict != VERDICT_REGRESSED || !bf)))
			add_seed(ev, s->seed);
	}
	if (ev->verdict == VERDICT_CLEAN || ev->verdict == VERDICT_FLAKY)
		return apply_drift(in, p, ev);
	return 0;
}

int stats_verdict(const struct stats_verdict_input *in, const struct stats_verdict_params *p,
		  struct stats_evidence *ev)
{
	struct stats_verdict_params def;
	double z = stats_z_from_alpha(0.05);
	int rc;

	if (!in || !ev || (in->nseeds && !in->seeds))
		return -EINVAL;
	if (in->nseeds > NW_TRIALS_MAX)
		return -E2BIG;
	if (!p) {
		stats_verdict_params_default(&def);
		p = &def;
	}
	if (!verdict_params_ok(p))
		return -EINVAL;
	memset(ev, 0, sizeof(*ev));
	for (unsigned i = 0; i < in->nseeds; i++) {
		const struct stats_seed *s = &in->seeds[i];

		if (classify(s->cand_first, OUTCOME_NONE) != SIDE_NOT_RUN) {
			ev->cand.trials++;
			ev->cand.failures += outcome_is_failure(s->cand_first);
		}
		if (classify(s->base_first, OUTCOME_NONE) != SIDE_NOT_RUN) {
			ev->base.trials++;
			ev->base.failures += outcome_is_failure(s->base_first);
		}
	}
	stats_wilson(ev->cand.failures, ev->cand.trials, z, &ev->cand.rate);
	stats_wilson(ev->base.failures, ev->base.trials, z, &ev->base.rate);
	if (in->build_failed) {
		ev->verdict = VERDICT_BUILD_FAILED;
		snprintf(ev->reason, sizeof(ev->reason), "build failed");
		return 0;
	}
	if (in->infra_failed) {
		ev->verdict = VERDICT_INFRA_ERROR;
		snprintf(ev->reason, sizeof(ev->reason), "infrastructure errors");
		return 0;
	}
	rc = in->deterministic ? verdict_deterministic(in, p, ev) : verdict_nondeterministic(in, p, ev);
	if (rc)
		memset(ev, 0, sizeof(*ev));
	return rc;
}

/* ---------------------------------------------------------------------------
 * JSON
 */

static json_t *side_json(const struct stats_side *s)
{
	return json_pack("{s:I, s:I, s:f, s:[f, f]}", "trials", (json_int_t)s->trials, "failures",
			 (json_int_t)s->failures, "rate", s->rate.p, "wilson95", s->rate.lo, s->rate.hi);
}

/* json_real refuses NaN and infinities; JSON has no spelling for them either. */
static json_t *real_or_null(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

json_t *stats_evidence_json(const struct stats_evidence *ev)
{
	json_t *o, *seeds = NULL, *x = NULL;

	if (!ev)
		return NULL;
	o = json_object();
	if (!o)
		return NULL;
	if (json_object_set_new(o, "verdict", json_string(verdict_name(ev->verdict))) ||
	    json_object_set_new(o, "test", json_string(stats_test_name(ev->test))) ||
	    json_object_set_new(o, "reason", json_string(ev->reason)) ||
	    json_object_set_new(o, "needs_trials", json_integer(ev->needs_trials)) ||
	    json_object_set_new(o, "needs_baseline", json_integer(ev->needs_baseline)) ||
	    json_object_set_new(o, "candidate", side_json(&ev->cand)) ||
	    json_object_set_new(o, "baseline_rate", side_json(&ev->base)))
		goto error;
	if (ev->pool.trials && json_object_set_new(o, "baseline_pool", side_json(&ev->pool)))
		goto error;
	if (ev->sprt_used) {
		x = json_pack("{s:o, s:o, s:f, s:f, s:o, s:o, s:o, s:s, s:I}", "p0",
			      real_or_null(ev->sprt.par.p0), "p1", real_or_null(ev->sprt.par.p1), "alpha",
			      ev->sprt.par.alpha, "beta", ev->sprt.par.beta, "llr",
			      real_or_null(ev->sprt.llr), "a", real_or_null(ev->sprt.a), "b",
			      real_or_null(ev->sprt.b), "decision", sprt_decision_name(ev->sprt.decided),
			      "decided_at", (json_int_t)ev->sprt.decided_at);
		if (json_object_set_new(o, "sprt", x))
			goto error;
		x = json_pack("{s:I, s:I, s:f, s:f, s:f}", "b", (json_int_t)ev->mcnemar.b, "c",
			      (json_int_t)ev->mcnemar.c, "p_two_sided", ev->mcnemar.p_two_sided, "p_worse",
			      ev->mcnemar.p_worse, "p_better", ev->mcnemar.p_better);
		if (json_object_set_new(o, "mcnemar", x))
			goto error;
		/* A deterministic check judged by rates: the seeds that failed, then passed. */
		if (ev->nondeterministic_seeds &&
		    json_object_set_new(o, "nondeterministic_seeds",
					json_integer(ev->nondeterministic_seeds)))
			goto error;
	} else {
		x = json_pack("{s:I, s:I, s:I, s:I}", "regressed", (json_int_t)ev->regressed_seeds,
			      "improved", (json_int_t)ev->improved_seeds, "both_fail",
			      (json_int_t)ev->both_fail_seeds, "nondeterministic",
			      (json_int_t)ev->nondeterministic_seeds);
		if (json_object_set_new(o, "paired", x))
			goto error;
	}
	if (ev->drift_used) {
		x = json_pack("{s:I, s:o, s:f, s:f, s:b, s:b, s:b}", "pairs", (json_int_t)ev->drift.pairs,
			      "median_log_ratio", real_or_null(ev->drift.median_log_ratio), "p_greater",
			      ev->drift.w.p_greater, "p_two_sided", ev->drift.w.p_two_sided, "exact",
			      ev->drift.w.exact, "drift", ev->drift.drift, "improved", ev->drift.improved);
		if (json_object_set_new(o, "drift", x))
			goto error;
	}
	seeds = json_array();
	if (!seeds)
		goto error;
	for (unsigned i = 0; i < ev->nseeds; i++)
		if (json_array_append_new(seeds, json_integer(ev->seeds[i])))
			goto error;
	if (json_object_set_new(o, "seeds", seeds))
		goto error_seeds_taken;
	if (json_object_set_new(o, "seeds_total", json_integer(ev->seeds_total)))
		goto error_seeds_taken;
	return o;
error:
	json_decref(seeds);
error_seeds_taken:
	json_decref(o);
	return NULL;
}
