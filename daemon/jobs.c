/* jobs: claim, lease, finish. */
#include "jobs.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "db.h"
#include "log.h"
#include "nwd.h"

/* job_claim() (sql/040, 055): FOR UPDATE SKIP LOCKED, leases, per-host builds, what the check needs. */
static const char claim_sql[] = "SELECT * FROM job_claim($1, $2, $3, $4, $5, $6)";
/* job_claim_batch() (sql/070): the claims waiting, each answered as job_claim() would, in order. */
static const char claim_batch_sql[] = "SELECT * FROM job_claim_batch($1, $2, $3, $4, $5, $6)";

/* The columns of job_claim()'s row, from 'col' on (job_claim_batch() has the request's number first). */
enum { CLAIM_COLUMNS = 13 };

/*
 * A claim: the builder's is sent alone; a slot's waits in the daemon's batch
 * (struct jobs_batch) while the batch before it is in flight.
 */
struct claim {
	struct claim *next;
	struct nwd *d;
	const char *kinds; /* a literal: "build", "trials,probe" or "trials,probe,sanitize" */
	long long prefer;
	bool gpu;
	uint64_t since; /* uv_hrtime() at jobs_claim() */
	jobs_claim_cb cb;
	void *data;
};

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;

	return x < y ? -1 : x > y;
}

/* Parses a PostgreSQL array literal of integers ("{1,2,3}") into a sorted array. */
static int parse_seeds(const char *text, struct job *job)
{
	size_t cap = 1;

	for (const char *c = text; *c; c++)
		cap += *c == ',';
	job->seeds = calloc(cap, sizeof(*job->seeds));
	if (!job->seeds)
		return -ENOMEM;
	for (const char *c = text; *c;) {
		char *end;

		if (*c < '0' || *c > '9') {
			c++;
			continue;
		}
		job->seeds[job->nseeds++] = strtoull(c, &end, 10);
		c = end;
	}
	qsort(job->seeds, job->nseeds, sizeof(*job->seeds), cmp_ull);
	return 0;
}

/* Hands one claimed job (row 'row' of 'res', its columns from 'col') to the claim's callback; frees 'c'. */
static void claim_answer(struct claim *c, PGresult *res, int row, int col)
{
	struct job job = {0};

	job.id = db_get_ll(res, row, col, 0);
	job.commit_id = db_get_ll(res, row, col + 1, 0);
	job.check_id = (int)db_get_ll(res, row, col + 2, 0);
	snprintf(job.dtype, sizeof(job.dtype), "%s", PQgetvalue(res, row, col + 3));
	job.strikes = (int)db_get_ll(res, row, col + 4, 0);
	snprintf(job.sha, sizeof(job.sha), "%s", PQgetvalue(res, row, col + 5));
	snprintf(job.check, sizeof(job.check), "%s", PQgetvalue(res, row, col + 6));
	job.deterministic = strcmp(PQgetvalue(res, row, col + 7), "t") == 0;
	job.bisection_id = db_get_ll(res, row, col + 9, 0);
	job.stop_on_failure = strcmp(PQgetvalue(res, row, col + 10), "t") == 0;
	snprintf(job.tool, sizeof(job.tool), "%s", PQgetvalue(res, row, col + 11));
	job.round = (int)db_get_ll(res, row, col + 12, -1);
	if (!PQgetisnull(res, row, col + 8) && parse_seeds(PQgetvalue(res, row, col + 8), &job) < 0) {
		log_error("jobs: out of memory");
		jobs_release(c->d, job.id);
		c->cb(NULL, c->data);
		free(c);
		return;
	}
	c->cb(&job, c->data);
	free(c);
}

static void claim_none(struct claim *c)
{
	c->cb(NULL, c->data);
	free(c);
}

static void on_claimed(PGresult *res, const char *error, void *data)
{
	struct claim *c = data;

	if (error)
		log_warn("jobs: claim failed: %s", error);
	if (error || PQntuples(res) == 0 || PQnfields(res) < CLAIM_COLUMNS)
		claim_none(c);
	else
		claim_answer(c, res, 0, 0);
}

static void claim_params(const struct nwd *d, char *lease, size_t lease_len, char *repo, size_t repo_len)
{
	snprintf(lease, lease_len, "%u", d->cfg.lease_s);
	snprintf(repo, repo_len, "%d", d->repo_id);
}

static void batch_send(struct nwd *d);

/*
 * The batch's answer: each claim hears its job (the row whose 'req' is its
 * place in the batch, rows in any order) or none; then the claims that came
 * meanwhile go.
 */
