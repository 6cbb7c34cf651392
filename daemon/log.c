/* log: stderr lines, journald-aware. */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static enum log_level max_level = LOG_LEVEL_INFO;

void log_set_level(enum log_level level)
{
	max_level = level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	static const int priorities[] = {3, 4, 6, 7};
	static int journald = -1;
	char line[2048];
	va_list ap;

	if (level > max_level)
		return;
	if (journald < 0)
		journald = getenv("JOURNAL_STREAM") != NULL;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (journald) {
		fprintf(stderr, "<%d>%s\n", priorities[level], line);
	} else {
		struct timespec ts;
		struct tm tm;
		char when[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(stderr, "%s.%03ldZ numwatchd %s: %s\n", when, ts.tv_nsec / 1000000, names[level],
			line);
	}
}
