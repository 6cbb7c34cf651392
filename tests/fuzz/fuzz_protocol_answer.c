/*
 * fuzz_protocol_answer: the C SDK's answers (kernels/sdk: nw_runner_hello,
 * nw_runner_trial_json, written by nw_runner_dump) decoded by the daemon
 * (proto_parse_hello, proto_parse_trial), as every runner built from
 * kernels/ talks to it: each answer is accepted, with the values the SDK
 * had, reals to the 6 significant digits it writes and non-finite ones as
 * NAN. The hello is checked once, at start. The input fills a finished
 * trial the way a check would (see sdk_answer()).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_util.h"
#include "numwatch_check.h"
#include "protocol.h"
#include "runner.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void hello_roundtrip(void);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	json_object_seed(1);
	hello_roundtrip();
	return 0;
}

/* Reads the input front to back; past its end every read is zero. */
struct reader {
	const uint8_t *p;
	size_t n;
};

static uint64_t take(struct reader *r, size_t bytes)
{
	uint64_t v = 0;

	for (size_t i = 0; i < bytes; i++) {
		v = v << 8 | (r->n ? *r->p : 0);
		if (r->n) {
			r->p++;
			r->n--;
		}
	}
	return v;
}

/* A metric as the SDK computes it: non-negative, or NaN or infinite (written as null). */
static double take_metric(struct reader *r)
{
	uint64_t bits = take(r, 8);
	double d;

	memcpy(&d, &bits, sizeof(d));
	return fabs(d);
}

/* A name of 1 to max-1 characters of [a-z0-9_] (the SDK's tensor names are C identifiers). */
static void take_name(struct reader *r, char *out, size_t max)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
	size_t n = 1 + take(r, 1) % (max - 1);

	for (size_t i = 0; i < n; i++)
		out[i] = chars[take(r, 1) % (sizeof(chars) - 1)];
	out[n] = '\0';
}

/* Whether the daemon's value 'got' is what the SDK wrote for 'sent' (6 significant digits, null for non-finite). */
static bool same_real(double sent, double got)
{
	if (!isfinite(sent))
		return isnan(got);
	return fabs(got - sent) <= 1e-5 * fabs(sent) + 1e-300;
}

static void hello_roundtrip(void)
{
	unsigned n;
	const struct nw_check *const *checks = nw_checks(&n);
	json_t *o = nw_runner_hello();
	char *line = o ? nw_runner_dump(o) : NULL, err[512];
	struct proto_hello h;

	if (!line || proto_parse_hello(line, strlen(line), &h, err, sizeof(err)) != 0)
		fuzz_fail("hello: the daemon refuses the SDK's hello: %s", line ? err : "out of memory");
	if (h.nchecks != n)
		fuzz_fail("hello: %u checks sent, %u decoded", n, h.nchecks);
	for (unsigned i = 0; i < n; i++) {
		if (strcmp(h.checks[i].check, checks[i]->name) != 0 ||
		    h.checks[i].nfamilies != checks[i]->nfamilies ||
		    h.checks[i].deterministic != checks[i]->deterministic)
			fuzz_fail("hello: check %u decodes as '%s'", i, h.checks[i].check);
		for (unsigned k = 0; k < h.checks[i].nfamilies; k++)
			if (strcmp(h.checks[i].families[k], checks[i]->families[k]) != 0)
				fuzz_fail("hello: check '%s' family %u decodes as '%s'", checks[i]->name, k,
					  h.checks[i].families[k]);
	}
	proto_hello_release(&h);
	json_decref(o);
	free(line);
}

/*
 * Input: check, id, family, error flag, then for an error its message
 * (the rest of the input, as text); otherwise shape, tensors, digests,
 * timing and case parameters, each read as sdk_answer() reads it.
 */
