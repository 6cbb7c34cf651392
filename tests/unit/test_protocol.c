/*
 * Unit tests for daemon/protocol.c: the PROTOCOL.md examples verbatim, and
 * every way a runner's line can be wrong, each with the message the daemon
 * will log.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol.h"

/* The examples of PROTOCOL.md, as printed there (line breaks are JSON whitespace). */
static const char hello_example[] =
    "{\"op\":\"hello\",\"protocol\":1,\"runner\":\"demo-kernels 0.3.1\",\n"
    " \"device\":{\"backend\":\"cuda\",\"name\":\"NVIDIA "
    "H200\",\"cc\":\"9.0\",\"driver\":\"580.159.04\",\"toolkit\":\"13.0\"},\n"
    " \"checks\":[\n"
    "   "
    "{\"check\":\"softmax.fwd\",\"op\":\"softmax\",\"pass\":\"fwd\",\"dtypes\":[\"f32\",\"f16\",\"bf16\"],\n"
    "    \"deterministic\":true,\"families\":[\"aligned\",\"tail\",\"threshold\",\"tiny\",\"extreme\"]},\n"
    "   {\"check\":\"msda.bwd\",\"op\":\"msda\",\"pass\":\"bwd\",\"dtypes\":[\"f32\"],\n"
    "    \"deterministic\":false,\"families\":[\"aligned\",\"boundary\",\"outside\"]}]}";

static const char trial_example[] =
    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\n"
    " \"case\":{\"family\":\"threshold\",\"shape\":[3,1025],\"gen\":1},\n"
    " \"ratio\":4.72,\n"
    " \"tensors\":[\n"
    "   {\"name\":\"dx\",\"ratio\":4.72,\"max_abs\":0.0131,\"max_rel\":0.35,\"max_ulp\":null,\n"
    "    \"nonfinite\":0,\"ref_nonfinite\":0,\"unwritten\":0,\"canary\":0,\"excluded\":0,\n"
    "    \"worst\":[2,1024],\"tail\":true}],\n"
    " \"digest\":\"9f2c41d07be3a8e1\",\"digests_differ\":0,\n"
    " \"kernel_us\":18.4}";

/* The example's tensors array with its whitespace removed: what the daemon stores. */
static const char trial_example_tensors[] =
    "[{\"name\":\"dx\",\"ratio\":4.72,\"max_abs\":0.0131,\"max_rel\":0.35,\"max_ulp\":null,"
    "\"nonfinite\":0,\"ref_nonfinite\":0,\"unwritten\":0,\"canary\":0,\"excluded\":0,"
    "\"worst\":[2,1024],\"tail\":true}]";

static const char error_example[] =
    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"error\",\"error\":\"<text>\",\n"
    "  \"fatal\":true}";

static int parse_trial(const char *line, long id, struct proto_trial *t, char *err, size_t errlen)
{
	return proto_parse_trial(line, strlen(line), id, t, err, errlen);
}

/*
 * Whether 'err' is 'expect', where a '*' in 'expect' stands for a number (the
 * column jansson reports, which depends on how far its lexer read).
 */
static bool message_matches(const char *err, const char *expect)
{
	while (*expect) {
		if (*expect == '*') {
			if (*err < '0' || *err > '9')
				return false;
			while (*err >= '0' && *err <= '9')
				err++;
			expect++;
		} else if (*err++ != *expect++) {
			return false;
		}
	}
	return *err == '\0';
}

static void assert_message(const char *err, const char *expect)
{
	if (!message_matches(err, expect))
		fail_msg("message \"%s\", expected \"%s\"", err, expect);
}

/* A trial line must be refused with exactly 'expect'; 't' must come back released. */
static void trial_fails(const char *line, long id, const char *expect)
{
	struct proto_trial t;
	char err[512];
	int r;

	r = parse_trial(line, id, &t, err, sizeof(err));
	if (r != -EPROTO)
		print_error("line %s: got %d (%s)\n", line, r, err);
	assert_int_equal(r, -EPROTO);
	assert_message(err, expect);
	assert_null(t.tensors_json);
	assert_int_equal(t.ntensors, 0);
}

static void hello_fails(const char *line, const char *expect)
{
	struct proto_hello h;
	char err[512];
	int r;

	r = proto_parse_hello(line, strlen(line), &h, err, sizeof(err));
	if (r != -EPROTO)
		print_error("line %s: got %d (%s)\n", line, r, err);
	assert_int_equal(r, -EPROTO);
	assert_message(err, expect);
	assert_null(h.checks);
	assert_int_equal(h.nchecks, 0);
}

static void test_requests(void **state)
{
	char *s;

	s = proto_hello_request();
	assert_string_equal(s, "{\"op\":\"hello\",\"protocol\":1}\n");
	free(s);
	s = proto_bye_request();
	assert_string_equal(s, "{\"op\":\"bye\"}\n");
	free(s);
	/* The trial request of PROTOCOL.md, byte for byte. */
	s = proto_trial_request(17, "softmax.bwd", "bf16", 42, 1, NULL);
	assert_string_equal(s, "{\"op\":\"trial\",\"id\":17,\"check\":\"softmax.bwd\",\"dtype\":\"bf16\","
			       "\"seed\":42,\"repeats\":1,"
			       "\"family\":null}\n");
	free(s);
	/* Seeds are unsigned 64-bit; strings are escaped. */
	s = proto_trial_request(3, "odd\"name\\", "f32", 18446744073709551615ULL, 2, "tail");
	assert_string_equal(s, "{\"op\":\"trial\",\"id\":3,\"check\":\"odd\\\"name\\\\\",\"dtype\":\"f32\","
			       "\"seed\":18446744073709551615,\"repeats\":2,\"family\":\"tail\"}\n");
	free(s);
	s = proto_trial_request(4, "tab\tname", "f\"32", 7, 2, NULL);
	assert_string_equal(s, "{\"op\":\"trial\",\"id\":4,\"check\":\"tab\\tname\",\"dtype\":\"f\\\"32\","
			       "\"seed\":7,\"repeats\":2,\"family\":null}\n");
	free(s);
	/* A string that is not UTF-8 cannot be sent. */
	assert_null(proto_trial_request(3, "bad\xff", "f32", 0, 1, NULL));
}

/* The slots' request without allocating: the same bytes, or 0 where it cannot write them. */
static void test_request_buf(void **state)
{
	static const struct {
		long id;
		const char *check, *dtype;
		unsigned long long seed;
		unsigned repeats;
	} cases[] = {
	    {17, "softmax.bwd", "bf16", 42, 1},
	    {0, "a", "f32", 0, 0},
	    {-5, "attention.fwd", "f16", 18446744073709551615ULL, 4294967295U},
	    {9223372036854775807L, "x", "y", 1, 3},
	};
	char buf[NW_PROTO_REQUEST_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *want = proto_trial_request(cases[i].id, cases[i].check, cases[i].dtype, cases[i].seed,
						 cases[i].repeats, NULL);
		size_t n = proto_trial_request_buf(buf, sizeof(buf), cases[i].id, cases[i].check,
						   cases[i].dtype, cases[i].seed, cases[i].repeats);

		assert_non_null(want);
		if (n != strlen(want) || memcmp(buf, want, n) != 0)
			fail_msg("case %zu: '%.*s' against '%s'", i, (int)n, buf, want);
		/* One byte short: nothing written that could be sent. */
		assert_int_equal(proto_trial_request_buf(buf, n - 1, cases[i].id, cases[i].check,
							 cases[i].dtype, cases[i].seed, cases[i].repeats),
				 0);
		free(want);
	}
	/* Names that need quoting are proto_trial_request()'s. */
	assert_int_equal(proto_trial_request_buf(buf, sizeof(buf), 3, "odd\"name", "f32", 1, 1), 0);
	assert_int_equal(proto_trial_request_buf(buf, sizeof(buf), 3, "a", "tab\t", 1, 1), 0);
}

