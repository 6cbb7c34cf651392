/* api: REST routes and static files. */
#include "api.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder.h"
#include "caps.h"
#include "db.h"
#include "http.h"
#include "nwd.h"
#include "poller.h"
#include "slot.h"
#include "store.h"

#define API "/api/v1"

/* A request waiting for its query. */
struct pending {
	struct http_req *r; /* NULL once the client is gone */
	struct nwd *d;
	const char *what; /* "commit" etc., for 404 messages */
	char key[64];
	bool text;   /* reply text/plain instead of JSON */
	bool health; /* merge live daemon state into the answer */
};

static const char commits_sql[] =
    "SELECT json_build_object("
    " 'repository', (SELECT name FROM repositories WHERE id = $1),"
    " 'total', (SELECT count(*) FROM commits WHERE repo_id = $1 AND reachable),"
    " 'limit', $2::int, 'offset', $3::int,"
    " 'checks', (SELECT coalesce(json_agg(json_build_object('check', name, 'dtypes', dtypes,"
    "   'deterministic', deterministic) ORDER BY name), '[]') FROM checks WHERE repo_id = $1),"
    " 'commits', coalesce((SELECT json_agg(x ORDER BY x.position DESC) FROM ("
    "   SELECT c.sha, c.title, c.author, c.email, c.committed_at, c.position, b.status AS build,"
    "    commit_verdict(c.id) AS verdict,"
    "    (SELECT coalesce(json_object_agg(k.name || '/' || s.dtype, s.verdict), '{}')"
    "     FROM stats s JOIN checks k ON k.id = s.check_id WHERE s.commit_id = c.id) AS verdicts"
    "   FROM commits c LEFT JOIN builds b ON b.commit_id = c.id"
    "   WHERE c.repo_id = $1 AND c.reachable ORDER BY c.position DESC LIMIT $2 OFFSET $3) x), '[]'))::text";

static const char commit_sql[] =
    "WITH c AS (SELECT * FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%' ORDER BY reachable DESC "
    "LIMIT 2)"
    " SELECT (SELECT count(*) FROM c), (SELECT json_build_object("
    "  'sha', c.sha, 'parent', c.parent_sha, 'title', c.title, 'author', c.author, 'email', c.email,"
    "  'committed_at', c.committed_at, 'position', c.position, 'reachable', c.reachable,"
    "  'verdict', commit_verdict(c.id),"
    "  'build', (SELECT json_build_object('status', b.status, 'duration_ms', b.duration_ms,"
    "    'runner_hash', b.runner_hash, 'host', b.host, 'started_at', b.started_at,"
    "    'log', '/api/v1/commits/' || c.sha || '/build-log') FROM builds b WHERE b.commit_id = c.id),"
    "  'checks', coalesce((SELECT json_agg(json_build_object('check', k.name, 'dtype', s.dtype,"
    "    'deterministic', k.deterministic, 'trials', s.trials, 'failures', s.failures,"
    "    'infra_errors', s.infra_errors, 'worst_ratio', s.worst_ratio, 'verdict', s.verdict,"
    "    'evidence', s.evidence,"
    "    'failing_seeds', (SELECT coalesce(json_agg(json_build_object('seed', t.seed, 'attempt', t.attempt,"
    "      'outcome', t.outcome, 'ratio', t.ratio, 'family', t.family, 'shape', t.shape, 'error', t.error,"
    "      'tensors', t.tensors, 'repro', format('numwatch-runner-%s --check %s --dtype %s --seed %s',"
    "       CASE WHEN t.slot LIKE 'gpu%' THEN 'cuda' ELSE 'host' END, k.name, t.dtype, t.seed))"
    "      ORDER BY t.seed, t.attempt), '[]') FROM (SELECT * FROM trials t WHERE t.commit_id = c.id"
    "      AND t.check_id = k.id AND t.dtype = s.dtype AND t.seed = ANY (s.failing_seeds)"
    "      AND t.outcome <> 'pass' ORDER BY t.seed, t.attempt LIMIT 100) t)"
    "   ) ORDER BY k.name, s.dtype) FROM stats s JOIN checks k ON k.id = s.check_id"
    "   WHERE s.commit_id = c.id), '[]')"
    " )::text FROM c ORDER BY c.reachable DESC LIMIT 1)";

