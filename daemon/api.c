/* api: REST routes and static files. */
#include "api.h"

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "api_internal.h"
#include "builder.h"
#include "caps.h"
#include "db.h"
#include "http.h"
#include "nwd.h"
#include "outcome.h"
#include "poller.h"
#include "queries.h"
#include "slot.h"
#include "store.h"

#define API "/api/v1"

#define commits_sql nwq_api_commits /* sql/queries/api_commits.sql */

/* Cached (see cached_ask): the snapshot it read under comes first. */
#define commit_sql nwq_api_commit /* sql/queries/api_commit.sql */

static const char build_log_sql[] =
    "WITH c AS (SELECT * FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%' ORDER BY reachable DESC "
    "LIMIT 2)"
    " SELECT (SELECT count(*) FROM c),"
    " (SELECT b.log FROM c JOIN builds b ON b.commit_id = c.id ORDER BY c.reachable DESC LIMIT 1)";

#define health_sql nwq_api_health /* sql/queries/api_health.sql */

#define checks_sql nwq_api_checks /* sql/queries/api_checks.sql */

/* A check's history: per commit x dtype, its verdict and figures; regressions and culprits to mark. */
#define check_sql nwq_api_check /* sql/queries/api_check.sql */

#define trials_sql nwq_api_trials /* sql/queries/api_trials.sql */

#define bisections_sql nwq_api_bisections /* sql/queries/api_bisections.sql */

#define bisection_sql nwq_api_bisection /* sql/queries/api_bisection.sql */

/* Regressions: the list ($2 state, $3 check, $4 dtype, '' for any; $5 limit, $6 offset), and one. */
static const char regressions_sql[] = "SELECT api_regressions($1, $2, $3, $4, $5, $6)::text";
static const char regression_sql[] =
    "SELECT (SELECT count(*) FROM regressions WHERE repo_id = $1 AND id = $2::bigint),"
    " api_regression($1, $2::bigint, $3, $4)::text";

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
	json_object_set_new(o, "status",
			    json_string(p->d->read_only ? "read_only"
					: error         ? "degraded"
							: "ok"));
	json_object_set_new(o, "read_only", p->d->read_only ? json_string(p->d->refused) : json_null());
	body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	http_reply(p->r, error || p->d->read_only ? 503 : 200, "application/json", body,
		   body ? strlen(body) : 0);
}

/* A failed query: bad input that PostgreSQL refused (SQLSTATE class 22) is the client's fault. */
static void reply_db_error(struct http_req *r, PGresult *res, const char *error)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if (state && strncmp(state, "22", 2) == 0)
		http_reply_error(r, 400, "invalid value: %s", msg ? msg : error);
	else
		http_reply_error(r, 503, "database unavailable: %s", error);
}

/*
 * What a lookup answered, from column 'first' on (a cached query's answer
 * starts with its snapshot): lookups answer (matches, value); lists answer
 * (value).
 */
enum answer { ANSWER_VALUE, ANSWER_DB_ERROR, ANSWER_UNKNOWN, ANSWER_AMBIGUOUS, ANSWER_NO_VALUE };

static enum answer classify(PGresult *res, const char *error, int first, const char **value)
{
	int col;

	if (error)
		return ANSWER_DB_ERROR;
	col = PQnfields(res) - 1;
	if (PQntuples(res) != 1 || col < first ||
	    (col == first + 1 && strcmp(PQgetvalue(res, 0, first), "0") == 0))
		return ANSWER_UNKNOWN;
	if (col == first + 1 && strcmp(PQgetvalue(res, 0, first), "1") != 0)
		return ANSWER_AMBIGUOUS;
	*value = db_get(res, 0, col);
	return *value ? ANSWER_VALUE : ANSWER_NO_VALUE;
}

/* The default reply: the value PostgreSQL built, passed through, or the error. */
static void reply_answer(struct pending *p, PGresult *res, const char *error, int first)
{
	const char *value = NULL;

	switch (classify(res, error, first, &value)) {
	case ANSWER_VALUE:
		http_reply(p->r, 200, p->text ? "text/plain; charset=utf-8" : "application/json",
			   strdup(value), strlen(value));
		break;
	case ANSWER_DB_ERROR:
		reply_db_error(p->r, res, error);
		break;
	case ANSWER_UNKNOWN:
		http_reply_error(p->r, 404, "unknown %s '%s'", p->what, p->key);
		break;
	case ANSWER_AMBIGUOUS:
		http_reply_error(p->r, 400, "ambiguous %s '%s': give more digits", p->what, p->key);
		break;
	case ANSWER_NO_VALUE:
		http_reply_error(p->r, 404, "no %s for '%s'", p->what, p->key);
		break;
	}
}