static void test_hello_example(void **state)
{
	struct proto_hello h;
	char err[256];

	assert_int_equal(proto_parse_hello(hello_example, strlen(hello_example), &h, err, sizeof(err)), 0);
	assert_int_equal(h.protocol, 1);
	assert_string_equal(h.runner, "demo-kernels 0.3.1");
	assert_string_equal(h.backend, "cuda");
	assert_string_equal(h.device_name, "NVIDIA H200");
	assert_string_equal(h.device_json, "{\"backend\":\"cuda\",\"name\":\"NVIDIA H200\",\"cc\":\"9.0\","
					   "\"driver\":\"580.159.04\",\"toolkit\":\"13.0\"}");
	assert_int_equal(h.nchecks, 2);
	assert_string_equal(h.checks[0].check, "softmax.fwd");
	assert_string_equal(h.checks[0].op, "softmax");
	assert_string_equal(h.checks[0].pass, "fwd");
	assert_int_equal(h.checks[0].ndtypes, 3);
	assert_string_equal(h.checks[0].dtypes[0], "f32");
	assert_string_equal(h.checks[0].dtypes[1], "f16");
	assert_string_equal(h.checks[0].dtypes[2], "bf16");
	assert_true(h.checks[0].deterministic);
	assert_int_equal(h.checks[0].nfamilies, 5);
	assert_string_equal(h.checks[0].families[0], "aligned");
	assert_string_equal(h.checks[0].families[4], "extreme");
	assert_string_equal(h.checks[1].check, "msda.bwd");
	assert_string_equal(h.checks[1].op, "msda");
	assert_string_equal(h.checks[1].pass, "bwd");
	assert_int_equal(h.checks[1].ndtypes, 1);
	assert_false(h.checks[1].deterministic);
	assert_int_equal(h.checks[1].nfamilies, 3);
	assert_string_equal(h.checks[1].families[1], "boundary");
	proto_hello_release(&h);
	assert_null(h.checks);
	proto_hello_release(&h);
}

/* The optional repro template of PROTOCOL.md's hello: kept whole, or refused, never cut. */
static void test_hello_repro(void **state)
{
	static const char ok[] =
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],"
	    "\"repro\":\"python3 -m mylib.checks --check {check} --dtype {dtype} --seed {seed} "
	    "--runs {runs}\"}";
	struct proto_hello h;
	char err[256], *line;

	assert_int_equal(proto_parse_hello(ok, strlen(ok), &h, err, sizeof(err)), 0);
	assert_string_equal(
	    h.repro, "python3 -m mylib.checks --check {check} --dtype {dtype} --seed {seed} --runs {runs}");
	proto_hello_release(&h);
	/* Absent or null: none. */
	assert_int_equal(proto_parse_hello(hello_example, strlen(hello_example), &h, err, sizeof(err)), 0);
	assert_string_equal(h.repro, "");
	proto_hello_release(&h);
	line = "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"repro\":null}";
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_string_equal(h.repro, "");
	proto_hello_release(&h);

	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"repro\":3}",
		    "field 'repro' must be a string");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"repro\":\"\"}",
		    "field 'repro' must not be empty");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"repro\":\"run --seed 1\\nrm -rf /\"}",
		    "field 'repro' must not contain control characters");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"repro\":\"./runner --check {check}\"}",
		    "field 'repro' must contain '{seed}'");
	/* Too long for the daemon: refused, not cut (a cut command would run something else). */
	{
		char big[NW_PROTO_TEXT_MAX + 200];
		int n = snprintf(big, sizeof(big),
				 "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"repro\":\"{seed}");

		memset(big + n, 'x', NW_PROTO_TEXT_MAX);
		snprintf(big + n + NW_PROTO_TEXT_MAX, sizeof(big) - (size_t)n - NW_PROTO_TEXT_MAX, "\"}");
		hello_fails(big, "field 'repro' is too long (* bytes, at most 1023)");
	}
}

/*
 * The optional "pipeline" of the hello (issue 18): how many trial requests the
 * runner takes outstanding. Absent or null: 1, one at a time, as every
 * version-1 runner; a count of 0, a negative one, a fraction or a string is
 * read as 1 (flagged for a warning), a larger count than the maximum as it.
 */
static void test_hello_pipeline(void **state)
{
	static const struct {
		const char *line;
		unsigned pipeline;
	} ok[] = {
	    {"{\"op\":\"hello\",\"protocol\":1,\"checks\":[]}", 1},
	    {"{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":null}", 1},
	    {"{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":1}", 1},
	    {"{\"op\":\"hello\",\"protocol\":1,\"pipeline\":2,\"checks\":[]}", 2},
	    /* More than the daemon uses is no error: it sends at most two (slot.c). */
	    {"{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":1024}", 1024},
	};
	struct proto_hello h;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(proto_parse_hello(ok[i].line, strlen(ok[i].line), &h, err, sizeof(err)), 0);
		if (h.pipeline != ok[i].pipeline)
			print_error("line %s: pipeline %u, expected %u\n", ok[i].line, h.pipeline,
				    ok[i].pipeline);
		assert_int_equal(h.pipeline, ok[i].pipeline);
		proto_hello_release(&h);
	}
	assert_int_equal(proto_parse_hello(hello_example, strlen(hello_example), &h, err, sizeof(err)), 0);
	assert_int_equal(h.pipeline, 1);
	proto_hello_release(&h);

	/* Unknown before issue 18, so never a reason to refuse a hello: read as 1 and flagged. */
	{
		static const char *const odd[] = {
		    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":0}",
		    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":-2}",
		    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":2.0}",
		    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":\"2\"}",
		    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":true}",
		};

		for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
			assert_int_equal(proto_parse_hello(odd[i], strlen(odd[i]), &h, err, sizeof(err)), 0);
			assert_int_equal(h.pipeline, 1);
			assert_true(h.pipeline_ignored);
			proto_hello_release(&h);
		}
	}
	{
		const char *big = "{\"op\":\"hello\",\"protocol\":1,\"checks\":[],\"pipeline\":1025}";

		assert_int_equal(proto_parse_hello(big, strlen(big), &h, err, sizeof(err)), 0);
		assert_int_equal(h.pipeline, NW_PROTO_PIPELINE_MAX);
		assert_false(h.pipeline_ignored);
		proto_hello_release(&h);
	}
}

static void test_trial_example(void **state)
{
	struct proto_trial t;
	char err[256];

	assert_int_equal(parse_trial(trial_example, 17, &t, err, sizeof(err)), 0);
	assert_int_equal(t.id, 17);
	assert_int_equal(t.verdict, OUTCOME_FAIL);
	assert_false(t.fatal);
	assert_string_equal(t.error, "");
	assert_string_equal(t.family, "threshold");
	assert_int_equal(t.ndim, 2);
	assert_int_equal(t.shape[0], 3);
	assert_int_equal(t.shape[1], 1025);
	assert_int_equal(t.gen, 1);
	assert_true(t.ratio == 4.72);
	assert_int_equal(t.ntensors, 1);
	assert_string_equal(t.tensors[0].name, "dx");
	assert_true(t.tensors[0].ratio == 4.72);
	assert_int_equal(t.tensors[0].nonfinite, 0);
	assert_string_equal(t.digest, "9f2c41d07be3a8e1");
	assert_int_equal(t.digests_differ, 0);
	assert_true(t.kernel_us == 18.4);
	/* Stored as sent: shortest numbers, the runner's key order, null kept. */
	assert_string_equal(t.tensors_json, trial_example_tensors);
	proto_trial_release(&t);
	assert_null(t.tensors_json);
	proto_trial_release(&t);

	/* The compact form parses to the same thing (a runner may write either). */
	assert_int_equal(
	    parse_trial("{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.5,\"tensors\":"
			"[{\"name\":\"y\",\"ratio\":0.5,\"nonfinite\":1,\"ref_nonfinite\":2,"
			"\"unwritten\":3,\"canary\":4,\"excluded\":5,\"max_abs\":1,\"max_ulp\":3.0,"
			"\"scale\":1e-300,\"big\":1e300,\"third\":0.1}]}",
			17, &t, err, sizeof(err)),
	    0);
	assert_int_equal(t.verdict, OUTCOME_PASS);
	assert_int_equal(t.tensors[0].nonfinite, 1);
	assert_int_equal(t.tensors[0].ref_nonfinite, 2);
	assert_int_equal(t.tensors[0].unwritten, 3);
	assert_int_equal(t.tensors[0].canary, 4);
	assert_int_equal(t.tensors[0].excluded, 5);
	/* Reals stay reals ("3.0"), integers stay integers, unknown fields are stored too. */
	assert_string_equal(t.tensors_json,
			    "[{\"name\":\"y\",\"ratio\":0.5,\"nonfinite\":1,\"ref_nonfinite\":2,"
			    "\"unwritten\":3,\"canary\":4,\"excluded\":5,\"max_abs\":1,\"max_ulp\":3.0,"
			    "\"scale\":1e-300,\"big\":1e+300,\"third\":0.1}]");
	proto_trial_release(&t);
}

