/* db: libpq's asynchronous API on the libuv loop. */
#include "db.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define RECONNECT_MIN_MS 500
#define RECONNECT_MAX_MS 30000
/* A connection attempt that has not finished by then is abandoned. */
#define CONNECT_TIMEOUT_MS 10000
/* COPY data is handed to libpq in pieces of at most this many bytes. */
#define DB_COPY_CHUNK (256 * 1024)

struct db_query {
	struct db_query *next;
	const char *sql;
	int nparams;
	char **params;
	db_cb cb;
	void *data;
	/* db_copy(): the COPY's data (borrowed), how much of it libpq has taken, and whether its end was sent. */
	bool is_copy;
	const char *copy;
	size_t copy_len, copy_sent;
	bool copy_started, copy_ended;
};

enum db_state { DB_CONNECTING, DB_READY, DB_BUSY, DB_DOWN, DB_CLOSING };

struct db {
	uv_loop_t *loop;
	char *conninfo;
	char name[32];
	PGconn *conn;
	uv_poll_t *poll;  /* own allocation: a closing handle can't be reused at once */
	uv_timer_t timer; /* reconnect backoff and connect deadline */
	enum db_state state;
	unsigned backoff_ms;
	struct db_query *head, *tail;
	unsigned queued;
	PGresult *last;
	bool logged_down;
	bool counts_writes; /* completions count in db_writes() (not a pool's connections) */
	bool refused;       /* db_refuse(): no new query is taken */
	/* A pool: queries go to its members; the pool itself has no connection. */
	struct db **members;
	unsigned nmembers, next_member;
};

/* Queries completed on connections that count writes (see db_writes in db.h). */
static uint64_t writes_completed;

static void start_next(struct db *db);
static void connect_start(struct db *db);

long long db_get_ll(PGresult *res, int row, int col, long long fallback)
{
	const char *v = db_get(res, row, col);

	return v ? strtoll(v, NULL, 10) : fallback;
}

double db_get_double(PGresult *res, int row, int col, double fallback)
{
	const char *v = db_get(res, row, col);

	return v ? strtod(v, NULL) : fallback;
}

static void query_free(struct db_query *q)
{
	for (int i = 0; i < q->nparams; i++)
		free(q->params[i]);
	free(q->params);
	free(q);
}

static struct db_query *pop(struct db *db)
{
	struct db_query *q = db->head;

	if (q) {
		db->head = q->next;
		if (!db->head)
			db->tail = NULL;
		db->queued--;
	}
	return q;
}

uint64_t db_writes(void)
{
	return writes_completed;
}

void db_count_write(void)
{
	writes_completed++;
}

static void complete(struct db *db, PGresult *res, const char *error)
{
	struct db_query *q = pop(db);

	/* Counted before the callback runs: what it reads next must not be tagged with the old count. */
	if (q && db->counts_writes)
		writes_completed++;
	if (q && q->cb)
		q->cb(res, error, q->data);
	if (q)
		query_free(q);
}

void db_refuse(struct db *db, const char *why)
{
	struct db_query *rest, *q;

	db->refused = true;
	/* The query in flight finishes; those behind it fail. */
	rest = db->state == DB_BUSY && db->head ? db->head->next : db->head;
	if (db->state == DB_BUSY && db->head) {
		db->head->next = NULL;
		db->tail = db->head;
		db->queued = 1;
	} else {
		db->head = db->tail = NULL;
		db->queued = 0;
	}
	while ((q = rest)) {
		rest = q->next;
		if (q->cb)
			q->cb(NULL, why, q->data);
		query_free(q);
	}
}

static void on_poll_closed(uv_handle_t *h)
{
	free(h);
}

static void stop_poll(struct db *db)
{
	if (db->poll) {
		uv_poll_stop(db->poll);
		uv_close((uv_handle_t *)db->poll, on_poll_closed);
		db->poll = NULL;
	}
}

static void on_timer(uv_timer_t *t);