static void on_answer(PGresult *res, const char *error, void *data)
{
	struct pending *p = data;

	/* A continuation may have written (api_write.c): cached answers read before are stale. */
	if (p->then)
		db_count_write();
	if (!p->r)
		goto out;
	http_set_pending(p->r, NULL);
	if (p->then)
		p->then(p, res, error);
	else
		reply_answer(p, res, error, 0);
out:
	free(p->body);
	free(p);
}

static struct pending *send_ask(struct nwd *d, struct http_req *r, const char *sql, int n,
				const char *const *params, const char *what, const char *key,
				api_then_fn then, bool text, char *body)
{
	struct pending *p = calloc(1, sizeof(*p));

	if (!p) {
		free(body);
		http_reply_error(r, 500, "out of memory");
		return NULL;
	}
	p->body = body;
	p->r = r;
	p->d = d;
	p->what = what;
	p->then = then;
	p->text = text; /* set before the query is queued: a connection lost while sending answers at once */
	snprintf(p->key, sizeof(p->key), "%s", key ? key : "");
	http_set_pending(r, p);
	if (db_query(d->db_http, sql, n, params, on_answer, p) < 0) {
		http_set_pending(r, NULL);
		free(p->body);
		free(p);
		http_reply_error(r, 503, "database unavailable");
		return NULL;
	}
	return p;
}

/*
 * The pending request may be answered (and freed) before this returns, when
 * the connection drops while sending: callers never touch it afterwards, so
 * everything it needs (key, body) goes in here.
 */
void api_ask(struct nwd *d, struct http_req *r, const char *sql, int n, const char *const *params,
	     const char *what, const char *key, char *body, api_then_fn then)
{
	send_ask(d, r, sql, n, params, what, key, then, false, body);
}

static void ask(struct nwd *d, struct http_req *r, const char *sql, int n, const char *const *params,
		const char *what, const char *key, bool text)
{
	send_ask(d, r, sql, n, params, what, key, NULL, text, NULL);
}

/*
 * The response cache: answers that PostgreSQL built for GET requests, by
 * request path, each with the snapshot it was read under (a cached query
 * answers pg_current_snapshot() first, then as ask() expects). An entry is served without asking
 * the database while no write of this daemon completed since its query (or
 * its last check) was sent (db_writes) and for NW_API_CACHE_TTL_MS after
 * that. Past either, a check asks for the current snapshot: if no
 * transaction completed since the entry's, the database is as the entry saw
 * it (an idle claim that changed nothing takes no transaction id) and the
 * entry is served again as if just read; otherwise it is read again. An entry
 * in the last quarter of its life is checked while it is still served.
 * Requests that find the entry's query or check in flight, sent after the
 * last write, wait for it. At most NW_API_CACHE_ENTRIES entries and
 * NW_API_CACHE_BYTES; the least recently used goes first.
 *
 * The loop alone changes the cache; libmicrohttpd's threads serve fresh
 * entries themselves (api_reply_cached), reading under 'lock', which the
 * loop holds while it adds, drops or refreshes an entry. The recency list
 * is the loop's alone: an entry served by the threads is moved up when the
 * loop next serves it (at the latest when it is checked, once a TTL).
 */
#define CACHE_KEY_MAX      96
#define CACHE_SNAPSHOT_MAX 128 /* a longer snapshot (many transactions open) is never checked */
#define CACHE_PARAMS_MAX   4
#define CACHE_BUCKETS      2048 /* a power of two, at least NW_API_CACHE_ENTRIES */
#define CACHE_TTL_NS       ((uint64_t)NW_API_CACHE_TTL_MS * 1000000)
#define CACHE_CHECK_NS     (CACHE_TTL_NS * 3 / 4)
static const char snapshot_sql[] = "SELECT pg_current_snapshot()::text";

