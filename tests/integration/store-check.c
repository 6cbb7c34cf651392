/*
 * tests/integration/store-check: the store (daemon/store.c) against a real
 * PostgreSQL (NW_DATABASE, from store_copy.sh): every trial stored exactly
 * once with the values the daemon means, through COPY.
 *
 *   1. awkward values: text with tabs, newlines, backslashes, quotes, valid
 *      non-ASCII and invalid UTF-8 (a runner's stderr tail), tensors JSON with
 *      escapes, non-finite numbers, no answer at all, an empty shape;
 *   2. a batch of which some rows are stored already (sent again after its
 *      answer was lost, or by a daemon that lost the job): the new rows are
 *      stored, the old ones kept as they were, none twice;
 *   3. store_flush_then: when its callback runs, every trial added before is
 *      visible to another connection (a verdict may be written then);
 *   4. a batch the database refuses (a commit that does not exist) is kept
 *      and retried until the commit exists, then stored;
 *   5. a store of many connections (batches in parallel, on connections
 *      that answer in any order): every trial stored once, each waiter called
 *      once, in the order they came, and only once the trials added before it
 *      are visible; a batch meeting stored rows there too;
 *   6. trials' references (sql/080 checks them once a statement, not a row):
 *      a trial of a check that does not exist is refused with the foreign
 *      key's SQLSTATE, a commit or check that trials name cannot be deleted.
 *
 * Prints "ok: ..." per check; exits 1 with what differs.
 */
#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "caps.h"
#include "migrate.h"
#include "protocol.h"
#include "store.h"

#define DEADLINE_MS 60000

static PGconn *conn;
static long long commit_id;
static int check_id;

