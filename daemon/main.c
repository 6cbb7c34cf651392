/*
 * numwatchd: the daemon. Loads the configuration, applies migrations, then
 * runs every service (poller, builder, runner slots, store, HTTP) on one
 * libuv loop until SIGTERM drains it.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>
#ifdef NW_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "bisector.h"
#include "builder.h"
#include "caps.h"
#include "db.h"
#include "fleet.h"
#include "gpus.h"
#include "http.h"
#include "jobs.h"
#include "log.h"
#include "mailer.h"
#include "migrate.h"
#include "nwd.h"
#include "poller.h"
#include "proc.h"
#include "slot.h"
#include "store.h"

/* How long a drain may take before the daemon exits anyway. */
#define DRAIN_DEADLINE_MS (60 * 1000)
/* How long start-up waits for the database before giving up. */
#define DB_WAIT_S 60
/*
 * The exit status when the database's schema is newer than this binary
 * knows: restarting cannot help (the unit's RestartPreventExitStatus).
 */
#define EXIT_SCHEMA_NEWER 3

static struct nwd daemon_ctx;
static uv_signal_t sig_term, sig_int, sig_hup;
static uv_timer_t drain_timer, watchdog_timer;
static unsigned term_count;
/* mailer.c: the culprit emails (its enqueue API needs only the struct nwd). */
static struct mailer *mailer;

static void notify(const char *state)
{
#ifdef NW_HAVE_SYSTEMD
	sd_notify(0, state);
#else
	(void)state;
#endif
}

