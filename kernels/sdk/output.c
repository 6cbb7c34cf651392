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
 * A run whose last repeats are queued but not yet waited for: the trial goes
 * on queueing (a comparison on the device) and the one wait serves both
 * (nw_run_settle). One at a time: a runner runs one trial at a time.
 */
static struct {
	struct nw_trial *t;
	struct nw_output *outs;
	unsigned nouts;
	unsigned from; /* the first repeat not yet finished */
	double *times;
} pending;

static size_t fetched_bytes(const struct nw_output *o)
{
	return o->count * nw_dtype_size(o->dtype) + 2 * NW_GUARD_BYTES;
}

/* Where repeat rep's copy lands: the first in o->first, later ones in turn in o->fetch's slots. */
static unsigned char *fetched_of(const struct nw_output *o, unsigned rep)
{
	return rep == 0 ? o->first : o->fetch + (size_t)((rep - 1) % o->fetch_slots) * fetched_bytes(o);
}

/* Arms the outputs, launches once with timer rep and queues the fetch of every output: nothing waits. */
static int queue_repeat(struct nw_trial *t, struct nw_output *outs, unsigned nouts, unsigned rep,
			int (*launch)(void *ctx), void *ctx, int *krc)
{
	unsigned j;
	int rc;

	rc = arm(outs, nouts);
	if (rc)
		return nw_trial_device_error(t);
	rc = nw_dev_timer_start(rep);
	if (!rc) {
		*krc = launch(ctx);
		rc = nw_dev_timer_stop(rep);
	}
	for (j = 0; !rc && j < nouts; j++)
		rc = nw_dev_download_pinned(fetched_of(&outs[j], rep), outs[j].dev_alloc,
					    fetched_bytes(&outs[j]));
	return rc ? nw_trial_device_error(t) : 0;
}

/* After the wait: repeat rep's time, canaries and digest. */
static int finish_repeat(struct nw_trial *t, struct nw_output *outs, unsigned nouts, unsigned rep, double *us)
{
	uint64_t h = NW_FNV_OFFSET;
	unsigned j;

	if (nw_dev_timer_us(rep, us))
		return nw_trial_device_error(t);
	for (j = 0; j < nouts; j++) {
		struct nw_output *o = &outs[j];
		const unsigned char *fetched = fetched_of(o, rep);
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

/* Waits for the queued repeats [*from, to) and finishes them in order. */
static int finish_queued(struct nw_trial *t, struct nw_output *outs, unsigned nouts, unsigned *from,
			 unsigned to, double *times)
{
	int rc = 0;

	if (nw_dev_sync("kernel"))
		return nw_trial_device_error(t);
	for (; !rc && *from < to; ++*from)
		rc = finish_repeat(t, outs, nouts, *from, &times[*from]);
	return rc;
}

int nw_run_settle(void)
{
	struct nw_trial *t = pending.t;
	int rc;

	if (!t)
		return 0;
	pending.t = NULL;
	rc = finish_queued(t, pending.outs, pending.nouts, &pending.from, t->repeats, pending.times);
	if (!rc) {
		qsort(pending.times, t->repeats, sizeof(*pending.times), cmp_double);
		t->kernel_us = pending.times[t->repeats / 2];
	}
	free(pending.times);
	return rc;
}

/* Page-locked room for the later repeats in flight at once (the first has o->first). */
static int fetch_room(struct nw_trial *t, struct nw_output *o)
{
	unsigned slots = t->repeats - 1 < NW_DEV_TIMERS ? t->repeats - 1 : NW_DEV_TIMERS;

	if (slots == 0 || o->fetch_slots >= slots) /* an output run again keeps its buffer */
		return 0;
	nw_dev_unpin(o->fetch);
	o->fetch_slots = 0;
	o->fetch = nw_dev_pinned(slots * fetched_bytes(o));
	if (!o->fetch)
		return nw_trial_error(t, false, "out of memory");
	o->fetch_slots = slots;
	return 0;
}

/*
 * The repeats are queued whole (arm, launch, fetch) back to back, up to
 * NW_DEV_TIMERS at a time, and waited for together, where the kernel's own
 * errors surface ("kernel: ..."); the last ones are left pending for the
 * comparison to share their wait.
 */
static int run_kernel(struct nw_trial *t, struct nw_output *outs, unsigned nouts, const char *what,
		      int (*launch)(void *ctx), void *ctx)
{
	double *times;
	unsigned rep, from = 0, j;
	int rc = 0, krc = 0;

	if (nw_run_settle())
		return -EIO;
	times = calloc(t->repeats, sizeof(*times));
	if (!times)
		return nw_trial_error(t, false, "out of memory");
	for (j = 0; j < nouts && !rc; j++)
		rc = fetch_room(t, &outs[j]);
	for (rep = 0; !rc && rep < t->repeats; rep++) {
		if (rep - from == NW_DEV_TIMERS && (rc = finish_queued(t, outs, nouts, &from, rep, times)))
			break;
		rc = queue_repeat(t, outs, nouts, rep, launch, ctx, &krc);
		if (!rc && krc) {
			(void)nw_dev_sync("kernel");
			rc = nw_trial_error(t, false, "%s returned %d", what, krc);
		}
	}
	if (rc) {
		free(times);
		return rc;
	}
	for (j = 0; j < nouts; j++)
		outs[j].dev_is_first = t->repeats == 1;
	pending.t = t;
	pending.outs = outs;
	pending.nouts = nouts;
	pending.from = from;
	pending.times = times;
	return 0;
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