static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("FAIL: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static PGresult *sql(const char *q)
{
	PGresult *r = PQexec(conn, q);

	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
		fail("%s: %s", q, PQresultErrorMessage(r));
	return r;
}

/* The first value of a one-row query, copied into a static buffer ("NULL" for SQL NULL). */
static const char *value(const char *fmt, ...)
{
	static char out[8192];
	char q[1024];
	va_list ap;
	PGresult *r;

	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	r = sql(q);
	if (PQntuples(r) != 1)
		fail("%s: %d rows", q, PQntuples(r));
	snprintf(out, sizeof(out), "%s", PQgetisnull(r, 0, 0) ? "NULL" : PQgetvalue(r, 0, 0));
	PQclear(r);
	return out;
}

static void expect(const char *what, const char *got, const char *want)
{
	if (strcmp(got, want) != 0)
		fail("%s: got '%s', want '%s'", what, got, want);
}

static struct trial_row row(unsigned long long seed, const struct proto_trial *t, const char *error)
{
	return (struct trial_row){.commit_id = commit_id,
				  .check_id = check_id,
				  .dtype = "f32",
				  .seed = seed,
				  .attempt = 0,
				  .outcome = t ? t->verdict : OUTCOME_CRASH,
				  .result = t,
				  .error = error,
				  .slot = "host1"};
}

static bool flushed;

static void on_flushed(void *data)
{
	(void)data;
	flushed = true;
}

/* Runs the loop until store_flush_then's callback ran. */
static void flush_and_wait(uv_loop_t *loop, struct store *s)
{
	uint64_t start = uv_now(loop);

	flushed = false;
	if (store_flush_then(s, on_flushed, NULL) < 0)
		fail("store_flush_then: out of memory");
	while (!flushed) {
		if (uv_now(loop) - start > DEADLINE_MS)
			fail("the store did not write its batch within %d ms", DEADLINE_MS);
		uv_run(loop, UV_RUN_ONCE);
	}
}

static struct proto_trial answer(double ratio, const char *tensors)
{
	struct proto_trial t = {0};

	t.verdict = OUTCOME_PASS;
	snprintf(t.family, sizeof(t.family), "tail");
	snprintf(t.case_digest, sizeof(t.case_digest), "c0ffee");
	t.shape[0] = 3;
	t.shape[1] = 1025;
	t.ndim = 2;
	t.gen = 2;
	t.ratio = ratio;
	snprintf(t.digest, sizeof(t.digest), "9f2c41d07be3a8e1");
	t.digests_differ = 1;
	t.kernel_us = 18.4;
	t.tensors_json = (char *)tensors;
	return t;
}

/* A waiter of the wide store: how many trials were added before it, and whether it was called. */
struct wide_waiter {
	unsigned index;
	unsigned long long added;
	bool called;
};

static unsigned wide_called; /* waiters called so far */

static void on_wide(void *data)
{
	struct wide_waiter *w = data;
	char want[32];

	if (w->called)
		fail("waiter %u called twice", w->index);
	if (w->index != wide_called)
		fail("waiter %u called after %u others: waiters hear in the order they came", w->index,
		     wide_called);
	w->called = true;
	wide_called++;
	/* Every trial added before it is visible to another connection now. */
	snprintf(want, sizeof(want), "%llu", w->added);
	expect("trials visible when a waiter is called",
	       value("SELECT count(*) FROM trials WHERE seed >= 100000 AND seed < %llu", 100000 + w->added),
	       want);
}

/* 5. Many connections writing batches at once. */
static void wide_store(uv_loop_t *loop, const char *conninfo)
{
	enum { CONNS = 5, ROWS = 30000, WAITERS = 40 };
	struct wide_waiter waiters[WAITERS];
	struct proto_trial t = answer(0.75, "[{\"name\":\"y\",\"ratio\":0.75}]");
	struct store *w;
	uint64_t start;
	unsigned nwait = 0;

	if (store_init(loop, conninfo, "wide", 300 * 1000, 0, &w) != -EINVAL ||
	    store_init(loop, conninfo, "wide", 300 * 1000, NW_STORE_CONNECTIONS_MAX + 1, &w) != -EINVAL)
		fail("store_init accepted a number of connections out of bounds");
	if (store_init(loop, conninfo, "wide", 300 * 1000, CONNS, &w) < 0)
		fail("store_init with %d connections", CONNS);
	if (store_connections(w) != CONNS)
		fail("the store has %u connections, not %d", store_connections(w), CONNS);
	start = uv_now(loop);
	while (!store_connected(w)) {
		if (uv_now(loop) - start > DEADLINE_MS)
			fail("the store's %d connections did not come up within %d ms", CONNS, DEADLINE_MS);
		uv_run(loop, UV_RUN_ONCE);
	}
	/* Seeds 100000 and up; batches of varied sizes, flushed now and then, waiters between them. */
	for (unsigned i = 0; i < ROWS; i++) {
		struct trial_row r = row(100000 + i, &t, NULL);

		if (store_add_trial(w, &r) < 0)
			fail("store_add_trial: out of memory");
		if (i % 997 == 0)
			store_flush(w);
		if (i % (ROWS / WAITERS) == 0 && nwait < WAITERS) {
			waiters[nwait] = (struct wide_waiter){.index = nwait, .added = i + 1};
			if ((nwait % 2 ? store_then(w, on_wide, &waiters[nwait])
				       : store_flush_then(w, on_wide, &waiters[nwait])) < 0)
				fail("store_then: out of memory");
			nwait++;
		}
		if (i % 64 == 63)
			uv_run(loop, UV_RUN_NOWAIT);
	}
	/* Seeds stored already among new ones: through the staging table, on any connection. */
	for (unsigned i = ROWS - 500; i < ROWS + 500; i++) {
		struct trial_row r = row(100000 + i, &t, NULL);

		store_add_trial(w, &r);
	}
	flush_and_wait(loop, w);
	for (unsigned i = 0; i < nwait; i++)
		if (!waiters[i].called)
			fail("waiter %u was not called once every trial was stored", i);
	expect("rows written by the wide store", value("SELECT count(*) FROM trials WHERE seed >= 100000"),
	       "30500");
	expect("rows stored twice",
	       value("SELECT count(*) FROM (SELECT seed FROM trials WHERE seed >= 100000"
		     " GROUP BY seed HAVING count(*) > 1) x"),
	       "0");
	/* Batches in turn to the connections with the fewest waiting: each of them wrote some. */
	expect("store connections whose last statement was a batch",
	       value("SELECT count(DISTINCT application_name) FROM pg_stat_activity"
		     " WHERE application_name LIKE 'numwatchd store%%' AND query LIKE '%%COPY%%'"),
	       "5");
	store_free(w);
	uv_run(loop, UV_RUN_DEFAULT);
	printf("ok: %d connections store every trial once; %u waiters heard in order, each once its trials "
	       "were visible\n",
	       CONNS, nwait);
}

/* The SQLSTATE of a statement that must fail ("" when it did not). */
static const char *refused(const char *q)
{
	static char state[8];
	PGresult *r = PQexec(conn, q);
	const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);

	snprintf(state, sizeof(state), "%s", PQresultStatus(r) == PGRES_FATAL_ERROR && s ? s : "");
	PQclear(r);
	return state;
}