static void close_walk(uv_handle_t *h, void *arg)
{
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* Everything has stopped and the store is flushed: close the connections and leave the loop. */
static void finish_exit(void)
{
	struct nwd *d = &daemon_ctx;

	uv_timer_stop(&drain_timer);
	/* Closing the read connections answers the requests still waiting on them. */
	db_close(d->db_http);
	if (d->http)
		http_stop(d->http);
	d->http = NULL;
	db_close(d->db);
	db_close(d->db_judge);
	store_close(d->store);
	uv_stop(d->loop);
}

static void on_drain_check(uv_timer_t *t)
{
	struct nwd *d = &daemon_ctx;
	uint64_t waited = uv_now(d->loop) - (uint64_t)(uintptr_t)t->data;

	if (d->running_services == 0) {
		store_flush(d->store);
		/* The other daemons see it stopped, not lost (written before the connection is idle). */
		if (d->fleet)
			fleet_stop(d->fleet);
	}
	if ((d->running_services == 0 && store_pending(d->store) == 0 && db_idle(d->db)) ||
	    waited > DRAIN_DEADLINE_MS) {
		if (waited > DRAIN_DEADLINE_MS)
			log_warn("drain: deadline passed with %u services running, %u batches unwritten",
				 d->running_services, store_pending(d->store));
		finish_exit();
	}
}

/* Stops every service: no new claim; what runs finishes (drain) or is dropped (refusal). */
static void stop_services(struct nwd *d)
{
	if (d->poller)
		poller_stop(d->poller);
	if (d->bisector)
		bisector_stop(d->bisector);
	d->running_services = d->nslots + 1;
	builder_drain(d->builder);
	for (unsigned i = 0; i < d->nslots; i++)
		slot_drain(d->slots[i]);
	/* mailer.c: a send in flight finishes (within [mail] timeout) and its result is stored. */
	if (mailer) {
		d->running_services++;
		mailer_drain(mailer);
	}
}

void nwd_refuse(struct nwd *d, const char *why)
{
	if (d->read_only)
		return;
	d->read_only = true;
	snprintf(d->refused, sizeof(d->refused), "%s", why);
	log_error("schema: %s; this daemon writes nothing from now on (it keeps serving reads: stop it, and"
		  " start the newer numwatchd in its place)",
		  why);
	notify("STATUS=refusing to write: the database's schema is newer than this numwatchd");
	/* Results in hand are dropped, not written: the schema they would go into is not this binary's. */
	store_discard(d->store);
	db_refuse(d->db, "the daemon refuses to write (its schema is older than the database's)");
	d->draining = true;
	stop_services(d);
}

static void drain(struct nwd *d)
{
	d->draining = true;
	notify("STOPPING=1");
	log_info("draining: finishing the trials in flight");
	stop_services(d);
	if (d->fleet)
		fleet_beat(d->fleet);
	drain_timer.data = (void *)(uintptr_t)uv_now(d->loop);
	uv_timer_start(&drain_timer, on_drain_check, 20, 20);
}

static void on_term(uv_signal_t *s, int signum)
{
	if (++term_count > 1) {
		log_warn("second signal: exiting at once");
		exit(1);
	}
	/* A daemon that refuses to write has nothing to finish or hand back. */
	if (daemon_ctx.read_only) {
		log_info("stopping (it refused to write)");
		notify("STOPPING=1");
		finish_exit();
		return;
	}
	drain(&daemon_ctx);
}

/* Options that only a restart changes keep their running values. */
static void keep_restart_only(struct config *next, struct config *cur)
{
#define KEEP(field)                                                                                          \
	do {                                                                                                 \
		char *t = next->field;                                                                       \
		next->field = cur->field;                                                                    \
		cur->field = t;                                                                              \
	} while (0)
	KEEP(state_dir);
	KEEP(database);
	KEEP(node_name);
	KEEP(repo_name);
	KEEP(repo_url);
	KEEP(repo_branch);
	KEEP(http_address);
	KEEP(web_root);
	KEEP(public_url);
#undef KEEP
	next->http_port = cur->http_port;
	next->http_threads = cur->http_threads;
	memcpy(next->slots, cur->slots, sizeof(cur->slots));
	next->nslots = cur->nslots;
	next->slots_gpus = cur->slots_gpus;
	next->store_connections = cur->store_connections;
}

/*
 * A reload reads files (the configuration, [mail] password_file) on the
 * thread pool, never on the loop, one reload at a time (config_load is not
 * thread-safe); a SIGHUP during one asks for another after it.
 */
static struct {
	uv_work_t req;
	struct config next;
	char err[1024];
	int rc;
	bool busy, again;
} reload;

static void reload_read(uv_work_t *w)
{
	reload.rc = config_load(&reload.next, daemon_ctx.config_path, reload.err, sizeof(reload.err));
}

static void start_reload(void);

static void reload_done(uv_work_t *w, int status)
{
	struct nwd *d = &daemon_ctx;

	reload.busy = false;
	if (status < 0 || reload.rc < 0) {
		log_error("reload: keeping the running configuration: %s",
			  status < 0 ? uv_strerror(status) : reload.err);
	} else {
		keep_restart_only(&reload.next, &d->cfg);
		config_release(&d->cfg);
		d->cfg = reload.next;
		log_info("reload: configuration reloaded from '%s'", d->config_path);
		db_set_timeout(d->db, d->cfg.query_timeout_s * 1000);
		db_set_timeout(d->db_http, d->cfg.http_query_timeout_s * 1000);
		db_set_timeout(d->db_judge, d->cfg.query_timeout_s * 1000);
		if (d->poller)
			poller_poll_now(d->poller);
	}
	memset(&reload.next, 0, sizeof(reload.next));
	if (reload.again) {
		reload.again = false;
		start_reload();
		return;
	}
	notify("READY=1");
}

static void start_reload(void)
{
	int rc;

	reload.busy = true;
	rc = uv_queue_work(daemon_ctx.loop, &reload.req, reload_read, reload_done);
	if (rc < 0) {
		reload.busy = false;
		log_error("reload: keeping the running configuration: %s", uv_strerror(rc));
		notify("READY=1");
	}
}

static void on_hup(uv_signal_t *s, int signum)
{
	if (reload.busy) {
		reload.again = true;
		return;
	}
	notify("RELOADING=1");
	start_reload();
}

static void on_watchdog(uv_timer_t *t)
{
	notify("WATCHDOG=1");
}

static int make_dirs(const char *state_dir)
{
	const char *subs[] = {"", "/builds", "/worktrees"};
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", state_dir, subs[i]);
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			log_error("cannot create '%s': %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static int migrate_with_wait(const struct config *cfg)
{
	char err[1024];
	unsigned applied = 0;

	for (int waited = 0;; waited++) {
		int rc = migrate_run(cfg->database, &applied, err, sizeof(err));

		if (rc == 0)
			break;
		if (rc == MIGRATE_NEWER) {
			log_error("schema: %s", err);
			return MIGRATE_NEWER;
		}
		if (waited >= DB_WAIT_S || !strstr(err, "cannot connect")) {
			log_error("%s", err);
			return -1;
		}
		if (waited == 0)
			log_warn("waiting for the database: %s", err);
		sleep(1); /* before the loop runs: nothing else to serve yet */
	}
	if (applied)
		log_info("database: applied %u migrations", applied);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: numwatchd --config FILE [--migrate | --check-config] [--verbose]\n"
		   "       numwatchd --version\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"migrate", no_argument, NULL, 'm'},
	    {"check-config", no_argument, NULL, 'k'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct nwd *d = &daemon_ctx;
	bool only_migrate = false, only_check = false;
	char err[1024];
	int c, rc;
	uint64_t watchdog_us = 0;

	while ((c = getopt_long(argc, argv, "c:mkvVh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			d->config_path = optarg;
			break;
		case 'm':
			only_migrate = true;
			break;
		case 'k':
			only_check = true;
			break;
		case 'v':
			log_set_level(LOG_LEVEL_DEBUG);
			break;
		case 'V':
			printf("numwatchd %s\n", NW_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!d->config_path || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (config_load(&d->cfg, d->config_path, err, sizeof(err)) < 0 ||
	    gpus_check_slots(&d->cfg, GPUS_PROC_DIR, err, sizeof(err)) < 0) {
		fprintf(stderr, "numwatchd: %s\n", err);
		return 2;
	}
	if (only_check) {
		printf("%s: ok\n", d->config_path);
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	rc = migrate_with_wait(&d->cfg);
	if (rc == MIGRATE_NEWER)
		return EXIT_SCHEMA_NEWER;
	if (rc < 0)
		return 1;
	if (only_migrate)
		return 0;
	if (make_dirs(d->cfg.state_dir) < 0)
		return 1;
	/* Before any child: what a previous daemon left is killed, and the reaper guards ours. */
	if (proc_init(d->cfg.state_dir) < 0)
		log_error("children will die with the daemon, but not their own children");
	d->repo_id = migrate_repository(d->cfg.database, d->cfg.repo_name, d->cfg.repo_url,
					d->cfg.repo_branch, err, sizeof(err));
	if (d->repo_id < 0) {
		log_error("%s", err);
		return 1;
	}

	d->loop = uv_default_loop();
	/* The loop's idle time goes to /metrics: how busy the daemon's one thread is. */
	uv_loop_configure(d->loop, UV_METRICS_IDLE_TIME);
	d->started_ms = uv_now(d->loop);
	if (db_open(d->loop, d->cfg.database, "main", d->cfg.query_timeout_s * 1000, &d->db) < 0 ||
	    db_open_pool(d->loop, d->cfg.database, "http", NW_HTTP_DB_POOL,
			 d->cfg.http_query_timeout_s * 1000, &d->db_http) < 0 ||
	    db_open_pool(d->loop, d->cfg.database, "judge", config_judge_connections(d->cfg.nslots),
			 d->cfg.query_timeout_s * 1000, &d->db_judge) < 0 ||
	    store_init(d->loop, d->cfg.database, d->cfg.node_name, d->cfg.query_timeout_s * 1000,
		       d->cfg.store_connections, &d->store) < 0) {
		log_error("out of memory");
		return 1;
	}
	rc = http_start(d, &d->http);
	if (rc < 0)
		return 1;
	if (fleet_start(d, &d->fleet) < 0) {
		log_error("out of memory");
		return 1;
	}
	jobs_requeue_own(d);
	if (poller_start(d, &d->poller) < 0 || builder_start(d, &d->builder) < 0)
		return 1;
	for (unsigned i = 0; i < d->cfg.nslots; i++) {
		if (slot_start(d, &d->cfg.slots[i], &d->slots[i]) < 0)
			return 1;
		d->nslots++;
	}
	if (bisector_start(d, &d->bisector) < 0)
		return 1;
	/* mailer.c: after the slots, as the other services. */
	if (mailer_start(d, &mailer) < 0)
		return 1;
	uv_signal_init(d->loop, &sig_term);
	uv_signal_init(d->loop, &sig_int);
	uv_signal_init(d->loop, &sig_hup);
	uv_signal_start(&sig_term, on_term, SIGTERM);
	uv_signal_start(&sig_int, on_term, SIGINT);
	uv_signal_start(&sig_hup, on_hup, SIGHUP);
	uv_timer_init(d->loop, &drain_timer);
	uv_timer_init(d->loop, &watchdog_timer);
#ifdef NW_HAVE_SYSTEMD
	if (sd_watchdog_enabled(0, &watchdog_us) > 0)
		uv_timer_start(&watchdog_timer, on_watchdog, watchdog_us / 2000, watchdog_us / 2000);
#endif
	(void)watchdog_us;
	log_info("numwatchd %s: watching %s (%s) with %u slots, %u store connections; http://%s:%u/",
		 NW_VERSION, d->cfg.repo_url, d->cfg.repo_branch, d->nslots, store_connections(d->store),
		 d->cfg.http_address, http_port(d->http));
	notify("READY=1");

	uv_run(d->loop, UV_RUN_DEFAULT);

	/* Close whatever handles remain (finished children, timers) and let their callbacks run. */
	uv_walk(d->loop, close_walk, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	log_info("stopped");
	config_release(&d->cfg);
	return 0;
}
