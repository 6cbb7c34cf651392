/*
 * bisect: flake-aware bisection over a range of commits (pure module: libm
 * and jansson only).
 *
 * The range is [good exclusive .. bad inclusive] in first-parent order:
 * index 0 is the first commit after the last clean one, n-1 the commit that
 * regressed. The model keeps a probability for each commit being the
 * culprit, plus "no culprit" (the first signal was a flake), and updates it
 * with every probe (PRODUCT.md "Bisection"; noisy binary search in the style
 * of Google's flake-aware culprit finding and BBChop):
 *
 *   culprit i:   commits >= i fail each trial at rate q, commits < i at f;
 *   no culprit:  every commit fails at f.
 *
 * f is the baseline flake rate (the caller's estimate from the good side,
 * floored so that one flake cannot rule a commit out). q is unknown: the
 * likelihood is marginalised over a fixed log-spaced grid of q values from
 * q_min to 0.999 with a uniform prior, which is more robust than a point
 * estimate when the first probes are few. Probes that rerun the seeds that
 * failed at the bad commit are modelled with their own rate q_s, on the same
 * grid: for a deterministic check a failing seed fails at every commit after
 * the culprit (q_s near 1) while fresh seeds fail at the check's rate, and
 * for a race both are alike. q_s's prior puts most of its mass (0.8) on the
 * top of the grid, so that a clean replay is strong evidence, and spreads the
 * rest over the whole grid, so that a race is still learnt; the two
 * marginals factorise, so this costs nothing when unused.
 *
 * Unbuildable commits and commits whose binary equals their parent's have
 * probability 0: never blamed, never probed (a same-binary commit's result
 * is its parent's, so probing the nearest eligible ancestor is the same
 * experiment).
 *
 * Everything derives from the list of probes, so the daemon stores probes
 * and replays them (bisect_replay, or bisect_from_json) after a restart;
 * the result is bit-for-bit the same posterior whatever the order of replay
 * (only per-commit sums enter the likelihood).
 *
 * Functions return 0 or a negative errno; predicates return bool.
 */
#ifndef NW_BISECT_H
#define NW_BISECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Commits in one bisection, and probes recorded in one. */
#define BISECT_RANGE_MAX  65536
#define BISECT_PROBES_MAX 1000000
/* Points of the q grid. */
#define BISECT_QGRID 16
/* "No culprit" where a commit index is expected. */
#define BISECT_NONE (-1)

enum bisect_flag {
	BISECT_UNBUILDABLE = 1u << 0, /* does not build: probability 0, skipped, never blamed */
	BISECT_SAME_BINARY = 1u << 1, /* built kernels equal its parent's: cannot be the culprit */
};

struct bisect_params {
	double confidence;   /* stop when one hypothesis holds this much (0.99) */
	double prior_none;   /* prior mass of "no culprit" (0.1) */
	double flake_rate;   /* f, the baseline failure rate (0.001; floored at 1e-4) */
	double q_min;        /* smallest culprit rate modelled (0.02), at least 2 f */
	double q_known;      /* 0: learn q; else the culprit's rate is known (1 for a deterministic check) */
	unsigned batch_max;  /* trials one probe may run (512) */
	unsigned max_trials; /* search budget: give up, blaming nobody (50000); free results not counted */
	unsigned failing_seeds; /* seeds that failed at the bad commit, rerun first (0) */
};
void bisect_params_default(struct bisect_params *p);

/* One probe's result: 'failures' of 'trials' at one commit. */
struct bisect_probe {
	unsigned commit;
	unsigned trials;
	unsigned failures;
	bool failing_seeds; /* the trials reran seeds that failed at the bad commit */
	bool free;          /* not run by the search (bisect_observe_free): not counted against its budget */
};

/* What to run next at one commit. */
struct bisect_plan {
	unsigned commit;
	unsigned trials;      /* at most this many */
	bool failing_seeds;   /* rerun the bad commit's failing seeds: the next 'trials' not yet run at
				 'commit', from the count of failing-seed trials recorded there (trial[1]) */
	bool stop_on_failure; /* a failure ends the probe (fresh seeds; the model takes any count) */
	unsigned parts;       /* run as this many probes of disjoint fresh seeds, about trials / parts
				 each, on as many slots at once (1: one probe) */
};

