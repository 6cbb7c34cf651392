/* Unit tests of reading compute-sanitizer's output (daemon/sanitizer.c), on the tools' report formats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sanitizer.h"

static enum sanitizer_status scan(const char *text, char *excerpt)
{
	return sanitizer_scan(text, strlen(text), excerpt, 1024);
}

static void clean_run(void **state)
{
	char ex[1024];

	assert_int_equal(scan("========= COMPUTE-SANITIZER\n"
			      "runner: warming up\n"
			      "========= ERROR SUMMARY: 0 errors\n",
			      ex),
			 SANITIZER_CLEAN);
	assert_string_equal(ex, "");
	assert_int_equal(scan("", ex), SANITIZER_CLEAN);
}

static void memcheck_report(void **state)
{
	char ex[1024];

	assert_int_equal(scan("========= COMPUTE-SANITIZER\n"
			      "========= Invalid __global__ write of size 4 bytes\n"
			      "=========     at dl_softmax_fwd_kernel+0x30 in softmax.cu:61\n"
			      "=========     by thread (255,0,0) in block (3,0,0)\n"
			      "=========     Address 0x7f0000001000 is out of bounds\n",
			      ex),
			 SANITIZER_REPORT);
	assert_non_null(strstr(ex, "Invalid __global__ write"));
	assert_non_null(strstr(ex, "softmax.cu:61"));
}

static void racecheck_report(void **state)
{
	char ex[1024];

	assert_int_equal(
	    scan("========= Error: Race reported between Write access at 0x1c0 in attention.cu:88\n"
		 "=========     and Read access at 0x210 in attention.cu:95 [128 hazards]\n"
		 "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n",
		 ex),
	    SANITIZER_REPORT);
	assert_non_null(strstr(ex, "Race reported"));
}

static void initcheck_and_synccheck_reports(void **state)
{
	char ex[1024];

	assert_int_equal(scan("========= Uninitialized __global__ memory read of size 2 bytes\n", ex),
			 SANITIZER_REPORT);
	assert_int_equal(scan("========= Barrier error detected. Divergent thread(s) in warp\n", ex),
			 SANITIZER_REPORT);
}

static void refusal_is_skipped_not_passed(void **state)
{
	char ex[1024];

	assert_int_equal(scan("========= COMPUTE-SANITIZER\n========= Error: Device not supported\n", ex),
			 SANITIZER_SKIPPED);
	assert_non_null(strstr(ex, "Device not supported"));
	assert_int_equal(
	    scan("========= Error: Target application terminated before first instrumented API call\n", ex),
	    SANITIZER_SKIPPED);
}

static void runner_lines_are_not_reports(void **state)
{
	char ex[1024];

	/* The runner's own stderr may say "error"; only the tool's prefixed lines count. */
	assert_int_equal(scan("runner: Error: invalid argument (ignored)\nInvalid value\n", ex),
			 SANITIZER_CLEAN);
}

static void excerpt_is_bounded(void **state)
{
	char text[20000], ex[64];
	size_t n = 0;

	for (int i = 0; i < 200; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "========= Invalid __global__ read of size 4 bytes\n");
	assert_int_equal(sanitizer_scan(text, n, ex, sizeof(ex)), SANITIZER_REPORT);
	assert_true(strlen(ex) < sizeof(ex));
}

static void tools(void **state)
{
	assert_true(sanitizer_tool_valid("memcheck"));
	assert_true(sanitizer_tool_valid("synccheck"));
	assert_false(sanitizer_tool_valid("leakcheck"));
	assert_string_equal(sanitizer_status_name(SANITIZER_SKIPPED), "skipped");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(clean_run),
	    cmocka_unit_test(memcheck_report),
	    cmocka_unit_test(racecheck_report),
	    cmocka_unit_test(initcheck_and_synccheck_reports),
	    cmocka_unit_test(refusal_is_skipped_not_passed),
	    cmocka_unit_test(runner_lines_are_not_reports),
	    cmocka_unit_test(excerpt_is_bounded),
	    cmocka_unit_test(tools),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
