/*
 * fuzz_protocol_decode: one runner response line through the daemon's
 * decoders (proto_parse_hello, proto_parse_trial, proto_parse_bye), as a
 * runner built from any commit may write it. Besides the sanitizers'
 * findings, it checks what the daemon relies on: every error message is
 * printable UTF-8 (it goes to the log and a text column), every decoded
 * string fits its array and every count its cap, and the trial's tensors,
 * re-encoded compactly for storage (tensors_json), decode to the same JSON
 * values the runner sent.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "protocol.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* A fixed hash seed: an input replays the same way every time. */
	json_object_seed(1);
	return 0;
}

static void check_error(int r, const char *err)
{
	if (r != -EPROTO && r != -ENOTSUP)
		fuzz_fail("parser returned %d, expected 0, -EPROTO or -ENOTSUP", r);
	if (!err[0] || !fuzz_printable_utf8(err))
		fuzz_fail("error message is empty or not printable UTF-8: '%s'", err);
}

static void check_hello(const struct proto_hello *h)
{
	json_t *dev;

	if (h->protocol != PROTO_VERSION || h->nchecks > NW_PROTO_CHECKS_MAX)
		fuzz_fail("hello: protocol %d, %u checks", h->protocol, h->nchecks);
	/* The slot sends ahead where pipeline >= 2: a hello taken has 1 to NW_PROTO_PIPELINE_MAX. */
	if (h->pipeline < 1 || h->pipeline > NW_PROTO_PIPELINE_MAX)
		fuzz_fail("hello: pipeline %u", h->pipeline);
	if (!fuzz_terminated(h->runner, sizeof(h->runner)) ||
	    !fuzz_terminated(h->backend, sizeof(h->backend)) ||
	    !fuzz_terminated(h->device_name, sizeof(h->device_name)) ||
	    !fuzz_terminated(h->repro, sizeof(h->repro)) || !fuzz_utf8_valid(h->runner, strlen(h->runner)) ||
	    !fuzz_utf8_valid(h->device_name, strlen(h->device_name)))
		fuzz_fail("hello: a text field is unterminated or not UTF-8");
	dev = json_loads(h->device_json, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(dev))
		fuzz_fail("hello: device_json '%s' is not a JSON object", h->device_json);
	json_decref(dev);
	for (unsigned i = 0; i < h->nchecks; i++) {
		const struct proto_check *c = &h->checks[i];

		/* No dtype at all is allowed (docs/protocol.md: "at most 8"): the check just gets no trials. */
		if (!c->check[0] || c->ndtypes > NW_PROTO_DTYPES_MAX || c->nfamilies > NW_PROTO_FAMILIES_MAX)
			fuzz_fail("hello: check %u has name '%s', %u dtypes, %u families", i, c->check,
				  c->ndtypes, c->nfamilies);
	}
}

/* The tensors array as the runner sent it (borrowed from 'root'), or NULL when absent or null. */
static json_t *sent_tensors(json_t *root)
{
	json_t *t = json_object_get(root, "tensors");

	return json_is_array(t) ? t : NULL;
}

static void check_trial(const struct proto_trial *t, const uint8_t *data, size_t size)
{
	json_t *root, *stored, *sent;

	if (t->verdict != OUTCOME_PASS && t->verdict != OUTCOME_FAIL && t->verdict != OUTCOME_ERROR)
		fuzz_fail("trial: verdict %d", (int)t->verdict);
	if (t->ntensors > NW_PROTO_TENSORS_MAX || t->ndim > NW_PROTO_SHAPE_MAX)
		fuzz_fail("trial: %u tensors, %u dimensions", t->ntensors, t->ndim);
	if (t->verdict != OUTCOME_ERROR && (isnan(t->ratio) ? false : t->ratio < 0))
		fuzz_fail("trial: negative ratio %g", t->ratio);
	if (!fuzz_utf8_valid(t->error, strlen(t->error)))
		fuzz_fail("trial: error text is not UTF-8");
	if (!t->tensors_json)
		fuzz_fail("trial: no tensors_json");
	stored = json_loads(t->tensors_json, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_array(stored))
		fuzz_fail("trial: tensors_json '%.200s' is not a JSON array", t->tensors_json);
	root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	/*
	 * A line jansson refuses that the daemon takes (NaN and Infinity as
	 * json.dumps writes them, read as null) has no reference to compare with.
	 */
	if (!root && memmem(data, size, "NaN", 3) == NULL && memmem(data, size, "Infinity", 8) == NULL &&
	    json_array_size(stored) != 0)
		fuzz_fail("trial: tensors_json '%.200s' from a line that is not JSON", t->tensors_json);
	sent = sent_tensors(root);
	if (root && (sent ? !json_equal(sent, stored) : json_array_size(stored) != 0))
		fuzz_fail("trial: tensors_json '%.200s' does not decode to the tensors sent",
			  t->tensors_json);
	json_decref(stored);
	json_decref(root);
}

/* The id the line answers, so that the trial decoder goes past its id check. */
static long line_id(const uint8_t *data, size_t size)
{
	json_t *root = json_loadb((const char *)data, size, 0, NULL);
	json_t *id = json_object_get(root, "id");
	long v = json_is_integer(id) ? (long)json_integer_value(id) : 17;

	json_decref(root);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *line = (const char *)data;
	char err[512];
	struct proto_hello h;
	struct proto_trial t;
	long id;
	int r;

	/* The slot hands over one line without its '\n'. */
	if (size > 0 && data[size - 1] == '\n')
		size--;
	id = line_id(data, size);

	r = proto_parse_hello(line, size, &h, err, sizeof(err));
	if (r == 0) {
		check_hello(&h);
		proto_hello_release(&h);
	} else {
		check_error(r, err);
	}

	r = proto_parse_trial(line, size, id, &t, err, sizeof(err));
	if (r == 0) {
		check_trial(&t, data, size);
		proto_trial_release(&t);
		/* The same answer to another request is refused. */
		r = proto_parse_trial(line, size, id ^ 1, &t, err, sizeof(err));
		if (r == 0)
			fuzz_fail("trial: accepted with the wrong id");
		check_error(r, err);
	} else {
		check_error(r, err);
	}

	/* Every other input length: the short error buffer a caller may pass, cut but terminated. */
	r = proto_parse_bye(line, size, err, size & 1 ? 8 : sizeof(err));
	if (r != 0 && !fuzz_terminated(err, size & 1 ? 8 : sizeof(err)))
		fuzz_fail("bye: error message not terminated in its buffer");
	if (r != 0 && !(size & 1))
		check_error(r, err);
	return 0;
}
