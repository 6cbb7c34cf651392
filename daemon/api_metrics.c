/* api_metrics: GET /metrics in the Prometheus text exposition format. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "db.h"
#include "http.h"
#include "nwd.h"
#include "outcome.h"
#include "slot.h"
#include "store.h"

/* Queue depth and shared counts live in the database: one query. */
static const char metrics_sql[] =
    "SELECT (SELECT coalesce(json_object_agg(kind || ':' || state, n), '{}') FROM"
    "  (SELECT kind, state, count(*) AS n FROM jobs WHERE state IN ('queued', 'running') GROUP BY 1, 2) q),"
    " (SELECT count(*) FROM bisections WHERE state <> 'done'),"
    " (SELECT count(*) FROM mail WHERE state = 'pending'),"
    /* Every daemon sharing the database (fleet_json(), sql/040). */
    " fleet_json($1, $2)::text";

struct text {
	char *buf;
	size_t len, cap;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (t->buf && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		t->cap = (t->cap + (size_t)n + 1) * 2;
		t->buf = realloc(t->buf, t->cap);
		if (!t->buf)
			return;
	}
}

/* A label value: backslash, double quote and newline escaped, as the text format wants. */
static void add_label(struct text *t, const char *v)
{
	for (const char *c = v ? v : ""; *c; c++) {
		if (*c == '\\' || *c == '"')
			add(t, "\\%c", *c);
		else if (*c == '\n')
			add(t, "\\n");
		else
			add(t, "%c", *c);
	}
}

/* The daemons sharing the database, from fleet_json(). */
static void add_daemons(struct text *t, const char *json)
{
	static const char *const help =
	    "# HELP numwatch_daemon_up Daemons sharing the database: 1 while one's heartbeat is fresh.\n"
	    "# TYPE numwatch_daemon_up gauge\n";
	json_t *all = json_loads(json, 0, NULL), *x;
	size_t i;

	if (!json_is_array(all)) {
		json_decref(all);
		return;
	}
	add(t, "%s", help);
	json_array_foreach(all, i, x)
	{
		add(t, "numwatch_daemon_up{node=\"");
		add_label(t, json_string_value(json_object_get(x, "name")));
		add(t, "\",version=\"");
		add_label(t, json_string_value(json_object_get(x, "version")));
		add(t, "\",state=\"");
		add_label(t, json_string_value(json_object_get(x, "state")));
		add(t, "\"} %d\n", json_is_true(json_object_get(x, "alive")));
	}
	add(t, "# HELP numwatch_daemon_last_seen_seconds Seconds since a daemon's last heartbeat.\n"
	       "# TYPE numwatch_daemon_last_seen_seconds gauge\n");
	json_array_foreach(all, i, x)
	{
		add(t, "numwatch_daemon_last_seen_seconds{node=\"");
		add_label(t, json_string_value(json_object_get(x, "name")));
		add(t, "\"} %g\n", json_number_value(json_object_get(x, "seen_s_ago")));
	}
	add(t, "# HELP numwatch_daemon_slots A daemon's runner slots, by kind.\n"
	       "# TYPE numwatch_daemon_slots gauge\n");
	json_array_foreach(all, i, x)
	{
		for (int k = 0; k < 2; k++) {
			add(t, "numwatch_daemon_slots{node=\"");
			add_label(t, json_string_value(json_object_get(x, "name")));
			add(t, "\",kind=\"%s\"} %lld\n", k ? "gpu" : "host",
			    (long long)json_integer_value(
				json_object_get(x, k ? "gpu_slots" : "host_slots")));
		}
	}
	add(t, "# HELP numwatch_daemon_schema_version The newest migration a daemon knows.\n"
	       "# TYPE numwatch_daemon_schema_version gauge\n");
	json_array_foreach(all, i, x)
	{
		add(t, "numwatch_daemon_schema_version{node=\"");
		add_label(t, json_string_value(json_object_get(x, "name")));
		add(t, "\"} %lld\n", (long long)json_integer_value(json_object_get(x, "schema_version")));
	}
	add(t, "# HELP numwatch_daemon_differs Whether a daemon's shared settings (config) or schema version"
	       " differ from a live daemon's.\n# TYPE numwatch_daemon_differs gauge\n");
	json_array_foreach(all, i, x)
	{
		static const char *const what[2] = {"config", "schema"};

		for (int k = 0; k < 2; k++) {
			add(t, "numwatch_daemon_differs{node=\"");
			add_label(t, json_string_value(json_object_get(x, "name")));
			add(t, "\",what=\"%s\"} %d\n", what[k],
			    json_array_size(
				json_object_get(x, k ? "schema_differs_from" : "config_differs_from")) > 0);
		}
	}
	json_decref(all);
}

