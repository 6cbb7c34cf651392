/*
 * jobs: the shared work queue in PostgreSQL. A daemon claims a job with
 * FOR UPDATE SKIP LOCKED under a lease it renews while it works; a job whose
 * lease expired (its daemon died) can be claimed by anyone, so several
 * daemons on several hosts can share one database.
 */
#ifndef NW_JOBS_H
#define NW_JOBS_H

#include <stdbool.h>

struct nwd;
struct db_txn;
struct claim;

/*
 * The slots' claims of one daemon (kept in struct nwd): they go to the
 * database together, one statement for every claim that waits
 * (job_claim_batch(), sql/070), with one such statement in flight at a time:
 * the claims that come while it runs wait for its answer, then go as the next.
 */
struct jobs_batch {
	struct claim *sent;           /* the batch in flight, in its requests' order; NULL when none */
	struct claim *waiting, *last; /* the claims for the next batch, oldest first */
	unsigned long long batches;   /* statements sent (for /metrics) */
	unsigned long long claims;    /* claims sent in them */
	double seconds;               /* from each claim to its answer, summed */
};

struct job {
	long long id;
	long long commit_id;
	int check_id;   /* trials jobs only, else 0 */
	char dtype[16]; /* trials jobs only */
	int strikes;    /* infrastructure faults so far */
	char sha[41];
	char check[64];     /* trials jobs only */
	bool deterministic; /* trials jobs only */
	/* probe jobs: the seeds to run (sorted, unique; owned by whoever holds the job, free()), else NULL */
	unsigned long long *seeds;
	unsigned nseeds;
	long long bisection_id; /* probe jobs of a bisection, else 0 */
	bool stop_on_failure;   /* probe jobs: the first failure ends the probe */
	int round;     /* probe jobs: the bisection's round (the parts of one probe share it), else -1 */
	char tool[16]; /* sanitize jobs: the compute-sanitizer tool, else "" */
};

/* Called with the claimed job, or NULL when none is claimable (or on error). */
typedef void (*jobs_claim_cb)(struct job *job, void *data);

/*
 * Called with whether this daemon still holds the job after a renewal: false
 * when its lease ran out and another daemon claimed it (the job is no longer
 * this daemon's to finish). A renewal that failed says true: nobody knows.
 */
typedef void (*jobs_renew_cb)(long long job_id, bool held, void *data);

/*
 * Claims the next job of the kinds listed in 'kinds' (a literal: "build", or
 * "trials,probe"), preferring 'prefer_commit', for a GPU slot ('gpu') or a
 * host slot: trials, probe and sanitize jobs only of commits this host has
 * built the slot's runner for (host_builds) and of checks that slot can run.
 * A build's claim is sent alone; the others join the daemon's next batch
 * (struct jobs_batch), each answered as if it had been sent alone at its
 * turn. Claims nothing (cb(NULL)) once the daemon refuses to write.
 */
void jobs_claim(struct nwd *d, const char *kinds, long long prefer_commit, bool gpu, jobs_claim_cb cb,
		void *data);
/* Extends the lease of a job this daemon holds; 'cb' (may be NULL) hears whether it still does. */
void jobs_renew(struct nwd *d, long long job_id, jobs_renew_cb cb, void *data);
/* Marks a job done (or failed, with 'error'). This and the calls below write nothing once the daemon refuses to write. */
void jobs_finish(struct nwd *d, long long job_id, bool failed, const char *error);
/* Adds "the job is done" to a transaction (db.h), which then commits it with the job's results. */
void jobs_finish_in(struct db_txn *t, long long job_id);
/* Gives a job back to the queue (on drain), untouched. */
void jobs_release(struct nwd *d, long long job_id);
/* Records one more infrastructure fault against a job. */
void jobs_strike(struct nwd *d, long long job_id, int strikes);
/*
 * Records that a trials job's plan grew to 'planned' seeds (adaptive trials):
 * whoever takes the job next (it is judged again, taken over, or this daemon
 * restarts) runs and judges that many. Lost (a crash before it is written),
 * the judge asks for the seeds again at its next look.
 */
void jobs_grow(struct nwd *d, long long job_id, unsigned planned);
/* At start-up: jobs this node held when it died go back to the queue at once. */
void jobs_requeue_own(struct nwd *d);

#endif