struct cache_entry {
	struct cache_entry *hnext;       /* hash chain */
	struct cache_entry *prev, *next; /* recency list, most recent first */
	char key[CACHE_KEY_MAX];
	char snapshot[CACHE_SNAPSHOT_MAX];
	uint64_t writes, sent_ns; /* db_writes() and the time when its query or last check was sent */
	struct http_body *body;
};

/* A request waiting for a cache fill ('p' first: api_abandon clears p.r through http_pending). */
struct fill_req {
	struct pending p;
	struct fill_req *next;
};

/* A query (or a check of an entry's snapshot) in flight for a key, and the requests waiting for it. */
struct fill {
	struct fill *next;
	struct nwd *d;
	bool check;
	char key[CACHE_KEY_MAX];
	char snapshot[CACHE_SNAPSHOT_MAX]; /* a check: the entry's snapshot */
	uint64_t writes, sent_ns;
	struct fill_req *reqs;
	const char *sql; /* the cached query, to read again after a failed check */
	int n;
	char params[CACHE_PARAMS_MAX][CACHE_KEY_MAX];
};

static struct {
	pthread_mutex_t lock;
	struct cache_entry *buckets[CACHE_BUCKETS];
	struct cache_entry *head, *tail;
	unsigned entries;
	size_t bytes;
	struct fill *fills;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct cache_entry **cache_slot(const char *key)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const unsigned char *c = (const unsigned char *)key; *c; c++)
		h = (h ^ *c) * 16777619u;
	return &cache.buckets[h & (CACHE_BUCKETS - 1)];
}

static void cache_unlink_recency(struct cache_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		cache.head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		cache.tail = e->prev;
	e->prev = e->next = NULL;
}

static void cache_push_recency(struct cache_entry *e)
{
	e->next = cache.head;
	if (cache.head)
		cache.head->prev = e;
	cache.head = e;
	if (!cache.tail)
		cache.tail = e;
}

static void cache_drop(struct cache_entry *e)
{
	struct cache_entry **at = cache_slot(e->key);

	while (*at != e)
		at = &(*at)->hnext;
	*at = e->hnext;
	cache_unlink_recency(e);
	cache.entries--;
	cache.bytes -= http_body_len(e->body);
	http_body_unref(e->body);
	free(e);
}

static struct cache_entry *cache_find(const char *key)
{
	struct cache_entry *e = *cache_slot(key);

	while (e && strcmp(e->key, key) != 0)
		e = e->hnext;
	return e;
}

/* Whether 'e' may be served without asking the database. */
static bool cache_fresh(const struct cache_entry *e, uint64_t writes, uint64_t now)
{
	return e && e->writes == writes && now - e->sent_ns < CACHE_TTL_NS;
}

/* Keeps 'body' (a reference of its own) as the answer for a fill's key, replacing any older one. */
static void cache_put(const struct fill *f, const char *snapshot, struct http_body *body)
{
	size_t len = http_body_len(body);
	struct cache_entry *e = cache_find(f->key), **slot;

	pthread_mutex_lock(&cache.lock);
	if (e)
		cache_drop(e);
	while (len <= NW_API_CACHE_BYTES / 16 && cache.tail &&
	       (cache.entries >= NW_API_CACHE_ENTRIES || cache.bytes + len > NW_API_CACHE_BYTES))
		cache_drop(cache.tail);
	e = len <= NW_API_CACHE_BYTES / 16 ? calloc(1, sizeof(*e)) : NULL;
	if (!e) {
		pthread_mutex_unlock(&cache.lock);
		return;
	}
	snprintf(e->key, sizeof(e->key), "%s", f->key);
	if (snapshot && strlen(snapshot) < sizeof(e->snapshot))
		snprintf(e->snapshot, sizeof(e->snapshot), "%s", snapshot);
	e->writes = f->writes;
	e->sent_ns = f->sent_ns;
	http_body_ref(body);
	e->body = body;
	slot = cache_slot(e->key);
	e->hnext = *slot;
	*slot = e;
	cache_push_recency(e);
	cache.entries++;
	cache.bytes += len;
	pthread_mutex_unlock(&cache.lock);
}

