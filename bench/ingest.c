/*
 * bench/ingest: trial results per second through the daemon's storage path
 * (store.c: batched COPY, idempotent through the unique key) against a plain
 * COPY of the same rows into the same table. Run by bench/ingest.sh,
 * which starts a private PostgreSQL; NW_DATABASE names it.
 *
 * usage: ingest [ROWS]
 */
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "db.h"
#include "migrate.h"
#include "protocol.h"
#include "store.h"

static const char tensors[] =
    "[{\"name\":\"dx\",\"ratio\":0.42,\"max_abs\":0.000131,\"max_rel\":0.0035,\"max_ulp\":null,"
    "\"nonfinite\":0,\"ref_nonfinite\":0,\"unwritten\":0,\"canary\":0,\"excluded\":0,\"worst\":[2,1024],"
    "\"tail\":true}]";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void must(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);

	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
		fprintf(stderr, "ingest: %s: %s", sql, PQresultErrorMessage(r));
		exit(1);
	}
	PQclear(r);
}

struct run {
	struct store *store;
	unsigned long long target;
	uv_timer_t check;
	double done_at;
};

static void on_check(uv_timer_t *t)
{
	struct run *run = t->data;

	if (store_written(run->store) >= run->target) {
		run->done_at = now_s();
		uv_stop(t->loop);
	}
}

/* The daemon's path: rows handed to the store one by one, written in batches. */
static double ingest_store(const char *conninfo, long long commit_id, int check_id, unsigned rows)
{
	uv_loop_t *loop = uv_default_loop();
	struct run run = {0};
	struct proto_trial t = {0};
	double start;

	store_init(loop, conninfo, "bench", 300 * 1000, 2, &run.store);
	run.target = rows;
	uv_timer_init(loop, &run.check);
	run.check.data = &run;
	uv_timer_start(&run.check, on_check, 1, 1);
	/* Let the connections come up before the clock starts. */
	while (!store_connected(run.store))
		uv_run(loop, UV_RUN_ONCE);
	t.verdict = OUTCOME_PASS;
	snprintf(t.family, sizeof(t.family), "threshold");
	t.shape[0] = 3;
	t.shape[1] = 1025;
	t.ndim = 2;
	t.gen = 1;
	t.ratio = 0.42;
	snprintf(t.digest, sizeof(t.digest), "9f2c41d07be3a8e1");
	t.kernel_us = 18.4;
	t.tensors_json = (char *)tensors;
	start = now_s();
	for (unsigned i = 0; i < rows; i++) {
		struct trial_row row = {.commit_id = commit_id,
					.check_id = check_id,
					.dtype = "bf16",
					.seed = i,
					.attempt = 0,
					.outcome = OUTCOME_PASS,
					.result = &t,
					.slot = "gpu0"};

		store_add_trial(run.store, &row);
		/* Slots hand over results as they come; let the loop work between them. */
		if (i % 64 == 63)
			uv_run(loop, UV_RUN_NOWAIT);
	}
	store_flush(run.store);
	uv_run(loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&run.check, NULL);
	store_free(run.store);
	uv_run(loop, UV_RUN_DEFAULT);
	return rows / (run.done_at - start);
}

/* The yardstick: the same rows through one COPY. */
static double ingest_copy(PGconn *c, long long commit_id, int check_id, unsigned rows)
{
	char line[1024];
	double start = now_s();
	PGresult *r;

	r = PQexec(
	    c, "COPY trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen,"
	       " tensors, digest, digests_differ, kernel_us, error, slot, host) FROM STDIN");
	if (PQresultStatus(r) != PGRES_COPY_IN) {
		fprintf(stderr, "ingest: COPY: %s", PQresultErrorMessage(r));
		exit(1);
	}
	PQclear(r);
	for (unsigned i = 0; i < rows; i++) {
		int n = snprintf(
		    line, sizeof(line),
		    "%lld\t%d\tbf16\t%u\t0\tpass\t0.42\tthreshold\t{3,1025}\t1\t%s\t9f2c41d07be3a8e1\t0\t"
		    "18.4\t\\N\tgpu0\tbench\n",
		    commit_id, check_id, i, tensors);

		PQputCopyData(c, line, n);
	}
	PQputCopyEnd(c, NULL);
	r = PQgetResult(c);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		fprintf(stderr, "ingest: COPY: %s", PQresultErrorMessage(r));
		exit(1);
	}
	PQclear(r);
	return rows / (now_s() - start);
}

int main(int argc, char **argv)
{
	const char *conninfo = getenv("NW_DATABASE");
	unsigned rows = argc > 1 ? (unsigned)atoi(argv[1]) : 200000;
	unsigned applied;
	char err[512];
	double store_rate[3], copy_rate[3];
	PGconn *c;

	if (!conninfo || rows == 0) {
		fprintf(stderr, "usage: NW_DATABASE=CONNINFO ingest [ROWS]\n");
		return 2;
	}
	if (migrate_run(conninfo, &applied, err, sizeof(err)) < 0) {
		fprintf(stderr, "ingest: %s\n", err);
		return 1;
	}
	c = PQconnectdb(conninfo);
	must(c, "INSERT INTO repositories (name, url, branch) VALUES ('bench', '/bench', 'main')"
		" ON CONFLICT DO NOTHING");
	must(c, "INSERT INTO commits (repo_id, sha, position, author, email, title, committed_at)"
		" SELECT id, repeat('ab', 20), 0, 'b', 'b@example.com', 'bench', now() FROM repositories"
		" WHERE name = 'bench' ON CONFLICT DO NOTHING");
	must(c, "INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic)"
		" SELECT id, 'bench.fwd', 'bench', 'fwd', '{bf16}', '{}', true FROM repositories"
		" WHERE name = 'bench' ON CONFLICT DO NOTHING");
	{
		PGresult *r =
		    PQexec(c, "SELECT c.id, k.id FROM commits c, checks k WHERE c.sha = repeat('ab', 20)"
			      " AND k.name = 'bench.fwd'");
		long long commit_id = atoll(PQgetvalue(r, 0, 0));
		int check_id = atoi(PQgetvalue(r, 0, 1));

		PQclear(r);
		/* Three rounds each, alternating, on an emptied table; the median is reported. */
		for (int round = 0; round < 3; round++) {
			must(c, "TRUNCATE trials");
			must(c, "VACUUM ANALYZE trials");
			store_rate[round] = ingest_store(conninfo, commit_id, check_id, rows);
			must(c, "TRUNCATE trials");
			must(c, "VACUUM ANALYZE trials");
			copy_rate[round] = ingest_copy(c, commit_id, check_id, rows);
			fprintf(stderr, "round %d: store %.0f rows/s, copy %.0f rows/s\n", round + 1,
				store_rate[round], copy_rate[round]);
		}
		must(c, "TRUNCATE trials");
	}
	PQfinish(c);
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++) {
			double t;

			if (store_rate[j] < store_rate[i]) {
				t = store_rate[i], store_rate[i] = store_rate[j], store_rate[j] = t;
			}
			if (copy_rate[j] < copy_rate[i]) {
				t = copy_rate[i], copy_rate[i] = copy_rate[j], copy_rate[j] = t;
			}
		}
	printf("rows=%u store_rows_per_s=%.0f copy_rows_per_s=%.0f ratio=%.2f\n", rows, store_rate[1],
	       copy_rate[1], store_rate[1] / copy_rate[1]);
	return 0;
}