static void test_error_example(void **state)
{
	struct proto_trial t;
	char err[256];

	assert_int_equal(parse_trial(error_example, 17, &t, err, sizeof(err)), 0);
	assert_int_equal(t.verdict, OUTCOME_ERROR);
	assert_true(t.fatal);
	assert_string_equal(t.error, "<text>");
	assert_true(isnan(t.ratio));
	assert_true(isnan(t.kernel_us));
	assert_int_equal(t.gen, -1);
	assert_string_equal(t.family, "");
	assert_int_equal(t.ndim, 0);
	assert_int_equal(t.ntensors, 0);
	assert_string_equal(t.tensors_json, "[]");
	proto_trial_release(&t);

	/* Non-fatal, and without a text. */
	assert_int_equal(
	    parse_trial("{\"op\":\"trial\",\"id\":5,\"verdict\":\"error\"}", 5, &t, err, sizeof(err)), 0);
	assert_int_equal(t.verdict, OUTCOME_ERROR);
	assert_false(t.fatal);
	assert_string_equal(t.error, "");
	proto_trial_release(&t);
}

static void test_bye(void **state)
{
	char err[256];

	assert_int_equal(proto_parse_bye("{\"op\":\"bye\"}", 12, err, sizeof(err)), 0);
	assert_int_equal(proto_parse_bye("{\"op\":\"bye\",\"note\":\"x\"}", 23, err, sizeof(err)), 0);
	assert_int_equal(proto_parse_bye("{\"op\":\"hello\"}", 14, err, sizeof(err)), -EPROTO);
	assert_string_equal(err, "op 'hello' does not match request 'bye'");
	/* 'len' bounds the line: what follows is not read. */
	assert_int_equal(proto_parse_bye("{\"op\":\"bye\"}garbage", 12, err, sizeof(err)), 0);
}

static void test_unknown_op(void **state)
{
	struct proto_hello h;
	struct proto_trial t;
	char err[256];
	const char *line;

	line = "{\"op\":\"trial\",\"error\":\"unknown op\"}";
	assert_int_equal(parse_trial(line, 17, &t, err, sizeof(err)), -ENOTSUP);
	assert_string_equal(err, "runner does not know op 'trial'");
	assert_null(t.tensors_json);
	line = "{\"op\":\"hello\",\"error\":\"unknown op\"}";
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), -ENOTSUP);
	assert_null(h.checks);
	line = "{\"op\":\"bye\",\"error\":\"unknown op\"}";
	assert_int_equal(proto_parse_bye(line, strlen(line), err, sizeof(err)), -ENOTSUP);
	/* The answer must still name the op that was sent. */
	trial_fails("{\"op\":\"tiral\",\"error\":\"unknown op\"}", 17,
		    "op 'tiral' does not match request 'trial'");
	/* Another error text is not "unknown op". */
	trial_fails("{\"op\":\"trial\",\"error\":\"out of memory\"}", 17, "missing field 'id'");
	hello_fails("{\"op\":\"hello\",\"error\":\"no cuda device\"}",
		    "runner refused hello: 'no cuda device'");
}

static void test_garbage(void **state)
{
	static const struct {
		const char *line, *err;
	} cases[] = {
	    {"", "not json: '[' or '{' expected near end of file at column *"},
	    {"hello", "not json: '[' or '{' expected near 'hello' at column *"},
	    {"{", "not json: string or '}' expected near end of file at column *"},
	    {"{\"op\":\"trial\"} {}", "not json: end of file expected near '{' at column *"},
	    {"[]", "not a json object"},
	    {"[{\"op\":\"trial\"}]", "not a json object"},
	    {"{}", "missing field 'op'"},
	    {"{\"op\":null}", "field 'op' must be a string"},
	    {"{\"op\":\"hello\"}", "op 'hello' does not match request 'trial'"},
	    {"{\"op\":\"trial\",\"op\":\"trial\"}",
	     "not json: duplicate object key near '\"op\"' at column *"},
	    {"Segmentation fault (core dumped)",
	     "not json: '[' or '{' expected near 'Segmentation' at column *"},
	    {"{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.1,\"digest\":\"\xc3\x28\"}",
	     "not json: unable to decode byte 0xc3 near '\"' at column *"},
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		trial_fails(cases[i].line, 17, cases[i].err);
}

static void test_wrong_types(void **state)
{
	static const struct {
		const char *fields, *err;
	} cases[] = {
	    {"\"id\":\"17\",\"verdict\":\"pass\",\"ratio\":1", "field 'id' must be an integer"},
	    {"\"id\":17.0,\"verdict\":\"pass\",\"ratio\":1", "field 'id' must be an integer"},
	    {"\"id\":17,\"verdict\":1,\"ratio\":1", "field 'verdict' must be a string"},
	    {"\"id\":17,\"verdict\":\"PASS\",\"ratio\":1",
	     "field 'verdict' must be 'pass', 'fail' or 'error', not 'PASS'"},
	    {"\"id\":17,\"verdict\":\"crash\",\"ratio\":1",
	     "field 'verdict' must be 'pass', 'fail' or 'error', not 'crash'"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":\"4.7\"", "field 'ratio' must be a number or null"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":true", "field 'ratio' must be a number or null"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":-0.5", "field 'ratio' must be a non-negative number"},
	    {"\"id\":17,\"verdict\":\"error\",\"fatal\":\"true\"", "field 'fatal' must be true or false"},
	    {"\"id\":17,\"verdict\":\"error\",\"fatal\":1", "field 'fatal' must be true or false"},
	    {"\"id\":17,\"verdict\":\"pass\",\"fatal\":true,\"ratio\":1",
	     "field 'fatal' is true but verdict is not 'error'"},
	    {"\"id\":17,\"verdict\":\"error\",\"error\":42", "field 'error' must be a string"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":{}", "field 'tensors' must be an array"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[1]",
	     "field 'tensors[0]' must be an object"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"dx\",\"ratio\":1,"
	     "\"nonfinite\":-1}]",
	     "field 'tensors[0].nonfinite' is out of range (-1, expected 0 to 9223372036854775807)"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"dx\",\"ratio\":1,"
	     "\"canary\":0.5}]",
	     "field 'tensors[0].canary' must be an integer"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"dx\",\"ratio\":1,\"max_"
	     "ulp\":\"x\"}]",
	     "field 'tensors[0].max_ulp' must be a number or null"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"dx\",\"ratio\":1,\"tail\":"
	     "1}]",
	     "field 'tensors[0].tail' must be true or false"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"dx\",\"ratio\":1,\"worst\":"
	     "[1,-2]}]",
	     "field 'tensors[0].worst[1]' must be a non-negative integer"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"\",\"ratio\":1}]",
	     "field 'tensors[0].name' must not be empty"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":\"d\\nx\",\"ratio\":1}]",
	     "field 'tensors[0].name' must not contain control characters"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":[]", "field 'case' must be an object"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":{\"shape\":[3,-1]}",
	     "field 'case.shape[1]' must be a non-negative integer"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":{\"shape\":[3,1.5]}",
	     "field 'case.shape[1]' must be a non-negative integer"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":{\"shape\":\"3x4\"}",
	     "field 'case.shape' must be an array"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":{\"gen\":\"1\"}",
	     "field 'case.gen' must be an integer"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":{\"gen\":-1}",
	     "field 'case.gen' is out of range (-1, expected 0 to 2147483647)"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"case\":{\"family\":\"tail tile\"}",
	     "field 'case.family' must contain only letters, digits and '._-+:'"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"digest\":7", "field 'digest' must be a string"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"digests_differ\":-1",
	     "field 'digests_differ' is out of range (-1, expected 0 to 2147483647)"},
	    {"\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"kernel_us\":\"fast\"",
	     "field 'kernel_us' must be a number or null"},
	};
	char line[512];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(line, sizeof(line), "{\"op\":\"trial\",%s}", cases[i].fields);
		trial_fails(line, 17, cases[i].err);
	}
}