/* The query or check in flight for 'key' that a request sent now may wait for, or NULL. */
static struct fill *fill_find(const char *key, uint64_t writes, uint64_t now)
{
	for (struct fill *f = cache.fills; f; f = f->next)
		if (f->writes == writes && now - f->sent_ns < CACHE_TTL_NS && strcmp(f->key, key) == 0)
			return f;
	return NULL;
}

static void fill_unlink(struct fill *f)
{
	struct fill **at = &cache.fills;

	while (*at != f)
		at = &(*at)->next;
	*at = f->next;
}

/* Answers the requests of 'f' with 'body', or else from the query's result. */
static void fill_answer(struct fill *f, struct http_body *body, PGresult *res, const char *error)
{
	while (f->reqs) {
		struct fill_req *q = f->reqs;

		f->reqs = q->next;
		if (q->p.r) {
			http_set_pending(q->p.r, NULL);
			if (body)
				http_reply_body(q->p.r, 200, body);
			else if (res || error)
				reply_answer(&q->p, res, error, 1);
			else
				http_reply_error(q->p.r, 503, "database unavailable");
		}
		free(q);
	}
}

static void on_filled(PGresult *res, const char *error, void *data);
static void on_checked(PGresult *res, const char *error, void *data);

/*
 * Sends the query for f->key (or, with 'e', a check of e's snapshot) for the
 * requests in f->reqs; false, with its requests not answered yet, if it
 * could not be queued.
 */
static bool fill_send(struct fill *f, const struct cache_entry *e)
{
	const char *params[CACHE_PARAMS_MAX];

	f->check = e != NULL;
	if (e)
		snprintf(f->snapshot, sizeof(f->snapshot), "%s", e->snapshot);
	f->writes = db_writes();
	f->sent_ns = uv_hrtime();
	for (int i = 0; i < f->n; i++)
		params[i] = f->params[i];
	f->next = cache.fills;
	cache.fills = f;
	for (struct fill_req *q = f->reqs; q; q = q->next)
		if (q->p.r)
			http_set_pending(q->p.r, &q->p);
	/* Linked first: a connection lost while sending answers at once. */
	if (f->check ? db_query(f->d->db_http, snapshot_sql, 0, NULL, on_checked, f) < 0
		     : db_query(f->d->db_http, f->sql, f->n, params, on_filled, f) < 0) {
		fill_unlink(f);
		for (struct fill_req *q = f->reqs; q; q = q->next)
			if (q->p.r)
				http_set_pending(q->p.r, NULL);
		return false;
	}
	return true;
}

static void on_filled(PGresult *res, const char *error, void *data)
{
	struct fill *f = data;
	struct http_body *body = NULL;
	const char *value = NULL;

	fill_unlink(f);
	if (classify(res, error, 1, &value) == ANSWER_VALUE) {
		char *copy = strdup(value);

		body = copy ? http_body_new(copy, strlen(value), "application/json") : NULL;
		if (body)
			cache_put(f, db_get(res, 0, 0), body);
	}
	fill_answer(f, body, res, error);
	http_body_unref(body);
	free(f);
}

static void on_checked(PGresult *res, const char *error, void *data)
{
	struct fill *f = data;
	bool ahead = !f->reqs; /* checked ahead of time, for no request */
	struct cache_entry *e;

	fill_unlink(f);
	e = cache_find(f->key);
	if (e && !error && PQntuples(res) == 1 && f->snapshot[0] && strcmp(e->snapshot, f->snapshot) == 0 &&
	    strcmp(PQgetvalue(res, 0, 0), f->snapshot) == 0) {
		/* Nothing completed since the entry was read: it is as good as read when the check was sent. */
		if (f->sent_ns > e->sent_ns) {
			pthread_mutex_lock(&cache.lock);
			e->writes = f->writes;
			e->sent_ns = f->sent_ns;
			pthread_mutex_unlock(&cache.lock);
		}
		fill_answer(f, e->body, NULL, NULL);
		free(f);
		return;
	}
	if (e && cache_fresh(e, db_writes(), uv_hrtime()) &&
	    (strcmp(e->snapshot, f->snapshot) != 0 || ahead)) {
		/* Replaced meanwhile by a fresh answer, or checked ahead of time: served till it expires. */
		fill_answer(f, e->body, NULL, NULL);
		if (ahead && strcmp(e->snapshot, f->snapshot) == 0 && fill_send(f, NULL))
			return; /* read again meanwhile */
		free(f);
		return;
	}
	if (!fill_send(f, NULL)) {
		fill_answer(f, NULL, NULL, NULL);
		free(f);
	}
}