static const char build_log_sql[] =
    "WITH c AS (SELECT * FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%' ORDER BY reachable DESC "
    "LIMIT 2)"
    " SELECT (SELECT count(*) FROM c),"
    " (SELECT b.log FROM c JOIN builds b ON b.commit_id = c.id ORDER BY c.reachable DESC LIMIT 1)";

static const char health_sql[] =
    "SELECT json_build_object("
    " 'queue', (SELECT coalesce(json_object_agg(kind || '_' || state, n), '{}') FROM"
    "   (SELECT kind, state, count(*) AS n FROM jobs WHERE state IN ('queued', 'running')"
    "    GROUP BY kind, state) q),"
    " 'commits', (SELECT count(*) FROM commits WHERE repo_id = $1),"
    " 'polled_at', (SELECT polled_at FROM repositories WHERE id = $1),"
    " 'poll_error', (SELECT poll_error FROM repositories WHERE id = $1))::text";

bool api_valid_sha(const char *s)
{
	size_t n = strlen(s);

	if (n < 4 || n > 40)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

void api_abandon(struct http_req *r)
{
	struct pending *p = http_pending(r);

	if (p)
		p->r = NULL;
}

static json_t *live_state(struct nwd *d)
{
	json_t *slots = json_array();

	for (unsigned i = 0; i < d->nslots; i++) {
		struct slot_status st;

		slot_status(d->slots[i], &st);
		json_array_append_new(slots, json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:i, s:I}",
						       "name", st.name, "gpu", st.gpu, "state", st.state,
						       "commit", st.commit, "check", st.check, "dtype",
						       st.dtype, "runner_pid", st.runner_pid, "restarts",
						       st.restarts, "trials", (json_int_t)st.trials));
	}
	return json_pack("{s:s, s:s, s:I, s:o, s:s, s:i, s:I, s:i, s:b}", "version", NW_VERSION, "node",
			 d->cfg.node_name, "uptime_s", (json_int_t)((uv_now(d->loop) - d->started_ms) / 1000),
			 "slots", slots, "building", d->builder ? builder_current(d->builder) : "",
			 "store_pending", d->store ? (int)store_pending(d->store) : 0, "trials_stored",
			 (json_int_t)(d->store ? store_written(d->store) : 0), "poll_failures",
			 d->poller ? (int)poller_failures(d->poller) : 0, "draining", d->draining);
}

static void reply_health(struct pending *p, PGresult *res, const char *error)
{
	json_t *o = live_state(p->d);
	json_t *dbinfo = NULL;
	char *body;

	if (!error && PQntuples(res) == 1)
		dbinfo = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	if (dbinfo) {
		json_object_update(o, dbinfo);
		json_decref(dbinfo);
	}
	json_object_set_new(o, "database", json_string(error ? "unavailable" : "ok"));
	json_object_set_new(o, "status", json_string(error ? "degraded" : "ok"));
	body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	http_reply(p->r, error ? 503 : 200, "application/json", body, body ? strlen(body) : 0);
}

static void on_answer(PGresult *res, const char *error, void *data)
{
	struct pending *p = data;
	const char *value;
	int col;

	if (!p->r)
		goto out;
	http_set_pending(p->r, NULL);
	if (p->health) {
		reply_health(p, res, error);
		goto out;
	}
	if (error) {
		http_reply_error(p->r, 503, "database unavailable: %s", error);
		goto out;
	}
	/* Lookups by sha answer (matches, value); lists answer (value). */
	col = PQnfields(res) - 1;
	if (PQntuples(res) != 1 || (col == 1 && strcmp(PQgetvalue(res, 0, 0), "0") == 0)) {
		http_reply_error(p->r, 404, "unknown %s '%s'", p->what, p->key);
		goto out;
	}
	if (col == 1 && strcmp(PQgetvalue(res, 0, 0), "1") != 0) {
		http_reply_error(p->r, 400, "ambiguous %s '%s': give more digits", p->what, p->key);
		goto out;
	}
	value = db_get(res, 0, col);
	if (!value) {
		http_reply_error(p->r, 404, "no %s for '%s'", p->what, p->key);
		goto out;
	}
	http_reply(p->r, 200, p->text ? "text/plain; charset=utf-8" : "application/json", strdup(value),
		   strlen(value));
out:
	free(p);
}