static void test_id(void **state)
{
	struct proto_trial t;
	char err[256];

	trial_fails("{\"op\":\"trial\",\"id\":18,\"verdict\":\"pass\",\"ratio\":0.1}", 17,
		    "id 18 does not match request 17");
	/* An id past 'long' is a mismatch, not a wrap-around. */
	trial_fails("{\"op\":\"trial\",\"id\":-1,\"verdict\":\"pass\",\"ratio\":0.1}", 4294967295L,
		    "id -1 does not match request 4294967295");
	trial_fails("{\"op\":\"trial\",\"id\":99999999999999999999,\"verdict\":\"pass\",\"ratio\":0.1}", 17,
		    "not json: too big integer near '99999999999999999999' at column *");
	assert_int_equal(
	    parse_trial("{\"op\":\"trial\",\"id\":9007199254740993,\"verdict\":\"pass\",\"ratio\":0.1}",
			9007199254740993L, &t, err, sizeof(err)),
	    0);
	assert_int_equal(t.id, 9007199254740993L);
	proto_trial_release(&t);
}

static void test_missing_fields(void **state)
{
	trial_fails("{\"op\":\"trial\",\"verdict\":\"pass\",\"ratio\":0.1}", 17, "missing field 'id'");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"ratio\":0.1}", 17, "missing field 'verdict'");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\"}", 17, "missing field 'ratio'");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\"}", 17, "missing field 'ratio'");
	trial_fails(
	    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"ratio\":1}]}", 17,
	    "missing field 'tensors[0].name'");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":[{\"name\":"
		    "\"a\",\"ratio\":1},"
		    "{\"name\":\"b\"}]}",
		    17, "missing field 'tensors[1].ratio'");

	hello_fails("{\"op\":\"hello\",\"checks\":[]}", "missing field 'protocol'");
	hello_fails("{\"op\":\"hello\",\"protocol\":1}", "missing field 'checks'");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"dtypes\":[\"f32\"]}]}",
	    "missing field 'checks[0].deterministic'");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"deterministic\":true}]}",
	    "missing field 'checks[0].dtypes'");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"op\":\"a\",\"pass\":\"fwd\",\"dtypes\":[],"
	    "\"deterministic\":true}]}",
	    "missing field 'checks[0].check'");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"pass\":\"fwd\","
		    "\"dtypes\":[],"
		    "\"deterministic\":true}]}",
		    "missing field 'checks[0].op'");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"dtypes\":[],"
	    "\"deterministic\":true}]}",
	    "missing field 'checks[0].pass'");
}

static void test_hello_variants(void **state)
{
	struct proto_hello h;
	char err[256];
	const char *line;

	/* The least a runner must say: families and device may be missing. */
	line = "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"gemm.fwd\",\"op\":\"gemm\","
	       "\"pass\":\"fwd\","
	       "\"dtypes\":[\"f32\"],\"deterministic\":true}]}";
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_int_equal(h.nchecks, 1);
	assert_int_equal(h.checks[0].nfamilies, 0);
	assert_string_equal(h.device_json, "{}");
	assert_string_equal(h.backend, "");
	assert_string_equal(h.device_name, "");
	assert_string_equal(h.runner, "");
	proto_hello_release(&h);

	/* Unknown fields everywhere are ignored (and kept in device_json). */
	line = "{\"op\":\"hello\",\"protocol\":1,\"x-ext\":{\"a\":[1,2]},\"device\":{\"backend\":\"host\","
	       "\"cores\":16},"
	       "\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\",\"dtypes\":[\"f64\"],"
	       "\"deterministic\":"
	       "false,\"families\":null,\"budget\":2.0}]}";
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_string_equal(h.backend, "host");
	assert_string_equal(h.device_json, "{\"backend\":\"host\",\"cores\":16}");
	assert_int_equal(h.checks[0].nfamilies, 0);
	proto_hello_release(&h);

	/* No checks at all is a valid (if useless) runner; the daemon decides. */
	line = "{\"op\":\"hello\",\"protocol\":1,\"checks\":[]}";
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_int_equal(h.nchecks, 0);
	assert_null(h.checks);
	proto_hello_release(&h);

	hello_fails("{\"op\":\"hello\",\"protocol\":2,\"checks\":[]}",
		    "unsupported protocol version 2 (expected 1)");
	hello_fails("{\"op\":\"hello\",\"protocol\":\"1\",\"checks\":[]}",
		    "field 'protocol' must be an integer");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":{}}", "field 'checks' must be an array");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[\"softmax.fwd\"]}",
		    "field 'checks[0]' must be an object");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"device\":\"H200\",\"checks\":[]}",
		    "field 'device' must be an object");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"device\":{\"backend\":\"cu da\"},\"checks\":[]}",
		    "field 'device.backend' must contain only letters, digits and '._-+:'");
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"runner\":[],\"checks\":[]}",
		    "field 'runner' must be a string");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"dtypes\":[\"f32\"],\"deterministic\":\"yes\"}]}",
	    "field 'checks[0].deterministic' must be true or false");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"dtypes\":\"f32\",\"deterministic\":true}]}",
	    "field 'checks[0].dtypes' must be an array");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"dtypes\":[\"f32\",32],\"deterministic\":true}]}",
	    "field 'checks[0].dtypes[1]' must be a string");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"dtypes\":[\"f32\",\"f32\"],\"deterministic\":true}]}",
	    "field 'checks[0].dtypes' lists 'f32' twice");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\","
	    "\"dtypes\":[\"f32\"],\"families\":[\"tail\",\"\"],\"deterministic\":true}]}",
	    "field 'checks[0].families[1]' must not be empty");
	/* Names go into URLs and shell commands: no quoting needed anywhere. */
	hello_fails("{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd;rm -rf "
		    "~\",\"op\":\"a\",\"pass\":"
		    "\"fwd\",\"dtypes\":[\"f32\"],\"deterministic\":true}]}",
		    "field 'checks[0].check' must contain only letters, digits and '._-+:'");
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":["
	    "{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\",\"dtypes\":[\"f32\"],\"deterministic\":true},"
	    "{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":\"fwd\",\"dtypes\":[\"f16\"],\"deterministic\":true}]"
	    "}",
	    "duplicate check 'a.fwd' in field 'checks'");
}

/* Builds a hello whose first check has 'n' dtypes or families. */
static char *hello_with_list(const char *field, unsigned n)
{
	char *line = malloc(4096);
	size_t len;
	unsigned i;

	assert_non_null(line);
	len = (size_t)snprintf(
	    line, 4096,
	    "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"a.fwd\",\"op\":\"a\",\"pass\":"
	    "\"fwd\",\"deterministic\":true,%s\"%s\":[",
	    strcmp(field, "dtypes") ? "\"dtypes\":[\"f32\"]," : "", field);
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(line + len, 4096 - len, "%s\"n%u\"", i ? "," : "", i);
	snprintf(line + len, 4096 - len, "]}]}");
	return line;
}

