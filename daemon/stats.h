/*
 * stats: the statistics behind verdicts, version 2 (pure module: libm and
 * jansson only).
 *
 * PRODUCT.md "Verdicts and statistics": seeds are paired across commits, so
 * a deterministic check is decided exactly (fails twice on the candidate,
 * passes on the baseline); a non-deterministic one by a sequential
 * probability ratio test on the failure rate against the baseline's, with
 * McNemar's exact test on the discordant paired seeds; precision drift by a
 * paired Wilcoxon signed-rank test on log(ratio) per seed. Every p-value and
 * rate that decided is kept in a struct stats_evidence, which serialises to
 * JSON for the database and the API.
 *
 * Functions return 0 or a negative errno; predicates return bool.
 */
#ifndef NW_STATS_H
#define NW_STATS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "outcome.h"

/* ---------------------------------------------------------------------------
 * Normal distribution
 */

/* Upper tail P(Z > z) of the standard normal, accurate in the far tail. */
double stats_normal_sf(double z);
/* The p-quantile of the standard normal, 0 < p < 1 (NAN outside). */
double stats_normal_quantile(double p);
/* Two-sided critical value: 1.959964 for alpha 0.05 (NAN unless 0 < alpha < 1). */
double stats_z_from_alpha(double alpha);

/* ---------------------------------------------------------------------------
 * Binomial proportion: Wilson score interval
 */

struct stats_interval {
	double p;  /* point estimate k/n (0 when n is 0) */
	double lo; /* lower bound */
	double hi; /* upper bound */
};

/*
 * Wilson score interval for k successes in n trials at critical value z
 * (z = stats_z_from_alpha(0.05) for 95%). n == 0 gives [0, 1].
 * Returns -EINVAL when k > n or z is not positive and finite.
 */
int stats_wilson(unsigned k, unsigned n, double z, struct stats_interval *out);

/* ---------------------------------------------------------------------------
 * Binomial tails (log-space, stable for n up to NW_TRIALS_MAX and beyond)
 */

/* log of the binomial pmf P(X = k), X ~ Bin(n, p); -INFINITY when impossible. */
double stats_binom_logpmf(unsigned k, unsigned n, double p);
/* P(X <= k). */
double stats_binom_cdf(unsigned k, unsigned n, double p);
/* P(X >= k). */
double stats_binom_sf(unsigned k, unsigned n, double p);

/* ---------------------------------------------------------------------------
 * Wald's sequential probability ratio test for a failure rate
 *
 * H0: p = p0 against H1: p = p1 (p0 < p1). Each observation adds
 * log(p1/p0) for a failure and log((1-p1)/(1-p0)) for a pass to the
 * log-likelihood ratio; the test accepts H1 when it reaches
 * A = log((1-beta)/alpha) and H0 when it falls to B = log(beta/(1-alpha)).
 * alpha is the rate of false alarms on a commit at p0, beta the rate of
 * missed regressions at p1.
 *
 * The test is sequential: once a boundary is crossed the decision is latched
 * and later observations are counted but do not change it, since the error
 * rates hold only for the first crossing. H0 is not accepted before
 * min_trials (H1 may be: failures reaching A are strong evidence at any
 * point, while a handful of passes is too little to call a commit clean). At max_trials without a crossing the decision is
 * SPRT_UNDECIDED: the data did not separate p0 from p1 at the requested
 * strength, and calling it by the sign of the log-likelihood ratio would
 * silently weaken alpha and beta. sprt_truncated() gives that sign-based
 * call for a caller that must decide anyway (it is what Wald's truncated
 * SPRT does), and says so in its name.
 */

enum sprt_decision {
	SPRT_CONTINUE = 0,
	SPRT_ACCEPT_H0,
	SPRT_ACCEPT_H1,
	SPRT_UNDECIDED, /* max_trials reached without a crossing */
};

