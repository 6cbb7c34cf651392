/*
 * store: the daemon's writes of results. Trials are buffered and written in
 * batches, so the loop never waits on a row: each batch is one COPY (text
 * format, written straight from the trial, no JSON), on the store's own
 * connections ([store] connections, batches in parallel: a batch goes to the
 * connected one with the fewest queued), so that claims and verdicts on the
 * daemon's write connection never queue behind a batch. Batches are not
 * ordered among themselves; what needs trials stored waits for them
 * (store_flush_then, store_then).
 * Idempotent through the trials table's unique key: a batch that meets rows
 * already stored fails whole and goes again through a staging table that
 * inserts only the new ones (sql/050_trial_path.sql). A batch that fails is kept and
 * retried; nothing is dropped.
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

/*
 * Opens the store's 'nconns' connections to 'conninfo' (asynchronously; 1 to
 * NW_STORE_CONNECTIONS_MAX, else -EINVAL). 'host' names this daemon in stored
 * rows (borrowed for the store's lifetime); their statement_timeout is
 * 'timeout_ms'.
 */
int store_init(uv_loop_t *loop, const char *conninfo, const char *host, unsigned timeout_ms, unsigned nconns,
	       struct store **out);
/*
 * Closes the store's connections (the daemon exits): what is not written yet
 * is dropped, nobody waiting hears, and later trials are ignored.
 */
void store_close(struct store *s);
/* store_close(), then frees the store once its handles are closed. */
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

typedef void (*store_flushed_cb)(void *data);
/*
 * Writes the buffered trials now, and calls 'cb' once every trial added so
 * far is written (or dropped: store_discard), possibly before this returns.
 * The store writes on its own connections, so a statement that needs the
 * trials stored (a verdict, a probe's end) is sent from 'cb'. Returns 0, or
 * -ENOMEM and then 'cb' is never called (nor once the store is closed).
 */
int store_flush_then(struct store *s, store_flushed_cb cb, void *data);

/*
 * Calls 'cb' once every trial added so far is written (or dropped), as
 * store_flush_then() does, without sending the buffered trials early: they
 * go with their batch, within STORE_FLUSH_MS, so that a statement that only
 * needs them stored some time (a part's end) does not make batches small.
 */
int store_then(struct store *s, store_flushed_cb cb, void *data);

/* Whether every connection of the store is up. */
bool store_connected(const struct store *s);
/* How many connections the store writes on. */
unsigned store_connections(const struct store *s);
/* Batches buffered, in flight or waiting for a retry. */
unsigned store_pending(const struct store *s);
/* Trials written since start. */
unsigned long long store_written(const struct store *s);
/* Batches written since start, and those that met rows already stored (written through the staging table). */
unsigned long long store_batches(const struct store *s);
unsigned long long store_conflicts(const struct store *s);

/* Bounds of a batch: rows, and the longest a row waits before its batch is sent. */
#define STORE_FLUSH_MS 50

#endif
