/*
 * metrics_dump: the C SDK's nw_compare() on cases read from stdin, for the
 * parity test with the Python SDKs (tests/unit/metrics_parity.py).
 *
 * One JSON object per line in, one per line out. Numbers that must travel
 * exactly go as hex: "out" is the output's bytes in its dtype (little-endian,
 * as in memory), "ref" and each "plain" are float64 bit patterns, 16 hex
 * digits each, most significant first. In:
 *
 *   {"name":"y","dtype":"f32","dims":[2,3],"out":"...","ref":"...","plain":["..."],
 *    "exclude":"0100..","factor":2,"floor_eps":4,"floor_scale":0,"atol":0,"rtol":0,
 *    "tail_width":8,"canary":0}
 *
 * ("plain" empty or absent: the fixed atol/rtol rule; "exclude" absent: none.)
 * Out: nw_tensor_result's fields, the doubles as 16 hex digits of their bits,
 * "worst" null when worst_ndim is 0, and "failed" (nw_tensor_failed).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "numwatch_check.h"

/* A test tool's caps: far above any case the parity test writes. */
#define DUMP_LINE_MAX  (64u << 20)
#define DUMP_COUNT_MAX (4u << 20)

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decodes 2 * n hex digits of s into out[0..n). */
static int unhex(const char *s, unsigned char *out, size_t n)
{
	size_t i;

	if (strlen(s) != 2 * n)
		return -1;
	for (i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

/* n float64 values, each 16 hex digits of its bits (most significant first). */
static int doubles(const char *s, double *out, size_t n)
{
	size_t i, k;

	if (strlen(s) != 16 * n)
		return -1;
	for (i = 0; i < n; i++) {
		uint64_t u = 0;

		for (k = 0; k < 16; k++) {
			int v = hexval(s[16 * i + k]);

			if (v < 0)
				return -1;
			u = u << 4 | (uint64_t)v;
		}
		memcpy(&out[i], &u, sizeof(u));
	}
	return 0;
}

static json_t *bits_of(double d)
{
	char buf[17];
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	snprintf(buf, sizeof(buf), "%016" PRIx64, u);
	return json_string(buf);
}

static double number(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : 0.0;
}

static json_t *result_json(const struct nw_tensor_result *r)
{
	json_t *o = json_object(), *worst = json_null();
	unsigned k;

	if (r->worst_ndim) {
		worst = json_array();
		for (k = 0; k < r->worst_ndim; k++)
			json_array_append_new(worst, json_integer(r->worst[k]));
	}
	json_object_set_new(o, "name", json_string(r->name));
	json_object_set_new(o, "ratio", bits_of(r->ratio));
	json_object_set_new(o, "max_abs", bits_of(r->max_abs));
	json_object_set_new(o, "max_rel", bits_of(r->max_rel));
	json_object_set_new(o, "max_ulp", bits_of(r->max_ulp));
	json_object_set_new(o, "has_ulp", json_boolean(r->has_ulp));
	json_object_set_new(o, "plain_max_abs", bits_of(r->plain_max_abs));
	json_object_set_new(o, "budget", bits_of(r->budget));
	json_object_set_new(o, "nonfinite", json_integer(r->nonfinite));
	json_object_set_new(o, "ref_nonfinite", json_integer(r->ref_nonfinite));
	json_object_set_new(o, "mismatch", json_integer(r->mismatch));
	json_object_set_new(o, "unwritten", json_integer(r->unwritten));
	json_object_set_new(o, "canary", json_integer(r->canary));
	json_object_set_new(o, "excluded", json_integer(r->excluded));
	json_object_set_new(o, "worst", worst);
	json_object_set_new(o, "tail", json_boolean(r->tail));
	json_object_set_new(o, "failed", json_boolean(nw_tensor_failed(r)));
	return o;
}

/* One case: 0, or -1 with a message on stderr. */
static int dump(const json_t *in, unsigned lineno)
{
	struct nw_compare_spec s = {0};
	struct nw_output out = {0};
	struct nw_tensor_result r;
	const char *dtype = json_string_value(json_object_get(in, "dtype"));
	const char *name = json_string_value(json_object_get(in, "name"));
	json_t *dims = json_object_get(in, "dims"), *plain = json_object_get(in, "plain"), *res;
	const char *hex_out = json_string_value(json_object_get(in, "out"));
	const char *hex_ref = json_string_value(json_object_get(in, "ref"));
	const char *exclude = json_string_value(json_object_get(in, "exclude"));
	long dimv[NW_SHAPE_MAX];
	double *ref = NULL, *plains[NW_PLAIN_MAX] = {0};
	unsigned char *host = NULL, *exc = NULL;
	size_t count = 1, i;
	unsigned p;
	int d, rc = -1;

	d = dtype ? nw_dtype_parse(dtype) : -1;
	if (d < 0 || !name || !json_is_array(dims) || json_array_size(dims) > NW_SHAPE_MAX || !hex_out ||
	    !hex_ref || (plain && (!json_is_array(plain) || json_array_size(plain) > NW_PLAIN_MAX))) {
		fprintf(stderr, "metrics_dump: line %u: bad case\n", lineno);
		return -1;
	}
	for (i = 0; i < json_array_size(dims); i++) {
		dimv[i] = (long)json_integer_value(json_array_get(dims, i));
		count *= dimv[i] > 0 ? (size_t)dimv[i] : 0;
	}
	if (count > DUMP_COUNT_MAX) {
		fprintf(stderr, "metrics_dump: line %u: %zu elements, more than %u\n", lineno, count,
			DUMP_COUNT_MAX);
		return -1;
	}
	host = malloc(count * nw_dtype_size(d) + 1);
	ref = malloc(count * sizeof(double) + 1);
	exc = malloc(count + 1);
	if (!host || !ref || !exc)
		goto out;
	if (unhex(hex_out, host, count * nw_dtype_size(d)) || doubles(hex_ref, ref, count)) {
		fprintf(stderr, "metrics_dump: line %u: bad out or ref\n", lineno);
		goto out;
	}
	for (p = 0; plain && p < json_array_size(plain); p++) {
		const char *h = json_string_value(json_array_get(plain, p));

		plains[p] = malloc(count * sizeof(double) + 1);
		if (!plains[p] || !h || doubles(h, plains[p], count)) {
			fprintf(stderr, "metrics_dump: line %u: bad plain %u\n", lineno, p);
			goto out;
		}
		s.plain[p] = plains[p];
	}
	s.nplain = plain ? (unsigned)json_array_size(plain) : 0;
	if (exclude) {
		if (strlen(exclude) != count) {
			fprintf(stderr, "metrics_dump: line %u: exclude has %zu flags for %zu elements\n",
				lineno, strlen(exclude), count);
			goto out;
		}
		for (i = 0; i < count; i++)
			exc[i] = exclude[i] == '1';
		s.exclude = exc;
	}
	out.name = name;
	out.dtype = (enum nw_dtype)d;
	out.count = count;
	out.host = host;
	out.canary = (long)number(in, "canary");
	s.out = &out;
	s.ref = ref;
	s.factor = number(in, "factor");
	s.floor_eps = number(in, "floor_eps");
	s.floor_scale = number(in, "floor_scale");
	s.atol = number(in, "atol");
	s.rtol = number(in, "rtol");
	s.dims = dimv;
	s.ndim = (unsigned)json_array_size(dims);
	s.tail_width = (unsigned)number(in, "tail_width");
	if (nw_compare(&r, name, &s)) {
		fprintf(stderr, "metrics_dump: line %u: nw_compare failed\n", lineno);
		goto out;
	}
	res = result_json(&r);
	if (json_dumpf(res, stdout, JSON_COMPACT) == 0 && putchar('\n') != EOF)
		rc = 0;
	json_decref(res);
out:
	for (p = 0; p < NW_PLAIN_MAX; p++)
		free(plains[p]);
	free(exc);
	free(ref);
	free(host);
	return rc;
}

int main(void)
{
	char *line = malloc(DUMP_LINE_MAX);
	unsigned lineno = 0;
	int rc = 0;

	if (!line)
		return 1;
	while (fgets(line, DUMP_LINE_MAX, stdin)) {
		json_error_t err;
		json_t *in;

		lineno++;
		in = json_loads(line, 0, &err);
		if (!in) {
			fprintf(stderr, "metrics_dump: line %u: %s\n", lineno, err.text);
			rc = 1;
			break;
		}
		if (dump(in, lineno))
			rc = 1;
		json_decref(in);
		if (rc)
			break;
	}
	free(line);
	return rc || fflush(stdout) ? 1 : 0;
}