/* Like ask(), for a JSON answer that may be served from the cache under 'key' (the request path). */
static void cached_ask(struct nwd *d, struct http_req *r, const char *key, const char *cached_sql, int n,
		       const char *const *params, const char *what, const char *name)
{
	uint64_t writes = db_writes(), now = uv_hrtime();
	struct cache_entry *e;
	struct fill *f;
	struct fill_req *q;
	bool fits = strlen(key) < CACHE_KEY_MAX && n <= CACHE_PARAMS_MAX;

	for (int i = 0; fits && i < n; i++)
		fits = params[i] && strlen(params[i]) < CACHE_KEY_MAX;
	if (!fits) {
		http_reply_error(r, 414, "request path too long");
		return;
	}
	e = cache_find(key);
	if (cache_fresh(e, writes, now)) {
		if (e != cache.head) {
			cache_unlink_recency(e);
			cache_push_recency(e);
		}
		http_reply_body(r, 200, e->body);
		if (now - e->sent_ns < CACHE_CHECK_NS || fill_find(key, writes, now))
			return;
		r = NULL; /* checked ahead of time, for no request */
	} else if ((f = fill_find(key, writes, now))) {
		q = calloc(1, sizeof(*q));
		if (!q) {
			http_reply_error(r, 500, "out of memory");
			return;
		}
		q->p.r = r;
		q->p.d = d;
		q->p.what = what;
		snprintf(q->p.key, sizeof(q->p.key), "%s", name);
		q->next = f->reqs;
		f->reqs = q;
		http_set_pending(r, &q->p);
		return;
	}
	f = calloc(1, sizeof(*f));
	q = r ? calloc(1, sizeof(*q)) : NULL;
	if (!f || (r && !q)) {
		free(f);
		free(q);
		if (r)
			http_reply_error(r, 500, "out of memory");
		return;
	}
	f->d = d;
	snprintf(f->key, sizeof(f->key), "%s", key);
	f->sql = cached_sql;
	f->n = n;
	for (int i = 0; i < n; i++)
		snprintf(f->params[i], sizeof(f->params[i]), "%s", params[i]);
	if (q) {
		q->p.r = r;
		q->p.d = d;
		q->p.what = what;
		snprintf(q->p.key, sizeof(q->p.key), "%s", name);
		f->reqs = q;
	}
	if (!fill_send(f, e && e->snapshot[0] ? e : NULL)) {
		free(f);
		free(q);
		if (r)
			http_reply_error(r, 503, "database unavailable");
	}
}

bool api_reply_cached(struct http_req *r, const char *method, const char *url)
{
	static const char prefix[] = API "/commits/";
	const char *sha = url + sizeof(prefix) - 1;
	char key[CACHE_KEY_MAX];
	struct cache_entry *e;
	struct http_body *body = NULL;
	uint64_t now;

	if ((strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) ||
	    strncmp(url, prefix, sizeof(prefix) - 1) != 0 || !api_valid_sha(sha))
		return false;
	snprintf(key, sizeof(key), "/commits/%s", sha);
	pthread_mutex_lock(&cache.lock);
	e = cache_find(key);
	now = uv_hrtime();
	/* An entry due for its check is left to the loop, which sends the check (cached_ask). */
	if (cache_fresh(e, db_writes(), now) && now - e->sent_ns < CACHE_CHECK_NS) {
		body = e->body;
		http_body_ref(body);
	}
	pthread_mutex_unlock(&cache.lock);
	if (!body)
		return false;
	http_reply_body(r, 200, body);
	http_body_unref(body);
	return true;
}

bool api_arg_uint(struct http_req *r, const char *key, unsigned dflt, unsigned max, unsigned *out)
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

/* limit and offset of a paged list, or a 400 reply and false. */
static bool page_args(struct http_req *r, unsigned dflt, char *lim, char *off)
{
	unsigned limit, offset;

	if (!api_arg_uint(r, "limit", dflt, NW_HTTP_PAGE_MAX, &limit) || limit == 0) {
		http_reply_error(r, 400, "'limit' must be an integer from 1 to %d", NW_HTTP_PAGE_MAX);
		return false;
	}
	if (!api_arg_uint(r, "offset", 0, 100000000, &offset)) {
		http_reply_error(r, 400, "'offset' must be a non-negative integer");
		return false;
	}
	snprintf(lim, 16, "%u", limit);
	snprintf(off, 16, "%u", offset);
	return true;
}

