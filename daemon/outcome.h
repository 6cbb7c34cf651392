/*
 * outcome: the values a stored trial and a per-commit verdict can take.
 * Plain value types shared by the pure modules and the storage layer.
 */
#ifndef NW_OUTCOME_H
#define NW_OUTCOME_H

#include <stdbool.h>

/* What happened to one trial (PROTOCOL.md: "A trial never disappears"). */
enum outcome {
	OUTCOME_NONE = 0, /* not run */
	OUTCOME_PASS,
	OUTCOME_FAIL,
	OUTCOME_CRASH,       /* runner died mid-trial or answered fatal: a property of the commit */
	OUTCOME_TIMEOUT,     /* no answer within the trial deadline */
	OUTCOME_ERROR,       /* the runner could not run the trial (non-fatal) */
	OUTCOME_INFRA_ERROR, /* the daemon's side failed (protocol error, no runner): not the commit's fault */
};

/* Per commit x check x dtype (PRODUCT.md "Verdicts and statistics"). */
enum verdict {
	VERDICT_PENDING = 0,
	VERDICT_CLEAN,
	VERDICT_REGRESSED,
	VERDICT_IMPROVED,
	VERDICT_FLAKY,
	VERDICT_BUILD_FAILED,
	VERDICT_INFRA_ERROR,
};

/* Lowercase names as stored and served ("pass", "infra_error", ...). */
const char *outcome_name(enum outcome o);
const char *verdict_name(enum verdict v);
/* Parses a stored name; returns OUTCOME_NONE / -1 for an unknown one. */
enum outcome outcome_parse(const char *name);
int verdict_parse(const char *name);

/* Whether a trial with this outcome counts against the commit. */
static inline bool outcome_is_failure(enum outcome o)
{
	return o == OUTCOME_FAIL || o == OUTCOME_CRASH || o == OUTCOME_TIMEOUT || o == OUTCOME_ERROR;
}

#endif
