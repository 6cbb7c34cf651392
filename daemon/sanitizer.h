/*
 * sanitizer: reading NVIDIA compute-sanitizer's output (pure module). A
 * runner started under compute-sanitizer writes its reports to stderr; after
 * each trial the slot hands the new stderr bytes here to learn whether the
 * tool reported an error (the trial fails), refused to run on this GPU (the
 * trial is recorded as skipped, never as passed), or found nothing.
 */
#ifndef NW_SANITIZER_H
#define NW_SANITIZER_H

#include <stddef.h>

enum sanitizer_status {
	SANITIZER_CLEAN = 0,
	SANITIZER_REPORT,  /* an error report: memcheck, racecheck, initcheck or synccheck found something */
	SANITIZER_SKIPPED, /* the tool could not run here (device not supported, no tool, ...) */
};

/* Stored names: "clean", "report", "skipped". */
const char *sanitizer_status_name(enum sanitizer_status s);

/*
 * Scans compute-sanitizer output 'text' (need not be NUL-terminated). On a
 * report or a refusal, copies the first relevant lines (at most 'cap' - 1
 * bytes) into 'excerpt'.
 */
enum sanitizer_status sanitizer_scan(const char *text, size_t len, char *excerpt, size_t cap);

/* The tools numwatch runs ("memcheck", "racecheck", "initcheck", "synccheck"). */
int sanitizer_tool_valid(const char *tool);

#endif