static void on_batch_claimed(PGresult *res, const char *error, void *data)
{
	struct nwd *d = data;
	struct claim *batch[NW_CLAIM_BATCH_MAX];
	int n = 0, rows = error || PQnfields(res) < 1 + CLAIM_COLUMNS ? 0 : PQntuples(res);
	uint64_t now = uv_hrtime();

	if (error)
		log_warn("jobs: claim failed: %s", error);
	for (struct claim *c = d->claims.sent; c && n < NW_CLAIM_BATCH_MAX; c = c->next)
		batch[n++] = c;
	d->claims.sent = NULL;
	for (int i = 0; i < n; i++)
		d->claims.seconds += (double)(now - batch[i]->since) / 1e9;
	for (int row = 0; row < rows; row++) {
		long long req = db_get_ll(res, row, 0, 0);

		if (req < 1 || req > n || !batch[req - 1]) {
			/* Not the daemon's to run (never seen): back to the queue. */
			log_warn("jobs: job %lld claimed for request %lld of a batch of %d: given back",
				 db_get_ll(res, row, 1, 0), req, n);
			jobs_release(d, db_get_ll(res, row, 1, 0));
			continue;
		}
		claim_answer(batch[req - 1], res, row, 1);
		batch[req - 1] = NULL;
	}
	for (int i = 0; i < n; i++)
		if (batch[i])
			claim_none(batch[i]);
	batch_send(d);
}

/* Appends one array element ('quoted': as a string) to an array literal being built; false when full. */
static bool array_add(char *buf, size_t len, size_t *at, const char *value, bool quoted)
{
	int n = snprintf(buf + *at, len - *at, "%s%s%s%s", *at > 1 ? "," : "", quoted ? "\"" : "", value,
			 quoted ? "\"" : "");

	if (n < 0 || (size_t)n >= len - *at)
		return false;
	*at += (size_t)n;
	return true;
}

/* Sends the claims that wait (at most NW_CLAIM_BATCH_MAX) as one statement, unless a batch is in flight. */
static void batch_send(struct nwd *d)
{
	struct jobs_batch *b = &d->claims;
	/* Each request: its kinds (quoted), its commit, its slot kind, and the separators. */
	char kinds[NW_CLAIM_BATCH_MAX * 32 + 3], prefer[NW_CLAIM_BATCH_MAX * 24 + 3],
	    gpu[NW_CLAIM_BATCH_MAX * 2 + 3];
	size_t at_kinds = 1, at_prefer = 1, at_gpu = 1;
	char lease[16], repo[16];
	const char *params[6] = {kinds, d->cfg.node_name, lease, prefer, repo, gpu};
	struct claim **tail = &b->sent;
	unsigned n = 0;

	if (b->sent || !b->waiting)
		return;
	if (d->read_only) {
		while (b->waiting) {
			struct claim *c = b->waiting;

			b->waiting = c->next;
			claim_none(c);
		}
		b->last = NULL;
		return;
	}
	kinds[0] = prefer[0] = gpu[0] = '{';
	while (b->waiting && n < NW_CLAIM_BATCH_MAX) {
		struct claim *c = b->waiting;
		char id[24];

		snprintf(id, sizeof(id), "%lld", c->prefer);
		if (!array_add(kinds, sizeof(kinds) - 1, &at_kinds, c->kinds, true) ||
		    !array_add(prefer, sizeof(prefer) - 1, &at_prefer, id, false) ||
		    !array_add(gpu, sizeof(gpu) - 1, &at_gpu, c->gpu ? "t" : "f", false))
			break; /* a kinds string longer than any slot asks for: it goes alone next time */
		b->waiting = c->next;
		c->next = NULL;
		*tail = c;
		tail = &c->next;
		n++;
	}
	if (!b->waiting)
		b->last = NULL;
	if (n == 0) {
		/* Only a claim too long for an array: none of the daemon's own. */
		struct claim *c = b->waiting;

		b->waiting = c->next;
		if (!b->waiting)
			b->last = NULL;
		claim_none(c);
		batch_send(d);
		return;
	}
	strcpy(kinds + at_kinds, "}");
	strcpy(prefer + at_prefer, "}");
	strcpy(gpu + at_gpu, "}");
	claim_params(d, lease, sizeof(lease), repo, sizeof(repo));
	b->batches++;
	b->claims += n;
	if (db_query(d->db, claim_batch_sql, 6, params, on_batch_claimed, d) < 0)
		on_batch_claimed(NULL, "cannot queue query", d);
}

void jobs_claim(struct nwd *d, const char *kinds, long long prefer_commit, bool gpu, jobs_claim_cb cb,
		void *data)
{
	struct claim *c;

	if (d->read_only || !(c = calloc(1, sizeof(*c)))) {
		cb(NULL, data);
		return;
	}
	c->d = d;
	c->kinds = kinds;
	c->prefer = prefer_commit;
	c->gpu = gpu;
	c->since = uv_hrtime();
	c->cb = cb;
	c->data = data;
	if (strcmp(kinds, "build") != 0) {
		/* A slot's: with the others that wait, in one statement, once the batch in flight is answered. */
		if (d->claims.last)
			d->claims.last->next = c;
		else
			d->claims.waiting = c;
		d->claims.last = c;
		batch_send(d);
		return;
	}
	/* The builder's: one at a time, alone (a build is one job a commit). */
	char lease[16], prefer[24], repo[16];
	const char *params[6] = {kinds, d->cfg.node_name, lease, prefer, repo, gpu ? "t" : "f"};

	claim_params(d, lease, sizeof(lease), repo, sizeof(repo));
	snprintf(prefer, sizeof(prefer), "%lld", prefer_commit);
	if (db_query(d->db, claim_sql, 6, params, on_claimed, c) < 0)
		on_claimed(NULL, "cannot queue query", c);
}

