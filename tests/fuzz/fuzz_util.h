/*
 * fuzz_util: what the fuzz targets share. A property that does not hold is
 * reported with fuzz_fail(), which aborts, so that libFuzzer keeps the input
 * as a crash like any sanitizer report.
 */
#ifndef NW_FUZZ_UTIL_H
#define NW_FUZZ_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fuzz_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("fuzz: property failed: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/*
 * Length of the well-formed UTF-8 sequence at 's' (n bytes left), or 0 (RFC 3629, as PostgreSQL).
 * Written again on purpose, not proto_utf8_len(): the targets check the daemon's output with it,
 * and an oracle sharing the code under test could not catch that code's mistakes.
 */
static inline size_t fuzz_utf8_len(const unsigned char *s, size_t n)
{
	unsigned char lo = 0x80, hi = 0xBF;
	size_t len;

	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	if (s[0] == 0xE0)
		lo = 0xA0;
	else if (s[0] == 0xED)
		hi = 0x9F;
	else if (s[0] == 0xF0)
		lo = 0x90;
	else if (s[0] == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return len;
}

/* Whether s[0..n) is valid UTF-8 (NUL bytes count as valid). */
static inline bool fuzz_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0, k; i < n; i += k)
		if ((k = fuzz_utf8_len(p + i, n - i)) == 0)
			return false;
	return true;
}

/* Whether 's' (NUL-terminated) is valid UTF-8 without C0 controls or DEL: fit for a log line. */
static inline bool fuzz_printable_utf8(const char *s)
{
	if (!fuzz_utf8_valid(s, strlen(s)))
		return false;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

/* Whether 'buf' of 'cap' bytes holds a NUL (a string that was written stays inside its array). */
static inline bool fuzz_terminated(const char *buf, size_t cap)
{
	return memchr(buf, '\0', cap) != NULL;
}

/*
 * Splits the input into at most 'max' fields at each byte 'sep'; missing
 * fields are "". The fields are NUL-terminated copies in one allocation
 * (free(fields[0])). Returns the number of fields found.
 */
static inline size_t fuzz_split(const unsigned char *data, size_t size, char sep, char **fields, size_t max)
{
	char *copy = malloc(size + 1), *p;
	size_t n = 0;

	if (!copy)
		abort();
	memcpy(copy, data, size);
	copy[size] = '\0';
	p = copy;
	fields[n++] = p;
	for (size_t i = 0; i < size && n < max; i++) {
		if (copy[i] == sep) {
			copy[i] = '\0';
			fields[n++] = copy + i + 1;
		}
	}
	for (size_t i = n; i < max; i++)
		fields[i] = copy + size; /* "" */
	return n;
}

#endif
