/*
 * bench/ingest: trial results per second through the daemon's storage path
 * (store.c: batched COPY on its connections, idempotent through the unique
 * key) against a plain COPY of the same rows into the same table, and what
 * each costs the server a row. Run by bench/ingest.sh, which starts a private
 * PostgreSQL; NW_DATABASE names it.
 *
 * usage: ingest -m                    apply the migrations, and exit
 *        ingest [-a ANSWERS] [-c CONNECTIONS] [-r ROUNDS] [ROWS]
 *
 * Rows: with -a, the runner answers in ANSWERS (one protocol v1 trial answer
 * a line, e.g. bench/ingest-answers.jsonl: the C suite's 8 checks, 1 to 3
 * tensors each), decoded as the daemon decodes them and handed to the store
 * in turn, over 8 checks x 3 dtypes; without, the one small answer of issue 2
 * (one tensor) for one check. The plain COPY sends the very text the store's
 * rows read back as (COPY ... TO STDOUT after the store's round, outside the
 * clock), so both store the same rows into the same table.
 *
 * Server cost, where the server has them: statement time of the COPYs
 * (pg_stat_statements: wall time in the server, waits included) and the CPU
 * of every server process (NW_PG_PID, the postmaster: its children's
 * utime + stime from /proc), each divided by the rows.
 *
 * Prints one line of name=value pairs (the medians of the rounds) on stdout,
 * each round on stderr.
 */
#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "caps.h"
#include "db.h"
#include "migrate.h"
#include "protocol.h"
#include "store.h"

#define ANSWERS_MAX 64
#define CHECKS      8

static const char *const dtypes[] = {"f32", "f16", "bf16"};

/* The answer of issue 2's bench: one tensor, every field. */
static const char small_answer[] =
    "{\"op\":\"trial\",\"id\":1,\"verdict\":\"pass\",\"case\":{\"family\":\"threshold\",\"shape\":[3,1025],"
    "\"gen\":1},\"ratio\":0.42,\"tensors\":[{\"name\":\"dx\",\"ratio\":0.42,\"max_abs\":0.000131,"
    "\"max_rel\":0.0035,\"max_ulp\":null,\"nonfinite\":0,\"ref_nonfinite\":0,\"unwritten\":0,\"canary\":0,"
    "\"excluded\":0,\"worst\":[2,1024],\"tail\":true}],\"digest\":\"9f2c41d07be3a8e1\",\"digests_differ\":0,"
    "\"kernel_us\":18.4}";

static struct proto_trial answers[ANSWERS_MAX];
static unsigned nanswers, nchecks = 1, ndtypes = 1;
static int check_ids[CHECKS];
static long long commit_id;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static PGresult *must(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);

	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
		fprintf(stderr, "ingest: %s: %s", sql, PQresultErrorMessage(r));
		exit(1);
	}
	return r;
}

static void must_clear(PGconn *c, const char *sql)
{
	PQclear(must(c, sql));
}

static void add_answer(const char *line, size_t len)
{
	const char *id = strstr(line, "\"id\":");
	char err[256];

	if (nanswers == ANSWERS_MAX) {
		fprintf(stderr, "ingest: more than %d answers\n", ANSWERS_MAX);
		exit(2);
	}
	if (proto_parse_trial(line, len, id ? atol(id + 5) : 0, &answers[nanswers], err, sizeof(err)) < 0) {
		fprintf(stderr, "ingest: answer %u: %s\n", nanswers + 1, err);
		exit(2);
	}
	nanswers++;
}

static void read_answers(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (!f) {
		fprintf(stderr, "ingest: cannot open '%s': %s\n", path, strerror(errno));
		exit(2);
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n > 0)
			add_answer(line, (size_t)n);
	}
	free(line);
	fclose(f);
	if (nanswers == 0) {
		fprintf(stderr, "ingest: no answers in '%s'\n", path);
		exit(2);
	}
}

/* Row i: check i % nchecks (its answer), dtype, seed; the key (commit, check, dtype, seed, 0) unique. */
static struct trial_row row_of(unsigned i)
{
	unsigned k = i % nchecks, d = (i / nchecks) % ndtypes;
	const struct proto_trial *t = &answers[k % nanswers];

	return (struct trial_row){.commit_id = commit_id,
				  .check_id = check_ids[k],
				  .dtype = dtypes[d],
				  .seed = i / (nchecks * ndtypes),
				  .attempt = 0,
				  .outcome = t->verdict,
				  .result = t,
				  .slot = nchecks > 1 ? "gpu0.3" : "gpu0"};
}

