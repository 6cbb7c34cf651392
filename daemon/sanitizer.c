/* sanitizer: classify compute-sanitizer output. */
#include "sanitizer.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* compute-sanitizer prefixes every line it writes with this. */
#define PREFIX "========= "

const char *sanitizer_status_name(enum sanitizer_status s)
{
	static const char *const names[] = {"clean", "report", "skipped"};

	return names[s];
}

int sanitizer_tool_valid(const char *tool)
{
	static const char *const tools[] = {"memcheck", "racecheck", "initcheck", "synccheck"};

	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
		if (strcmp(tool, tools[i]) == 0)
			return 1;
	return 0;
}

static bool has(const char *line, size_t n, const char *needle)
{
	size_t k = strlen(needle);

	for (size_t i = 0; i + k <= n; i++)
		if (strncasecmp(line + i, needle, k) == 0)
			return true;
	return false;
}

/* Lines that say the tool could not do its job on this machine. */
static bool refusal(const char *line, size_t n)
{
	return has(line, n, "not supported") || has(line, n, "Unable to find injection library") ||
	       has(line, n, "Target application terminated before first instrumented API call") ||
	       has(line, n, "Error: No attachable process found") || has(line, n, "failed to initialize");
}

/* Lines that report an error in the program under test. */
static bool report(const char *line, size_t n)
{
	if (has(line, n, "ERROR SUMMARY: 0 error") || has(line, n, "RACECHECK SUMMARY: 0 hazard") ||
	    has(line, n, "COMPUTE-SANITIZER"))
		return false;
	return has(line, n, "Invalid") || has(line, n, "hazard") || has(line, n, "Uninitialized") ||
	       has(line, n, "Barrier") || has(line, n, "Error") || has(line, n, "leak") ||
	       has(line, n, "Race reported");
}

enum sanitizer_status sanitizer_scan(const char *text, size_t len, char *excerpt, size_t cap)
{
	enum sanitizer_status st = SANITIZER_CLEAN;
	size_t used = 0;

	if (cap > 0)
		excerpt[0] = '\0';
	for (size_t i = 0; i < len;) {
		const char *line = text + i, *nl = memchr(line, '\n', len - i);
		size_t n = nl ? (size_t)(nl - line) : len - i;

		i += n + 1;
		if (n < sizeof(PREFIX) - 1 || strncmp(line, PREFIX, sizeof(PREFIX) - 1) != 0)
			continue;
		if (refusal(line, n)) {
			st = SANITIZER_SKIPPED;
		} else if (report(line, n)) {
			if (st == SANITIZER_CLEAN)
				st = SANITIZER_REPORT;
		} else if (st == SANITIZER_CLEAN || used > 600) {
			continue; /* context lines only after the first finding, and only a few */
		}
		if (cap > used + 1) {
			int w = snprintf(excerpt + used, cap - used, "%.*s\n", (int)n, line);

			used += w > 0 ? (size_t)w : 0;
			if (used >= cap)
				used = cap - 1;
		}
	}
	return st;
}