struct sprt_params {
	double p0, p1;       /* 0 < p0 < p1 < 1 */
	double alpha, beta;  /* 0 < alpha, beta and alpha + beta < 1 */
	unsigned min_trials; /* H0 is not accepted before this many observations */
	unsigned max_trials; /* 0: no limit */
};

struct sprt {
	struct sprt_params par;
	double a, b;                /* boundaries A > 0 > B */
	double inc_fail, inc_pass;  /* per-observation increments (> 0, < 0) */
	double llr;                 /* log-likelihood ratio so far */
	unsigned trials, failures;  /* observations so far */
	enum sprt_decision decided; /* latched decision, SPRT_CONTINUE until then */
	unsigned decided_at;        /* observations when it was decided */
};

/* Validates the parameters (-EINVAL) and starts an empty test. */
int sprt_init(struct sprt *s, const struct sprt_params *p);
/* Adds one observation; returns the (possibly latched) decision. */
enum sprt_decision sprt_observe(struct sprt *s, bool failed);
/* The decision so far. */
enum sprt_decision sprt_decision(const struct sprt *s);
/* The decision a truncated SPRT takes now: H1 if llr > 0, else H0. */
enum sprt_decision sprt_truncated(const struct sprt *s);
/*
 * The cheapest way to a decision from the current state: how many more
 * consecutive passes would accept H0 (respecting min_trials, capped at
 * max_trials). 0 when already decided.
 */
unsigned sprt_passes_to_decide(const struct sprt *s);
/*
 * From an empty test: the consecutive failures that accept H1 and the
 * consecutive passes that accept H0, ignoring min/max trials.
 * Returns -EINVAL for bad parameters.
 */
int sprt_run_lengths(const struct sprt_params *p, unsigned *fails_to_h1, unsigned *passes_to_h0);
const char *sprt_decision_name(enum sprt_decision d);

/* ---------------------------------------------------------------------------
 * McNemar's exact test on discordant paired seeds
 */

struct stats_mcnemar {
	unsigned b;         /* failed only on the candidate */
	unsigned c;         /* failed only on the baseline */
	double p_two_sided; /* min(1, 2 P(X <= min(b, c))), X ~ Bin(b + c, 1/2) */
	double p_worse;     /* one-sided, candidate worse: P(X >= b) */
	double p_better;    /* one-sided, candidate better: P(X <= b) */
};

/* b + c == 0 gives p-values of 1. */
int stats_mcnemar_exact(unsigned b, unsigned c, struct stats_mcnemar *out);

/* ---------------------------------------------------------------------------
 * Wilcoxon signed-rank test and precision drift
 */

/* Below this many non-zero differences the exact null distribution is used. */
#define STATS_WILCOXON_EXACT_MAX 20

struct stats_wilcoxon {
	unsigned n;         /* non-zero differences ranked */
	unsigned zeros;     /* zero differences, dropped (Wilcoxon's method) */
	double w_plus;      /* sum of the ranks of positive differences */
	double z;           /* normal score (0 when exact) */
	double p_greater;   /* one-sided: differences tend to be positive */
	double p_less;      /* one-sided: differences tend to be negative */
	double p_two_sided; /* min(1, 2 min(p_greater, p_less)) */
	bool exact;         /* exact permutation distribution (ties included) */
};

/*
 * Signed-rank test of the differences d[0..n-1] against a distribution
 * symmetric about 0. Zeros are dropped, tied magnitudes get average ranks.
 * For fewer than STATS_WILCOXON_EXACT_MAX non-zero differences the p-values
 * are exact (the permutation distribution given the ranks, ties included);
 * otherwise the normal approximation with the tie-corrected variance and a
 * continuity correction of 1/2 (R's wilcox.test default).
 * Non-finite differences are -EINVAL; -ENOMEM; n > NW_TRIALS_MAX is -E2BIG.
 */
int stats_wilcoxon_signed_rank(const double *d, unsigned n, struct stats_wilcoxon *out);