/* CPU seconds of every process of the server: the postmaster's children (0 when not known). */
static double server_cpu_s(void)
{
	const char *pid = getenv("NW_PG_PID");
	double total = 0;
	long hz = sysconf(_SC_CLK_TCK);
	uv_fs_t req;
	uv_dirent_t ent;

	if (!pid || !*pid)
		return 0;
	if (uv_fs_scandir(NULL, &req, "/proc", 0, NULL) < 0)
		return 0;
	while (uv_fs_scandir_next(&req, &ent) != UV_EOF) {
		char path[64], buf[1024], *p;
		unsigned long long ut, st;
		int ppid;
		FILE *f;

		if (ent.name[0] < '0' || ent.name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", ent.name);
		f = fopen(path, "r");
		if (!f)
			continue;
		p = fgets(buf, sizeof(buf), f);
		fclose(f);
		/* pid (comm) state ppid ...: fields after the comm's closing parenthesis. */
		if (!p || !(p = strrchr(buf, ')')))
			continue;
		if (sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ppid, &ut, &st) !=
		    3)
			continue;
		if (ppid == atoi(pid) || strcmp(ent.name, pid) == 0)
			total += (double)(ut + st) / (double)hz;
	}
	uv_fs_req_cleanup(&req);
	return total;
}

/* Statement time of the COPYs since the last reset, in seconds (-1: no pg_stat_statements). */
static bool have_pgss;

static void pgss_reset(PGconn *c)
{
	if (have_pgss)
		must_clear(c, "SELECT pg_stat_statements_reset()");
}

static double pgss_copy_s(PGconn *c)
{
	PGresult *r;
	double s;

	if (!have_pgss)
		return -1;
	r = must(c, "SELECT coalesce(sum(total_exec_time), 0) / 1000 FROM pg_stat_statements"
		    " WHERE query ILIKE '%COPY%trial%' OR query LIKE '%trial_stage_insert%'");
	s = atof(PQgetvalue(r, 0, 0));
	PQclear(r);
	return s;
}

struct measure {
	double rows_per_s, server_us, cpu_us;
};

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

/* The daemon's path: rows handed to the store one by one, written in batches on its connections. */
static struct measure ingest_store(PGconn *c, const char *conninfo, unsigned conns, unsigned rows)
{
	uv_loop_t *loop = uv_default_loop();
	struct run run = {0};
	struct measure m;
	double start, cpu;

	if (store_init(loop, conninfo, "bench-host", 300 * 1000, conns, &run.store) < 0) {
		fprintf(stderr, "ingest: store_init with %u connections failed\n", conns);
		exit(1);
	}
	run.target = rows;
	uv_timer_init(loop, &run.check);
	run.check.data = &run;
	uv_timer_start(&run.check, on_check, 1, 1);
	/* Let the connections come up before the clock starts. */
	while (!store_connected(run.store))
		uv_run(loop, UV_RUN_ONCE);
	pgss_reset(c);
	cpu = server_cpu_s();
	start = now_s();
	for (unsigned i = 0; i < rows; i++) {
		struct trial_row row = row_of(i);

		store_add_trial(run.store, &row);
		/* Slots hand over results as they come; let the loop work between them. */
		if (i % 64 == 63)
			uv_run(loop, UV_RUN_NOWAIT);
	}
	store_flush(run.store);
	uv_run(loop, UV_RUN_DEFAULT);
	m.rows_per_s = rows / (run.done_at - start);
	m.cpu_us = (server_cpu_s() - cpu) * 1e6 / rows;
	m.server_us = pgss_copy_s(c) * 1e6 / rows;
	uv_close((uv_handle_t *)&run.check, NULL);
	store_free(run.store);
	uv_run(loop, UV_RUN_DEFAULT);
	return m;
}

/* The columns the store writes (store.c's STORE_COLUMNS), in its order. */
#define COLUMNS                                                                                              \
	"commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, case_digest, "       \
	"tensors, digest, digests_differ, kernel_us, error, slot, host, sanitizer, sanitizer_status"

