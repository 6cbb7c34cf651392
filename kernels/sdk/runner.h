/*
 * runner: the protocol v1 side of a runner (shared/PROTOCOL.md), without any
 * I/O: request line in, response object out. runner_main.c does the reading,
 * the writing and the command line.
 */
#ifndef NW_RUNNER_H
#define NW_RUNNER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "numwatch_check.h"

#define NW_RUNNER_PROTOCOL 1
/* Trial requests the runner takes outstanding (its hello's "pipeline"): read in order from stdin. */
#define NW_RUNNER_PIPELINE 2
/* Longest request or response line, '\n' excluded (PROTOCOL.md). */
#define NW_LINE_MAX (1024 * 1024)

/* Free text naming the runner and the library it was built from (checks/registry.c). */
extern const char nw_runner_name[];

/*
 * Answers one request line (len bytes, no '\n'). Returns the response object
 * (new reference; NULL only when out of memory). *quit is set after bye, and
 * after a fatal error answer: the runner must exit once it has written it.
 */
json_t *nw_runner_answer(const char *line, size_t len, bool *quit);

/* The hello answer (new reference). */
json_t *nw_runner_hello(void);

/*
 * The answer to a finished trial (new reference): a verdict with its case and
 * tensors, or an error answer. 'id' is borrowed and echoed (NULL: json null).
 */
json_t *nw_runner_trial_json(const struct nw_check *c, const struct nw_trial *t, json_t *id);

/* One compact line (malloc'd, no '\n'), NULL when out of memory. */
char *nw_runner_dump(const json_t *obj);

#endif
