/*
 * Trials: family resolution, error answers and the verdict rule.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "numwatch_check.h"
#include "nw_device.h"
#include "nw_prepare.h"

const struct nw_check *nw_check_find(const char *name)
{
	const struct nw_check *const *all;
	unsigned n, i;

	all = nw_checks(&n);
	for (i = 0; i < n; i++)
		if (name && strcmp(all[i]->name, name) == 0)
			return all[i];
	return NULL;
}

int nw_check_family(const struct nw_check *c, const char *name)
{
	unsigned i;

	for (i = 0; i < c->nfamilies; i++)
		if (name && strcmp(c->families[i], name) == 0)
			return (int)i;
	return -1;
}

int nw_trial_error(struct nw_trial *t, bool fatal, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->errmsg, sizeof(t->errmsg), fmt, ap);
	va_end(ap);
	t->error = true;
	t->fatal = fatal;
	return -EIO;
}

static struct nw_param *new_param(struct nw_trial *t, const char *key)
{
	struct nw_param *p;

	if (t->nparams >= NW_PARAMS_MAX)
		return NULL;
	p = &t->params[t->nparams++];
	memset(p, 0, sizeof(*p));
	p->key = key;
	return p;
}

void nw_trial_param_int(struct nw_trial *t, const char *key, long value)
{
	struct nw_param *p = new_param(t, key);

	if (p) {
		p->is_int = true;
		p->ival = value;
	}
}

void nw_trial_param_str(struct nw_trial *t, const char *key, const char *value)
{
	struct nw_param *p = new_param(t, key);

	if (p)
		snprintf(p->sval, sizeof(p->sval), "%s", value);
}

/* Integers enter the case digest as 8 little-endian bytes, whatever the machine. */
static uint64_t case_hash_u64(uint64_t h, uint64_t v)
{
	unsigned char b[8];
	unsigned i;

	for (i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	return nw_fnv1a(h, b, sizeof(b));
}

/* Strings with their NUL, so that ("ab", "c") and ("a", "bc") differ. */
static uint64_t case_hash_str(uint64_t h, const char *s)
{
	return nw_fnv1a(h, s, strlen(s) + 1);
}

/*
 * Changing what goes in, or in what order, changes every case's digest and
 * so, for the daemon, every seed's case at the next commit: don't, unless
 * that is the point (tests/unit/test_sdk.c pins one value).
 */
uint64_t nw_case_digest(const struct nw_check *c, const struct nw_trial *t)
{
	uint64_t h = case_hash_str(NW_FNV_OFFSET, "numwatch case");
	unsigned i;

	h = case_hash_str(h, c->name);
	h = case_hash_str(h, nw_dtype_name(t->dtype));
	h = case_hash_str(h,
			  t->family >= 0 && (unsigned)t->family < c->nfamilies ? c->families[t->family] : "");
	h = case_hash_u64(h, t->ndim);
	for (i = 0; i < t->ndim && i < NW_SHAPE_MAX; i++)
		h = case_hash_u64(h, (uint64_t)t->shape[i]);
	h = case_hash_u64(h, t->nparams);
	for (i = 0; i < t->nparams && i < NW_PARAMS_MAX; i++) {
		h = case_hash_str(h, t->params[i].key);
		h = case_hash_u64(h, t->params[i].is_int);
		h = t->params[i].is_int ? case_hash_u64(h, (uint64_t)t->params[i].ival)
					: case_hash_str(h, t->params[i].sval);
	}
	h = case_hash_u64(h, t->ninputs);
	h = case_hash_u64(h, t->inputs_hash);
	return nw_mix64(h);
}

static struct {
	bool on, checked, generated;
	unsigned long trials;
	double started, total, phase[NW_PHASES];
	double first_end, last_end; /* wall clock after the first and the latest trial */
} timing;

double nw_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nw_phase_add(enum nw_phase p, double since)
{
	if (timing.on && p < NW_PHASES)
		timing.phase[p] += nw_now() - since;
}

void nw_phase_inputs_begin(void)
{
	if (timing.on && !timing.generated) {
		timing.generated = true;
		nw_phase_add(NW_PHASE_GENERATION, timing.started);
	}
}

int nw_reference_done(struct nw_trial *t, int rc, double since)
{
	nw_phase_add(NW_PHASE_REFERENCE, since);
	if (rc == 0)
		return 0;
	return rc == -ENOMEM ? nw_trial_error(t, false, "out of memory") : nw_trial_device_error(t);
}

static void timing_report(void)
{
	static const char *const names[NW_PHASES] = {"generation", "inputs", "reference",
						     "outputs",    "kernel", "compare"};
	double per = timing.trials ? 1e6 / (double)timing.trials : 0.0, rest = timing.total;
	unsigned p;

	fprintf(stderr, "timing: %lu trials, %.1f us per trial:", timing.trials, timing.total * per);
	for (p = 0; p < NW_PHASES; p++) {
		fprintf(stderr, " %s %.1f", names[p], timing.phase[p] * per);
		rest -= timing.phase[p];
	}
	fprintf(stderr, " the rest %.1f (us)\n", rest * per);
	/* The runner's own rate, start-up and the first trial's warm-up left out: what a bench compares. */
	if (timing.trials > 1 && timing.last_end > timing.first_end)
		fprintf(stderr,
			"timing: %.1f trials/s from the end of the first trial to the end of the last\n",
			(double)(timing.trials - 1) / (timing.last_end - timing.first_end));
}

int nw_trial_setup(const struct nw_check *c, struct nw_trial *t)
{
	memset(&t->index, 0, sizeof(*t) - offsetof(struct nw_trial, index));
	if (!(c->dtypes & NW_DTYPE_BIT(t->dtype)))
		return nw_trial_error(t, false, "check '%s' does not run at dtype '%s'", c->name,
				      nw_dtype_name(t->dtype));
	if (t->family >= (int)c->nfamilies)
		return nw_trial_error(t, false, "no family %d in check '%s'", t->family, c->name);
	if (t->repeats < 1 || t->repeats > NW_REPEATS_MAX)
		return nw_trial_error(t, false, "repeats must be 1..%d", NW_REPEATS_MAX);
	/* Consecutive seeds walk through the families; seed / n is the step within one. */
	if (t->family < 0)
		t->family = (int)(t->seed % c->nfamilies);
	t->index = t->seed / c->nfamilies;
	return 0;
}

/* A split check's trial: prepared ahead if it was, the next seed's started, then the rest. */
static int run_split(const struct nw_check *c, const struct nw_trial *req, struct nw_trial *t)
{
	struct nw_trial next = *req;
	void *prepared = NULL;
	int rc;

	if (!nw_prepare_take(c, req, t, &prepared, &rc))
		rc = c->prepare(c, t, &prepared);
	next.seed++;
	nw_prepare_ahead(c, &next);
	if (rc == 0)
		rc = c->run_prepared(c, t, prepared);
	if (prepared) {
		(void)nw_run_settle(); /* the device is done with what prepare() made */
		nw_prepare_release(c, prepared);
	}
	return rc;
}

int nw_trial_run(const struct nw_check *c, struct nw_trial *t)
{
	const struct nw_device_info *dev;
	struct nw_trial req = *t;
	double t0;
	unsigned i;
	int rc;

	if (!timing.checked) {
		const char *v = getenv("NW_TIMING");

		timing.checked = true;
		timing.on = v && *v && strcmp(v, "0") != 0;
		if (timing.on)
			atexit(timing_report);
	}

	rc = nw_trial_setup(c, t);
	if (rc)
		return rc;
	dev = nw_dev_init();
	if (!dev->available)
		return nw_trial_error(t, false, "%s", dev->name);
	t0 = nw_now();
	timing.started = t0;
	timing.generated = false;
	rc = c->prepare ? run_split(c, &req, t) : c->run(c, t);
	if (nw_run_settle() && !rc) /* a check that left its last run pending */
		rc = -EIO;
	if (timing.on) {
		timing.last_end = nw_now();
		if (timing.trials++ == 0)
			timing.first_end = timing.last_end;
		timing.total += timing.last_end - t0;
	}
	if (rc && !t->error)
		nw_trial_error(t, false, "%s: %s", c->name, strerror(-rc));
	if (!rc)
		for (i = 0; i < t->ntensors; i++)
			if (t->tensors[i].ratio != t->tensors[i].ratio) /* NaN: never report a pass */
				t->tensors[i].ratio = 1e300;
	if (!rc)
		t->case_digest = nw_case_digest(c, t);
	return rc;
}

bool nw_trial_failed(const struct nw_trial *t)
{
	unsigned i;

	for (i = 0; i < t->ntensors; i++)
		if (nw_tensor_failed(&t->tensors[i]))
			return true;
	return false;
}

double nw_trial_ratio(const struct nw_trial *t)
{
	double r = 0.0;
	unsigned i;

	for (i = 0; i < t->ntensors; i++)
		if (t->tensors[i].ratio > r)
			r = t->tensors[i].ratio;
	return r;
}
