/* fleet: this daemon's heartbeat in the daemons table, the others', and the schema check. */
#include "fleet.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "log.h"
#include "migrate.h"
#include "nwd.h"

/* The longest between beats; a shorter lease beats at a third of it. */
#define BEAT_MAX_MS 5000
/* The shared settings' text (config_shared()). */
#define SHARED_MAX 4096
/* What the last beat found different (the log says it again only when it changes). */
#define DIFFERS_MAX 2048

/* daemon_heartbeat() (sql/040): this daemon's row; the live daemons that differ from it. */
static const char beat_sql[] =
    "SELECT * FROM daemon_heartbeat($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
/* The refusal, said where the others see it: this daemon's row, and nothing else. */
static const char refused_sql[] =
    "UPDATE daemons SET state = 'refused', note = $2, last_seen = now() WHERE name = $1";

struct fleet {
	struct nwd *d;
	uv_timer_t timer;
	bool busy, stopped;
	unsigned beat_ms;
	double started; /* wall time of the start, seconds */
	char known[1024];
	char shared[SHARED_MAX];
	char digest[17];
	char slots[NW_CONFIG_SLOTS_MAX * 8];
	unsigned host_slots, gpu_slots;
	char differs[DIFFERS_MAX];
	bool clash_logged;
};

static void beat(struct fleet *f);

static void on_timer(uv_timer_t *t)
{
	beat(t->data);
}

/* A third of the lease (a reload may change it), at most BEAT_MAX_MS. */
static unsigned beat_ms(const struct nwd *d)
{
	return d->cfg.lease_s * 1000 / 3 < BEAT_MAX_MS ? d->cfg.lease_s * 1000 / 3 : BEAT_MAX_MS;
}

static void done(struct fleet *f)
{
	f->busy = false;
	f->beat_ms = beat_ms(f->d);
	if (!f->stopped && !f->d->read_only)
		uv_timer_start(&f->timer, on_timer, f->beat_ms, 0);
}

/* What differs between this daemon and one row of daemon_heartbeat(): its settings, its schema, or both. */
static void describe(struct fleet *f, PGresult *res, int row, char *out, size_t len)
{
	char keys[512];
	int schema = (int)db_get_ll(res, row, 2, 0);

	config_shared_diff(f->shared, db_get(res, row, 3) ? db_get(res, row, 3) : "", keys, sizeof(keys));
	snprintf(out, len,
		 "daemon '%s' (numwatchd %s, schema %03d) differs from this one (numwatchd %s, schema "
		 "%03d):%s%s%s%s",
		 PQgetvalue(res, row, 0), PQgetvalue(res, row, 1), schema, NW_VERSION, migrate_latest(),
		 keys[0] ? " settings " : "", keys, keys[0] && schema != migrate_latest() ? ";" : "",
		 schema != migrate_latest() ? " schema version" : "");
}

static void on_beat(PGresult *res, const char *error, void *data)
{
	struct fleet *f = data;
	char now[DIFFERS_MAX] = "", line[1024];
	size_t n = 0;

	if (error) {
		log_warn("fleet: heartbeat failed: %s", error);
		done(f);
		return;
	}
	for (int i = 0; i < PQntuples(res); i++) {
		if (strcmp(PQgetvalue(res, i, 4), "t") == 0) {
			if (!f->clash_logged)
				log_error(
				    "fleet: another daemon runs as '%s' (numwatchd %s): node_name must be "
				    "unique"
				    " across the daemons sharing a database, or each takes the other's jobs",
				    f->d->cfg.node_name, PQgetvalue(res, i, 1));
			f->clash_logged = true;
			continue;
		}
		describe(f, res, i, line, sizeof(line));
		if (n < sizeof(now)) {
			int w = snprintf(now + n, sizeof(now) - n, "%s%s", n ? "\n" : "", line);

			if (w > 0)
				n += (size_t)w;
		}
	}
	if (strcmp(now, f->differs) != 0) {
		if (now[0]) {
			for (char *l = now, *nl; l && *l; l = nl ? nl + 1 : NULL) {
				nl = strchr(l, '\n');
				log_warn("fleet: %.*s: the daemons' verdicts are not comparable; give every "
					 "daemon the"
					 " same settings and numwatchd",
					 nl ? (int)(nl - l) : (int)strlen(l), l);
			}
		} else {
			log_info("fleet: the daemons sharing the database agree again");
		}
		snprintf(f->differs, sizeof(f->differs), "%s", now);
	}
	done(f);
}

