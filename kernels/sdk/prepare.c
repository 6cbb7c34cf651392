/*
 * Trials prepared ahead. A check that splits its trial (nw_check.prepare:
 * the shape and the inputs from the seed, host work only) has the next
 * seeds' parts done on worker threads while this trial's device work runs
 * and its answer travels: the daemon sends a part's seeds in order, and the
 * command line runs them in order. DEPTH seeds are prepared at once, each
 * on a worker of its own: a large case's draws can take longer than a
 * trial's own host path, and with one worker the trial waited for them.
 * A request that is not one prepared has the prepared ones thrown away;
 * after misses the workers rest (they only probe every PROBE_EVERY trials),
 * so out-of-order work costs little. The workers also free what finished
 * trials prepared, off the trial's path.
 *
 * By default only where a device does the rest: on the host backend the
 * trial is all host work, and more threads would only take other cores.
 * NW_PREPARE_AHEAD=0 turns it off (every trial prepared in line), =1 on
 * whatever the backend (the host's tests drive it so).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "numwatch_check.h"
#include "nw_device.h"
#include "nw_prepare.h"

#define DEPTH       2
#define PROBE_EVERY 16
#define GARBAGE_MAX 4

struct garbage {
	void (*release)(void *prepared);
	void *prepared;
};

/* A seed prepared ahead: queued, then taken by a worker, then done. */
struct job {
	bool queued;  /* holds a request (until taken by the trial or thrown away) */
	bool running; /* a worker prepares it */
	bool done;
	bool dropped;        /* thrown away while running: its worker releases what it made */
	struct nw_check c;   /* a copy: the caller's may change meanwhile (a test's twin of a check) */
	struct nw_trial req; /* the request prepared for, as asked */
	struct nw_trial t;   /* its trial, set up and prepared */
	void *prepared;
	int rc;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool on, checked, missed;
	unsigned since_probe;
	struct job job[DEPTH];
	struct garbage garbage[GARBAGE_MAX]; /* trials done with, for a worker to free */
	unsigned ngarbage;
} ahead = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The queued job no worker has taken yet, the lowest seed first (the one needed first); or NULL. */
static struct job *next_job(void)
{
	struct job *best = NULL;

	for (unsigned i = 0; i < DEPTH; i++) {
		struct job *j = &ahead.job[i];

		if (j->queued && !j->running && !j->done && (!best || j->req.seed < best->req.seed))
			best = j;
	}
	return best;
}

static void *worker(void *arg)
{
	struct garbage g[GARBAGE_MAX];
	struct job *j;
	unsigned n, i;

	(void)arg;
	pthread_mutex_lock(&ahead.mu);
	for (;;) {
		while (!ahead.ngarbage && !(j = next_job()))
			pthread_cond_wait(&ahead.cv, &ahead.mu);
		n = ahead.ngarbage;
		memcpy(g, ahead.garbage, n * sizeof(g[0]));
		ahead.ngarbage = 0;
		if ((j = next_job()))
			j->running = true;
		pthread_mutex_unlock(&ahead.mu);
		for (i = 0; i < n; i++)
			g[i].release(g[i].prepared);
		if (j)
			j->rc = j->c.prepare(&j->c, &j->t, &j->prepared);
		pthread_mutex_lock(&ahead.mu);
		if (j) {
			j->running = false;
			j->done = true;
			if (j->dropped) {
				if (j->rc == 0)
					j->c.release_prepared(j->prepared);
				*j = (struct job){0};
			}
			pthread_cond_broadcast(&ahead.cv);
		}
	}
	return NULL;
}

static bool enabled(void)
{
	if (!ahead.checked) {
		const char *v = getenv("NW_PREPARE_AHEAD");
		pthread_t th;

		ahead.checked = true;
		if (v && *v)
			ahead.on = strcmp(v, "0") != 0;
		else
			ahead.on = strcmp(nw_dev_init()->backend, "host") != 0;
		for (unsigned i = 0; ahead.on && i < DEPTH; i++)
			ahead.on = pthread_create(&th, NULL, worker, NULL) == 0 && pthread_detach(th) == 0;
	}
	return ahead.on;
}

