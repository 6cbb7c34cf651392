/* verdict: per-seed rules of a commit's plan. */
#include "verdict.h"

bool verdict_seed_needs_rerun(const struct verdict_seed *s)
{
	return outcome_is_failure(s->first) && s->second == OUTCOME_NONE;
}

bool verdict_seed_confirmed(const struct verdict_seed *s)
{
	return outcome_is_failure(s->first) && outcome_is_failure(s->second);
}

bool verdict_seed_unconfirmed(const struct verdict_seed *s)
{
	return outcome_is_failure(s->first) && s->second == OUTCOME_PASS;
}
