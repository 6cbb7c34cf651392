/* Unit tests of the version-1 verdict rules (daemon/verdict.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "verdict.h"

#define P OUTCOME_PASS
#define F OUTCOME_FAIL
#define N OUTCOME_NONE

static enum verdict decide(const struct verdict_seed *seeds, unsigned n, struct verdict_summary *sum)
{
	struct verdict_input in = {.seeds = seeds, .nseeds = n};

	return verdict_decide(&in, sum);
}

static void all_pass_is_clean(void **state)
{
	struct verdict_seed s[4] = {{P, N}, {P, N}, {P, N}, {P, N}};
	struct verdict_summary sum;

	assert_int_equal(decide(s, 4, &sum), VERDICT_CLEAN);
	assert_int_equal(sum.trials, 4);
	assert_int_equal(sum.failures, 0);
	assert_int_equal(sum.outstanding, 0);
}

static void unrun_seeds_are_pending(void **state)
{
	struct verdict_seed s[3] = {{P, N}, {N, N}, {P, N}};
	struct verdict_summary sum;

	assert_int_equal(decide(s, 3, &sum), VERDICT_PENDING);
	assert_int_equal(sum.outstanding, 1);
}

static void a_failure_waits_for_its_rerun(void **state)
{
	struct verdict_seed s[2] = {{P, N}, {F, N}};
	struct verdict_summary sum;

	assert_true(verdict_seed_needs_rerun(&s[1]));
	assert_int_equal(decide(s, 2, &sum), VERDICT_PENDING);
	assert_int_equal(sum.failures, 1);
	assert_int_equal(sum.outstanding, 1);
}

static void fails_twice_is_regressed(void **state)
{
	struct verdict_seed s[3] = {{P, N}, {F, F}, {N, N}};
	struct verdict_summary sum;

	/* A confirmed failure decides at once, even with seeds still to run. */
	assert_int_equal(decide(s, 3, &sum), VERDICT_REGRESSED);
	assert_int_equal(sum.confirmed, 1);
}

static void crash_and_timeout_count_as_failures(void **state)
{
	struct verdict_seed s[2] = {{OUTCOME_CRASH, OUTCOME_TIMEOUT}, {P, N}};

	assert_int_equal(decide(s, 2, NULL), VERDICT_REGRESSED);
	assert_false(outcome_is_failure(OUTCOME_INFRA_ERROR));
	assert_false(outcome_is_failure(OUTCOME_PASS));
}

static void fail_then_pass_is_flaky(void **state)
{
	struct verdict_seed s[3] = {{P, N}, {F, P}, {P, N}};
	struct verdict_summary sum;

	assert_true(verdict_seed_unconfirmed(&s[1]));
	assert_int_equal(decide(s, 3, &sum), VERDICT_FLAKY);
	assert_int_equal(sum.unconfirmed, 1);
	assert_int_equal(sum.confirmed, 0);
}

static void build_and_infra_failures_win(void **state)
{
	struct verdict_seed s[1] = {{F, F}};
	struct verdict_input in = {.build_failed = true, .seeds = s, .nseeds = 1};

	assert_int_equal(verdict_decide(&in, NULL), VERDICT_BUILD_FAILED);
	in.build_failed = false;
	in.infra_failed = true;
	assert_int_equal(verdict_decide(&in, NULL), VERDICT_INFRA_ERROR);
}

static void empty_plan_is_pending(void **state)
{
	assert_int_equal(decide(NULL, 0, NULL), VERDICT_PENDING);
}

static void names_round_trip(void **state)
{
	for (int v = VERDICT_PENDING; v <= VERDICT_INFRA_ERROR; v++)
		assert_int_equal(verdict_parse(verdict_name(v)), v);
	for (int o = OUTCOME_PASS; o <= OUTCOME_INFRA_ERROR; o++)
		assert_int_equal(outcome_parse(outcome_name(o)), o);
	assert_int_equal(outcome_parse("bogus"), OUTCOME_NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(all_pass_is_clean),
	    cmocka_unit_test(unrun_seeds_are_pending),
	    cmocka_unit_test(a_failure_waits_for_its_rerun),
	    cmocka_unit_test(fails_twice_is_regressed),
	    cmocka_unit_test(crash_and_timeout_count_as_failures),
	    cmocka_unit_test(fail_then_pass_is_flaky),
	    cmocka_unit_test(build_and_infra_failures_win),
	    cmocka_unit_test(empty_plan_is_pending),
	    cmocka_unit_test(names_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