static void test_oversized(void **state)
{
	struct proto_hello h;
	struct proto_trial t;
	char err[256], want[256], *line, name[NW_PROTO_NAME_MAX + 1];
	size_t len, cap = 1 << 20;
	unsigned i;

	/* Tensors: NW_PROTO_TENSORS_MAX is fine, one more is not. */
	line = malloc(cap);
	assert_non_null(line);
	for (unsigned n = NW_PROTO_TENSORS_MAX; n <= NW_PROTO_TENSORS_MAX + 1; n++) {
		len = (size_t)snprintf(
		    line, cap, "{\"op\":\"trial\",\"id\":1,\"verdict\":\"pass\",\"ratio\":0.5,\"tensors\":[");
		for (i = 0; i < n; i++)
			len += (size_t)snprintf(line + len, cap - len, "%s{\"name\":\"t%u\",\"ratio\":0.5}",
						i ? "," : "", i);
		snprintf(line + len, cap - len, "]}");
		if (n == NW_PROTO_TENSORS_MAX) {
			assert_int_equal(parse_trial(line, 1, &t, err, sizeof(err)), 0);
			assert_int_equal(t.ntensors, NW_PROTO_TENSORS_MAX);
			assert_string_equal(t.tensors[NW_PROTO_TENSORS_MAX - 1].name, "t15");
			proto_trial_release(&t);
		} else {
			snprintf(want, sizeof(want), "field 'tensors' has too many elements (%u, at most %d)",
				 n, NW_PROTO_TENSORS_MAX);
			trial_fails(line, 1, want);
		}
	}

	/* Checks. */
	for (unsigned n = NW_PROTO_CHECKS_MAX; n <= NW_PROTO_CHECKS_MAX + 1; n++) {
		len = (size_t)snprintf(line, cap, "{\"op\":\"hello\",\"protocol\":1,\"checks\":[");
		for (i = 0; i < n; i++)
			len += (size_t)snprintf(
			    line + len, cap - len,
			    "%s{\"check\":\"c%u.fwd\",\"op\":\"c%u\",\"pass\":\"fwd\",\"dtypes\":[\"f32\"],"
			    "\"deterministic\":true}",
			    i ? "," : "", i, i);
		snprintf(line + len, cap - len, "]}");
		if (n == NW_PROTO_CHECKS_MAX) {
			assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
			assert_int_equal(h.nchecks, NW_PROTO_CHECKS_MAX);
			assert_string_equal(h.checks[255].check, "c255.fwd");
			proto_hello_release(&h);
		} else {
			snprintf(want, sizeof(want), "field 'checks' has too many elements (%u, at most %d)",
				 n, NW_PROTO_CHECKS_MAX);
			hello_fails(line, want);
		}
	}
	free(line);

	/* Dtypes and families of one check. */
	line = hello_with_list("dtypes", NW_PROTO_DTYPES_MAX);
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_int_equal(h.checks[0].ndtypes, NW_PROTO_DTYPES_MAX);
	proto_hello_release(&h);
	free(line);
	line = hello_with_list("dtypes", NW_PROTO_DTYPES_MAX + 1);
	hello_fails(line, "field 'checks[0].dtypes' has too many elements (9, at most 8)");
	free(line);
	line = hello_with_list("families", NW_PROTO_FAMILIES_MAX);
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_int_equal(h.checks[0].nfamilies, NW_PROTO_FAMILIES_MAX);
	assert_string_equal(h.checks[0].families[31], "n31");
	proto_hello_release(&h);
	free(line);
	line = hello_with_list("families", NW_PROTO_FAMILIES_MAX + 1);
	hello_fails(line, "field 'checks[0].families' has too many elements (33, at most 32)");
	free(line);

	/* Shape dimensions. */
	trial_fails("{\"op\":\"trial\",\"id\":1,\"verdict\":\"pass\",\"ratio\":0.5,\"case\":{\"shape\":[1,2,"
		    "3,4,5,6,7,8,9]}}",
		    1, "field 'case.shape' has too many elements (9, at most 8)");
	assert_int_equal(
	    parse_trial("{\"op\":\"trial\",\"id\":1,\"verdict\":\"pass\",\"ratio\":0.5,\"case\":{\"shape\":"
			"[1,2,3,4,5,6,7,0],\"family\":\"tiny\"}}",
			1, &t, err, sizeof(err)),
	    0);
	assert_int_equal(t.ndim, 8);
	assert_int_equal(t.shape[7], 0);
	proto_trial_release(&t);

	/* Names: NW_PROTO_NAME_MAX - 1 bytes fit, one more is refused, not cut. */
	line = malloc(1024);
	assert_non_null(line);
	memset(name, 'd', sizeof(name));
	name[NW_PROTO_NAME_MAX - 1] = '\0';
	snprintf(line, 1024,
		 "{\"op\":\"trial\",\"id\":1,\"verdict\":\"pass\",\"ratio\":0.5,\"digest\":\"%s\"}", name);
	assert_int_equal(parse_trial(line, 1, &t, err, sizeof(err)), 0);
	assert_string_equal(t.digest, name);
	proto_trial_release(&t);
	name[NW_PROTO_NAME_MAX - 1] = 'd';
	name[NW_PROTO_NAME_MAX] = '\0';
	snprintf(line, 1024,
		 "{\"op\":\"trial\",\"id\":1,\"verdict\":\"pass\",\"ratio\":0.5,\"digest\":\"%s\"}", name);
	trial_fails(line, 1, "field 'digest' is too long (64 bytes, at most 63)");
	snprintf(line, 1024,
		 "{\"op\":\"hello\",\"protocol\":1,\"checks\":[{\"check\":\"%s\",\"op\":\"a\",\"pass\":"
		 "\"fwd\",\"dtypes\":[\"f32\"],\"deterministic\":true}]}",
		 name);
	hello_fails(line, "field 'checks[0].check' is too long (64 bytes, at most 63)");
	free(line);
}

/* Free text (error, runner, device name) is cut to fit, at a UTF-8 character boundary. */
static void test_long_text(void **state)
{
	struct proto_hello h;
	struct proto_trial t;
	char err[256], *line, *text;
	size_t n = 3 * NW_PROTO_TEXT_MAX, len;

	text = malloc(n + 1);
	line = malloc(n + 512);
	assert_non_null(text);
	assert_non_null(line);
	/*
	 * 2-byte characters only: the last byte that fits (offset
	 * NW_PROTO_TEXT_MAX - 2) is the first half of one, which must go too.
	 */
	for (len = 0; len + 2 <= n; len += 2)
		memcpy(text + len, "\xc3\xa9", 2);
	text[len] = '\0';
	snprintf(line, n + 512, "{\"op\":\"trial\",\"id\":1,\"verdict\":\"error\",\"error\":\"%s\"}", text);
	assert_int_equal(parse_trial(line, 1, &t, err, sizeof(err)), 0);
	len = strlen(t.error);
	assert_int_equal(len, NW_PROTO_TEXT_MAX - 2);
	assert_memory_equal(t.error, text, len);
	proto_trial_release(&t);

	snprintf(
	    line, n + 512,
	    "{\"op\":\"hello\",\"protocol\":1,\"runner\":\"%s\",\"device\":{\"name\":\"%s\"},\"checks\":[]}",
	    text, "NVIDIA H200");
	assert_int_equal(proto_parse_hello(line, strlen(line), &h, err, sizeof(err)), 0);
	assert_int_equal(strlen(h.runner), NW_PROTO_TEXT_MAX - 2);
	assert_string_equal(h.device_name, "NVIDIA H200");
	proto_hello_release(&h);

	/* A device object too big to store whole is refused (cut JSON is not JSON). */
	snprintf(line, n + 512,
		 "{\"op\":\"hello\",\"protocol\":1,\"device\":{\"name\":\"%s\"},\"checks\":[]}", text);
	snprintf(err, sizeof(err), "field 'device' is too long (%zu bytes encoded, at most %d)",
		 strlen(text) + strlen("{\"name\":\"\"}"), NW_PROTO_TEXT_MAX - 1);
	hello_fails(line, err);
	free(line);
	free(text);
}

static void test_nul_byte(void **state)
{
	static const char line[] =
	    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.1}\0 trailing";
	static const char bye[] = "{\"op\":\"bye\"\0}";
	struct proto_trial t;
	char err[256];

	assert_int_equal(proto_parse_trial(line, sizeof(line) - 1, 17, &t, err, sizeof(err)), -EPROTO);
	assert_string_equal(err, "line contains a nul byte");
	assert_int_equal(proto_parse_bye(bye, sizeof(bye) - 1, err, sizeof(err)), -EPROTO);
	assert_string_equal(err, "line contains a nul byte");
	/* An escaped NUL inside a string is refused by the JSON parser. */
	trial_fails(
	    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"error\",\"error\":\"a\\u0000b\"}", 17,
	    "not json: \\u0000 is not allowed without JSON_ALLOW_NUL near '\"a\\u0000b\"' at column *");
}

