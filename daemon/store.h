/*
 * store: the daemon's writes of results. Trials are buffered and written in
 * batches (one INSERT ... SELECT FROM json_to_recordset per batch, idempotent
 * through the trials table's unique key), so the loop never waits on a row.
 * A batch that fails is kept and retried; nothing is dropped.
 */
#ifndef NW_STORE_H
#define NW_STORE_H

#include <stdbool.h>
#include <uv.h>

#include "outcome.h"
#include "protocol.h"

struct db;
struct store;

/* One trial as it is stored. Strings are borrowed (copied by store_add_trial). */
struct trial_row {
	long long commit_id;
	int check_id;
	const char *dtype;
	unsigned long long seed;
	int attempt;
	enum outcome outcome;
	const struct proto_trial *result; /* the runner's answer, NULL when there was none */
	const char *error;                /* why, for crash/timeout/infra_error/error */
	const char *slot;
	const char *sanitizer;        /* the compute-sanitizer tool it ran under, or NULL */
	const char *sanitizer_status; /* "clean", "report" or "skipped" when under one */
};

/* 'host' names this daemon in stored rows (borrowed for the store's lifetime). */
int store_init(uv_loop_t *loop, struct db *db, const char *host, struct store **out);
void store_free(struct store *s);

/* Buffers one trial; a full batch is written at once, otherwise within a few milliseconds. */
int store_add_trial(struct store *s, const struct trial_row *row);

/*
 * From now on nothing is written (the daemon refuses to write): buffered
 * rows are dropped, new ones too, and a batch in flight that fails is not
 * retried.
 */
void store_discard(struct store *s);

/* Writes the buffered trials now. */
void store_flush(struct store *s);

/* Batches buffered, in flight or waiting for a retry. */
unsigned store_pending(const struct store *s);
/* Trials written since start. */
unsigned long long store_written(const struct store *s);

/* Bounds of a batch: rows, and the longest a row waits before its batch is sent. */
#define STORE_FLUSH_MS 50

#endif
