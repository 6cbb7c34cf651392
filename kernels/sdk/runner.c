/*
 * Protocol v1 requests and answers (shared/PROTOCOL.md, normative).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nw_device.h"
#include "runner.h"

/* Numbers are for people and statistics: 6 significant digits carry the information. */
#define REAL_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(6))

/* JSON has no NaN or Inf: such a metric is written as null. */
static json_t *real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *string_list(const char *const *names, unsigned n)
{
	json_t *a = json_array();
	unsigned i;

	for (i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(names[i]));
	return a;
}

json_t *nw_runner_hello(void)
{
	const struct nw_device_info *dev = nw_dev_init();
	const struct nw_check *const *all;
	json_t *hello, *device, *checks;
	unsigned n, i;

	device = json_pack("{s:s, s:s}", "backend", dev->backend, "name", dev->name);
	if (device && dev->cc[0])
		json_object_set_new(device, "cc", json_string(dev->cc));
	if (device && dev->driver[0])
		json_object_set_new(device, "driver", json_string(dev->driver));
	if (device && dev->toolkit[0])
		json_object_set_new(device, "toolkit", json_string(dev->toolkit));

	checks = json_array();
	all = nw_checks(&n);
	for (i = 0; checks && i < n; i++) {
		const struct nw_check *c = all[i];
		const char *dtypes[NW_DTYPE_COUNT];
		unsigned nd = 0;
		int d;

		for (d = 0; d < NW_DTYPE_COUNT; d++)
			if (c->dtypes & NW_DTYPE_BIT(d))
				dtypes[nd++] = nw_dtype_name((enum nw_dtype)d);
		json_array_append_new(
		    checks, json_pack("{s:s, s:s, s:s, s:o, s:b, s:o}", "check", c->name, "op", c->op, "pass",
				      c->pass, "dtypes", string_list(dtypes, nd), "deterministic",
				      c->deterministic, "families", string_list(c->families, c->nfamilies)));
	}
	/*
	 * "pipeline": the protocol loop (runner_main.c) reads requests as lines
	 * from stdin's buffered stream and answers them in order, so the daemon
	 * may send the next trial while this one runs, its turnaround hidden
	 * behind the trial (issue 18).
	 */
	hello =
	    json_pack("{s:s, s:i, s:s, s:o, s:o, s:i, s:i}", "op", "hello", "protocol", NW_RUNNER_PROTOCOL,
		      "runner", nw_runner_name, "device", device ? device : json_object(), "checks",
		      checks ? checks : json_array(), "gen", NW_GEN_VERSION, "pipeline", NW_RUNNER_PIPELINE);
	return hello;
}

static json_t *tensor_json(const struct nw_tensor_result *r)
{
	json_t *o, *worst = json_null();
	unsigned k;

	if (r->worst_ndim) {
		worst = json_array();
		for (k = 0; worst && k < r->worst_ndim; k++)
			json_array_append_new(worst, json_integer(r->worst[k]));
	}
	o = json_pack("{s:s, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:o, s:b, s:I, s:o, s:o}", "name",
		      r->name, "ratio", real_or_null(r->ratio), "max_abs", real_or_null(r->max_abs),
		      "max_rel", real_or_null(r->max_rel), "max_ulp",
		      r->has_ulp ? real_or_null(r->max_ulp) : json_null(), "nonfinite",
		      (json_int_t)r->nonfinite, "ref_nonfinite", (json_int_t)r->ref_nonfinite, "unwritten",
		      (json_int_t)r->unwritten, "canary", (json_int_t)r->canary, "excluded",
		      (json_int_t)r->excluded, "worst", worst ? worst : json_null(), "tail", r->tail,
		      /* optional fields, beyond version 1's list */
		      "mismatch", (json_int_t)r->mismatch, "plain_max_abs", real_or_null(r->plain_max_abs),
		      "budget", real_or_null(r->budget));
	return o;
}

static json_t *error_answer(json_t *id, const char *msg, bool fatal)
{
	return json_pack("{s:s, s:O, s:s, s:s, s:b}", "op", "trial", "id", id ? id : json_null(), "verdict",
			 "error", "error", msg, "fatal", fatal);
}

json_t *nw_runner_trial_json(const struct nw_check *c, const struct nw_trial *t, json_t *id)
{
	json_t *o, *shape, *tensors;
	char digest[17], case_digest[17];
	unsigned i;

	if (t->error)
		return error_answer(id, t->errmsg, t->fatal);
	shape = json_array();
	for (i = 0; shape && i < t->ndim; i++)
		json_array_append_new(shape, json_integer(t->shape[i]));
	tensors = json_array();
	for (i = 0; tensors && i < t->ntensors; i++)
		json_array_append_new(tensors, tensor_json(&t->tensors[i]));
	snprintf(digest, sizeof(digest), "%016" PRIx64, t->digest);
	snprintf(case_digest, sizeof(case_digest), "%016" PRIx64, t->case_digest);
	o = json_pack("{s:s, s:O, s:s, s:{s:s, s:o, s:i, s:s}, s:o, s:o, s:s, s:i, s:o}", "op", "trial", "id",
		      id ? id : json_null(), "verdict", nw_trial_failed(t) ? "fail" : "pass", "case",
		      "family", c->families[t->family], "shape", shape ? shape : json_array(), "gen",
		      NW_GEN_VERSION, "digest", case_digest, "ratio", real_or_null(nw_trial_ratio(t)),
		      "tensors", tensors ? tensors : json_array(), "digest", digest, "digests_differ",
		      (int)t->digests_differ, "kernel_us", real_or_null(t->kernel_us));
	if (o && t->nparams) {
		json_t *params = json_object();

		for (i = 0; params && i < t->nparams; i++)
			json_object_set_new(params, t->params[i].key,
					    t->params[i].is_int ? json_integer(t->params[i].ival)
								: json_string(t->params[i].sval));
		if (params)
			json_object_set_new(json_object_get(o, "case"), "params", params);
	}
	return o;
}