/* The store's rows as COPY text, read back from the table. */
static char *export_rows(PGconn *c, size_t *len)
{
	size_t cap = 1 << 20, n = 0;
	char *out = malloc(cap), *buf;
	PGresult *r = PQexec(c, "COPY (SELECT " COLUMNS " FROM trials ORDER BY id) TO STDOUT");
	int k;

	if (PQresultStatus(r) != PGRES_COPY_OUT || !out) {
		fprintf(stderr, "ingest: COPY TO: %s", PQresultErrorMessage(r));
		exit(1);
	}
	PQclear(r);
	while ((k = PQgetCopyData(c, &buf, 0)) > 0) {
		if (n + (size_t)k > cap) {
			while (n + (size_t)k > cap)
				cap *= 2;
			out = realloc(out, cap);
			if (!out) {
				fprintf(stderr, "ingest: out of memory\n");
				exit(1);
			}
		}
		memcpy(out + n, buf, (size_t)k);
		n += (size_t)k;
		PQfreemem(buf);
	}
	PQclear(PQgetResult(c));
	*len = n;
	return out;
}

/* The yardstick: the same rows through one COPY on one connection. */
static struct measure ingest_copy(PGconn *c, const char *data, size_t len, unsigned rows)
{
	struct measure m;
	double start, cpu;
	PGresult *r;

	pgss_reset(c);
	cpu = server_cpu_s();
	start = now_s();
	r = PQexec(c, "COPY trials (" COLUMNS ") FROM STDIN");
	if (PQresultStatus(r) != PGRES_COPY_IN) {
		fprintf(stderr, "ingest: COPY: %s", PQresultErrorMessage(r));
		exit(1);
	}
	PQclear(r);
	/* In pieces of a batch's order of size, as a client streams it. */
	for (size_t off = 0; off < len;) {
		size_t n = len - off < 256 * 1024 ? len - off : 256 * 1024;

		if (PQputCopyData(c, data + off, (int)n) != 1) {
			fprintf(stderr, "ingest: COPY data: %s", PQerrorMessage(c));
			exit(1);
		}
		off += n;
	}
	PQputCopyEnd(c, NULL);
	r = PQgetResult(c);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		fprintf(stderr, "ingest: COPY: %s", PQresultErrorMessage(r));
		exit(1);
	}
	PQclear(r);
	m.rows_per_s = rows / (now_s() - start);
	m.cpu_us = (server_cpu_s() - cpu) * 1e6 / rows;
	m.server_us = pgss_copy_s(c) * 1e6 / rows;
	return m;
}