static void get_commits(struct nwd *d, struct http_req *r)
{
	char repo[16], lim[16], off[16];
	const char *params[3] = {repo, lim, off};

	if (!page_args(r, 50, lim, off))
		return;
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	ask(d, r, commits_sql, 3, params, "page", NULL, false);
}

/* Copies a path segment (up to '/' or the end) into 'out'; false if too long. */
static bool segment(const char *s, char *out, size_t cap, const char **rest)
{
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);

	if (n >= cap)
		return false;
	memcpy(out, s, n);
	out[n] = '\0';
	*rest = slash ? slash : "";
	return true;
}

static void get_commit(struct nwd *d, struct http_req *r, const char *rest)
{
	char sha[64], repo[16], key[80];
	const char *params[2] = {repo, sha};

	if (!segment(rest, sha, sizeof(sha), &rest) || !api_valid_sha(sha)) {
		http_reply_error(r, 400, "malformed commit id: expected 4 to 40 lowercase hex digits");
		return;
	}
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	snprintf(key, sizeof(key), "/commits/%s", sha);
	if (!*rest)
		cached_ask(d, r, key, commit_sql, 2, params, "commit", sha);
	else if (strcmp(rest, "/build-log") == 0)
		ask(d, r, build_log_sql, 2, params, "commit", sha, true);
	else
		http_reply_error(r, 404, "no such resource '%s'", rest);
}