static void test_line_length(void **state)
{
	struct proto_trial t;
	char err[256], want[256], *line;
	const char *head = "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.1,\"padding\":\"";
	size_t len;

	line = malloc(NW_PROTO_LINE_MAX + 2);
	assert_non_null(line);
	/* Exactly NW_PROTO_LINE_MAX bytes: accepted, and the big unknown field is ignored. */
	len = strlen(head);
	memcpy(line, head, len);
	memset(line + len, 'p', NW_PROTO_LINE_MAX - len - 2);
	memcpy(line + NW_PROTO_LINE_MAX - 2, "\"}", 2);
	line[NW_PROTO_LINE_MAX] = '\0';
	assert_int_equal(proto_parse_trial(line, NW_PROTO_LINE_MAX, 17, &t, err, sizeof(err)), 0);
	assert_int_equal(t.verdict, OUTCOME_PASS);
	assert_string_equal(t.tensors_json, "[]");
	proto_trial_release(&t);

	/* One byte more. */
	memcpy(line + NW_PROTO_LINE_MAX - 2, "p\"}", 3);
	line[NW_PROTO_LINE_MAX + 1] = '\0';
	assert_int_equal(proto_parse_trial(line, NW_PROTO_LINE_MAX + 1, 17, &t, err, sizeof(err)), -EPROTO);
	snprintf(want, sizeof(want), "line too long (%d bytes, at most %d)", NW_PROTO_LINE_MAX + 1,
		 NW_PROTO_LINE_MAX);
	assert_string_equal(err, want);
	assert_null(t.tensors_json);
	free(line);
}

/* Not-a-number cannot be written in JSON; a runner sends null, and NaN text is refused with a hint. */
static void test_nan(void **state)
{
	struct proto_trial t;
	char err[256];

	assert_int_equal(
	    parse_trial(
		"{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":null,\"kernel_us\":null,"
		"\"tensors\":[{\"name\":\"dv\",\"ratio\":null,\"nonfinite\":4096,\"ref_nonfinite\":0}]}",
		17, &t, err, sizeof(err)),
	    0);
	assert_true(isnan(t.ratio));
	assert_true(isnan(t.kernel_us));
	assert_true(isnan(t.tensors[0].ratio));
	assert_int_equal(t.tensors[0].nonfinite, 4096);
	assert_string_equal(t.tensors_json,
			    "[{\"name\":\"dv\",\"ratio\":null,\"nonfinite\":4096,\"ref_nonfinite\":0}]");
	assert_string_equal(t.nonfinite, "");
	proto_trial_release(&t);

	/* What a strict parser refuses, and where NaN or Infinity is not a bare value: no repair. */
	trial_fails(
	    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":NaNa}", 17,
	    "not json: invalid token near 'NaNa' at column * (nan and infinity are not json: send null)");
	trial_fails(
	    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":Infinity,\"x\":tru}", 17,
	    "not json: invalid token near 'Infinity' at column * (nan and infinity are not json: send null)");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":\"NaN\"}", 17,
		    "field 'ratio' must be a number or null");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":\"inf\"}", 17,
		    "field 'ratio' must be a number or null");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":1e400}", 17,
		    "not json: real number overflow near '1e400' at column *");
	trial_fails("{\"op\":\"trial\",\"id\":17,\"verdict\":\"fail\",\"ratio\":1,\"tensors\":[{\"name\":"
		    "\"dv\",\"ratio\":\"nan\"}]}",
		    17, "field 'tensors[0].ratio' must be a number or null");
}

/*
 * Python's json.dumps() writes NaN, Infinity and -Infinity: read as null, and
 * a ratio that was one is named (the daemon fails that trial), whatever the
 * runner's verdict; a string that holds the words is left as it is.
 */
static void test_nan_words(void **state)
{
	struct proto_trial t;
	char err[256];

	assert_int_equal(
	    parse_trial("{\"op\": \"trial\", \"id\": 17, \"verdict\": \"fail\", \"ratio\": NaN, "
			"\"tensors\": [{\"name\": \"y\", \"ratio\": NaN, \"max_abs\": Infinity}]}",
			17, &t, err, sizeof(err)),
	    0);
	assert_int_equal(t.verdict, OUTCOME_FAIL);
	assert_true(isnan(t.ratio));
	assert_true(isnan(t.tensors[0].ratio));
	assert_string_equal(t.nonfinite, "'ratio' was NaN");
	assert_string_equal(t.tensors_json, "[{\"name\":\"y\",\"ratio\":null,\"max_abs\":null}]");
	proto_trial_release(&t);

	/* A passing verdict with an infinite tensor ratio: named all the same. */
	assert_int_equal(
	    parse_trial(
		"{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.5,"
		"\"tensors\":[{\"name\":\"y\",\"ratio\":-Infinity},{\"name\":\"z\",\"ratio\":[NaN]}]}",
		17, &t, err, sizeof(err)),
	    -EPROTO);
	assert_message(err, "field 'tensors[1].ratio' must be a number or null");
	assert_string_equal(t.nonfinite, "");
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.5,"
				     "\"tensors\":[{\"name\":\"y\",\"ratio\":Infinity}]}",
				     17, &t, err, sizeof(err)),
			 0);
	assert_int_equal(t.verdict, OUTCOME_PASS);
	assert_string_equal(t.nonfinite, "'ratio' was Infinity");
	proto_trial_release(&t);

	/* Elsewhere (a time, a spread) it is only no value; strings keep the words. */
	assert_int_equal(
	    parse_trial("{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.25,"
			"\"kernel_us\":NaN,\"digest\":\"NaN, \\\":Infinity\","
			"\"tensors\":[{\"name\":\"ratio\",\"ratio\":0.25,\"max_rel\":-Infinity}]}",
			17, &t, err, sizeof(err)),
	    0);
	assert_int_equal(t.verdict, OUTCOME_PASS);
	assert_true(isnan(t.kernel_us));
	assert_string_equal(t.digest, "NaN, \":Infinity");
	assert_string_equal(t.nonfinite, "");
	proto_trial_release(&t);

	/* A hello is not repaired: nothing in it may be a number that is not finite. */
	hello_fails(
	    "{\"op\":\"hello\",\"protocol\":NaN,\"checks\":[]}",
	    "not json: invalid token near 'NaN' at column * (nan and infinity are not json: send null)");
}

/* A line whose first character that is not blank is not '{' cannot be a message. */
static void test_line_is_message(void **state)
{
	assert_true(proto_line_is_message("{}", 2));
	assert_true(proto_line_is_message(" \t\r{\"op\"", 8));
	assert_true(proto_line_is_message("{not json", 9));
	assert_false(proto_line_is_message("", 0));
	assert_false(proto_line_is_message("  ", 2));
	assert_false(proto_line_is_message("debug: x = {1, 2}", 17));
	assert_false(proto_line_is_message("\xff{", 2));
	assert_false(proto_line_is_message("[1]", 3));
}

/* Runner output made fit for the log and a text column. */
static void test_clean_text(void **state)
{
	char out[16];

	assert_string_equal(proto_clean_text(out, sizeof(out), "a\0b\nc\td\x1b", 8, true), "a?b\nc\td?");
	assert_string_equal(proto_clean_text(out, sizeof(out), "a\0b\nc\td\x1b", 8, false), "a?b?c?d?");
	/* A tail that starts inside a character, and bytes that are not UTF-8. */
	assert_string_equal(proto_clean_text(out, sizeof(out), "\xa9x\xff\xc3\xa9", 5, true), "?x?\xc3\xa9");
	/* Cut to fit; a character cut in two is replaced. */
	assert_string_equal(proto_clean_text(out, 4, "ab\xc3\xa9", 4, true), "ab?");
	assert_string_equal(proto_clean_text(out, sizeof(out), "", 0, true), "");
}

static void test_unknown_fields(void **state)
{
	struct proto_trial t;
	char err[256];

	assert_int_equal(
	    parse_trial(
		"{\"x\":[{\"deep\":{}}],\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0.25,"
		"\"case\":{\"family\":\"aligned\",\"shape\":[64],\"gen\":2,\"strides\":[1]},"
		"\"sanitizer\":\"none\",\"digest\":null,\"family\":null}",
		17, &t, err, sizeof(err)),
	    0);
	assert_true(t.ratio == 0.25);
	assert_string_equal(t.family, "aligned");
	assert_int_equal(t.gen, 2);
	assert_string_equal(t.digest, "");
	proto_trial_release(&t);
}

/*
 * case.digest (optional): a hash of the inputs the runner generated for the
 * seed. Kept as sent when present, "" when absent or null (a runner older
 * than it), and a protocol error when it is not a short printable string.
 */