static void on_metrics(struct pending *p, PGresult *res, const char *error)
{
	const struct nwd_metrics *m = &p->d->metrics;
	struct text t = {0};
	static const char *const builds[] = {"ok", "failed", "timeout", "no_runner"};
	double in_state[SLOT_STATES] = {0}, in_trial = 0, ahead = 0; /* summed over slots */

	add(&t,
	    "# HELP numwatch_up Whether numwatchd is serving.\n# TYPE numwatch_up gauge\nnumwatch_up 1\n");
	add(&t,
	    "# HELP numwatch_database_up Whether the database answered.\n# TYPE numwatch_database_up gauge\n"
	    "numwatch_database_up %d\n",
	    error ? 0 : 1);
	add(&t, "# HELP numwatch_trials_total Trials run by this daemon, by outcome.\n"
		"# TYPE numwatch_trials_total counter\n");
	for (int o = OUTCOME_PASS; o <= OUTCOME_INFRA_ERROR; o++)
		add(&t, "numwatch_trials_total{outcome=\"%s\"} %llu\n", outcome_name(o), m->trials[o]);
	add(&t,
	    "# HELP numwatch_trial_failures_total Trials that counted against their commit.\n"
	    "# TYPE numwatch_trial_failures_total counter\nnumwatch_trial_failures_total %llu\n",
	    m->trials[OUTCOME_FAIL] + m->trials[OUTCOME_CRASH] + m->trials[OUTCOME_TIMEOUT] +
		m->trials[OUTCOME_ERROR]);
	add(&t, "# HELP numwatch_runner_restarts_total Runners restarted after a crash, timeout or fault.\n"
		"# TYPE numwatch_runner_restarts_total counter\n");
	for (unsigned i = 0; i < p->d->nslots; i++) {
		struct slot_status st;

		slot_status(p->d->slots[i], &st);
		add(&t, "numwatch_runner_restarts_total{slot=\"%s\"} %u\n", st.name, st.restarts);
		for (int k = 0; k < SLOT_STATES; k++)
			in_state[k] += st.state_s[k];
		in_trial += st.trial_s;
		ahead += st.ahead_s;
	}
	add(&t, "# HELP numwatch_slot_seconds_total Time the slots spent in each state, summed over "
		"slots.\n"
		"# TYPE numwatch_slot_seconds_total counter\n");
	for (int k = 0; k < SLOT_STATES; k++)
		add(&t, "numwatch_slot_seconds_total{state=\"%s\"} %.3f\n", slot_state_name(k), in_state[k]);
	add(&t,
	    "# HELP numwatch_slot_trial_seconds_total Time the slots had a trial in flight (part of "
	    "'running'), summed over slots.\n# TYPE numwatch_slot_trial_seconds_total counter\n"
	    "numwatch_slot_trial_seconds_total %.3f\n",
	    in_trial);
	add(&t,
	    "# HELP numwatch_slot_ahead_seconds_total Time the slots had a second trial request waiting "
	    "behind the trial in flight (a runner's pipeline), summed over slots.\n"
	    "# TYPE numwatch_slot_ahead_seconds_total counter\nnumwatch_slot_ahead_seconds_total %.3f\n",
	    ahead);
	add(&t,
	    "# HELP numwatch_trials_resent_total Trial requests sent behind one that was not answered (a "
	    "crash, a timeout), sent again: never stored.\n"
	    "# TYPE numwatch_trials_resent_total counter\nnumwatch_trials_resent_total %llu\n",
	    m->trials_resent);
	add(&t,
	    "# HELP numwatch_claim_batches_total Statements that claimed jobs for the slots (each for "
	    "every slot's claim waiting then).\n"
	    "# TYPE numwatch_claim_batches_total counter\nnumwatch_claim_batches_total %llu\n"
	    "# HELP numwatch_claims_total The slots' claims sent in those statements.\n"
	    "# TYPE numwatch_claims_total counter\nnumwatch_claims_total %llu\n"
	    "# HELP numwatch_claim_seconds_total Time from a slot's claim to its answer, summed over "
	    "claims.\n# TYPE numwatch_claim_seconds_total counter\nnumwatch_claim_seconds_total %.3f\n",
	    p->d->claims.batches, p->d->claims.claims, p->d->claims.seconds);
	add(&t, "# HELP numwatch_builds_total Builds by status.\n# TYPE numwatch_builds_total counter\n");
	for (int i = 0; i < 4; i++)
		add(&t, "numwatch_builds_total{status=\"%s\"} %llu\n", builds[i], m->builds[i]);
	add(&t, "# HELP numwatch_build_duration_seconds Build durations.\n"
		"# TYPE numwatch_build_duration_seconds histogram\n");
	for (int i = 0; i < NWD_BUILD_BUCKETS; i++)
		add(&t, "numwatch_build_duration_seconds_bucket{le=\"%g\"} %llu\n", nwd_build_bucket_le[i],
		    m->build_buckets[i]);
	add(&t, "numwatch_build_duration_seconds_bucket{le=\"+Inf\"} %llu\n", m->build_count);
	add(&t, "numwatch_build_duration_seconds_sum %.3f\nnumwatch_build_duration_seconds_count %llu\n",
	    m->build_seconds, m->build_count);
	add(&t,
	    "# HELP numwatch_store_pending_batches Trial batches not yet written.\n"
	    "# TYPE numwatch_store_pending_batches gauge\nnumwatch_store_pending_batches %u\n",
	    store_pending(p->d->store));
	add(&t,
	    "# HELP numwatch_store_rows_written_total Trial rows written by the store.\n"
	    "# TYPE numwatch_store_rows_written_total counter\nnumwatch_store_rows_written_total %llu\n"
	    "# HELP numwatch_store_batches_total Batches the store wrote.\n"
	    "# TYPE numwatch_store_batches_total counter\nnumwatch_store_batches_total %llu\n",
	    store_written(p->d->store), store_batches(p->d->store));
	add(&t,
	    "# HELP numwatch_db_queries_total Statements completed on the daemon's write connections (the "
	    "store's too).\n"
	    "# TYPE numwatch_db_queries_total counter\nnumwatch_db_queries_total %llu\n",
	    (unsigned long long)db_writes());
	add(&t,
	    "# HELP numwatch_loop_idle_seconds_total Time the daemon's event loop waited for events.\n"
	    "# TYPE numwatch_loop_idle_seconds_total counter\nnumwatch_loop_idle_seconds_total %.6f\n",
	    (double)uv_metrics_idle_time(p->d->loop) / 1e9);
	add(&t,
	    "# HELP numwatch_db_backlog Queries queued or running on the daemon's write connection.\n"
	    "# TYPE numwatch_db_backlog gauge\nnumwatch_db_backlog %u\n",
	    db_backlog(p->d->db));
	if (!error && PQntuples(res) == 1) {
		json_t *q = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
		const char *key;
		json_t *v;

		add(&t, "# HELP numwatch_queue_depth Jobs queued or running, shared by all daemons.\n"
			"# TYPE numwatch_queue_depth gauge\n");
		json_object_foreach(q, key, v)
		{
			const char *colon = strchr(key, ':');

			if (colon)
				add(&t, "numwatch_queue_depth{kind=\"%.*s\",state=\"%s\"} %lld\n",
				    (int)(colon - key), key, colon + 1, (long long)json_integer_value(v));
		}
		json_decref(q);
		add(&t,
		    "# HELP numwatch_bisections_active Bisections not finished.\n"
		    "# TYPE numwatch_bisections_active gauge\nnumwatch_bisections_active %s\n",
		    PQgetvalue(res, 0, 1));
		add(&t,
		    "# HELP numwatch_mail_pending Mail waiting to be sent.\n"
		    "# TYPE numwatch_mail_pending gauge\nnumwatch_mail_pending %s\n",
		    PQgetvalue(res, 0, 2));
		add_daemons(&t, PQgetvalue(res, 0, 3));
	}
	add(&t,
	    "# HELP numwatch_read_only Whether this daemon refuses to write (the schema is newer than it "
	    "knows).\n"
	    "# TYPE numwatch_read_only gauge\nnumwatch_read_only %d\n",
	    p->d->read_only ? 1 : 0);
	if (!t.buf) {
		http_reply_error(p->r, 500, "out of memory");
		return;
	}
	http_reply(p->r, 200, "text/plain; version=0.0.4; charset=utf-8", t.buf, t.len);
}

void api_metrics(struct nwd *d, struct http_req *r)
{
	char repo[16];
	const char *params[2] = {repo, d->cfg.node_name};

	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	api_ask(d, r, metrics_sql, 2, params, NULL, NULL, NULL, on_metrics);
}