enum bisect_status {
	BISECT_RUNNING = 0,
	BISECT_FOUND,      /* one commit holds the confidence: confirm it next */
	BISECT_NO_CULPRIT, /* "no culprit" holds the confidence */
	BISECT_EXHAUSTED,  /* budget spent, or nothing left to probe: blame nobody */
};
const char *bisect_status_name(enum bisect_status s);

struct bisect {
	struct bisect_params par;
	unsigned n;
	uint8_t *flags; /* per commit, enum bisect_flag */
	/* The probe log, as given (JSON, replay). */
	struct bisect_probe *probes;
	unsigned nprobes, probes_cap;
	unsigned long total_trials;
	unsigned long free_trials; /* of total_trials, those observed with bisect_observe_free */
	/* Per commit sums, [0] fresh seeds, [1] failing seeds. */
	unsigned *fail[2], *trial[2];
	/* The model. */
	double f;
	double q[BISECT_QGRID];
	/* Derived, recomputed when 'dirty'. */
	bool dirty;
	double *post; /* P(culprit = i), 0 where ineligible */
	double post_none;
	double *qpost;  /* n x BISECT_QGRID: P(q = q[g] | culprit = i), fresh seeds */
	double *qbar;   /* E[q | culprit = i], fresh seeds */
	double *qbar_s; /* E[q_s | culprit = i], failing seeds */
};

/*
 * Starts a bisection over n commits (1 <= n <= BISECT_RANGE_MAX). 'flags'
 * (n entries, borrowed; NULL for none) marks unbuildable and same-binary
 * commits; 'p' NULL takes the defaults. -EINVAL, -E2BIG, -ENOMEM.
 */
int bisect_init(struct bisect *b, unsigned n, const uint8_t *flags, const struct bisect_params *p);
/* Frees what bisect_init allocated; the struct may be initialised again. */
void bisect_release(struct bisect *b);
/* A commit found not to build, or to equal its parent, during the search. */
int bisect_set_flags(struct bisect *b, unsigned commit, unsigned flags);

/*
 * Records a probe: 'failures' of 'trials' at 'commit'. Several probes may be
 * recorded per commit; the order does not matter. -EINVAL for a commit out
 * of range or failures > trials; -E2BIG past BISECT_PROBES_MAX.
 */
int bisect_observe(struct bisect *b, unsigned commit, unsigned failures, unsigned trials, bool failing_seeds);
/*
 * The same for results the search did not run: the plan's first runs at a
 * commit of the range, the bad commit's reruns. They are evidence like any
 * probe's, but params.max_trials budgets the search's own probes: counted
 * against it, a range over a long history (1500 commits of 256 plan trials)
 * was over budget before its first probe, and nobody was blamed.
 */
int bisect_observe_free(struct bisect *b, unsigned commit, unsigned failures, unsigned trials,
			bool failing_seeds);
/* Records stored probes in one go (resume after a restart). */
int bisect_replay(struct bisect *b, const struct bisect_probe *probes, unsigned n);

/* Copies P(culprit = i) into out[0..n-1] and P(no culprit) into *none (either may be NULL). */
int bisect_posterior(struct bisect *b, double *out, double *none);
/* E[q | culprit = i] for fresh seeds: the culprit's estimated failure rate. */
double bisect_culprit_rate(struct bisect *b, unsigned commit);

/*
 * What the bad commit's reruns say about its failing seeds. A failing seed is
 * run again before the verdict (PRODUCT.md); of 'reruns' such reruns,
 * 'rerun_failures' failed again, against 'failures' of 'trials' in the first
 * pass. A race's rerun fails at the first pass's rate p, as any seed does; a
 * seed-bound failure's fails for sure, but for the share of failing seeds
 * that were flakes (about f / p), which fail again at f. Either way must be
 * 99 times likelier to be taken; where every trial and every rerun failed
 * the two look alike, and the seeds are taken as seed-bound (they fail
 * again as surely as any seed).
 */
enum bisect_seeds {
	BISECT_SEEDS_UNSURE = 0, /* replay them, first at the bad commit, and learn q_s from the replays */
	BISECT_SEEDS_BOUND, /* replay them; their failed reruns count as their replay at the bad commit */
	BISECT_SEEDS_RACE,  /* do not replay them: fresh seeds tell as much, and stop at a failure */
};
enum bisect_seeds bisect_judge_seeds(unsigned failures, unsigned trials, unsigned reruns,
				     unsigned rerun_failures, double flake_rate);
