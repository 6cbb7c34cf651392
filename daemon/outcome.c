/*
 * outcome: names of trial outcomes and per-commit verdicts, exactly as they
 * are stored in PostgreSQL (sql/001_init.sql CHECK constraints) and served by
 * the API. The tables are indexed by the enum so that adding a value without a
 * name is caught by the array sizes below.
 */
#include "outcome.h"

#include <stddef.h>
#include <string.h>

static const char *const outcome_names[] = {
    [OUTCOME_NONE] = "none",
    [OUTCOME_PASS] = "pass",
    [OUTCOME_FAIL] = "fail",
    [OUTCOME_CRASH] = "crash",
    [OUTCOME_TIMEOUT] = "timeout",
    [OUTCOME_ERROR] = "error",
    [OUTCOME_INFRA_ERROR] = "infra_error",
};

static const char *const verdict_names[] = {
    [VERDICT_PENDING] = "pending",         [VERDICT_CLEAN] = "clean", [VERDICT_REGRESSED] = "regressed",
    [VERDICT_IMPROVED] = "improved",       [VERDICT_FLAKY] = "flaky", [VERDICT_BUILD_FAILED] = "build_failed",
    [VERDICT_INFRA_ERROR] = "infra_error",
};

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

const char *outcome_name(enum outcome o)
{
	if ((unsigned)o >= ARRAY_SIZE(outcome_names) || !outcome_names[o])
		return "unknown";
	return outcome_names[o];
}

const char *verdict_name(enum verdict v)
{
	if ((unsigned)v >= ARRAY_SIZE(verdict_names) || !verdict_names[v])
		return "unknown";
	return verdict_names[v];
}

enum outcome outcome_parse(const char *name)
{
	size_t i;

	if (!name)
		return OUTCOME_NONE;
	/*
	 * Start at 1: "none" is never stored, so it parses like any other
	 * unknown name, to OUTCOME_NONE.
	 */
	for (i = 1; i < ARRAY_SIZE(outcome_names); i++)
		if (outcome_names[i] && strcmp(name, outcome_names[i]) == 0)
			return (enum outcome)i;
	return OUTCOME_NONE;
}

int verdict_parse(const char *name)
{
	size_t i;

	if (!name)
		return -1;
	for (i = 0; i < ARRAY_SIZE(verdict_names); i++)
		if (verdict_names[i] && strcmp(name, verdict_names[i]) == 0)
			return (int)i;
	return -1;
}
