/*
 * Host backend: "device" memory is ordinary memory and the timer is the
 * monotonic clock. Nothing here is ever fatal.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "numwatch_check.h"
#include "nw_compare_fold.h"
#include "nw_device.h"

static struct nw_device_info info;
static bool probed;
static char last_error[128];
static struct timespec t0[NW_DEV_TIMERS], t1[NW_DEV_TIMERS];

/* The CPU's model name, so trials on different hosts can be told apart. */
static void cpu_name(char *buf, size_t len)
{
	char line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	snprintf(buf, len, "cpu");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) != 0 || !colon)
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(buf, len, "%s", colon);
		break;
	}
	fclose(f);
}

const struct nw_device_info *nw_dev_init(void)
{
	if (!probed) {
		info.backend = "host";
		cpu_name(info.name, sizeof(info.name));
		info.available = true;
		probed = true;
	}
	return &info;
}

int nw_dev_alloc(void **p, size_t bytes)
{
	/* 64-byte alignment, as cudaMalloc gives at least 256. */
	*p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
	if (!*p) {
		snprintf(last_error, sizeof(last_error), "cannot allocate %zu bytes", bytes);
		return -ENOMEM;
	}
	return 0;
}

void nw_dev_free(void *p)
{
	free(p);
}

int nw_dev_launched(const char *what)
{
	(void)what;
	return 0;
}

int nw_dev_upload(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
	return 0;
}

int nw_dev_download(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
	return 0;
}

void *nw_dev_pinned(size_t bytes)
{
	void *p;

	return nw_dev_alloc(&p, bytes) ? NULL : p;
}

void nw_dev_unpin(void *p)
{
	free(p);
}

int nw_dev_arm(const struct nw_arm *a, unsigned n)
{
	unsigned k;
	size_t i;

	for (k = 0; k < n; k++) {
		unsigned char *p = a[k].alloc, *body = p + a[k].guard_bytes;

		for (i = 0; i < a[k].guard_bytes; i++)
			p[i] = body[a[k].count * a[k].elem_size + i] = (unsigned char)NW_CANARY[i % 8];
		for (i = 0; i < a[k].count; i++)
			memcpy(body + i * a[k].elem_size, &a[k].poison, a[k].elem_size); /* little endian */
	}
	return 0;
}

int nw_dev_download_pinned(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
	return 0;
}

int nw_dev_sync(const char *what)
{
	(void)what;
	return 0;
}

int nw_dev_timer_start(unsigned k)
{
	clock_gettime(CLOCK_MONOTONIC, &t0[k % NW_DEV_TIMERS]);
	return 0;
}

int nw_dev_timer_stop(unsigned k)
{
	clock_gettime(CLOCK_MONOTONIC, &t1[k % NW_DEV_TIMERS]);
	return 0;
}

int nw_dev_timer_us(unsigned k, double *us)
{
	const struct timespec *a = &t0[k % NW_DEV_TIMERS], *b = &t1[k % NW_DEV_TIMERS];

	*us = (double)(b->tv_sec - a->tv_sec) * 1e6 + (double)(b->tv_nsec - a->tv_nsec) / 1e3;
	return 0;
}

/* Device memory is host memory here: the host's fold, on the same pointers. */
int nw_dev_compare(struct nw_fold *f, const struct nw_fold_rule *rule, const struct nw_compare_spec *s,
		   unsigned n)
{
	unsigned k;
	size_t i;

	if (nw_run_settle())
		return -EIO;
	for (k = 0; k < n; k++) {
		struct nw_compare_spec h = s[k];

		h.ref = s[k].ref_dev;
		h.plain_err = s[k].plain_err_dev;
		h.ref_dev = h.plain_err_dev = NULL;
		nw_fold_host(&f[k], &rule[k], &h);
		if (s[k].floor_scale_dev) {
			f[k].floor_scale = 0.0;
			for (i = 0; i < s[k].floor_scale_count; i++)
				f[k].floor_scale = fmax(f[k].floor_scale, s[k].floor_scale_dev[i]);
		}
	}
	return 0;
}

const char *nw_dev_error(bool *fatal)
{
	if (fatal)
		*fatal = false;
	return last_error;
}
