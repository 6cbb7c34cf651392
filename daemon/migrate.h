/*
 * migrate: applies the forward-only migrations in sql/ (compiled into the
 * binary) at start-up, each in one transaction, recorded in
 * schema_migrations. Several daemons starting at once serialise on an
 * advisory lock. Runs before the event loop starts, so it may block.
 */
#ifndef NW_MIGRATE_H
#define NW_MIGRATE_H

#include <stddef.h>

/* migrate_run(): the database has migrations this binary does not know. */
#define MIGRATE_NEWER (-2)
/* The migrations applied to the database that this binary does not know ($1: migrate_known()), or NULL. */
#define MIGRATE_UNKNOWN_SQL                                                                                  \
	"SELECT string_agg(name, ', ' ORDER BY version) FROM schema_migrations WHERE version <> ALL "        \
	"($1::int[])"
/* The refusal, with this binary's version, the unknown migrations and the newest one it knows. */
#define MIGRATE_NEWER_FMT                                                                                    \
	"the database's schema is newer than this numwatchd %s knows: it has %s (this numwatchd knows up "   \
	"to "                                                                                                \
	"%03d); refusing to write; run the numwatchd that migrated it"

/*
 * Applies what is missing; returns 0, -1 with a message in 'err', or
 * MIGRATE_NEWER (and the message) when the database holds migrations this
 * binary does not know: then it applies nothing. Reports how many it applied.
 */
int migrate_run(const char *conninfo, unsigned *applied, char *err, size_t errlen);
/* The newest migration this binary knows (its schema version). */
int migrate_latest(void);
/* The migrations this binary knows, as a PostgreSQL array literal "{1,2,...}" into buf; -1 when it does not fit. */
int migrate_known(char *buf, size_t len);

/* Upserts the watched repository and returns its id (> 0), or -1 with a message. */
int migrate_repository(const char *conninfo, const char *name, const char *url, const char *branch, char *err,
		       size_t errlen);

#endif
