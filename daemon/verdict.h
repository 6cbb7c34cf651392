/*
 * verdict: the per commit x check x dtype decision, version 1 (pure module).
 *
 * Seeds are paired across commits, so for a deterministic check the rule is
 * exact: a seed that fails, and fails again on a rerun, is a confirmed
 * failure; a confirmed failure on a commit whose last clean baseline passed
 * that seed is a regression. A seed that fails once and passes on its rerun
 * shows non-determinism: the commit is flaky for that check.
 */
#ifndef NW_VERDICT_H
#define NW_VERDICT_H

#include <stdbool.h>

#include "outcome.h"

/* What one seed did on one commit (infrastructure errors are not counted). */
struct verdict_seed {
	enum outcome first;  /* first result, OUTCOME_NONE if not run yet */
	enum outcome second; /* the rerun's result, OUTCOME_NONE if none */
};

/* A seed needs a rerun when its first result failed and it has none yet. */
bool verdict_seed_needs_rerun(const struct verdict_seed *s);
/* Failed twice: a confirmed failure. */
bool verdict_seed_confirmed(const struct verdict_seed *s);
/* Failed, then passed: non-determinism. */
bool verdict_seed_unconfirmed(const struct verdict_seed *s);

struct verdict_input {
	bool build_failed;                /* the commit did not build (or built no runner) */
	bool infra_failed;                /* the job gave up after repeated infrastructure faults */
	const struct verdict_seed *seeds; /* indexed by seed, 0..nseeds-1 */
	unsigned nseeds;                  /* the plan's seeds */
};

struct verdict_summary {
	unsigned trials;      /* seeds with a first result */
	unsigned failures;    /* seeds whose first result failed */
	unsigned confirmed;   /* failed twice */
	unsigned unconfirmed; /* failed, then passed */
	unsigned outstanding; /* seeds still to run or rerun */
};

/* Decides the verdict and fills 'sum' (may be NULL). */
enum verdict verdict_decide(const struct verdict_input *in, struct verdict_summary *sum);

#endif
