/*
 * verdict: the per-seed rules a commit's plan runs by (pure module). The
 * verdict itself is decided by stats_verdict() (stats.h), from these seeds
 * and the baseline's.
 *
 * Seeds are paired across commits. A seed whose first result fails is run
 * again: failing twice confirms the failure, failing then passing shows
 * non-determinism.
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

#endif
