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
 *      and retried until the commit exists, then stored.
 *
 * Prints "ok: ..." per check; exits 1 with what differs.
 */
#include <libpq-fe.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

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
	if (store_init(loop, conninfo, "host-\xc3\xa9", 300 * 1000, &s) < 0)
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
		    "pass|t|tail|{3,1025}|2|c0ffee|[{\"x\": \"\xe2\x82\xac\", \"name\": \"a\\\"b\\\\c\\n\", "
		    "\"ratio\": 0.5}]|"
		    "9f2c41d07be3a8e1|1|18.4|t|host1|host-\xc3\xa9|t");
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
	PQfinish(conn);
	return 0;
}