/* 6. Trials' references to commits and checks (sql/080). */
static void references(void)
{
	char q[512];

	snprintf(q, sizeof(q),
		 "INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, slot, host)"
		 " VALUES (%lld, %d, 'f32', 900000, 0, 'pass', 'x', 'y')",
		 commit_id, check_id + 1000);
	expect("a trial of a check that does not exist", refused(q), "23503");
	snprintf(q, sizeof(q), "DELETE FROM commits WHERE id = %lld", commit_id);
	expect("deleting a commit that trials name", refused(q), "23503");
	snprintf(q, sizeof(q), "DELETE FROM checks WHERE id = %d", check_id);
	expect("deleting a check that trials name", refused(q), "23503");
	snprintf(q, sizeof(q), "UPDATE commits SET id = id + 5000 WHERE id = %lld", commit_id);
	expect("changing the id of a commit that trials name", refused(q), "23503");
	PQclear(sql(
	    "INSERT INTO commits (repo_id, sha, position, author, email, title, committed_at)"
	    " SELECT id, repeat('0a', 20), 7, 'a', 'a@example.com', 'no trials', now() FROM repositories"));
	PQclear(sql("DELETE FROM commits WHERE sha = repeat('0a', 20)"));
	expect("trials after the refusals", value("SELECT count(*) FROM trials WHERE seed = 900000"), "0");
	printf("ok: trials name only commits and checks that exist, and those stay\n");
}