static void log_error_cb(PGresult *res, const char *error, void *data)
{
	if (error)
		log_warn("jobs: %s: %s", (const char *)data, error);
}

struct renewal {
	long long job_id;
	jobs_renew_cb cb;
	void *data;
};

static void on_renewed(PGresult *res, const char *error, void *data)
{
	struct renewal *r = data;

	if (error)
		log_warn("jobs: renewing the lease of job %lld: %s", r->job_id, error);
	/* An error says nothing of who holds the job: only a renewal that found no row is a loss. */
	if (r->cb)
		r->cb(r->job_id, error || strcmp(PQcmdTuples(res), "0") != 0, r->data);
	free(r);
}

void jobs_renew(struct nwd *d, long long job_id, jobs_renew_cb cb, void *data)
{
	char id[24], lease[16];
	const char *params[3] = {id, lease, d->cfg.node_name};
	struct renewal *r;

	if (d->read_only || !(r = malloc(sizeof(*r))))
		return;
	r->job_id = job_id;
	r->cb = cb;
	r->data = data;
	snprintf(id, sizeof(id), "%lld", job_id);
	snprintf(lease, sizeof(lease), "%u", d->cfg.lease_s);
	if (db_query(d->db,
		     "UPDATE jobs SET lease_until = now() + $2 * interval '1 second'"
		     " WHERE id = $1 AND owner = $3 AND state = 'running'",
		     3, params, on_renewed, r) < 0)
		on_renewed(NULL, "cannot queue the renewal", r);
}

static const char finish_sql[] = "UPDATE jobs SET state = $2, error = $3, finished_at = now(), owner = NULL, "
				 "lease_until = NULL WHERE id = $1";

void jobs_finish(struct nwd *d, long long job_id, bool failed, const char *error)
{
	char id[24];
	const char *params[3] = {id, failed ? "failed" : "done", error};
	int rc;

	if (d->read_only)
		return;
	snprintf(id, sizeof(id), "%lld", job_id);
	rc = db_query(d->db, finish_sql, 3, params, log_error_cb, "finishing a job");
	/* Its lease runs out, and the job is claimed again (its results are stored idempotently). */
	if (rc < 0)
		log_warn("jobs: cannot finish job %lld (%s): it runs again once its lease is out", job_id,
			 strerror(-rc));
}

void jobs_finish_in(struct db_txn *t, long long job_id)
{
	char id[24];
	const char *params[3] = {id, "done", NULL};

	snprintf(id, sizeof(id), "%lld", job_id);
	db_txn_add(t, finish_sql, 3, params);
}

void jobs_release(struct nwd *d, long long job_id)
{
	char id[24];
	const char *params[2] = {id, d->cfg.node_name};

	if (d->read_only)
		return;
	snprintf(id, sizeof(id), "%lld", job_id);
	if (db_query(d->db,
		     "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL"
		     " WHERE id = $1 AND owner = $2 AND state = 'running'",
		     2, params, log_error_cb, "releasing a job") < 0)
		log_warn("jobs: cannot give job %lld back: it is claimed again once its lease is out",
			 job_id);
}

/*
 * Sets one number of one job (sql: an UPDATE of job $1 with the number $2),
 * queued on the scheduler's connection; false where it cannot be queued.
 */
static bool set_number(struct nwd *d, long long job_id, const char *sql, long long value, const char *what)
{
	char id[24], n[24];
	const char *params[2] = {id, n};

	snprintf(id, sizeof(id), "%lld", job_id);
	snprintf(n, sizeof(n), "%lld", value);
	return db_query(d->db, sql, 2, params, log_error_cb, (void *)what) >= 0;
}

void jobs_strike(struct nwd *d, long long job_id, int strikes)
{
	if (!d->read_only && !set_number(d, job_id, "UPDATE jobs SET strikes = $2 WHERE id = $1", strikes,
					 "recording a strike"))
		log_warn("jobs: cannot record strike %d of job %lld", strikes, job_id);
}

void jobs_grow(struct nwd *d, long long job_id, unsigned planned)
{
	if (!d->read_only &&
	    !set_number(d, job_id, "UPDATE jobs SET planned = greatest(planned, $2::int) WHERE id = $1",
			planned, "recording a grown plan"))
		log_warn("jobs: cannot record job %lld's plan of %u seeds", job_id, planned);
}

void jobs_requeue_own(struct nwd *d)
{
	const char *params[1] = {d->cfg.node_name};

	if (d->read_only)
		return;
	/* At start-up the queue is empty: this fails only out of memory, and the leases then run out. */
	if (db_query(d->db,
		     "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL"
		     " WHERE state = 'running' AND owner = $1",
		     1, params, log_error_cb, "requeueing this node's jobs") < 0)
		log_warn("jobs: cannot give back the jobs this node held: they are claimed again once their "
			 "leases are out");
}