static void send_beat(struct fleet *f, const char *state, db_cb cb)
{
	const struct config *cfg = &f->d->cfg;
	char repo[16], schema[16], host[16], gpu[16], pid[16], beat_s[16], started[32];
	const char *params[14] = {cfg->node_name, repo,   NW_VERSION, schema,          f->digest, f->shared,
				  host,           gpu,    f->slots,   cfg->public_url, pid,       beat_s,
				  state,          started};

	/* Settings change on SIGHUP: the digest is taken again at every beat. */
	if (config_shared(cfg, f->shared, sizeof(f->shared)) < 0)
		log_warn("fleet: the shared settings are too long to compare; comparing their start");
	config_digest(f->shared, f->digest);
	snprintf(repo, sizeof(repo), "%d", f->d->repo_id);
	snprintf(schema, sizeof(schema), "%d", migrate_latest());
	snprintf(host, sizeof(host), "%u", f->host_slots);
	snprintf(gpu, sizeof(gpu), "%u", f->gpu_slots);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	snprintf(beat_s, sizeof(beat_s), "%u", (f->beat_ms + 999) / 1000);
	snprintf(started, sizeof(started), "%.6f", f->started);
	if (db_query(f->d->db, beat_sql, 14, params, cb, f) < 0 && cb)
		cb(NULL, "cannot queue the heartbeat", f);
}

static void on_refused_noted(PGresult *res, const char *error, void *data)
{
	if (error)
		log_warn("fleet: cannot say in the daemons table that this daemon refuses to write: %s",
			 error);
}

static void on_schema(PGresult *res, const char *error, void *data)
{
	struct fleet *f = data;
	char why[1024];

	if (error) {
		log_warn("fleet: cannot read the schema's migrations: %s", error);
		done(f);
		return;
	}
	if (PQgetisnull(res, 0, 0)) {
		send_beat(f, f->d->draining ? "draining" : "running", on_beat);
		return;
	}
	snprintf(why, sizeof(why), MIGRATE_NEWER_FMT, NW_VERSION, PQgetvalue(res, 0, 0), migrate_latest());
	nwd_refuse(f->d, why);
	/* Through the read connections: the write connection takes nothing more. */
	{
		const char *params[2] = {f->d->cfg.node_name, why};

		if (db_query(f->d->db_http, refused_sql, 2, params, on_refused_noted, NULL) < 0)
			on_refused_noted(NULL, "cannot queue the query", NULL);
	}
	done(f);
}

static void beat(struct fleet *f)
{
	const char *params[1] = {f->known};

	if (f->busy || f->stopped || f->d->read_only)
		return;
	uv_timer_stop(&f->timer);
	f->busy = true;
	if (db_query(f->d->db, MIGRATE_UNKNOWN_SQL, 1, params, on_schema, f) < 0)
		done(f);
}

void fleet_beat(struct fleet *f)
{
	beat(f);
}

void fleet_stop(struct fleet *f)
{
	if (f->stopped || f->d->read_only)
		return;
	f->stopped = true;
	uv_timer_stop(&f->timer);
	send_beat(f, "stopped", NULL);
}

int fleet_start(struct nwd *d, struct fleet **out)
{
	struct fleet *f = calloc(1, sizeof(*f));
	const struct config *cfg = &d->cfg;
	size_t n = 0;

	if (!f)
		return -ENOMEM;
	f->d = d;
	f->beat_ms = beat_ms(d);
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts); /* wall time: stored, and told apart from another start */
		f->started = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	}
	if (migrate_known(f->known, sizeof(f->known)) < 0) {
		free(f);
		return -ENOSPC;
	}
	for (unsigned i = 0; i < cfg->nslots; i++) {
		if (cfg->slots[i].gpu >= 0)
			f->gpu_slots++;
		else
			f->host_slots++;
		n += (size_t)snprintf(f->slots + n, sizeof(f->slots) - n, "%s%s", i ? "," : "",
				      cfg->slots[i].name);
		if (n >= sizeof(f->slots))
			break;
	}
	uv_timer_init(d->loop, &f->timer);
	f->timer.data = f;
	*out = f;
	beat(f);
	return 0;
}
