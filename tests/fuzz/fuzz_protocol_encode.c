/*
 * fuzz_protocol_encode: the daemon's requests (proto_trial_request, the
 * hello and bye lines), decoded as a runner decodes them (jansson, duplicate
 * keys refused): each is one '\n'-terminated JSON object whose fields are
 * the values encoded, whatever bytes the check, dtype and family names
 * hold. The other direction, the C SDK's answers decoded by the daemon, is
 * fuzz_protocol_answer.c.
 *
 * Input: 8 bytes id, 8 bytes seed (its top bit dropped: seeds are
 * PostgreSQL bigints), 4 bytes repeats, 1 flag byte (family null when
 * even), then check, dtype and family separated by NUL bytes.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "protocol.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	json_object_seed(1);
	return 0;
}

/* Decodes 'line' as a runner would: one JSON object, then the newline, nothing after it. */
static json_t *decode_line(const char *what, const char *line)
{
	size_t len = strlen(line);
	json_error_t jerr;
	json_t *o;

	if (len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1))
		fuzz_fail("%s: '%s' is not one '\\n'-terminated line", what, line);
	o = json_loadb(line, len - 1, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(o))
		fuzz_fail("%s: '%s' is not a JSON object: %s", what, line, jerr.text);
	if (strcmp(json_string_value(json_object_get(o, "op")) ?: "", what) != 0)
		fuzz_fail("%s: op is not '%s' in '%s'", what, what, line);
	return o;
}

static void expect_string(json_t *o, const char *key, const char *want, const char *line)
{
	const char *got = json_string_value(json_object_get(o, key));

	if (!got || strcmp(got, want) != 0)
		fuzz_fail("trial: '%s' decodes to '%s', encoded '%s' (line '%s')", key, got ? got : "(none)",
			  want, line);
}

static void fixed_requests(void)
{
	char *hello = proto_hello_request(), *bye = proto_bye_request();
	json_t *o;

	if (!hello || !bye)
		fuzz_fail("out of memory");
	o = decode_line("hello", hello);
	if (json_integer_value(json_object_get(o, "protocol")) != PROTO_VERSION)
		fuzz_fail("hello: protocol is not %d", PROTO_VERSION);
	json_decref(o);
	json_decref(decode_line("bye", bye));
	free(hello);
	free(bye);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	long long id;
	unsigned long long seed;
	uint32_t repeats;
	bool has_family;
	char *fields[3], *line;
	const char *check, *dtype, *family;
	json_t *o, *v;

	if (size < 21)
		return 0;
	memcpy(&id, data, 8);
	memcpy(&seed, data + 8, 8);
	/* Seeds are stored as PostgreSQL bigints, never negative: a signed 64-bit reader takes them all. */
	seed &= (unsigned long long)LLONG_MAX;
	memcpy(&repeats, data + 16, 4);
	has_family = data[20] & 1;
	fuzz_split(data + 21, size - 21, '\0', fields, 3);
	check = fields[0];
	dtype = fields[1];
	family = has_family ? fields[2] : NULL;

	line = proto_trial_request((long)id, check, dtype, seed, repeats, family);
	if (!line) {
		/* Refused only for text JSON cannot carry (invalid UTF-8). */
		if (fuzz_utf8_valid(check, strlen(check)) && fuzz_utf8_valid(dtype, strlen(dtype)) &&
		    (!family || fuzz_utf8_valid(family, strlen(family))))
			fuzz_fail("trial: no request for valid UTF-8 names");
		goto out;
	}
	o = decode_line("trial", line);
	if (!json_is_integer(json_object_get(o, "id")) || json_integer_value(json_object_get(o, "id")) != id)
		fuzz_fail("trial: id %lld does not decode back from '%s'", id, line);
	expect_string(o, "check", check, line);
	expect_string(o, "dtype", dtype, line);
	v = json_object_get(o, "family");
	if (family)
		expect_string(o, "family", family, line);
	else if (!json_is_null(v))
		fuzz_fail("trial: family is not null in '%s'", line);
	if (json_integer_value(json_object_get(o, "repeats")) != (json_int_t)repeats)
		fuzz_fail("trial: repeats %u does not decode back from '%s'", repeats, line);
	v = json_object_get(o, "seed");
	if (!json_is_integer(v) || (unsigned long long)json_integer_value(v) != seed)
		fuzz_fail("trial: seed %llu does not decode back from '%s'", seed, line);
	json_decref(o);
	free(line);
out:
	free(fields[0]);
	fixed_requests();
	return 0;
}