/* A digest of what the table holds (every stored column but id and finished_at). */
static char *table_digest(PGconn *c)
{
	PGresult *r = must(c, "SELECT count(*) || ' ' || md5(string_agg(md5(row(" COLUMNS ")::text), ''"
			      " ORDER BY check_id, dtype, seed)) FROM trials");
	char *d = strdup(PQgetvalue(r, 0, 0));

	PQclear(r);
	return d;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void setup(PGconn *c)
{
	PGresult *r;

	must_clear(c, "INSERT INTO repositories (name, url, branch) VALUES ('bench', '/bench', 'main')"
		      " ON CONFLICT DO NOTHING");
	must_clear(c,
		   "INSERT INTO commits (repo_id, sha, position, author, email, title, committed_at)"
		   " SELECT id, repeat('ab', 20), 0, 'b', 'b@example.com', 'bench', now() FROM repositories"
		   " WHERE name = 'bench' ON CONFLICT DO NOTHING");
	must_clear(c,
		   "INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic)"
		   " SELECT r.id, 'bench' || i || '.fwd', 'bench' || i, 'fwd', '{f32,f16,bf16}', '{}', true"
		   " FROM repositories r, generate_series(0, 7) i WHERE r.name = 'bench'"
		   " ON CONFLICT DO NOTHING");
	r = must(c, "SELECT c.id, k.id FROM commits c, checks k WHERE c.sha = repeat('ab', 20)"
		    " AND k.name LIKE 'bench_.fwd' ORDER BY k.name");
	if (PQntuples(r) != CHECKS) {
		fprintf(stderr, "ingest: %d bench checks, not %d\n", PQntuples(r), CHECKS);
		exit(1);
	}
	commit_id = atoll(PQgetvalue(r, 0, 0));
	for (int i = 0; i < CHECKS; i++)
		check_ids[i] = atoi(PQgetvalue(r, i, 1));
	PQclear(r);
	r = PQexec(c, "SELECT pg_stat_statements_reset()");
	have_pgss = PQresultStatus(r) == PGRES_TUPLES_OK;
	PQclear(r);
}

int main(int argc, char **argv)
{
	const char *conninfo = getenv("NW_DATABASE"), *answers_path = NULL;
	unsigned rows = 200000, conns = 2, rounds = 3, applied;
	bool migrate_only = false;
	struct measure store[16], copy[16];
	double v[16];
	char err[512], *digest_store = NULL;
	size_t tensor_bytes = 0;
	PGconn *c;
	int opt;

	while ((opt = getopt(argc, argv, "ma:c:r:")) != -1) {
		switch (opt) {
		case 'm':
			migrate_only = true;
			break;
		case 'a':
			answers_path = optarg;
			break;
		case 'c':
			conns = (unsigned)atoi(optarg);
			break;
		case 'r':
			rounds = (unsigned)atoi(optarg);
			break;
		default:
			goto usage;
		}
	}
	if (optind < argc)
		rows = (unsigned)atoi(argv[optind]);
	if (!conninfo || rows == 0 || conns == 0 || conns > NW_STORE_CONNECTIONS_MAX || rounds == 0 ||
	    rounds > 16)
		goto usage;
	if (migrate_run(conninfo, &applied, err, sizeof(err)) < 0) {
		fprintf(stderr, "ingest: %s\n", err);
		return 1;
	}
	if (migrate_only)
		return 0;
	if (answers_path) {
		read_answers(answers_path);
		nchecks = CHECKS;
		ndtypes = 3;
	} else {
		add_answer(small_answer, sizeof(small_answer) - 1);
	}
	for (unsigned i = 0; i < nchecks; i++)
		tensor_bytes += strlen(answers[i % nanswers].tensors_json);
	c = PQconnectdb(conninfo);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "ingest: %s", PQerrorMessage(c));
		return 1;
	}
	setup(c);
	/* Rounds alternate between the two paths, each on an emptied table; the medians are reported. */
	for (unsigned round = 0; round < rounds; round++) {
		size_t len;
		char *data, *digest;

		must_clear(c, "TRUNCATE trials");
		must_clear(c, "CHECKPOINT");
		store[round] = ingest_store(c, conninfo, conns, rows);
		data = export_rows(c, &len);
		if (round == 0)
			digest_store = table_digest(c);
		must_clear(c, "TRUNCATE trials");
		must_clear(c, "CHECKPOINT");
		copy[round] = ingest_copy(c, data, len, rows);
		free(data);
		if (round == 0) {
			/* The same rows, whichever path stored them. */
			digest = table_digest(c);
			if (strcmp(digest, digest_store) != 0) {
				fprintf(stderr, "ingest: the paths stored different rows: %s against %s\n",
					digest_store, digest);
				return 1;
			}
			free(digest);
		}
		fprintf(
		    stderr,
		    "round %u: store %.0f rows/s (server %.1f us/row, CPU %.1f), copy %.0f rows/s (server "
		    "%.1f us/row, CPU %.1f)\n",
		    round + 1, store[round].rows_per_s, store[round].server_us, store[round].cpu_us,
		    copy[round].rows_per_s, copy[round].server_us, copy[round].cpu_us);
	}
	must_clear(c, "TRUNCATE trials");
	PQfinish(c);
	free(digest_store);
	printf("rows=%u shape=%s tensor_bytes=%zu connections=%u rounds=%u", rows,
	       answers_path ? "gpu" : "small", tensor_bytes / nchecks, conns, rounds);
#define MEDIAN(arr, field, name, fmt)                                                                        \
	do {                                                                                                 \
		for (unsigned i = 0; i < rounds; i++)                                                        \
			v[i] = arr[i].field;                                                                 \
		printf(" " name "=" fmt, median(v, rounds));                                                 \
	} while (0)
	MEDIAN(store, rows_per_s, "store_rows_per_s", "%.0f");
	MEDIAN(copy, rows_per_s, "copy_rows_per_s", "%.0f");
	{
		double s, k;

		for (unsigned i = 0; i < rounds; i++)
			v[i] = store[i].rows_per_s;
		s = median(v, rounds);
		for (unsigned i = 0; i < rounds; i++)
			v[i] = copy[i].rows_per_s;
		k = median(v, rounds);
		printf(" ratio=%.2f", s / k);
	}
	MEDIAN(store, server_us, "store_server_us", "%.1f");
	MEDIAN(copy, server_us, "copy_server_us", "%.1f");
	MEDIAN(store, cpu_us, "store_cpu_us", "%.1f");
	MEDIAN(copy, cpu_us, "copy_cpu_us", "%.1f");
#undef MEDIAN
	printf("\n");
	return 0;
usage:
	fprintf(stderr,
		"usage: NW_DATABASE=CONNINFO ingest -m\n"
		"       NW_DATABASE=CONNINFO ingest [-a ANSWERS] [-c CONNECTIONS (1-%d)] [-r ROUNDS "
		"(1-16)] [ROWS]\n",
		NW_STORE_CONNECTIONS_MAX);
	return 2;
}