/* The connection broke: fail the query in flight, keep the rest, reconnect later. */
static void connection_lost(struct db *db, const char *why)
{
	bool was_busy = db->state == DB_BUSY;

	if (!db->logged_down)
		log_warn("db %s: connection lost: %s", db->name, why);
	db->logged_down = true;
	stop_poll(db);
	if (db->last) {
		PQclear(db->last);
		db->last = NULL;
	}
	if (db->conn) {
		PQfinish(db->conn);
		db->conn = NULL;
	}
	db->state = DB_DOWN;
	if (was_busy)
		complete(db, NULL, why);
	uv_timer_start(&db->timer, on_timer, db->backoff_ms, 0);
	db->backoff_ms = db->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : db->backoff_ms * 2;
}

static void on_poll(uv_poll_t *h, int status, int events);
static int watch(struct db *db, int events);
static void flush(struct db *db);
static bool copy_pending(const struct db *db);
static int copy_step(struct db *db);

static int watch(struct db *db, int events)
{
	int fd = PQsocket(db->conn);

	if (fd < 0)
		return -EBADF;
	if (!db->poll) {
		int rc;

		db->poll = malloc(sizeof(*db->poll));
		if (!db->poll)
			return -ENOMEM;
		rc = uv_poll_init(db->loop, db->poll, fd);
		if (rc) {
			free(db->poll);
			db->poll = NULL;
			return rc;
		}
		db->poll->data = db;
	}
	return uv_poll_start(db->poll, events, on_poll);
}

static void connect_step(struct db *db)
{
	switch (PQconnectPoll(db->conn)) {
	case PGRES_POLLING_READING:
		watch(db, UV_READABLE);
		return;
	case PGRES_POLLING_WRITING:
		watch(db, UV_WRITABLE);
		return;
	case PGRES_POLLING_OK:
		uv_timer_stop(&db->timer);
		PQsetnonblocking(db->conn, 1);
		db->state = DB_READY;
		db->backoff_ms = RECONNECT_MIN_MS;
		if (db->logged_down)
			log_info("db %s: connected", db->name);
		db->logged_down = false;
		start_next(db);
		return;
	default:
		connection_lost(db, PQerrorMessage(db->conn));
		return;
	}
}

static void connect_start(struct db *db)
{
	/* The socket may change between attempts: always start with a fresh poll handle. */
	stop_poll(db);
	db->state = DB_CONNECTING;
	db->conn = PQconnectStart(db->conninfo);
	if (!db->conn) {
		connection_lost(db, "out of memory");
		return;
	}
	if (PQstatus(db->conn) == CONNECTION_BAD) {
		connection_lost(db, PQerrorMessage(db->conn));
		return;
	}
	uv_timer_start(&db->timer, on_timer, CONNECT_TIMEOUT_MS, 0);
	connect_step(db);
}

static void on_timer(uv_timer_t *t)
{
	struct db *db = t->data;

	if (db->state == DB_DOWN)
		connect_start(db);
	else if (db->state == DB_CONNECTING)
		connection_lost(db, "connection attempt timed out");
}

static void read_results(struct db *db)
{
	if (!PQconsumeInput(db->conn)) {
		connection_lost(db, PQerrorMessage(db->conn));
		return;
	}
	while (!PQisBusy(db->conn)) {
		PGresult *r = PQgetResult(db->conn);

		if (!r) {
			PGresult *last = db->last;
			ExecStatusType st = last ? PQresultStatus(last) : PGRES_FATAL_ERROR;

			db->last = NULL;
			db->state = DB_READY;
			if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
				complete(db, last, NULL);
			else
				complete(db, last, last ? PQresultErrorMessage(last) : "no result");
			PQclear(last);
			start_next(db);
			return;
		}
		if (PQresultStatus(r) == PGRES_COPY_IN) {
			PQclear(r);
			if (copy_step(db) < 0 || copy_pending(db))
				return; /* lost, or waiting until the socket takes more */
			continue;
		}
		/* Keep the last result; an error result takes precedence over later ones. */
		if (db->last && PQresultStatus(db->last) == PGRES_FATAL_ERROR) {
			PQclear(r);
		} else {
			PQclear(db->last);
			db->last = r;
		}
	}
	/* Readable, and writable while a COPY's end is still in libpq's buffer. */
	flush(db);
}

/* Whether the query in flight is in COPY FROM STDIN and libpq has not taken all its data and end yet. */
static bool copy_pending(const struct db *db)
{
	const struct db_query *q = db->head;

	return q && q->copy_started && !q->copy_ended;
}

