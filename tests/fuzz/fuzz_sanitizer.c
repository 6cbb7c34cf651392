/*
 * fuzz_sanitizer: compute-sanitizer output, as a runner's stderr holds it,
 * through sanitizer_scan(). The first input byte picks the excerpt buffer's
 * size (0 to 1020 bytes; the slot passes 1024), the rest is the text.
 * Checked: the status is one of the three, the excerpt is terminated inside
 * its buffer, holds only lines of the tool ("========= "), and is empty when
 * the scan found nothing.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "sanitizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum sanitizer_status st;
	size_t cap;
	char *excerpt, *text;

	if (size < 1)
		return 0;
	cap = (size_t)data[0] * 4;
	/* Exactly sized copies: ASan sees a read or write one byte past either. */
	text = malloc(size - 1 ? size - 1 : 1);
	excerpt = malloc(cap ? cap : 1);
	if (!text || !excerpt)
		abort();
	memcpy(text, data + 1, size - 1);
	st = sanitizer_scan(text, size - 1, excerpt, cap);
	if (st != SANITIZER_CLEAN && st != SANITIZER_REPORT && st != SANITIZER_SKIPPED)
		fuzz_fail("status %d", (int)st);
	if (strlen(sanitizer_status_name(st)) == 0)
		fuzz_fail("status %d has no name", (int)st);
	if (cap > 0) {
		if (!fuzz_terminated(excerpt, cap))
			fuzz_fail("excerpt not terminated in its %zu bytes", cap);
		if (st == SANITIZER_CLEAN && excerpt[0])
			fuzz_fail("clean output with an excerpt: '%s'", excerpt);
		for (const char *line = excerpt; *line;) {
			const char *nl = strchr(line, '\n');
			size_t n = nl ? (size_t)(nl - line) : strlen(line);

			/* A cut last line may be shorter than the prefix, never something else. */
			if (strncmp(line, "========= ", n < 10 ? n : 10) != 0)
				fuzz_fail("excerpt line not from the tool: '%.*s'", (int)n, line);
			line += n + (nl ? 1 : 0);
		}
	}
	free(text);
	free(excerpt);
	return 0;
}
