/* Unit tests of the per-seed rules (daemon/verdict.c) and the outcome names (daemon/outcome.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "verdict.h"

static void a_failure_asks_for_a_rerun(void **state)
{
	struct verdict_seed fail_once = {OUTCOME_FAIL, OUTCOME_NONE};
	struct verdict_seed pass = {OUTCOME_PASS, OUTCOME_NONE};
	struct verdict_seed unrun = {OUTCOME_NONE, OUTCOME_NONE};

	assert_true(verdict_seed_needs_rerun(&fail_once));
	assert_false(verdict_seed_needs_rerun(&pass));
	assert_false(verdict_seed_needs_rerun(&unrun));
}

static void fails_twice_is_confirmed(void **state)
{
	struct verdict_seed s = {OUTCOME_FAIL, OUTCOME_FAIL};
	struct verdict_seed crash_timeout = {OUTCOME_CRASH, OUTCOME_TIMEOUT};

	assert_true(verdict_seed_confirmed(&s));
	assert_false(verdict_seed_needs_rerun(&s));
	assert_true(verdict_seed_confirmed(&crash_timeout));
	assert_false(verdict_seed_unconfirmed(&s));
}

static void fail_then_pass_is_unconfirmed(void **state)
{
	struct verdict_seed s = {OUTCOME_FAIL, OUTCOME_PASS};

	assert_true(verdict_seed_unconfirmed(&s));
	assert_false(verdict_seed_confirmed(&s));
}

static void infrastructure_is_never_the_commits_fault(void **state)
{
	assert_false(outcome_is_failure(OUTCOME_INFRA_ERROR));
	assert_false(outcome_is_failure(OUTCOME_PASS));
	assert_false(outcome_is_failure(OUTCOME_NONE));
	assert_true(outcome_is_failure(OUTCOME_ERROR));
}

static void names_round_trip(void **state)
{
	for (int v = VERDICT_PENDING; v <= VERDICT_INFRA_ERROR; v++)
		assert_int_equal(verdict_parse(verdict_name(v)), v);
	for (int o = OUTCOME_PASS; o <= OUTCOME_INFRA_ERROR; o++)
		assert_int_equal(outcome_parse(outcome_name(o)), o);
	assert_int_equal(outcome_parse("bogus"), OUTCOME_NONE);
	assert_int_equal(verdict_parse("bogus"), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_failure_asks_for_a_rerun),
	    cmocka_unit_test(fails_twice_is_confirmed),
	    cmocka_unit_test(fail_then_pass_is_unconfirmed),
	    cmocka_unit_test(infrastructure_is_never_the_commits_fault),
	    cmocka_unit_test(names_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
