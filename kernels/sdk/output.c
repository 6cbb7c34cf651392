/*
 * Output buffers with poison and canaries, inputs, and the repeat loop that
 * runs a kernel, times it and digests what it wrote.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "numwatch_check.h"
#include "nw_device.h"

/*
 * Quiet NaNs with a payload that arithmetic never produces (a computed NaN
 * carries the default payload), so "still poison" means "never written".
 */
uint32_t nw_poison_bits(enum nw_dtype d)
{
	switch (d) {
	case NW_F16:
		return 0x7e5au;
	case NW_BF16:
		return 0x7fdau;
	default:
		return 0x7fc5a5a5u;
	}
}

bool nw_is_poison(enum nw_dtype d, const void *buf, size_t i)
{
	if (d == NW_F32) {
		uint32_t v;

		memcpy(&v, (const unsigned char *)buf + 4 * i, 4);
		return v == nw_poison_bits(d);
	}
	return ((const uint16_t *)buf)[i] == (uint16_t)nw_poison_bits(d);
}

int nw_trial_device_error(struct nw_trial *t)
{
	bool fatal;
	const char *msg = nw_dev_error(&fatal);

	return nw_trial_error(t, fatal, "%s", msg);
}

/* Every output of a launch armed in one step: guards and poison (nw_dev_arm). */
static int arm(struct nw_output *outs, unsigned nouts)
{
	struct nw_arm a[NW_TENSORS_MAX];
	unsigned j;

	if (nouts > NW_TENSORS_MAX)
		return -EINVAL;
	for (j = 0; j < nouts; j++)
		a[j] = (struct nw_arm){.alloc = outs[j].dev_alloc,
				       .count = outs[j].count,
				       .guard_bytes = NW_GUARD_BYTES,
				       .elem_size = (unsigned)nw_dtype_size(outs[j].dtype),
				       .poison = nw_poison_bits(outs[j].dtype)};
	return nw_dev_arm(a, nouts);
}

static int nw_output_init_untimed(struct nw_trial *t, struct nw_output *o, const char *name, enum nw_dtype d,
				  size_t count)
{
	size_t total = count * nw_dtype_size(d) + 2 * NW_GUARD_BYTES;

	memset(o, 0, sizeof(*o));
	o->name = name;
	o->dtype = d;
	o->count = count;
	o->first = nw_dev_pinned(total);
	if (!o->first) {
		nw_output_release(o);
		return nw_trial_error(t, false, "out of memory");
	}
	o->host = o->first + NW_GUARD_BYTES;
	if (nw_dev_alloc(&o->dev_alloc, total)) {
		nw_output_release(o);
		return nw_trial_device_error(t);
	}
	o->dev = (unsigned char *)o->dev_alloc + NW_GUARD_BYTES;
	return 0;
}

void nw_output_release(struct nw_output *o)
{
	(void)nw_run_settle(); /* a pending run may still write o; its error is in its trial */
	nw_dev_free(o->dev_alloc);
	nw_dev_unpin(o->first);
	nw_dev_unpin(o->fetch);
	memset(o, 0, sizeof(*o));
}

/* Guard elements (in units of the dtype) of a fetched copy that differ from the canary. */
static long count_canary(const struct nw_output *o, const unsigned char *fetched)
{
	size_t es = nw_dtype_size(o->dtype), bytes = o->count * es, i;
	const unsigned char *tail = fetched + NW_GUARD_BYTES + bytes;
	unsigned char guard[NW_GUARD_BYTES];
	long n = 0;

	for (i = 0; i < NW_GUARD_BYTES; i++)
		guard[i] = (unsigned char)NW_CANARY[i % 8];
	for (i = 0; i < NW_GUARD_BYTES; i += es) {
		n += memcmp(fetched + i, guard + i, es) != 0;
		n += memcmp(tail + i, guard + i, es) != 0;
	}
	return n;
}

static int nw_input_upload_untimed(struct nw_trial *t, void **dev, const void *host, size_t bytes)
{
	if (nw_dev_alloc(dev, bytes))
		return nw_trial_device_error(t);
	if (nw_dev_upload(*dev, host, bytes)) {
		nw_dev_free(*dev);
		*dev = NULL;
		return nw_trial_device_error(t);
	}
	return 0;
}