/*
 * The query in flight is in COPY FROM STDIN: hands libpq its data and its end,
 * as much as the socket takes (a non-blocking connection refuses more while
 * its buffer is full: the rest goes when the socket is writable again).
 * Returns -1 when the connection was lost (connection_lost() has run).
 */
static int copy_step(struct db *db)
{
	struct db_query *q = db->head;
	int rc;

	while (q && !q->copy_ended) {
		size_t n = q->copy_len - q->copy_sent;

		q->copy_started = true;
		if (n > DB_COPY_CHUNK)
			n = DB_COPY_CHUNK;
		if (!q->is_copy) /* a COPY sent with db_query: nobody gave it data */
			rc = PQputCopyEnd(db->conn, "no COPY data was given for this statement");
		else if (n > 0)
			rc = PQputCopyData(db->conn, q->copy + q->copy_sent, (int)n);
		else
			rc = PQputCopyEnd(db->conn, NULL);
		if (rc < 0) {
			connection_lost(db, PQerrorMessage(db->conn));
			return -1;
		}
		if (rc == 0) {
			watch(db, UV_READABLE | UV_WRITABLE);
			return 0;
		}
		if (q->is_copy && n > 0)
			q->copy_sent += n;
		else
			q->copy_ended = true;
	}
	rc = PQflush(db->conn);
	if (rc < 0) {
		connection_lost(db, PQerrorMessage(db->conn));
		return -1;
	}
	watch(db, rc > 0 ? UV_READABLE | UV_WRITABLE : UV_READABLE);
	return 0;
}

static void flush(struct db *db)
{
	int rc = PQflush(db->conn);

	if (rc < 0)
		connection_lost(db, PQerrorMessage(db->conn));
	else if (rc > 0)
		watch(db, UV_READABLE | UV_WRITABLE);
	else
		watch(db, UV_READABLE);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct db *db = h->data;

	if (db->state == DB_CONNECTING) {
		connect_step(db);
		return;
	}
	if (status < 0) {
		connection_lost(db, uv_strerror(status));
		return;
	}
	if (db->state == DB_BUSY) {
		if ((events & UV_WRITABLE) && copy_pending(db)) {
			if (copy_step(db) < 0)
				return;
		} else if (events & UV_WRITABLE) {
			flush(db);
			if (db->state != DB_BUSY)
				return;
		}
		if (events & UV_READABLE)
			read_results(db);
		return;
	}
	if (db->state == DB_READY && (events & UV_READABLE)) {
		/* Idle connection readable: a notice, or the server went away. */
		if (!PQconsumeInput(db->conn))
			connection_lost(db, PQerrorMessage(db->conn));
	}
}

static void start_next(struct db *db)
{
	struct db_query *q = db->head;

	if (db->state != DB_READY || !q)
		return;
	if (q->is_copy ? !PQsendQuery(db->conn, q->sql)
		       : !PQsendQueryParams(db->conn, q->sql, q->nparams, NULL,
					    (const char *const *)q->params, NULL, NULL, 0)) {
		connection_lost(db, PQerrorMessage(db->conn));
		return;
	}
	db->state = DB_BUSY;
	flush(db);
}

/* The pool member with the fewest queries queued or running, connected ones first; ties in turn. */
static struct db *least_busy(struct db *pool)
{
	struct db *best = NULL;
	bool best_up = false;

	for (unsigned i = 0; i < pool->nmembers; i++) {
		struct db *m = pool->members[(pool->next_member + i) % pool->nmembers];
		bool up = db_connected(m);

		if (!best || (up && !best_up) || (up == best_up && m->queued < best->queued)) {
			best = m;
			best_up = up;
		}
	}
	pool->next_member = (pool->next_member + 1) % pool->nmembers;
	return best;
}

int db_query(struct db *db, const char *sql, int nparams, const char *const *params, db_cb cb, void *data)
{
	struct db_query *q;

	if (db->state == DB_CLOSING)
		return -ESHUTDOWN;
	if (db->refused)
		return -EROFS;
	if (db->nmembers)
		return db_query(least_busy(db), sql, nparams, params, cb, data);
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->sql = sql;
	q->cb = cb;
	q->data = data;
	q->nparams = nparams;
	if (nparams > 0) {
		q->params = calloc((size_t)nparams, sizeof(char *));
		if (!q->params) {
			free(q);
			return -ENOMEM;
		}
		for (int i = 0; i < nparams; i++) {
			if (params[i] && !(q->params[i] = strdup(params[i]))) {
				query_free(q);
				return -ENOMEM;
			}
		}
	}
	if (db->tail)
		db->tail->next = q;
	else
		db->head = q;
	db->tail = q;
	db->queued++;
	start_next(db);
	return 0;
}

