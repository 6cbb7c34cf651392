/*
 * nwd: the daemon's shared context, owned by main.c and handed to every
 * service module (poller, builder, slots, store, http). Everything in here is
 * touched on the loop thread only.
 */
#ifndef NW_NWD_H
#define NW_NWD_H

#include <stdbool.h>
#include <uv.h>

#include "config.h"
#include "jobs.h"

struct db;
struct store;
struct poller;
struct builder;
struct slot;
struct http;
struct bisector;
struct fleet;

/* Counters for /metrics, kept by the services that do the work. */
#define NWD_BUILD_BUCKETS 8
struct nwd_metrics {
	unsigned long long trials[8];                        /* by enum outcome */
	unsigned long long builds[4];                        /* ok, failed, timeout, no_runner */
	unsigned long long build_buckets[NWD_BUILD_BUCKETS]; /* cumulative, by nwd_build_bucket_le */
	unsigned long long build_count;
	double build_seconds;
	unsigned long long runner_restarts;
	/* Trial requests sent behind one that was not answered (a pipeline), sent again: none stored. */
	unsigned long long trials_resent;
};
extern const double nwd_build_bucket_le[NWD_BUILD_BUCKETS];

struct nwd {
	uv_loop_t *loop;
	struct config cfg;
	const char *config_path;
	int repo_id;
	struct db *db;      /* scheduler and store writes */
	struct db *db_http; /* dashboard and API reads */
	/*
	 * The judge's reads (judge_input), several at once beside the writes: a
	 * verdict per job; and the slots' reads of a job's stored trials.
	 */
	struct db *db_judge;
	struct jobs_batch claims; /* the slots' claims: the batch in flight and those waiting (jobs.c) */
	struct store *store;
	struct poller *poller;
	struct builder *builder;
	struct slot *slots[NW_CONFIG_SLOTS_MAX];
	unsigned nslots;
	struct http *http;
	struct bisector *bisector;
	bool draining; /* SIGTERM: claim nothing new, finish what runs */
	/*
	 * The database's schema is newer than this binary knows (fleet.c): the
	 * daemon writes nothing more (no claim, no result, no lease) and serves
	 * only reads, until it is replaced.
	 */
	bool read_only;
	char refused[1024]; /* why it refuses to write, "" while it writes */
	struct fleet *fleet;
	struct nwd_metrics metrics;
	uint64_t started_ms;
	unsigned running_services; /* builder and slots not yet stopped after a drain */
};

/* Wakes idle slots and the builder: new work may be claimable. */
void nwd_kick(struct nwd *d);
/* Called by a service when it has stopped after a drain; main exits when all have. */
void nwd_service_stopped(struct nwd *d);
/* Builds the environment of a child: the daemon's base plus 'extra' ("K=V", NULL-terminated). Caller frees with nwd_env_free. */
char **nwd_env(const struct nwd *d, const char *const *extra);
/* The same for the build command, with [build] env between the base and 'extra'. */
char **nwd_build_env(const struct nwd *d, const char *const *extra);
/* The same for a runner (the slots' and the build's hello), with [slots] env between the base and 'extra'. */
char **nwd_runner_env(const struct nwd *d, const char *const *extra);
void nwd_env_free(char **env);
/*
 * The database's schema is newer than this binary knows: from now on the
 * daemon writes nothing (no claim, result, lease, mail or bisection step;
 * the write connection takes no query), stops its work without storing it,
 * and keeps serving reads. 'why' is logged and shown on the health page.
 */
void nwd_refuse(struct nwd *d, const char *why);
/* A probe or a verdict was stored: bisections may take their next step. */
void nwd_kick_bisector(struct nwd *d);
/* Records a finished build for /metrics. */
void nwd_count_build(struct nwd *d, const char *status, double seconds);

#endif