static bool valid_name(const char *s)
{
	if (!*s || strlen(s) >= NW_PROTO_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-+:", *s))
			return false;
	return true;
}

static void get_check(struct nwd *d, struct http_req *r, const char *name)
{
	char repo[16], lim[16], off[16], nreg[16];
	const char *dtype = http_arg(r, "dtype");
	const char *params[6] = {repo, name, dtype ? dtype : "", lim, off, nreg};

	if (!valid_name(name)) {
		http_reply_error(r, 400, "malformed check name");
		return;
	}
	if (dtype && *dtype && !valid_name(dtype)) {
		http_reply_error(r, 400, "malformed dtype");
		return;
	}
	if (!page_args(r, 200, lim, off))
		return;
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	snprintf(nreg, sizeof(nreg), "%d", NW_API_CHECK_REGRESSIONS);
	ask(d, r, check_sql, 6, params, "check", name, false);
}

static void get_trials(struct nwd *d, struct http_req *r)
{
	char repo[16], lim[16], off[16];
	const char *commit = http_arg(r, "commit"), *check = http_arg(r, "check");
	const char *dtype = http_arg(r, "dtype"), *seed = http_arg(r, "seed"),
		   *outcome = http_arg(r, "outcome");
	const char *params[8] = {
	    repo, commit, check, dtype ? dtype : "", seed ? seed : "", outcome ? outcome : "", lim, off};
	unsigned seed_n;

	if (!commit || !api_valid_sha(commit)) {
		http_reply_error(r, 400, "'commit' must be 4 to 40 lowercase hex digits");
		return;
	}
	if (!check || !valid_name(check)) {
		http_reply_error(r, 400, "'check' is required");
		return;
	}
	if ((dtype && *dtype && !valid_name(dtype)) ||
	    (outcome && *outcome && outcome_parse(outcome) == OUTCOME_NONE)) {
		http_reply_error(r, 400, "malformed 'dtype' or 'outcome'");
		return;
	}
	if (!api_arg_uint(r, "seed", 0, 4000000000u, &seed_n)) {
		http_reply_error(r, 400, "'seed' must be a non-negative integer");
		return;
	}
	if (!page_args(r, 100, lim, off))
		return;
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	ask(d, r, trials_sql, 8, params, "commit", commit, false);
}

static void get_bisection(struct nwd *d, struct http_req *r, const char *id)
{
	char repo[16];
	const char *params[2] = {repo, id};

	if (!*id || strlen(id) > 18 || strspn(id, "0123456789") != strlen(id)) {
		http_reply_error(r, 400, "malformed bisection id '%s'", id);
		return;
	}
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	ask(d, r, bisection_sql, 2, params, "bisection", id, false);
}

/* The ?state= filter of the regressions list: one state, or 'active' / 'closed'. */
static bool valid_regression_state(const char *s)
{
	static const char *const states[] = {"open",  "bisecting", "culprit", "no_culprit", "check_changed",
					     "fixed", "withdrawn", "active",  "closed"};

	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		if (strcmp(s, states[i]) == 0)
			return true;
	return false;
}

static void get_regressions(struct nwd *d, struct http_req *r)
{
	char repo[16], lim[16], off[16];
	const char *state = http_arg(r, "state"), *check = http_arg(r, "check"),
		   *dtype = http_arg(r, "dtype");
	const char *params[6] = {repo, state ? state : "", check ? check : "", dtype ? dtype : "", lim, off};

	if (state && *state && !valid_regression_state(state)) {
		http_reply_error(
		    r, 400,
		    "'state' must be open, bisecting, culprit, no_culprit, check_changed, fixed, "
		    "withdrawn, active or closed");
		return;
	}
	if ((check && *check && !valid_name(check)) || (dtype && *dtype && !valid_name(dtype))) {
		http_reply_error(r, 400, "malformed 'check' or 'dtype'");
		return;
	}
	if (!page_args(r, 50, lim, off))
		return;
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	ask(d, r, regressions_sql, 6, params, "page", NULL, false);
}

/* One regression; limit and offset page the commits that show it. */
static void get_regression(struct nwd *d, struct http_req *r, const char *id)
{
	char repo[16], lim[16], off[16];
	const char *params[4] = {repo, id, lim, off};

	if (!*id || strlen(id) > 18 || strspn(id, "0123456789") != strlen(id)) {
		http_reply_error(r, 400, "malformed regression id '%s'", id);
		return;
	}
	if (!page_args(r, 200, lim, off))
		return;
	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	ask(d, r, regression_sql, 4, params, "regression", id, false);
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

static void route_get(struct nwd *d, struct http_req *r, const char *path)
{
	char repo[16], lim[16], off[16];
	const char *params[3] = {repo, lim, off};

	snprintf(repo, sizeof(repo), "%d", d->repo_id);
	if (strcmp(path, "/health") == 0) {
		const char *hparams[2] = {repo, d->cfg.node_name};

		api_ask(d, r, health_sql, 2, hparams, NULL, NULL, NULL, reply_health);
	} else if (strcmp(path, "/commits") == 0) {
		get_commits(d, r);
	} else if (strncmp(path, "/commits/", 9) == 0) {
		get_commit(d, r, path + 9);
	} else if (strcmp(path, "/checks") == 0) {
		ask(d, r, checks_sql, 1, params, "page", NULL, false);
	} else if (strncmp(path, "/checks/", 8) == 0) {
		get_check(d, r, path + 8);
	} else if (strcmp(path, "/trials") == 0) {
		get_trials(d, r);
	} else if (strcmp(path, "/bisections") == 0) {
		if (page_args(r, 50, lim, off))
			ask(d, r, bisections_sql, 3, params, "page", NULL, false);
	} else if (strncmp(path, "/bisections/", 12) == 0) {
		get_bisection(d, r, path + 12);
	} else if (strcmp(path, "/regressions") == 0) {
		get_regressions(d, r);
	} else if (strncmp(path, "/regressions/", 13) == 0) {
		get_regression(d, r, path + 13);
	} else {
		http_reply_error(r, 404, "no such endpoint '/api/v1%s'", path);
	}
}

void api_handle(struct nwd *d, struct http_req *r, const char *method, const char *url)
{
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

	if (strncmp(url, API "/", sizeof(API)) == 0 || strcmp(url, API) == 0) {
		const char *path = url + sizeof(API) - 1;

		if (get)
			route_get(d, r, path);
		else if (strcmp(method, "POST") == 0 || strcmp(method, "DELETE") == 0)
			api_write(d, r, method, path);
		else
			http_reply_error(r, 405, "method %s not allowed on '%s'", method, url);
		return;
	}
	if (strcmp(url, "/metrics") == 0 && get) {
		api_metrics(d, r);
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