static void test_case_digest(void **state)
{
	struct proto_trial t;
	char err[256], line[512], digest[NW_PROTO_NAME_MAX + 1];
	static const struct {
		const char *value, *err;
	} bad[] = {
	    {"42", "field 'case.digest' must be a string"},
	    {"[\"9f2c41d07be3a8e1\"]", "field 'case.digest' must be a string"},
	    {"true", "field 'case.digest' must be a string"},
	    {"\"\"", "field 'case.digest' must not be empty"},
	    {"\"9f2c 41d0\"", "field 'case.digest' must contain only printable ASCII characters, no spaces"},
	    {"\"9f2c\\t41d0\"",
	     "field 'case.digest' must contain only printable ASCII characters, no spaces"},
	    {"\"9f2c\\u00e941d0\"",
	     "field 'case.digest' must contain only printable ASCII characters, no spaces"},
	};
	size_t i;

	(void)state;
	/* Present: the C SDK's form (16 hex digits), and any other short printable token. */
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"id\":3,\"verdict\":\"pass\",\"ratio\":0.5,"
				     "\"case\":{\"family\":\"tail\",\"shape\":[3,1025],\"gen\":1,"
				     "\"digest\":\"0c1d2e3f4a5b6c7d\"},\"digest\":\"9f2c41d07be3a8e1\"}",
				     3, &t, err, sizeof(err)),
			 0);
	assert_string_equal(t.case_digest, "0c1d2e3f4a5b6c7d");
	/* Not to be confused with the outputs' digest. */
	assert_string_equal(t.digest, "9f2c41d07be3a8e1");
	assert_string_equal(t.family, "tail");
	proto_trial_release(&t);
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"id\":3,\"verdict\":\"fail\",\"ratio\":2,"
				     "\"case\":{\"digest\":\"sha256:Zm9v/YmFy+=\"}}",
				     3, &t, err, sizeof(err)),
			 0);
	assert_string_equal(t.case_digest, "sha256:Zm9v/YmFy+=");
	proto_trial_release(&t);

	/* Absent: no case, a case without it, or null. */
	assert_int_equal(parse_trial(trial_example, 17, &t, err, sizeof(err)), 0);
	assert_string_equal(t.case_digest, "");
	proto_trial_release(&t);
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"id\":3,\"verdict\":\"pass\",\"ratio\":0.5}", 3, &t,
				     err, sizeof(err)),
			 0);
	assert_string_equal(t.case_digest, "");
	proto_trial_release(&t);
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"id\":3,\"verdict\":\"pass\",\"ratio\":0.5,"
				     "\"case\":{\"family\":\"tail\",\"digest\":null}}",
				     3, &t, err, sizeof(err)),
			 0);
	assert_string_equal(t.case_digest, "");
	assert_string_equal(t.family, "tail");
	proto_trial_release(&t);
	/* An error answer may carry a case too; its digest is kept. */
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"id\":3,\"verdict\":\"error\",\"error\":\"x\","
				     "\"case\":{\"digest\":\"00ff\"}}",
				     3, &t, err, sizeof(err)),
			 0);
	assert_string_equal(t.case_digest, "00ff");
	proto_trial_release(&t);

	/* Malformed: the wrong type, empty, spaces, control or non-ASCII characters. */
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(line, sizeof(line),
			 "{\"op\":\"trial\",\"id\":3,\"verdict\":\"pass\",\"ratio\":0.5,"
			 "\"case\":{\"family\":\"tail\",\"digest\":%s}}",
			 bad[i].value);
		trial_fails(line, 3, bad[i].err);
	}

	/* Bounded like the outputs' digest: NW_PROTO_NAME_MAX - 1 bytes fit, one more is refused, not cut. */
	memset(digest, 'a', sizeof(digest));
	digest[NW_PROTO_NAME_MAX - 1] = '\0';
	snprintf(
	    line, sizeof(line),
	    "{\"op\":\"trial\",\"id\":3,\"verdict\":\"pass\",\"ratio\":0.5,\"case\":{\"digest\":\"%s\"}}",
	    digest);
	assert_int_equal(parse_trial(line, 3, &t, err, sizeof(err)), 0);
	assert_string_equal(t.case_digest, digest);
	proto_trial_release(&t);
	digest[NW_PROTO_NAME_MAX - 1] = 'a';
	digest[NW_PROTO_NAME_MAX] = '\0';
	snprintf(
	    line, sizeof(line),
	    "{\"op\":\"trial\",\"id\":3,\"verdict\":\"pass\",\"ratio\":0.5,\"case\":{\"digest\":\"%s\"}}",
	    digest);
	trial_fails(line, 3, "field 'case.digest' is too long (64 bytes, at most 63)");
}

/* Messages go to the log and to a text column: always valid UTF-8, no control characters. */
static void test_message_is_clean_text(void **state)
{
	char op[200];
	size_t i;

	/* A runner printing in colour to stdout: jansson quotes the raw escape byte. */
	trial_fails("\x1b[31mFAILED\x1b[0m", 1, "not json: '[' or '{' expected near '?' at column *");
	trial_fails("{\"op\":\x01}", 1, "not json: invalid token near '?' at column *");
	/* An escaped control character in a quoted value. */
	trial_fails("{\"op\":\"tri\\nal\"}", 1, "op 'tri?al' does not match request 'trial'");
	/* A long quoted value is cut, and never inside a character. */
	for (i = 0; i + 2 < 140; i += 2)
		memcpy(op + i, "\xc3\xa9", 2);
	op[i] = '\0';
	{
		char line[256], want[256];

		snprintf(line, sizeof(line), "{\"op\":\"x%s\"}", op);
		/* 'x' and 31 whole characters fit in 64 bytes; the half character left is replaced. */
		snprintf(want, sizeof(want), "op 'x%.62s?' does not match request 'trial'", op);
		trial_fails(line, 1, want);
	}
}

static void test_small_error_buffer(void **state)
{
	struct proto_trial t;
	char err[6];

	assert_int_equal(parse_trial("{}", 1, &t, err, sizeof(err)), -EPROTO);
	assert_string_equal(err, "missi");
	assert_int_equal(parse_trial("{}", 1, &t, NULL, 0), -EPROTO);
	assert_int_equal(parse_trial("{\"op\":\"trial\",\"error\":\"unknown op\"}", 1, &t, NULL, 0),
			 -ENOTSUP);
}

/*
 * proto_parse_trial decodes the common answer itself and leaves the rest to
 * the reference decoder (jansson): both must give the same result for every
 * line, and the fast one must take the usual answers. Each base line, then
 * each line with one byte replaced, inserted or removed at every position.
 */
static const char *const fast_bases[] = {
    trial_example,
    /* The instant runner's answer (bench/instant-runner.c). */
    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"case\":{\"family\":\"aligned\",\"shape\":[3,1025],"
    "\"gen\":1,\"digest\":\"f519f86ee2385b72\"},\"ratio\":0.42,\"tensors\":[{\"name\":\"y\",\"ratio\":0.42,"
    "\"max_abs\":0.000131,\"max_rel\":0.0035,\"max_ulp\":null,\"nonfinite\":0,\"ref_nonfinite\":0,"
    "\"unwritten\":0,\"canary\":0,\"excluded\":0,\"worst\":[2,1024],\"tail\":true}],"
    "\"digest\":\"9f2c41d07be3a8e1\",\"digests_differ\":0,\"kernel_us\":18.4}",
    /* The C runners' (kernels/sdk): unknown fields, a nested case.params, worst null. */
    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"case\":{\"family\":\"masked_rows\",\"shape\":[1,1,71,"
    "25,32],"
    "\"gen\":1,\"digest\":\"7b96650b3609505f\",\"params\":{\"causal\":1}},\"ratio\":0.0696489,\"tensors\":["
    "{\"name\":\"dq\",\"ratio\":0.0641567,\"max_abs\":0.00347897,\"max_rel\":0.00379722,\"max_ulp\":null,"
    "\"nonfinite\":0,\"ref_nonfinite\":0,\"unwritten\":0,\"canary\":0,\"excluded\":0,\"worst\":[0,0,52,15],"
    "\"tail\":false,\"mismatch\":0,\"plain_max_abs\":0.00598057,\"budget\":0.0542262},{\"name\":\"dv\","
    "\"ratio\":0,\"worst\":null,\"tail\":false,\"budget\":1.17549e-38}],\"digest\":\"20c50bb98b6a985c\","
    "\"digests_differ\":2,\"kernel_us\":0.701}",
    /* Nulls, -0, big and small numbers, a scalar's shape, whitespace everywhere. */
    " { \"op\" : \"trial\" , \"id\" : 17 , \"verdict\" : \"fail\" , \"ratio\" : null , \"fatal\" : false ,"
    " \"case\" : { \"family\" : null , \"shape\" : [ ] , \"gen\" : 0 , \"x\" : [ [ ] , { } , -0 , 1E2 ] } ,"
    " \"tensors\" : [ ] , \"digest\" : null , \"kernel_us\" : -0.0 , \"extra\" : [ true , false , null ,"
    " 12345678901234567 , 1e-400 , 0.1e+1 , \"/ ~\" , 9223372036854775807 , -9223372036854775808 ,"
    " 1e300 , 123e298 , 0.5e301 ] }\r\n",
    "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":1,\"tensors\":null,\"case\":null}",
};