int db_copy(struct db *db, const char *sql, const char *data, size_t len, db_cb cb, void *cbdata)
{
	struct db_query *q;

	if (db->state == DB_CLOSING)
		return -ESHUTDOWN;
	if (db->refused)
		return -EROFS;
	if (db->nmembers)
		return db_copy(least_busy(db), sql, data, len, cb, cbdata);
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->sql = sql;
	q->cb = cb;
	q->data = cbdata;
	q->is_copy = true;
	q->copy = data;
	q->copy_len = data ? len : 0;
	if (db->tail)
		db->tail->next = q;
	else
		db->head = q;
	db->tail = q;
	db->queued++;
	start_next(db);
	return 0;
}

static struct db *db_new(uv_loop_t *loop, const char *conninfo, const char *name)
{
	struct db *db = calloc(1, sizeof(*db));

	if (!db)
		return NULL;
	db->conninfo = strdup(conninfo);
	if (!db->conninfo) {
		free(db);
		return NULL;
	}
	snprintf(db->name, sizeof(db->name), "%s", name);
	db->loop = loop;
	db->backoff_ms = RECONNECT_MIN_MS;
	db->counts_writes = true;
	uv_timer_init(loop, &db->timer);
	db->timer.data = db;
	return db;
}

int db_open(uv_loop_t *loop, const char *conninfo, const char *name, struct db **out)
{
	struct db *db = db_new(loop, conninfo, name);

	if (!db)
		return -ENOMEM;
	connect_start(db);
	*out = db;
	return 0;
}

int db_open_pool(uv_loop_t *loop, const char *conninfo, const char *name, unsigned n, struct db **out)
{
	struct db *pool = db_new(loop, conninfo, name);

	if (!pool)
		return -ENOMEM;
	pool->state = DB_READY;
	pool->counts_writes = false;
	pool->members = calloc(n ? n : 1, sizeof(*pool->members));
	if (!pool->members) {
		db_close(pool);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < (n ? n : 1); i++) {
		char member[48];

		snprintf(member, sizeof(member), "%s%u", name, i);
		pool->members[i] = db_new(loop, conninfo, member);
		if (!pool->members[i]) {
			db_close(pool);
			return -ENOMEM;
		}
		pool->nmembers++;
		pool->members[i]->counts_writes = false;
		connect_start(pool->members[i]);
	}
	*out = pool;
	return 0;
}

bool db_idle(const struct db *db)
{
	for (unsigned i = 0; i < db->nmembers; i++)
		if (!db_idle(db->members[i]))
			return false;
	return db->head == NULL;
}

unsigned db_backlog(const struct db *db)
{
	unsigned n = db->queued;

	for (unsigned i = 0; i < db->nmembers; i++)
		n += db_backlog(db->members[i]);
	return n;
}

bool db_connected(const struct db *db)
{
	if (db->nmembers) {
		for (unsigned i = 0; i < db->nmembers; i++)
			if (db_connected(db->members[i]))
				return true;
		return false;
	}
	return db->state == DB_READY || db->state == DB_BUSY;
}

static void on_timer_closed(uv_handle_t *h)
{
	struct db *db = h->data;

	free(db->members);
	free(db->conninfo);
	free(db);
}

void db_close(struct db *db)
{
	struct db_query *q;

	for (unsigned i = 0; i < db->nmembers; i++)
		db_close(db->members[i]);
	db->nmembers = 0;
	db->state = DB_CLOSING;
	stop_poll(db);
	while ((q = pop(db))) {
		if (q->cb)
			q->cb(NULL, "database connection closed", q->data);
		query_free(q);
	}
	PQclear(db->last);
	if (db->conn)
		PQfinish(db->conn);
	db->conn = NULL;
	uv_close((uv_handle_t *)&db->timer, on_timer_closed);
}