struct stats_drift {
	unsigned pairs;          /* pairs with both ratios usable */
	double median_log_ratio; /* median of log(cand / base) over those pairs */
	struct stats_wilcoxon w; /* test of log(cand / base) > 0 */
	bool drift;              /* median > log(factor) and p_greater < alpha */
	bool improved;           /* median < -log(factor) and p_less < alpha */
};

/*
 * Paired precision drift: cand[i] and base[i] are the error ratios of seed i
 * on the candidate and the baseline. Pairs where either is NaN or infinite
 * are skipped (a non-finite result already fails the trial, which the
 * failure tests count). Ratios at or below 1e-300 are clamped there so an
 * exact zero error compares as "much smaller", not as undefined; two exact
 * zeros are a zero difference. factor > 1, 0 < alpha < 1.
 */
int stats_drift_test(const double *cand, const double *base, unsigned n, double factor, double alpha,
		     struct stats_drift *out);

/* ---------------------------------------------------------------------------
 * Verdict, version 2
 */

/* Seeds named in the evidence; the count of all of them is kept as well. */
#define STATS_EVIDENCE_SEEDS_MAX 32

/* One seed of one check x dtype on the candidate and on its baseline. */
struct stats_seed {
	int64_t seed;
	enum outcome cand_first, cand_rerun; /* OUTCOME_NONE when not run */
	enum outcome base_first, base_rerun;
	double cand_ratio, base_ratio; /* worst error ratio of the first run; NAN if unknown */
	double clean_ratio; /* the same at the last clean state (drift_from_clean); NAN if unknown */
};

struct stats_verdict_params {
	double p0_floor;          /* SPRT H0 rate is max(baseline rate, this) */
	double p1;                /* SPRT H1 rate, at least ... */
	double p1_factor;         /* ... and at least p1_factor * p0 */
	double alpha, beta;       /* SPRT error rates */
	unsigned min_trials;      /* SPRT: H0 not accepted before */
	unsigned max_trials;      /* SPRT: truncation (then flaky or clean) */
	double mcnemar_alpha;     /* one-sided level for McNemar */
	double drift_factor;      /* median ratio growth that counts as drift */
	double drift_alpha;       /* level of the signed-rank test */
	unsigned drift_min_pairs; /* fewer pairs: no drift test */
};

/*
 * Defaults: p0_floor 0.002, p1 0.02, p1_factor 3, alpha 0.01, beta 0.05
 * (PRODUCT.md's example: two quick failures flag, 165 clean trials accept),
 * min 20, max NW_TRIALS_MAX, McNemar 0.01, drift factor 2 at 0.001 with at
 * least 20 pairs.
 */
void stats_verdict_params_default(struct stats_verdict_params *p);

struct stats_verdict_input {
	bool deterministic;             /* the check claims identical results per seed */
	bool build_failed;              /* the commit did not build */
	bool infra_failed;              /* gave up after repeated infrastructure faults */
	const struct stats_seed *seeds; /* borrowed; in the order the seeds were run */
	unsigned nseeds;                /* <= NW_TRIALS_MAX */
	/*
	 * The baseline's failure rate pooled over the last commits not
	 * regressed, the baseline among them, none before an improvement
	 * (first runs; 0 trials: the baseline's paired seeds alone). It is the
	 * rate the rate tests take as the library's, unless the baseline's own
	 * trials make it 1000 times less likely than their own, lower rate (a
	 * fix inside the pool): one commit's trials are a small sample, and a 2% flake
	 * that happened to pass all 165 trials at one commit made every commit
	 * after it at 2% look like a regression.
	 */
	unsigned pool_trials, pool_failures;
	/*
	 * Precision drift is measured from each seed's clean_ratio (the last
	 * commit with no open regression) instead of the baseline's: a slow
	 * creep, a little worse at every commit, is still caught.
	 */
	bool drift_from_clean;
};

