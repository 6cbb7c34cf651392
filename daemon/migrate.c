/* migrate: schema migrations, applied at start-up. */
#include "migrate.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "migrations.h" /* generated from sql/ by CMake */

static int fail(PGconn *c, PGresult *r, const char *what, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s: %s", what, r ? PQresultErrorMessage(r) : PQerrorMessage(c));
	PQclear(r);
	return -1;
}

static PGresult *exec_ok(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return r;
	return r ? r : NULL;
}

static bool ok(PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);

	return r && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

int migrate_latest(void)
{
	int v = 0;

	for (size_t i = 0; i < nw_migrations_count; i++)
		if (nw_migrations[i].version > v)
			v = nw_migrations[i].version;
	return v;
}

int migrate_known(char *buf, size_t len)
{
	size_t n = 0;
	int w;

	w = snprintf(buf, len, "{");
	for (size_t i = 0; w >= 0 && (size_t)w < len - n && i < nw_migrations_count; i++) {
		n += (size_t)w;
		w = snprintf(buf + n, len - n, "%s%d", i ? "," : "", nw_migrations[i].version);
	}
	if (w >= 0 && (size_t)w < len - n) {
		n += (size_t)w;
		w = snprintf(buf + n, len - n, "}");
	}
	return w >= 0 && (size_t)w < len - n ? 0 : -1;
}

int migrate_run(const char *conninfo, unsigned *applied, char *err, size_t errlen)
{
	char known[1024];
	const char *kparams[1] = {known};
	PGconn *c = PQconnectdb(conninfo);
	PGresult *r;
	int rc = -1;

	*applied = 0;
	if (PQstatus(c) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(c));
		PQfinish(c);
		return -1;
	}
	PQclear(PQexec(c, "SET client_min_messages = warning"));
	r = exec_ok(c, "SELECT pg_advisory_lock(" /* blocks until other daemons are done */
		       "1852206439)");
	if (!ok(r)) {
		fail(c, r, "taking the migration lock", err, errlen);
		goto out;
	}
	PQclear(r);
	r = exec_ok(c, "CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY,"
		       " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())");
	if (!ok(r)) {
		fail(c, r, "creating schema_migrations", err, errlen);
		goto out;
	}
	PQclear(r);
	/*
	 * A newer numwatchd migrated this database: its schema is one this
	 * binary does not know, and anything it wrote could corrupt it.
	 */
	if (migrate_known(known, sizeof(known)) < 0) {
		snprintf(err, errlen, "too many migrations");
		goto out;
	}
	r = PQexecParams(c, MIGRATE_UNKNOWN_SQL, 1, NULL, kparams, NULL, NULL, 0);
	if (!ok(r)) {
		fail(c, r, "reading schema_migrations", err, errlen);
		goto out;
	}
	if (!PQgetisnull(r, 0, 0)) {
		snprintf(err, errlen, MIGRATE_NEWER_FMT, NW_VERSION, PQgetvalue(r, 0, 0), migrate_latest());
		PQclear(r);
		rc = MIGRATE_NEWER;
		goto out;
	}
	PQclear(r);
	for (size_t i = 0; i < nw_migrations_count; i++) {
		const struct nw_migration *m = &nw_migrations[i];
		char version[16];
		const char *params[2] = {version, m->name};

		snprintf(version, sizeof(version), "%d", m->version);
		r = PQexecParams(c, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, NULL, params,
				 NULL, NULL, 0);
		if (!ok(r)) {
			fail(c, r, "reading schema_migrations", err, errlen);
			goto out;
		}
		if (PQntuples(r) == 1) {
			PQclear(r);
			continue;
		}
		PQclear(r);
		PQclear(PQexec(c, "BEGIN"));
		r = PQexec(c, m->sql);
		if (!ok(r)) {
			char what[128];

			snprintf(what, sizeof(what), "applying migration %s", m->name);
			PQclear(PQexec(c, "ROLLBACK"));
			fail(c, r, what, err, errlen);
			goto out;
		}
		PQclear(r);
		r = PQexecParams(c, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2, NULL,
				 params, NULL, NULL, 0);
		if (!ok(r)) {
			PQclear(PQexec(c, "ROLLBACK"));
			fail(c, r, "recording a migration", err, errlen);
			goto out;
		}
		PQclear(r);
		r = PQexec(c, "COMMIT");
		if (!ok(r)) {
			fail(c, r, "committing a migration", err, errlen);
			goto out;
		}
		PQclear(r);
		(*applied)++;
	}
	rc = 0;
out:
	PQclear(PQexec(c, "SELECT pg_advisory_unlock(1852206439)"));
	PQfinish(c);
	return rc;
}

int migrate_repository(const char *conninfo, const char *name, const char *url, const char *branch, char *err,
		       size_t errlen)
{
	PGconn *c = PQconnectdb(conninfo);
	const char *params[3] = {name, url, branch};
	PGresult *r;
	int id = -1;

	if (PQstatus(c) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(c));
		PQfinish(c);
		return -1;
	}
	r = PQexecParams(c,
			 "INSERT INTO repositories (name, url, branch) VALUES ($1, $2, $3)"
			 " ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, branch = EXCLUDED.branch"
			 " RETURNING id",
			 3, NULL, params, NULL, NULL, 0);
	if (ok(r) && PQntuples(r) == 1)
		id = atoi(PQgetvalue(r, 0, 0));
	else
		snprintf(err, errlen, "registering repository '%s': %s", name, PQresultErrorMessage(r));
	PQclear(r);
	PQfinish(c);
	return id;
}
