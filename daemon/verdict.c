/* verdict: version-1 rules for one commit x check x dtype. */
#include "verdict.h"

#include <stddef.h>

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

enum verdict verdict_decide(const struct verdict_input *in, struct verdict_summary *sum)
{
	struct verdict_summary s = {0};

	for (unsigned i = 0; i < in->nseeds; i++) {
		const struct verdict_seed *seed = &in->seeds[i];

		if (seed->first == OUTCOME_NONE || verdict_seed_needs_rerun(seed))
			s.outstanding++;
		if (seed->first != OUTCOME_NONE)
			s.trials++;
		if (outcome_is_failure(seed->first))
			s.failures++;
		if (verdict_seed_confirmed(seed))
			s.confirmed++;
		if (verdict_seed_unconfirmed(seed))
			s.unconfirmed++;
	}
	if (sum)
		*sum = s;
	if (in->build_failed)
		return VERDICT_BUILD_FAILED;
	if (in->infra_failed)
		return VERDICT_INFRA_ERROR;
	/* A confirmed failure decides at once; everything else waits for the whole plan. */
	if (s.confirmed > 0)
		return VERDICT_REGRESSED;
	if (s.outstanding > 0 || in->nseeds == 0)
		return VERDICT_PENDING;
	if (s.unconfirmed > 0)
		return VERDICT_FLAKY;
	return VERDICT_CLEAN;
}