static void compare_decoders(const char *line, size_t len)
{
	struct proto_trial a, b;
	char ea[512], eb[512];
	int ra = proto_parse_trial(line, len, 17, &a, ea, sizeof(ea));
	int rb = proto_parse_trial_ref(line, len, 17, &b, eb, sizeof(eb));

	if (ra != rb || strcmp(ea, eb) != 0)
		fail_msg("line '%.*s': %d '%s' against the reference's %d '%s'", (int)len, line, ra, ea, rb,
			 eb);
	if ((a.tensors_json == NULL) != (b.tensors_json == NULL) ||
	    (a.tensors_json && strcmp(a.tensors_json, b.tensors_json) != 0))
		fail_msg("line '%.*s': tensors '%s' against the reference's '%s'", (int)len, line,
			 a.tensors_json ? a.tensors_json : "(null)",
			 b.tensors_json ? b.tensors_json : "(null)");
	proto_trial_release(&a);
	proto_trial_release(&b);
	/* Decoded again to compare every field, bit for bit (NANs included). */
	ra = proto_parse_trial(line, len, 17, &a, ea, sizeof(ea));
	rb = proto_parse_trial_ref(line, len, 17, &b, eb, sizeof(eb));
	{
		char *ta = a.tensors_json, *tb = b.tensors_json;

		a.tensors_json = b.tensors_json = NULL;
		if (memcmp(&a, &b, sizeof(a)) != 0)
			fail_msg("line '%.*s': decoded differently from the reference", (int)len, line);
		a.tensors_json = ta;
		b.tensors_json = tb;
	}
	proto_trial_release(&a);
	proto_trial_release(&b);
}

/*
 * Numbers are stored as the reference decoder re-encodes them (shortest
 * "%.Ng" that reads back, ".0" on a real without one); the fast decoder
 * copies a number that is already written so. Random numbers of every shape
 * (signs, leading and trailing zeros, 1 to 20 digits, the point anywhere,
 * exponents) must come out alike.
 */
static void test_fast_numbers(void **state)
{
	unsigned long long x = 88172645463325252ULL;
	char token[64], line[256];
	unsigned n;

	(void)state;
	for (unsigned k = 0; k < 200000; k++) {
		size_t len = 0;
		unsigned digits, point;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		digits = 1 + (unsigned)(x % 20);
		point = (unsigned)((x >> 8) % (digits + 2)); /* digits + 1: none */
		if ((x >> 16) & 1)
			token[len++] = '-';
		for (unsigned i = 0; i < digits; i++) {
			unsigned d = (unsigned)((x >> (20 + 2 * (i % 20))) % 10);

			/* Many zeros: leading, trailing and inner ones are the hard cases. */
			if (((x >> (i % 40)) & 3) == 0)
				d = 0;
			if (i == point && i > 0)
				token[len++] = '.';
			token[len++] = (char)('0' + d);
		}
		/* Exponents as printf writes them ("e-05", "e+100") and as it does not ("E7", "e007"). */
		if (((x >> 60) & 3) == 0) {
			static const char *const marks[] = {"e", "e-", "e+", "E", "E-", "e-", "e+", "e-0"};
			unsigned e = (x >> 50) & 1 ? (unsigned)((x >> 40) % 40) : (unsigned)((x >> 40) % 400);

			len +=
			    (size_t)snprintf(token + len, sizeof(token) - len, "%s%s%u", marks[(x >> 56) & 7],
					     e < 10 && ((x >> 62) & 1) ? "0" : "", e);
		}
		token[len] = '\0';
		n = (unsigned)snprintf(line, sizeof(line),
				       "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":0,"
				       "\"tensors\":[{\"name\":\"a\",\"ratio\":0,\"x\":%s}]}",
				       token);
		compare_decoders(line, n);
		/* As ratio and kernel_us (0 or more): their stored text reads back as the number. */
		n = (unsigned)snprintf(line, sizeof(line),
				       "{\"op\":\"trial\",\"id\":17,\"verdict\":\"pass\",\"ratio\":%s,"
				       "\"kernel_us\":%s,\"tensors\":[]}",
				       token + (token[0] == '-'), token + (token[0] == '-'));
		compare_decoders(line, n);
		{
			struct proto_trial t;
			char err[256];

			if (proto_parse_trial(line, n, 17, &t, err, sizeof(err)) == 0 &&
			    (!t.ratio_text[0] || strtod(t.ratio_text, NULL) != t.ratio ||
			     strcmp(t.ratio_text, t.kernel_us_text) != 0))
				fail_msg("line '%s': ratio %.17g stored as '%s', kernel_us as '%s'", line,
					 t.ratio, t.ratio_text, t.kernel_us_text);
			proto_trial_release(&t);
		}
	}
}

static void test_fast_matches_reference(void **state)
{
	static const char bytes[] = "\"\\{}[],:0123456789-+.eE ntfrux\t\n\x01\x7f\x80\xc3\xa9";
	char line[2048];
	unsigned lines = 0;

	(void)state;
	for (size_t k = 0; k < sizeof(fast_bases) / sizeof(fast_bases[0]); k++) {
		const char *base = fast_bases[k];
		size_t len = strlen(base);
		struct proto_trial t;

		/* Every base line is the fast decoder's. */
		if (proto_parse_trial_fast(base, len, 17, &t) != 1)
			fail_msg("the fast decoder left base line %zu to the reference", k);
		proto_trial_release(&t);
		assert_true(len + 2 < sizeof(line));
		compare_decoders(base, len);
		for (size_t i = 0; i < len; i++) {
			for (size_t j = 0; j < sizeof(bytes) - 1; j++) {
				/* Replaced. */
				memcpy(line, base, len);
				line[i] = bytes[j];
				compare_decoders(line, len);
				/* Inserted. */
				memcpy(line, base, i);
				line[i] = bytes[j];
				memcpy(line + i + 1, base + i, len - i);
				compare_decoders(line, len + 1);
				lines += 2;
			}
			/* Removed. */
			memcpy(line, base, i);
			memcpy(line + i, base + i + 1, len - i - 1);
			compare_decoders(line, len - 1);
			lines++;
		}
	}
	print_message("%u mutated lines decoded alike\n", lines);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_requests),
	    cmocka_unit_test(test_hello_example),
	    cmocka_unit_test(test_hello_repro),
	    cmocka_unit_test(test_hello_pipeline),
	    cmocka_unit_test(test_trial_example),
	    cmocka_unit_test(test_error_example),
	    cmocka_unit_test(test_bye),
	    cmocka_unit_test(test_unknown_op),
	    cmocka_unit_test(test_garbage),
	    cmocka_unit_test(test_wrong_types),
	    cmocka_unit_test(test_id),
	    cmocka_unit_test(test_missing_fields),
	    cmocka_unit_test(test_hello_variants),
	    cmocka_unit_test(test_oversized),
	    cmocka_unit_test(test_long_text),
	    cmocka_unit_test(test_nul_byte),
	    cmocka_unit_test(test_line_length),
	    cmocka_unit_test(test_nan),
	    cmocka_unit_test(test_nan_words),
	    cmocka_unit_test(test_line_is_message),
	    cmocka_unit_test(test_clean_text),
	    cmocka_unit_test(test_unknown_fields),
	    cmocka_unit_test(test_case_digest),
	    cmocka_unit_test(test_message_is_clean_text),
	    cmocka_unit_test(test_small_error_buffer),
	    cmocka_unit_test(test_request_buf),
	    cmocka_unit_test(test_fast_matches_reference),
	    cmocka_unit_test(test_fast_numbers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