void nw_input_release(void *dev)
{
	nw_dev_free(dev);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * A run whose last repeat is queued but not yet waited for: the trial goes
 * on queueing (a comparison on the device) and the one wait serves both
 * (nw_run_settle). One at a time: a runner runs one trial at a time.
 */
static struct {
	struct nw_trial *t;
	struct nw_output *outs;
	unsigned nouts;
	double *times;
} pending;

/* Arms the outputs, launches once and queues the fetch of every output: nothing waits. */
static int queue_repeat(struct nw_trial *t, struct nw_output *outs, unsigned nouts, unsigned rep,
			int (*launch)(void *ctx), void *ctx, int *krc)
{
	unsigned j;
	int rc;

	rc = arm(outs, nouts);
	if (rc)
		return nw_trial_device_error(t);
	rc = nw_dev_timer_start();
	if (!rc) {
		*krc = launch(ctx);
		rc = nw_dev_timer_stop();
	}
	for (j = 0; !rc && j < nouts; j++)
		rc =
		    nw_dev_download_pinned(rep == 0 ? outs[j].first : outs[j].fetch, outs[j].dev_alloc,
					   outs[j].count * nw_dtype_size(outs[j].dtype) + 2 * NW_GUARD_BYTES);
	return rc ? nw_trial_device_error(t) : 0;
}

/* After the wait: the repeat's time, canaries and digest. */
static int finish_repeat(struct nw_trial *t, struct nw_output *outs, unsigned nouts, unsigned rep, double *us)
{
	uint64_t h = NW_FNV_OFFSET;
	unsigned j;

	if (nw_dev_timer_us(us))
		return nw_trial_device_error(t);
	for (j = 0; j < nouts; j++) {
		struct nw_output *o = &outs[j];
		const unsigned char *fetched = rep == 0 ? o->first : o->fetch;
		long canary = count_canary(o, fetched);

		if (canary > o->canary)
			o->canary = canary;
		h = nw_digest(h, fetched + NW_GUARD_BYTES, o->count * nw_dtype_size(o->dtype));
	}
	if (rep == 0)
		t->digest = h;
	else if (h != t->digest)
		t->digests_differ++;
	return 0;
}

int nw_run_settle(void)
{
	struct nw_trial *t = pending.t;
	int rc;

	if (!t)
		return 0;
	pending.t = NULL;
	rc = nw_dev_sync("kernel");
	if (rc)
		rc = nw_trial_device_error(t);
	else
		rc = finish_repeat(t, pending.outs, pending.nouts, t->repeats - 1,
				   &pending.times[t->repeats - 1]);
	if (!rc) {
		qsort(pending.times, t->repeats, sizeof(*pending.times), cmp_double);
		t->kernel_us = pending.times[t->repeats / 2];
	}
	free(pending.times);
	return rc;
}

/*
 * Each repeat queued whole (arm, launch, fetch) and then waited for once,
 * where the kernel's own errors surface ("kernel: ..."); the last one is
 * left pending for the comparison to share its wait. The first repeat lands
 * in o->first (o->host), later ones in o->fetch.
 */
static int run_kernel(struct nw_trial *t, struct nw_output *outs, unsigned nouts, const char *what,
		      int (*launch)(void *ctx), void *ctx)
{
	double *times;
	unsigned rep, j;
	int rc = 0, krc = 0;

	if (nw_run_settle())
		return -EIO;
	times = calloc(t->repeats, sizeof(*times));
	if (!times)
		return nw_trial_error(t, false, "out of memory");
	for (j = 0; j < nouts && t->repeats > 1; j++) {
		if (!outs[j].fetch) /* an output run again keeps its buffer */
			outs[j].fetch =
			    nw_dev_pinned(outs[j].count * nw_dtype_size(outs[j].dtype) + 2 * NW_GUARD_BYTES);
		if (!outs[j].fetch) {
			rc = nw_trial_error(t, false, "out of memory");
			goto out;
		}
	}
	for (rep = 0; rep < t->repeats; rep++) {
		rc = queue_repeat(t, outs, nouts, rep, launch, ctx, &krc);
		if (!rc && krc) {
			(void)nw_dev_sync("kernel");
			rc = nw_trial_error(t, false, "%s returned %d", what, krc);
		}
		if (rc)
			goto out;
		if (rep + 1 == t->repeats) {
			for (j = 0; j < nouts; j++)
				outs[j].dev_is_first = rep == 0;
			pending.t = t;
			pending.outs = outs;
			pending.nouts = nouts;
			pending.times = times;
			return 0;
		}
		if (nw_dev_sync("kernel")) {
			rc = nw_trial_device_error(t);
			goto out;
		}
		rc = finish_repeat(t, outs, nouts, rep, &times[rep]);
		if (rc)
			goto out;
	}
out:
	free(times);
	return rc;
}

int nw_output_init(struct nw_trial *t, struct nw_output *o, const char *name, enum nw_dtype d, size_t count)
{
	double t0 = nw_now();
	int rc = nw_output_init_untimed(t, o, name, d, count);

	nw_phase_add(NW_PHASE_OUTPUTS, t0);
	return rc;
}

void nw_input_hash(struct nw_trial *t, const void *host, size_t bytes)
{
	t->inputs_hash = nw_digest(t->ninputs ? t->inputs_hash : NW_FNV_OFFSET, bytes ? host : "", bytes);
	t->ninputs++;
	t->hashed_ahead++;
}

int nw_input_upload(struct nw_trial *t, void **dev, const void *host, size_t bytes)
{
	double t0;

	nw_phase_inputs_begin();
	t0 = nw_now();
	/* The host data, before the upload: what the check generated (nw_case_digest). */
	if (t->hashed_ahead == 0)
		nw_input_hash(t, host, bytes);
	t->hashed_ahead--;
	int rc = nw_input_upload_untimed(t, dev, host, bytes);

	nw_phase_add(NW_PHASE_INPUTS, t0);
	return rc;
}

int nw_run_kernel(struct nw_trial *t, struct nw_output *outs, unsigned nouts, const char *what,
		  int (*launch)(void *ctx), void *ctx)
{
	double t0 = nw_now();
	int rc = run_kernel(t, outs, nouts, what, launch, ctx);

	nw_phase_add(NW_PHASE_KERNEL, t0);
	return rc;
}
