/*
 * Output buffers with poison and canaries, inputs, and the repeat loop that
 * runs a kernel, times it and digests what it wrote.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "numwatch_check.h"
#include "nw_device.h"

/* Guard bytes: "nwCANARY", recognisable in a hex dump of a corrupted buffer. */
static const unsigned char canary_pattern[8] = {'n', 'w', 'C', 'A', 'N', 'A', 'R', 'Y'};

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

static int nw_output_init_untimed(struct nw_trial *t, struct nw_output *o, const char *name, enum nw_dtype d,
				  size_t count)
{
	size_t es = nw_dtype_size(d), bytes = count * es, total = bytes + 2 * NW_GUARD_BYTES, i;
	uint32_t poison = nw_poison_bits(d);
	int rc;

	memset(o, 0, sizeof(*o));
	o->name = name;
	o->dtype = d;
	o->count = count;
	o->image = malloc(total);
	o->fetch = malloc(total);
	o->host = malloc(bytes ? bytes : 1);
	if (!o->image || !o->fetch || !o->host) {
		nw_output_release(o);
		return nw_trial_error(t, false, "out of memory");
	}
	for (i = 0; i < NW_GUARD_BYTES; i++) {
		o->image[i] = canary_pattern[i % sizeof(canary_pattern)];
		o->image[NW_GUARD_BYTES + bytes + i] = canary_pattern[i % sizeof(canary_pattern)];
	}
	for (i = 0; i < count; i++)
		memcpy(o->image + NW_GUARD_BYTES + i * es, &poison, es); /* little endian */
	rc = nw_dev_alloc(&o->dev_alloc, total);
	if (rc) {
		nw_output_release(o);
		return nw_trial_device_error(t);
	}
	o->dev = (unsigned char *)o->dev_alloc + NW_GUARD_BYTES;
	return 0;
}

void nw_output_release(struct nw_output *o)
{
	nw_dev_free(o->dev_alloc);
	free(o->image);
	free(o->fetch);
	free(o->host);
	memset(o, 0, sizeof(*o));
}

/* Guard elements (in units of the dtype) that differ from the canary. */
static long count_canary(const struct nw_output *o)
{
	size_t es = nw_dtype_size(o->dtype), bytes = o->count * es, i;
	const unsigned char *tail = o->fetch + NW_GUARD_BYTES + bytes;
	long n = 0;

	for (i = 0; i < NW_GUARD_BYTES; i += es) {
		n += memcmp(o->fetch + i, o->image + i, es) != 0;
		n += memcmp(tail + i, o->image + NW_GUARD_BYTES + bytes + i, es) != 0;
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

static int run_kernel(struct nw_trial *t, struct nw_output *outs, unsigned nouts, const char *what,
		      int (*launch)(void *ctx), void *ctx)
{
	double *times;
	unsigned rep, j;
	int rc = 0, krc;

	times = calloc(t->repeats ? t->repeats : 1, sizeof(*times));
	if (!times)
		return nw_trial_error(t, false, "out of memory");
	for (rep = 0; rep < t->repeats; rep++) {
		uint64_t h = NW_FNV_OFFSET;

		for (j = 0; j < nouts; j++) {
			rc = nw_dev_upload(outs[j].dev_alloc, outs[j].image,
					   outs[j].count * nw_dtype_size(outs[j].dtype) + 2 * NW_GUARD_BYTES);
			if (rc)
				goto dev_error;
		}
		rc = nw_dev_timer_start();
		if (rc)
			goto dev_error;
		krc = launch(ctx);
		rc = nw_dev_timer_stop(&times[rep]);
		if (rc)
			goto dev_error;
		if (krc) {
			rc = nw_trial_error(t, false, "%s returned %d", what, krc);
			goto out;
		}
		for (j = 0; j < nouts; j++) {
			struct nw_output *o = &outs[j];
			size_t bytes = o->count * nw_dtype_size(o->dtype);
			long canary;

			rc = nw_dev_download(o->fetch, o->dev_alloc, bytes + 2 * NW_GUARD_BYTES);
			if (rc)
				goto dev_error;
			canary = count_canary(o);
			if (canary > o->canary)
				o->canary = canary;
			h = nw_digest(h, o->fetch + NW_GUARD_BYTES, bytes);
			if (rep == 0)
				memcpy(o->host, o->fetch + NW_GUARD_BYTES, bytes);
		}
		if (rep == 0)
			t->digest = h;
		else if (h != t->digest)
			t->digests_differ++;
	}
	qsort(times, t->repeats, sizeof(*times), cmp_double);
	t->kernel_us = t->repeats ? times[t->repeats / 2] : 0.0;
	goto out;
dev_error:
	rc = nw_trial_device_error(t);
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

int nw_input_upload(struct nw_trial *t, void **dev, const void *host, size_t bytes)
{
	double t0;

	nw_phase_inputs_begin();
	t0 = nw_now();
	/* The host data, before the upload: what the check generated (nw_case_digest). */
	t->inputs_hash = nw_digest(t->ninputs ? t->inputs_hash : NW_FNV_OFFSET, bytes ? host : "", bytes);
	t->ninputs++;
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