/* Which test decided. */
enum stats_test {
	STATS_TEST_NONE = 0,
	STATS_TEST_PAIRED,    /* deterministic: exact per-seed rule */
	STATS_TEST_SPRT,      /* sequential test on the candidate's failure rate */
	STATS_TEST_MCNEMAR,   /* exact test on discordant paired seeds */
	STATS_TEST_DRIFT,     /* signed-rank test on log(ratio) */
	STATS_TEST_TRUNCATED, /* SPRT reached max_trials undecided */
};
const char *stats_test_name(enum stats_test t);

struct stats_side {
	unsigned trials, failures;  /* first runs only: reruns are chosen by outcome, so biased */
	struct stats_interval rate; /* Wilson 95% */
};

struct stats_evidence {
	enum verdict verdict;
	enum stats_test test;
	char reason[96];         /* one line for people: "needs more trials: 140", ... */
	unsigned needs_trials;   /* pending: more candidate trials (or reruns) asked for */
	unsigned needs_baseline; /* pending: baseline runs asked for */
	struct stats_side cand, base;
	struct stats_side pool; /* the pooled baseline rate the rate tests took (0 trials: none) */
	/* Non-deterministic checks. */
	bool sprt_used;
	struct sprt sprt;
	struct stats_mcnemar mcnemar;
	/* Both. */
	bool drift_used;
	struct stats_drift drift;
	/* Deterministic counts. */
	unsigned regressed_seeds, improved_seeds, both_fail_seeds, nondeterministic_seeds;
	/* The seeds behind the verdict (the first STATS_EVIDENCE_SEEDS_MAX). */
	int64_t seeds[STATS_EVIDENCE_SEEDS_MAX];
	unsigned nseeds;      /* stored in seeds[] */
	unsigned seeds_total; /* all of them */
};

/*
 * Decides the verdict of one commit x check x dtype and fills 'ev'.
 *
 * Deterministic check: a seed that fails on the candidate, fails again on
 * its rerun and passes on the baseline is a regression (decided at once).
 * A failure without its rerun, or a seed not run yet, leaves it pending.
 * A seed that fails then passes on its rerun shows non-determinism: the
 * candidate is then judged by its failure rate as a non-deterministic check
 * is (below): flaky at the baseline's rate, regressed clearly above it.
 * If every baseline failure failed twice there and passes on the candidate,
 * improved. Seeds failing twice on both sides are a stable property of the
 * library: flaky, with its rate. Otherwise clean, unless the paired
 * log(ratio) test finds drift (regressed, test "drift").
 *
 * Non-deterministic check: SPRT on the candidate's first runs, in seed
 * order, with p0 = max(baseline rate, p0_floor), the top of the one-sigma
 * Wilson interval of the rate pooled over the
 * last commits not regressed where given and the baseline's own trials do
 * not rule it out (stats_verdict_input), and
 * p1 = max(p1, p1_factor * p0); McNemar's exact test on the seeds both sides
 * ran. Regressed when the SPRT accepts H1 and the discordant seeds point the
 * same way (b > c), or when McNemar's one-sided p is below mcnemar_alpha.
 * Improved when McNemar says the candidate is better. SPRT accepting H0:
 * clean without failures, flaky with some. Still continuing: pending with
 * "needs more trials: N" (the passes that would accept H0), so the caller
 * runs more trials only where the evidence is ambiguous. At max_trials
 * undecided: flaky if the candidate failed at all, clean otherwise.
 *
 * Returns 0, -EINVAL (NULL or bad parameters) or -E2BIG (too many seeds),
 * -ENOMEM.
 */
int stats_verdict(const struct stats_verdict_input *in, const struct stats_verdict_params *p,
		  struct stats_evidence *ev);

/* The evidence as a JSON object: a new reference, NULL when out of memory. */
json_t *stats_evidence_json(const struct stats_evidence *ev);

#endif
