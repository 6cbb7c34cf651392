/*
 * Trials prepared ahead. A check that splits its trial (nw_check.prepare:
 * the shape and the inputs from the seed, host work only) has the next
 * seed's part done on a worker thread while this trial's device work runs
 * and its answer travels: the daemon sends a part's seeds in order, and the
 * command line runs them in order. A request that is not the one prepared
 * has the prepared one thrown away; after misses the worker rests (it only
 * probes every PROBE_EVERY trials), so out-of-order work costs little.
 * The worker also frees what finished trials prepared, off the trial's path.
 *
 * By default only where a device does the rest: on the host backend the
 * trial is all host work, and a second thread would only take another core.
 * NW_PREPARE_AHEAD=0 turns it off (every trial prepared in line), =1 on
 * whatever the backend (the host's tests drive it so).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "numwatch_check.h"
#include "nw_device.h"
#include "nw_prepare.h"

#define PROBE_EVERY 16
#define GARBAGE_MAX 4

struct garbage {
	void (*release)(void *prepared);
	void *prepared;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool on, checked, started, queued, done, missed;
	unsigned since_probe;
	struct nw_check c;   /* a copy: the caller's may change meanwhile (a test's twin of a check) */
	struct nw_trial req; /* the request prepared for, as asked */
	struct nw_trial t;   /* its trial, set up and prepared */
	void *prepared;
	int rc;
	struct garbage garbage[GARBAGE_MAX]; /* trials done with, for the worker to free */
	unsigned ngarbage;
} ahead = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *worker(void *arg)
{
	struct garbage g[GARBAGE_MAX];
	unsigned n, i;
	bool job;

	(void)arg;
	pthread_mutex_lock(&ahead.mu);
	for (;;) {
		while (!ahead.ngarbage && (!ahead.queued || ahead.done))
			pthread_cond_wait(&ahead.cv, &ahead.mu);
		n = ahead.ngarbage;
		memcpy(g, ahead.garbage, n * sizeof(g[0]));
		ahead.ngarbage = 0;
		job = ahead.queued && !ahead.done;
		pthread_mutex_unlock(&ahead.mu);
		for (i = 0; i < n; i++)
			g[i].release(g[i].prepared);
		if (job)
			ahead.rc = ahead.c.prepare(&ahead.c, &ahead.t, &ahead.prepared);
		pthread_mutex_lock(&ahead.mu);
		if (job) {
			ahead.done = true;
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
		if (ahead.on)
			ahead.on = pthread_create(&th, NULL, worker, NULL) == 0 && pthread_detach(th) == 0;
	}
	return ahead.on;
}

/* Waits for the worker's job, if any, and takes it off the worker. */
static bool collect(void)
{
	bool had;

	pthread_mutex_lock(&ahead.mu);
	while (ahead.queued && !ahead.done)
		pthread_cond_wait(&ahead.cv, &ahead.mu);
	had = ahead.queued;
	ahead.queued = ahead.done = false;
	pthread_mutex_unlock(&ahead.mu);
	return had;
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

bool nw_prepare_take(const struct nw_check *c, const struct nw_trial *req, struct nw_trial *t,
		     void **prepared, int *rc)
{
	bool hit;

	*prepared = NULL;
	if (!enabled() || !collect())
		return false;
	hit = same_check(&ahead.c, c) && same_request(&ahead.req, req);
	ahead.missed = !hit;
	if (!hit) {
		if (ahead.rc == 0)
			ahead.c.release_prepared(ahead.prepared);
		return false;
	}
	*t = ahead.t;
	*prepared = ahead.prepared;
	*rc = ahead.rc;
	return true;
}

void nw_prepare_ahead(const struct nw_check *c, const struct nw_trial *req)
{
	if (!c->prepare || !enabled())
		return;
	if (ahead.missed && ++ahead.since_probe % PROBE_EVERY != 0)
		return;
	pthread_mutex_lock(&ahead.mu);
	ahead.c = *c;
	ahead.req = *req;
	ahead.t = *req;
	if (nw_trial_setup(c, &ahead.t)) { /* a request that cannot run: nothing to prepare */
		pthread_mutex_unlock(&ahead.mu);
		return;
	}
	ahead.prepared = NULL;
	ahead.queued = true;
	ahead.done = false;
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
