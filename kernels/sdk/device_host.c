/*
 * Host backend: "device" memory is ordinary memory and the timer is the
 * monotonic clock. Nothing here is ever fatal.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nw_device.h"

static struct nw_device_info info;
static bool probed;
static char last_error[128];
static struct timespec t0;

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

int nw_dev_timer_start(void)
{
	clock_gettime(CLOCK_MONOTONIC, &t0);
	return 0;
}

int nw_dev_timer_stop(double *us)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	*us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
	return 0;
}

const char *nw_dev_error(bool *fatal)
{
	if (fatal)
		*fatal = false;
	return last_error;
}