int main(void)
{
	const char *conninfo = getenv("NW_DATABASE");
	uv_loop_t *loop = uv_default_loop();
	struct store *s;
	unsigned applied;
	char err[512];

	if (!conninfo)
		fail("NW_DATABASE is not set");
	if (migrate_run(conninfo, &applied, err, sizeof(err)) < 0)
		fail("%s", err);
	conn = PQconnectdb(conninfo);
	PQclear(sql("INSERT INTO repositories (name, url, branch) VALUES ('store', '/store', 'main')"));
	PQclear(
	    sql("INSERT INTO commits (repo_id, sha, position, author, email, title, committed_at)"
		" SELECT id, repeat('cd', 20), 0, 'a', 'a@example.com', 'store', now() FROM repositories"));
	PQclear(sql("INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic)"
		    " SELECT id, 'store.fwd', 'store', 'fwd', '{f32}', '{}', true FROM repositories"));
	commit_id = atoll(value("SELECT id FROM commits"));
	check_id = atoi(value("SELECT id FROM checks"));
	if (store_init(loop, conninfo, "host-\xc3\xa9", 300 * 1000, 2, &s) < 0)
		fail("store_init");
	/* Every wait below has its own deadline; this one bounds a wait that never returns to us. */
	alarm(2 * DEADLINE_MS / 1000);

	/* 1. Awkward values. */
	{
		static const char tensors[] =
		    "[{\"name\":\"a\\\"b\\\\c\\n\",\"ratio\":0.5,\"x\":\"\xe2\x82\xac\"}]";
		static const char error[] =
		    "stderr:\tline 1\nline 2\r\\n \xff\xfe bad bytes, caf\xc3\xa9 \xed\xa0\x80";
		struct proto_trial t = answer(1.0 / 3.0, tensors), odd = answer(NAN, NULL),
				   empty = answer(0, "[]");
		struct trial_row r;

		odd.kernel_us = INFINITY;
		odd.gen = -1;
		odd.family[0] = '\0';
		odd.ndim = 0;
		odd.case_digest[0] = '\0';
		odd.digest[0] = '\0';
		snprintf(odd.error, sizeof(odd.error), "the runner's own error");
		empty.ndim = 0; /* a scalar: shape [] */
		r = row(0, &t, NULL);
		store_add_trial(s, &r);
		r = row(1, NULL, error);
		store_add_trial(s, &r);
		r = row(2, &odd, NULL);
		store_add_trial(s, &r);
		r = row(3, &empty, "");
		store_add_trial(s, &r);
		flush_and_wait(loop, s);
		expect("rows", value("SELECT count(*) FROM trials"), "4");
		expect(
		    "seed 0",
		    value("SELECT concat_ws('|', outcome, ratio = 1.0 / 3.0, family, shape, gen, case_digest,"
			  " tensors, digest, digests_differ, kernel_us, error IS NULL, slot, host,"
			  " sanitizer IS NULL) FROM trials WHERE seed = 0"),
		    /* tensors: the JSON text as the daemon wrote it (sql/080: json, not jsonb). */
		    "pass|t|tail|{3,1025}|2|c0ffee|[{\"name\":\"a\\\"b\\\\c\\n\",\"ratio\":0.5,\"x\":"
		    "\"\xe2\x82\xac\"}]|"
		    "9f2c41d07be3a8e1|1|18.4|t|host1|host-\xc3\xa9|t");
		expect("seed 0's tensors read as jsonb",
		       value("SELECT tensors::jsonb -> 0 ->> 'x' FROM trials WHERE seed = 0"),
		       "\xe2\x82\xac");
		expect("seed 1 (no answer)",
		       value("SELECT concat_ws('|', outcome, ratio IS NULL, family IS NULL, shape IS NULL, "
			     "gen IS NULL,"
			     " tensors, digest IS NULL, digests_differ, kernel_us IS NULL) FROM trials WHERE "
			     "seed = 1"),
		       "crash|t|t|t|t|[]|t|0|t");
		expect("seed 1's error", value("SELECT error FROM trials WHERE seed = 1"),
		       "stderr:\tline 1\nline 2\r\\n ?? bad bytes, caf\xc3\xa9 ???");
		expect(
		    "seed 2 (not finite, no case)",
		    value(
			"SELECT concat_ws('|', ratio IS NULL, kernel_us IS NULL, gen IS NULL, family IS NULL,"
			" shape IS NULL, case_digest IS NULL, digest IS NULL, error) FROM trials WHERE seed "
			"= 2"),
		    "t|t|t|t|t|t|t|the runner's own error");
		expect("seed 3 (a scalar, empty error)",
		       value("SELECT concat_ws('|', shape, ratio, error IS NULL) FROM trials WHERE seed = 3"),
		       "{}|0|t");
		printf("ok: awkward values are stored as meant (escapes, invalid UTF-8 as '?', NULLs)\n");
	}

	/* 2. Rows stored already: seeds 0 to 3 again (other values), with seeds 4 to 9. */
	{
		struct proto_trial t = answer(0.25, "[]");
		unsigned long long before = store_conflicts(s);

		for (unsigned long long seed = 0; seed < 10; seed++) {
			struct trial_row r = row(seed, &t, NULL);

			store_add_trial(s, &r);
		}
		flush_and_wait(loop, s);
		expect("rows after the batch that met stored rows", value("SELECT count(*) FROM trials"),
		       "10");
		expect("stored rows kept",
		       value("SELECT string_agg(outcome, ',' ORDER BY seed) FROM trials WHERE seed < 4"),
		       "pass,crash,pass,pass");
		expect("new rows", value("SELECT count(*) FROM trials WHERE seed >= 4 AND ratio = 0.25"),
		       "6");
		if (store_conflicts(s) != before + 1)
			fail("the batch went through the staging table %llu times, not once",
			     store_conflicts(s) - before);
		printf("ok: a batch meeting stored rows stores only its new ones, once\n");
	}

	/* 3 and 4. A batch the database refuses is retried; whoever waits hears once it is stored. */
	{
		struct proto_trial t = answer(0.5, "[]");
		struct trial_row r = row(100, &t, NULL);

		r.commit_id = commit_id + 1000; /* no such commit yet */
		store_add_trial(s, &r);
		for (unsigned long long seed = 10; seed < 3000; seed++) {
			struct trial_row x = row(seed, &t, NULL);

			store_add_trial(s, &x);
		}
		/* Let the refused batch fail once, then give it its commit. */
		{
			uint64_t start = uv_now(loop);

			while (uv_now(loop) - start < 300)
				uv_run(loop, UV_RUN_ONCE);
		}
		PQclear(sql(
		    "INSERT INTO commits (id, repo_id, sha, position, author, email, title, committed_at)"
		    " SELECT (SELECT id + 1000 FROM commits), id, repeat('ef', 20), 1, 'a', 'a@example.com',"
		    " 'later', now() FROM repositories"));
		flush_and_wait(loop, s);
		expect("rows once store_flush_then answered", value("SELECT count(*) FROM trials"), "3001");
		printf(
		    "ok: a refused batch is retried; store_flush_then answers once every trial is visible\n");
	}
	store_free(s);
	uv_run(loop, UV_RUN_DEFAULT);
	wide_store(loop, conninfo);
	references();
	PQfinish(conn);
	return 0;
}