static void sdk_answer(const uint8_t *data, size_t size)
{
	static const char *const param_keys[] = {"causal", "levels", "pad", "mode"};
	struct reader r = {data, size};
	unsigned nchecks;
	const struct nw_check *const *checks = nw_checks(&nchecks);
	const struct nw_check *c = checks[take(&r, 1) % nchecks];
	long long id = (long long)take(&r, 8);
	struct nw_trial *t = calloc(1, sizeof(*t));
	struct proto_trial pt;
	char err[512], hex[17], *line;
	json_t *o, *idj;
	int rc;

	if (!t)
		abort();
	t->family = (int)(take(&r, 1) % c->nfamilies);
	if (take(&r, 1) % 4 == 0) {
		size_t n;

		t->error = true;
		t->fatal = take(&r, 1) & 1;
		n = r.n < sizeof(t->errmsg) - 1 ? r.n : sizeof(t->errmsg) - 1;
		memcpy(t->errmsg, r.p, n);
		t->errmsg[n] = '\0';
		/* The SDK's messages come from its own printf formats: text, never invalid UTF-8. */
		if (!fuzz_utf8_valid(t->errmsg, strlen(t->errmsg)))
			goto out;
	} else {
		t->ndim = (unsigned)(take(&r, 1) % (NW_SHAPE_MAX + 1));
		for (unsigned i = 0; i < t->ndim; i++)
			t->shape[i] = (long)take(&r, 4);
		t->ntensors = (unsigned)(take(&r, 1) % (NW_TENSORS_MAX + 1));
		for (unsigned i = 0; i < t->ntensors; i++) {
			struct nw_tensor_result *x = &t->tensors[i];

			take_name(&r, x->name, sizeof(x->name));
			x->ratio = take_metric(&r);
			x->max_abs = take_metric(&r);
			x->max_rel = take_metric(&r);
			x->max_ulp = take_metric(&r);
			x->has_ulp = take(&r, 1) & 1;
			x->plain_max_abs = take_metric(&r);
			x->budget = take_metric(&r);
			x->nonfinite = (long)(take(&r, 4));
			x->ref_nonfinite = (long)(take(&r, 4));
			x->mismatch = (long)(take(&r, 4));
			x->unwritten = (long)(take(&r, 4));
			x->canary = (long)(take(&r, 4));
			x->excluded = (long)(take(&r, 4));
			x->worst_ndim = (unsigned)(take(&r, 1) % (NW_SHAPE_MAX + 1));
			for (unsigned k = 0; k < x->worst_ndim; k++)
				x->worst[k] = (long)take(&r, 4);
			x->tail = take(&r, 1) & 1;
		}
		t->digest = take(&r, 8);
		t->case_digest = take(&r, 8);
		t->digests_differ = (unsigned)take(&r, 1);
		t->kernel_us = take_metric(&r);
		t->nparams = (unsigned)(take(&r, 1) % (NW_PARAMS_MAX + 1));
		for (unsigned i = 0; i < t->nparams; i++) {
			struct nw_param *p = &t->params[i];

			p->key = param_keys[i % 4];
			p->is_int = take(&r, 1) & 1;
			if (p->is_int)
				p->ival = (long)take(&r, 8);
			else
				take_name(&r, p->sval, sizeof(p->sval));
		}
	}

	idj = json_integer(id);
	o = nw_runner_trial_json(c, t, idj);
	line = o ? nw_runner_dump(o) : NULL;
	if (!line)
		fuzz_fail("trial: the SDK wrote no answer");
	rc = proto_parse_trial(line, strlen(line), (long)id, &pt, err, sizeof(err));
	if (rc != 0)
		fuzz_fail("trial: the daemon refuses the SDK's answer: %s (line '%.300s')", err, line);
	if (t->error) {
		if (pt.verdict != OUTCOME_ERROR || pt.fatal != t->fatal || strcmp(pt.error, t->errmsg) != 0)
			fuzz_fail("trial: error answer decodes as verdict %d, fatal %d, '%s'",
				  (int)pt.verdict, pt.fatal, pt.error);
	} else {
		if (pt.verdict != (nw_trial_failed(t) ? OUTCOME_FAIL : OUTCOME_PASS))
			fuzz_fail("trial: verdict decodes as %d", (int)pt.verdict);
		if (strcmp(pt.family, c->families[t->family]) != 0 || pt.ndim != t->ndim ||
		    pt.gen != NW_GEN_VERSION)
			fuzz_fail("trial: case decodes as family '%s', %u dimensions, gen %d", pt.family,
				  pt.ndim, pt.gen);
		for (unsigned i = 0; i < t->ndim; i++)
			if (pt.shape[i] != t->shape[i])
				fuzz_fail("trial: shape[%u] %ld decodes as %ld", i, t->shape[i], pt.shape[i]);
		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)t->case_digest);
		if (strcmp(pt.case_digest, hex) != 0)
			fuzz_fail("trial: case digest %s decodes as '%s'", hex, pt.case_digest);
		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)t->digest);
		if (strcmp(pt.digest, hex) != 0 || pt.digests_differ != (long)t->digests_differ)
			fuzz_fail("trial: digest %s decodes as '%s'", hex, pt.digest);
		if (!same_real(nw_trial_ratio(t), pt.ratio) || !same_real(t->kernel_us, pt.kernel_us))
			fuzz_fail("trial: ratio %.17g / kernel_us %.17g decode as %.17g / %.17g",
				  nw_trial_ratio(t), t->kernel_us, pt.ratio, pt.kernel_us);
		if (pt.ntensors != t->ntensors)
			fuzz_fail("trial: %u tensors decode as %u", t->ntensors, pt.ntensors);
		for (unsigned i = 0; i < t->ntensors; i++) {
			const struct nw_tensor_result *x = &t->tensors[i];
			const struct proto_tensor *y = &pt.tensors[i];

			if (strcmp(x->name, y->name) != 0 || !same_real(x->ratio, y->ratio) ||
			    x->nonfinite != y->nonfinite || x->ref_nonfinite != y->ref_nonfinite ||
			    x->unwritten != y->unwritten || x->canary != y->canary ||
			    x->excluded != y->excluded)
				fuzz_fail("trial: tensor %u ('%s', ratio %.17g) decodes as '%s', ratio %.17g",
					  i, x->name, x->ratio, y->name, y->ratio);
		}
	}
	proto_trial_release(&pt);
	free(line);
	json_decref(o);
	json_decref(idj);
out:
	free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sdk_answer(data, size);
	return 0;
}