static void ask(struct nwd *d, struct http_req *r, const char *sql, int n, const char *const *params,
		const char *what, const char *key, bool text)
{
	struct pending *p = calloc(1, sizeof(*p));

	if (!p) {
		http_reply_error(r, 500, "out of memory");
		return;
	}
	p->r = r;
	p->d = d;
	p->what = what;
	p->text = text;
	p->health = what == NULL;
	snprintf(p->key, sizeof(p->key), "%s", key ? key : "");
	http_set_pending(r, p);
	if (db_query(d->db_http, sql, n, params, on_answer, p) < 0) {
		http_set_pending(r, NULL);
		free(p);
		http_reply_error(r, 503, "database unavailable");
	}
}

/* Parses a non-negative integer argument within [0, max]; false on junk. */
static bool arg_uint(struct http_req *r, const char *key, unsigned dflt, unsigned max, unsigned *out)
{
	const char *v = http_arg(r, key);
	char *end;
	unsigned long n;

	if (!v || !*v) {
		*out = dflt;
		return true;
	}
	n = strtoul(v, &end, 10);
	if (*end || !isdigit((unsigned char)v[0]) || n > max)
		return false;
	*out = (unsigned)n;
	return true;
}

static void get_commits(struct nwd *d, struct http_req *r)
{
	unsigned limit, offset;
	char repo[16], lim[16], off[16];
	const char *params[3] = {repo, lim, off};

	if (!arg_uint(r, "limit", 50, NW_HTTP_PAGE_MAX, &limit) || limit == 0) {
		http_reply_error(r, 400, "'limit' must be an integer from 1 to %d", NW_HTTP_PAGE_MAX);
		return;
	}
	if (!arg_uint(r, "offset", 0, 100000000, &offset)) {
		http_reply_error(r, 400, "'offset' must be a non-negative integer");
		return;
	}
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	snprintf(lim, sizeof(lim), "%u", limit);
	snprintf(off, sizeof(off), "%u", offset);
	ask(d, r, commits_sql, 3, params, "page", NULL, false);
}

static void get_commit(struct nwd *d, struct http_req *r, const char *rest)
{
	char sha[64], repo[16];
	const char *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
	const char *params[2] = {repo, sha};

	if (n >= sizeof(sha)) {
		http_reply_error(r, 400, "malformed commit id: expected 4 to 40 hex digits");
		return;
	}
	memcpy(sha, rest, n);
	sha[n] = '\0';
	if (!api_valid_sha(sha)) {
		http_reply_error(r, 400, "malformed commit id '%s': expected 4 to 40 lowercase hex digits",
				 sha);
		return;
	}
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	if (!slash) {
		ask(d, r, commit_sql, 2, params, "commit", sha, false);
		return;
	}
	if (strcmp(slash, "/build-log") == 0) {
		ask(d, r, build_log_sql, 2, params, "commit", sha, true);
		return;
	}
	http_reply_error(r, 404, "no such resource '%s'", slash);
}

static bool safe_path(const char *p)
{
	if (strstr(p, "..") || strlen(p) > 200)
		return false;
	for (; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._-/", *p))
			return false;
	return true;
}

void api_handle(struct nwd *d, struct http_req *r, const char *method, const char *url)
{
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

	if (strncmp(url, API "/", sizeof(API)) == 0 || strcmp(url, API) == 0) {
		const char *path = url + sizeof(API) - 1;

		if (!get) {
			http_reply_error(r, 405, "method %s not allowed on '%s'", method, url);
			return;
		}
		if (strcmp(path, "/health") == 0) {
			char repo[16];
			const char *params[1] = {repo};

			snprintf(repo, sizeof(repo), "%d", d->repo_id);
			ask(d, r, health_sql, 1, params, NULL, NULL, false);
		} else if (strcmp(path, "/commits") == 0) {
			get_commits(d, r);
		} else if (strncmp(path, "/commits/", 9) == 0) {
			get_commit(d, r, path + 9);
		} else {
			http_reply_error(r, 404, "no such endpoint '%s'", url);
		}
		return;
	}
	if (!get) {
		http_reply_error(r, 405, "method %s not allowed on '%s'", method, url);
		return;
	}
	if (strcmp(url, "/") == 0) {
		http_reply_file(r, "index.html");
		return;
	}
	if (!safe_path(url + 1)) {
		http_reply_error(r, 404, "no such page '%s'", url);
		return;
	}
	http_reply_file(r, url + 1);
}