const char *bisect_seeds_name(enum bisect_seeds s);

/*
 * Plans the next round: up to k probes at distinct eligible commits, fills
 * out[0..*nout-1]. With k = 1 the commit that maximises the expected
 * information of one trial about the culprit; with k > 1 the commits at the
 * quantiles m/(k+1) of the posterior (k-section, "no culprit" counted past
 * the end), topped up by information gain where quantiles coincide; but
 * where the one probe that k = 1 would run plans two fresh trials or more,
 * that probe alone, split into up to k parts (plan.parts) that run at once.
 * Each
 * probe runs until its first failure, or until 'trials' passes, chosen so
 * that that many passes would halve the probability that the culprit lies
 * at or before the probed commit; a lone probe (one per round) stops short
 * at the passes that would end the search, since trials past them cannot
 * change its answer. Failing seeds are used first at each
 * commit while params.failing_seeds has some left there, two per probe (one
 * once E[q_s] over the posterior is at least 0.99), run
 * whole (a failing-seed probe does not stop at its first failure), and the
 * first round replays them at the bad commit (whether they fail again there
 * says whether they fail for sure past the culprit). *nout is 0 when the
 * search is over. -EINVAL.
 */
int bisect_next_probes(struct bisect *b, unsigned k, struct bisect_plan *out, unsigned *nout);

/*
 * Whether the search is over: BISECT_FOUND with *culprit, BISECT_NO_CULPRIT,
 * BISECT_EXHAUSTED, or BISECT_RUNNING. *prob gets the probability of the
 * leading hypothesis. Either pointer may be NULL.
 */
enum bisect_status bisect_done(struct bisect *b, int *culprit, double *prob);

/*
 * Confirmation with fresh seeds (PRODUCT.md: "re-test culprit and parent with
 * fresh seeds before reporting; a culprit that fails this is withdrawn").
 * The parent is the nearest earlier commit with a binary (BISECT_NONE: the
 * last good commit itself). Two sequential probability ratio tests at
 * alpha = beta = 1 - confidence, H0 p = f against H1 p = q_c where q_c is
 * the culprit's rate estimated by the search (geometric posterior mean,
 * floored at q_min): the culprit must accept H1 (it fails clearly more than
 * the baseline) and the parent must accept H0 (the failure is not older).
 * Either test going the other way, or running past max_trials, withdraws.
 * A withdrawn culprit is not reported; its fresh-seed results are evidence
 * like any other, so a caller that records them with bisect_observe and
 * resumes the search (bench/bisect-sim does, up to three culprits) ends
 * right more often than one that stops there (the table's "no retry").
 */
enum bisect_verdict {
	BISECT_CONFIRM_CONTINUE = 0,
	BISECT_CONFIRMED,
	BISECT_WITHDRAWN,
};

struct bisect_confirm_result {
	enum bisect_verdict verdict;
	int parent;         /* the commit re-tested beside the culprit */
	double p0, p1;      /* the rates tested */
	double llr_culprit; /* log-likelihood ratios, H1 over H0 */
	double llr_parent;
	unsigned more_culprit; /* CONTINUE: trials still to run at each */
	unsigned more_parent;
};

int bisect_confirm_parent(const struct bisect *b, unsigned culprit);
/*
 * Pure: decides from the fresh-seed results at the culprit and its parent
 * (cumulative counts). 'max_trials' caps each side (0: 20 / q_c).
 */
int bisect_confirm(struct bisect *b, unsigned culprit, unsigned culprit_failures, unsigned culprit_trials,
		   unsigned parent_failures, unsigned parent_trials, unsigned max_trials,
		   struct bisect_confirm_result *out);

/*
 * The bisection as JSON: parameters, flags and every probe, plus the
 * posterior for display. A new reference, NULL when out of memory.
 */
json_t *bisect_to_json(struct bisect *b);
/* Rebuilds a bisection from bisect_to_json's output (replaying its probes). -EINVAL, -ENOMEM. */
int bisect_from_json(struct bisect *b, const json_t *j);

#endif
