/* jobs: claim, lease, finish. */
#include "jobs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "log.h"
#include "nwd.h"

/* job_claim() (sql/040): FOR UPDATE SKIP LOCKED, leases, per-host builds, what the check needs. */
static const char claim_sql[] = "SELECT * FROM job_claim($1, $2, $3, $4, $5, $6)";

struct claim {
	struct nwd *d;
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

static void on_claimed(PGresult *res, const char *error, void *data)
{
	struct claim *c = data;
	struct job job = {0};

	if (error || PQntuples(res) == 0) {
		if (error)
			log_warn("jobs: claim failed: %s", error);
		c->cb(NULL, c->data);
		free(c);
		return;
	}
	job.id = db_get_ll(res, 0, 0, 0);
	job.commit_id = db_get_ll(res, 0, 1, 0);
	job.check_id = (int)db_get_ll(res, 0, 2, 0);
	snprintf(job.dtype, sizeof(job.dtype), "%s", PQgetvalue(res, 0, 3));
	job.strikes = (int)db_get_ll(res, 0, 4, 0);
	snprintf(job.sha, sizeof(job.sha), "%s", PQgetvalue(res, 0, 5));
	snprintf(job.check, sizeof(job.check), "%s", PQgetvalue(res, 0, 6));
	job.deterministic = strcmp(PQgetvalue(res, 0, 7), "t") == 0;
	job.bisection_id = db_get_ll(res, 0, 9, 0);
	job.stop_on_failure = strcmp(PQgetvalue(res, 0, 10), "t") == 0;
	snprintf(job.tool, sizeof(job.tool), "%s", PQgetvalue(res, 0, 11));
	job.round = (int)db_get_ll(res, 0, 12, -1);
	if (!PQgetisnull(res, 0, 8) && parse_seeds(PQgetvalue(res, 0, 8), &job) < 0) {
		log_error("jobs: out of memory");
		jobs_release(c->d, job.id);
		c->cb(NULL, c->data);
		free(c);
		return;
	}
	c->cb(&job, c->data);
	free(c);
}

void jobs_claim(struct nwd *d, const char *kind, long long prefer_commit, bool gpu, jobs_claim_cb cb,
		void *data)
{
	struct claim *c = malloc(sizeof(*c));
	char lease[16], prefer[24], repo[16];
	const char *params[6] = {kind, d->cfg.node_name, lease, prefer, repo, gpu ? "t" : "f"};

	if (!c) {
		cb(NULL, data);
		return;
	}
	c->d = d;
	c->cb = cb;
	c->data = data;
	snprintf(lease, sizeof(lease), "%u", d->cfg.lease_s);
	snprintf(prefer, sizeof(prefer), "%lld", prefer_commit);
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	if (d->read_only) {
		cb(NULL, data);
		free(c);
		return;
	}
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

void jobs_strike(struct nwd *d, long long job_id, int strikes)
{
	char id[24], n[16];
	const char *params[2] = {id, n};

	if (d->read_only)
		return;
	snprintf(id, sizeof(id), "%lld", job_id);
	snprintf(n, sizeof(n), "%d", strikes);
	if (db_query(d->db, "UPDATE jobs SET strikes = $2 WHERE id = $1", 2, params, log_error_cb,
		     "recording a strike") < 0)
		log_warn("jobs: cannot record strike %d of job %lld", strikes, job_id);
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