/* The same check: its name, its library's entry points and its code. */
static bool same_check(const struct nw_check *a, const struct nw_check *b)
{
	return strcmp(a->name, b->name) == 0 && a->kernels == b->kernels && a->prepare == b->prepare &&
	       a->run_prepared == b->run_prepared;
}

static bool same_request(const struct nw_trial *a, const struct nw_trial *b)
{
	return a->dtype == b->dtype && a->seed == b->seed && a->family == b->family &&
	       a->repeats == b->repeats;
}

/* Job j prepares one of the seeds that follow request req's, as nw_prepare_ahead() guesses them. */
static bool follows(const struct job *j, const struct nw_check *c, const struct nw_trial *req)
{
	struct nw_trial want = *req;

	for (unsigned k = 1; k <= DEPTH; k++) {
		want.seed = req->seed + k;
		if (same_check(&j->c, c) && same_request(&j->req, &want))
			return true;
	}
	return false;
}

bool nw_prepare_take(const struct nw_check *c, const struct nw_trial *req, struct nw_trial *t,
		     void **prepared, int *rc)
{
	struct garbage drop[DEPTH];
	struct job *hit = NULL;
	unsigned i, ndrop = 0;
	bool any = false;

	*prepared = NULL;
	if (!enabled())
		return false;
	pthread_mutex_lock(&ahead.mu);
	for (i = 0; i < DEPTH; i++) {
		struct job *j = &ahead.job[i];

		any |= j->queued;
		if (j->queued && same_check(&j->c, c) && same_request(&j->req, req))
			hit = j;
	}
	if (hit) {
		while (!hit->done)
			pthread_cond_wait(&ahead.cv, &ahead.mu);
		*t = hit->t;
		*prepared = hit->prepared;
		*rc = hit->rc;
		*hit = (struct job){0};
	}
	/* The others are kept if they are this run's next seeds, and thrown away if not. */
	for (i = 0; i < DEPTH; i++) {
		struct job *j = &ahead.job[i];

		if (!j->queued || follows(j, c, req))
			continue;
		if (j->running) { /* its worker releases it when done */
			j->queued = false;
			j->dropped = true;
			continue;
		}
		if (j->done && j->rc == 0)
			drop[ndrop++] = (struct garbage){j->c.release_prepared, j->prepared};
		*j = (struct job){0};
	}
	if (any)
		ahead.missed = !hit;
	pthread_mutex_unlock(&ahead.mu);
	for (i = 0; i < ndrop; i++)
		drop[i].release(drop[i].prepared);
	return hit != NULL;
}

void nw_prepare_ahead(const struct nw_check *c, const struct nw_trial *req)
{
	if (!c->prepare || !enabled())
		return;
	if (ahead.missed && ++ahead.since_probe % PROBE_EVERY != 0)
		return;
	pthread_mutex_lock(&ahead.mu);
	for (unsigned k = 0; k < DEPTH; k++) {
		struct nw_trial want = *req;
		struct job *free_job = NULL;
		bool have = false;

		want.seed = req->seed + k;
		for (unsigned i = 0; i < DEPTH; i++) {
			struct job *j = &ahead.job[i];

			have |= j->queued && same_check(&j->c, c) && same_request(&j->req, &want);
			if (!j->queued && !j->running && !j->dropped)
				free_job = j;
		}
		if (have)
			continue;
		if (!free_job)
			break;
		*free_job = (struct job){.c = *c, .req = want, .t = want};
		if (nw_trial_setup(c, &free_job->t)) { /* a request that cannot run: nothing to prepare */
			*free_job = (struct job){0};
			break;
		}
		free_job->queued = true;
	}
	pthread_cond_broadcast(&ahead.cv);
	pthread_mutex_unlock(&ahead.mu);
}

void nw_prepare_release(const struct nw_check *c, void *prepared)
{
	bool queued = false;

	if (enabled()) {
		pthread_mutex_lock(&ahead.mu);
		if (ahead.ngarbage < GARBAGE_MAX) {
			ahead.garbage[ahead.ngarbage++] = (struct garbage){c->release_prepared, prepared};
			queued = true;
			pthread_cond_broadcast(&ahead.cv);
		}
		pthread_mutex_unlock(&ahead.mu);
	}
	if (!queued)
		c->release_prepared(prepared);
}
