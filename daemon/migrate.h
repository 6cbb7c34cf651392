/*
 * migrate: applies the forward-only migrations in sql/ (compiled into the
 * binary) at start-up, each in one transaction, recorded in
 * schema_migrations. Several daemons starting at once serialise on an
 * advisory lock. Runs before the event loop starts, so it may block.
 */
#ifndef NW_MIGRATE_H
#define NW_MIGRATE_H

#include <stddef.h>

/* Applies what is missing; returns 0 or -1 with a message in 'err'. Reports how many it applied. */
int migrate_run(const char *conninfo, unsigned *applied, char *err, size_t errlen);

/* Upserts the watched repository and returns its id (> 0), or -1 with a message. */
int migrate_repository(const char *conninfo, const char *name, const char *url, const char *branch, char *err,
		       size_t errlen);

#endif