/* A field of the right JSON type, or NULL with the reason in err. */
static json_t *field(json_t *req, const char *key, json_type type, bool required, char *err, size_t errlen)
{
	json_t *v = json_object_get(req, key);

	if (!v || json_is_null(v)) {
		if (required)
			snprintf(err, errlen, "missing field '%s'", key);
		return NULL;
	}
	if (json_typeof(v) != type) {
		snprintf(err, errlen, "field '%s' has the wrong type", key);
		return NULL;
	}
	return v;
}

static json_t *answer_trial(json_t *req, bool *quit)
{
	json_t *id = json_object_get(req, "id"), *v, *answer;
	const struct nw_check *c;
	struct nw_trial t = {0};
	char err[NW_ERROR_MAX] = "";
	const char *name, *dtype;
	int d;

	if (!(v = field(req, "check", JSON_STRING, true, err, sizeof(err))))
		return error_answer(id, err, false);
	name = json_string_value(v);
	if (!(v = field(req, "dtype", JSON_STRING, true, err, sizeof(err))))
		return error_answer(id, err, false);
	dtype = json_string_value(v);
	if (!(v = field(req, "seed", JSON_INTEGER, true, err, sizeof(err))))
		return error_answer(id, err, false);
	if (json_integer_value(v) < 0)
		return error_answer(id, "field 'seed' is negative", false);
	t.seed = (uint64_t)json_integer_value(v);
	t.repeats = 1;
	if ((v = field(req, "repeats", JSON_INTEGER, false, err, sizeof(err)))) {
		if (json_integer_value(v) < 1 || json_integer_value(v) > NW_REPEATS_MAX) {
			snprintf(err, sizeof(err), "field 'repeats' must be 1..%d", NW_REPEATS_MAX);
			return error_answer(id, err, false);
		}
		t.repeats = (unsigned)json_integer_value(v);
	} else if (err[0]) {
		return error_answer(id, err, false);
	}

	c = nw_check_find(name);
	if (!c) {
		snprintf(err, sizeof(err), "unknown check '%.64s'", name);
		return error_answer(id, err, false);
	}
	d = nw_dtype_parse(dtype);
	if (d < 0) {
		snprintf(err, sizeof(err), "unknown dtype '%.64s'", dtype);
		return error_answer(id, err, false);
	}
	t.dtype = (enum nw_dtype)d;
	t.family = -1;
	if ((v = field(req, "family", JSON_STRING, false, err, sizeof(err)))) {
		t.family = nw_check_family(c, json_string_value(v));
		if (t.family < 0) {
			snprintf(err, sizeof(err), "unknown family '%.64s' for check '%s'",
				 json_string_value(v), c->name);
			return error_answer(id, err, false);
		}
	} else if (err[0]) {
		return error_answer(id, err, false);
	}

	nw_trial_run(c, &t);
	answer = nw_runner_trial_json(c, &t, id);
	if (t.error && t.fatal)
		*quit = true;
	return answer;
}

json_t *nw_runner_answer(const char *line, size_t len, bool *quit)
{
	json_error_t jerr;
	json_t *req, *opv, *answer;
	const char *op;
	char msg[300];

	*quit = false;
	req = json_loadb(line, len, 0, &jerr);
	if (!req) {
		snprintf(msg, sizeof(msg), "not json: %s", jerr.text);
		return json_pack("{s:n, s:s}", "op", "error", msg);
	}
	opv = json_object_get(req, "op");
	if (!json_is_string(opv)) {
		json_decref(req);
		return json_pack("{s:n, s:s}", "op", "error", "request has no string 'op'");
	}
	op = json_string_value(opv);
	if (strcmp(op, "hello") == 0) {
		answer = nw_runner_hello();
	} else if (strcmp(op, "trial") == 0) {
		answer = answer_trial(req, quit);
	} else if (strcmp(op, "bye") == 0) {
		answer = json_pack("{s:s}", "op", "bye");
		*quit = true;
	} else {
		answer = json_pack("{s:s, s:s}", "op", op, "error", "unknown op");
	}
	json_decref(req);
	return answer;
}

char *nw_runner_dump(const json_t *obj)
{
	return json_dumps(obj, REAL_FLAGS);
}
