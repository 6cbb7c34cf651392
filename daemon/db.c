/* db: libpq's asynchronous API on the libuv loop. */
#include "db.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "log.h"

#define RECONNECT_MIN_MS 500
#define RECONNECT_MAX_MS 30000
/* A connection attempt that has not finished by then is abandoned. */
#define CONNECT_TIMEOUT_MS 10000
/*
 * An answer is awaited for the statement_timeout and this much more: the
 * server cancels a slow statement itself, so an answer later than that means
 * the server or the network is gone, which TCP may take hours to notice.
 */
#define ANSWER_GRACE_MS 10000
/* A COMMIT whose answer was lost: its status is asked this often, 100 ms apart, while its session lives. */
#define RESOLVE_POLLS 100
/* Error texts kept from libpq (its messages are a few lines). */
#define ERROR_MAX 512
/* COPY data is handed to libpq in pieces of at most this many bytes. */
#define DB_COPY_CHUNK (256 * 1024)

struct db_stmt {
	const char *sql; /* borrowed */
	int nparams;
	char **params; /* owned copies; NULL entries are SQL NULL */
};

/* Where a transaction stands. */
enum txn_step {
	TXN_BEGIN,    /* BEGIN, and the transaction's id */
	TXN_STMT,     /* stmts[cur] */
	TXN_COMMIT,   /* COMMIT */
	TXN_ROLLBACK, /* ROLLBACK after a statement failed ('failed') */
	TXN_RESOLVE,  /* the connection dropped during COMMIT: ask whether it committed */
};

/* An entry of a connection's queue: a query, or a transaction (txn). */
struct db_query {
	struct db_query *next;
	struct db_stmt one; /* a query */
	bool txn;
	struct db_stmt *stmts; /* a transaction's statements */
	unsigned nstmts;
	enum txn_step step;
	unsigned cur;
	unsigned tries;   /* connections lost under the transaction */
	unsigned polls;   /* status checks of a COMMIT whose answer was lost */
	char xid[24];     /* the transaction's id (pg_current_xact_id) */
	PGresult *failed; /* the statement that failed, answered after the ROLLBACK */
	db_cb cb;
	void *data;
	/* db_copy(): the COPY's data (borrowed), how much of it libpq has taken, and whether its end was sent. */
	bool is_copy;
	const char *copy;
	size_t copy_len, copy_sent;
	bool copy_started, copy_ended;
};

/* A transaction being put together: its queue entry, with room to grow. */
struct db_txn {
	struct db_query q; /* first: the queue frees it as a struct db_query */
	unsigned cap;
	int error; /* a db_txn_add that failed */
};

enum db_state { DB_CONNECTING, DB_SETUP, DB_READY, DB_BUSY, DB_DOWN, DB_CLOSING };

struct db {
	uv_loop_t *loop;
	char *conninfo;
	char name[32];
	PGconn *conn;
	uv_poll_t *poll;  /* own allocation: a closing handle can't be reused at once */
	uv_timer_t timer; /* reconnect backoff, connect deadline, answer deadline */
	enum db_state state;
	unsigned backoff_ms;
	struct db_query *head, *tail;
	unsigned queued;
	PGresult *last;
	bool logged_down;
	bool counts_writes;  /* completions count in db_writes() (not a pool's connections) */
	bool refused;        /* db_refuse(): no new query is taken */
	unsigned timeout_ms; /* statement_timeout */
	bool setup_due;      /* statement_timeout is to be set before the next query */
	bool fail_queue;     /* a pool's member: a lost connection fails the whole queue */
	/* NUMWATCH_DB_REFUSE_EVERY (db_open): one entry in N offered is refused. */
	unsigned refuse_every;
	uint64_t draw;
	/* A pool: queries go to its members; the pool itself has no connection. */
	struct db **members;
	unsigned nmembers, next_member;
};

/* Queries completed on connections that count writes (see db_writes in db.h); read by HTTP threads. */
static _Atomic uint64_t writes_completed;

static void start_next(struct db *db);
static void connect_start(struct db *db);
static bool copy_pending(const struct db *db);
static int copy_step(struct db *db);
static void flush(struct db *db);

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

static void stmt_release(struct db_stmt *st)
{
	for (int i = 0; i < st->nparams; i++)
		free(st->params[i]);
	free(st->params);
	st->params = NULL;
	st->nparams = 0;
}

static int stmt_init(struct db_stmt *st, const char *sql, int nparams, const char *const *params)
{
	st->sql = sql;
	st->nparams = 0;
	st->params = NULL;
	if (nparams <= 0)
		return 0;
	st->params = calloc((size_t)nparams, sizeof(char *));
	if (!st->params)
		return -ENOMEM;
	st->nparams = nparams;
	for (int i = 0; i < nparams; i++) {
		if (params[i] && !(st->params[i] = strdup(params[i]))) {
			stmt_release(st);
			return -ENOMEM;
		}
	}
	return 0;
}

static void query_free(struct db_query *q)
{
	stmt_release(&q->one);
	for (unsigned i = 0; i < q->nstmts; i++)
		stmt_release(&q->stmts[i]);
	free(q->stmts);
	PQclear(q->failed);
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
	return atomic_load(&writes_completed);
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

/* Answers every query of a list taken off a queue with the error 'why', and frees it. */
static void fail_list(struct db_query *rest, const char *why)
{
	struct db_query *q;

	while ((q = rest)) {
		rest = q->next;
		if (q->cb)
			q->cb(NULL, why, q->data);
		query_free(q);
	}
}

void db_refuse(struct db *db, const char *why)
{
	struct db_query *rest;

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
	fail_list(rest, why);
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

/* What a transaction that rolled back after 'failed' answers. */
static const char *failed_error(const struct db_query *q)
{
	const char *e = PQresultErrorMessage(q->failed);

	return *e ? e : "the transaction's first answer was not its id";
}

/* A transaction starts again from BEGIN on the next connection, unless it lost too many. */
static void txn_restart(struct db *db, struct db_query *q, const char *why)
{
	char msg[ERROR_MAX + 96];

	if (++q->tries >= NW_DB_TXN_TRIES) {
		snprintf(msg, sizeof(msg), "transaction given up after %u lost connections: %s", q->tries,
			 why);
		complete(db, NULL, msg);
		return;
	}
	q->step = TXN_BEGIN;
	q->cur = 0;
	q->xid[0] = '\0';
}

/*
 * The connection dropped under the transaction at the head of the queue: the
 * server rolled back whatever it had done, except a COMMIT that it may have
 * carried out without its answer reaching us.
 */
static void txn_lost(struct db *db, struct db_query *q, bool was_busy, const char *why)
{
	switch (q->step) {
	case TXN_BEGIN:
		if (was_busy)
			txn_restart(db, q, why);
		return;
	case TXN_STMT:
		txn_restart(db, q, why);
		return;
	case TXN_COMMIT:
		if (!was_busy || !q->xid[0]) {
			txn_restart(db, q, why);
			return;
		}
		q->step = TXN_RESOLVE;
		q->polls = 0;
		return;
	case TXN_ROLLBACK:
		/* Rolled back by the server anyway: the statement's failure is the answer. */
		complete(db, q->failed, failed_error(q));
		return;
	case TXN_RESOLVE:
		if (++q->tries >= NW_DB_TXN_TRIES) {
			char msg[ERROR_MAX + 96];

			snprintf(msg, sizeof(msg), "whether the transaction committed is unknown: %s", why);
			complete(db, NULL, msg);
		}
		return;
	}
}

/* A pool's member whose connection dropped: who waits for a read hears at once. */
static void fail_queue(struct db *db, const char *why)
{
	struct db_query *rest = db->head;

	db->head = db->tail = NULL;
	db->queued = 0;
	fail_list(rest, why);
}

/*
 * The connection broke: fail the query in flight, keep the rest (a
 * transaction in flight runs again), reconnect later. 'reason' may be
 * libpq's text, which PQfinish frees: it is copied first.
 */
static void connection_lost(struct db *db, const char *reason)
{
	bool was_busy = db->state == DB_BUSY;
	char why[ERROR_MAX];
	size_t n;

	snprintf(why, sizeof(why), "%s", reason && *reason ? reason : "connection lost");
	for (n = strlen(why); n > 0 && (why[n - 1] == '\n' || why[n - 1] == ' '); n--)
		why[n - 1] = '\0';
	if (!db->logged_down)
		log_warn("db %s: connection lost: %s", db->name, why);
	db->logged_down = true;
	stop_poll(db);
	uv_timer_stop(&db->timer);
	if (db->last) {
		PQclear(db->last);
		db->last = NULL;
	}
	if (db->conn) {
		PQfinish(db->conn);
		db->conn = NULL;
	}
	db->state = DB_DOWN;
	if (db->head && db->head->txn)
		txn_lost(db, db->head, was_busy, why);
	else if (was_busy)
		complete(db, NULL, why);
	if (db->fail_queue)
		fail_queue(db, why);
	if (db->state != DB_DOWN)
		return; /* a callback closed the connection */
	uv_timer_start(&db->timer, on_timer, db->backoff_ms, 0);
	db->backoff_ms = db->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : db->backoff_ms * 2;
}

static void on_poll(uv_poll_t *h, int status, int events);

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
		db->setup_due = true;
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
	{
		/* Named in pg_stat_activity unless the connection string names it. */
		char app[48];
		const char *keys[] = {"dbname", "fallback_application_name", NULL};
		const char *values[] = {db->conninfo, app, NULL};

		snprintf(app, sizeof(app), "numwatchd %s", db->name);
		db->conn = PQconnectStartParams(keys, values, 1);
	}
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
	char msg[96];

	if (db->state == DB_DOWN) {
		connect_start(db);
	} else if (db->state == DB_CONNECTING) {
		connection_lost(db, "connection attempt timed out");
	} else if (db->state == DB_BUSY || db->state == DB_SETUP) {
		snprintf(msg, sizeof(msg),
			 "no answer within %u ms (statement_timeout %u ms): giving the connection up",
			 db->timeout_ms + ANSWER_GRACE_MS, db->timeout_ms);
		connection_lost(db, msg);
	}
}

/* Sends the next step of the entry at the head of the queue; 0 when libpq refused it. */
static int send_head(struct db *db, struct db_query *q)
{
	const struct db_stmt *st = &q->one;

	if (q->txn) {
		switch (q->step) {
		case TXN_BEGIN:
			return PQsendQuery(db->conn, "BEGIN; SELECT pg_current_xact_id()::text");
		case TXN_STMT:
			st = &q->stmts[q->cur];
			break;
		case TXN_COMMIT:
			return PQsendQuery(db->conn, "COMMIT");
		case TXN_ROLLBACK:
			return PQsendQuery(db->conn, "ROLLBACK");
		case TXN_RESOLVE: {
			/* Asked again after a pause while the old session has not finished yet. */
			const char *params[2] = {q->xid, q->polls ? "0.1" : "0"};

			return PQsendQueryParams(db->conn,
						 "SELECT pg_xact_status($1::xid8) FROM pg_sleep($2::float8)",
						 2, NULL, params, NULL, NULL, 0);
		}
		}
	}
	if (q->is_copy)
		return PQsendQuery(db->conn, st->sql);
	return PQsendQueryParams(db->conn, st->sql, st->nparams, NULL, (const char *const *)st->params, NULL,
				 NULL, 0);
}

/* A COMMIT's answer was lost: pg_xact_status() says what became of it. */
static void txn_resolved(struct db *db, struct db_query *q, PGresult *res, const char *error)
{
	const char *status = error || PQntuples(res) != 1 ? NULL : db_get(res, 0, 0);
	char msg[ERROR_MAX + 96];

	if (status && strcmp(status, "committed") == 0) {
		log_info("db %s: a transaction whose COMMIT went unanswered had committed", db->name);
		complete(db, NULL, NULL);
	} else if (status && strcmp(status, "aborted") == 0) {
		log_info(
		    "db %s: a transaction whose COMMIT went unanswered had not committed: running it again",
		    db->name);
		q->step = TXN_BEGIN;
		q->cur = 0;
		q->xid[0] = '\0';
	} else if (status && strcmp(status, "in progress") == 0 && ++q->polls < RESOLVE_POLLS) {
		/* Its session has not ended yet: asked again (send_head pauses first). */
	} else {
		snprintf(msg, sizeof(msg), "whether the transaction committed is unknown: %s",
			 error    ? error
			 : status ? status
				  : "its status is no longer kept");
		complete(db, NULL, msg);
	}
}

/* The head of the queue got its answer ('res', owned: NULL when none came). */
static void answered(struct db *db, PGresult *res)
{
	struct db_query *q = db->head;
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
	const char *error = ok ? NULL : res ? PQresultErrorMessage(res) : "no result";

	if (!q || !q->txn) {
		complete(db, res, error);
		PQclear(res);
		return;
	}
	switch (q->step) {
	case TXN_BEGIN:
	case TXN_STMT:
		if (!ok || (q->step == TXN_BEGIN && PQntuples(res) != 1)) {
			q->failed = res ? res : PQmakeEmptyPGresult(NULL, PGRES_FATAL_ERROR);
			q->step = TXN_ROLLBACK;
			return;
		}
		if (q->step == TXN_BEGIN) {
			snprintf(q->xid, sizeof(q->xid), "%s", PQgetvalue(res, 0, 0));
			q->cur = 0;
		} else {
			q->cur++;
		}
		q->step = q->cur < q->nstmts ? TXN_STMT : TXN_COMMIT;
		break;
	case TXN_COMMIT:
		/* COMMIT of a transaction that failed earlier answers ROLLBACK. */
		if (ok && strcmp(PQcmdStatus(res), "COMMIT") != 0)
			error = "transaction rolled back";
		complete(db, res, error);
		break;
	case TXN_ROLLBACK:
		complete(db, q->failed, failed_error(q));
		break;
	case TXN_RESOLVE:
		txn_resolved(db, q, res, error);
		break;
	}
	PQclear(res);
}

/* The answer to the connection's settings. */
static void setup_done(struct db *db, PGresult *res)
{
	if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
		log_warn("db %s: cannot set statement_timeout: %s", db->name,
			 res ? PQresultErrorMessage(res) : "no result");
	PQclear(res);
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
			bool setup = db->state == DB_SETUP;

			db->last = NULL;
			db->state = DB_READY;
			uv_timer_stop(&db->timer);
			if (setup)
				setup_done(db, last);
			else
				answered(db, last);
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
	if (db->state == DB_BUSY || db->state == DB_SETUP) {
		if ((events & UV_WRITABLE) && copy_pending(db)) {
			if (copy_step(db) < 0)
				return;
		} else if (events & UV_WRITABLE) {
			flush(db);
			if (db->state != DB_BUSY && db->state != DB_SETUP)
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

/* Answers come within the statement_timeout and a grace, or the connection is given up. */
static void await_answer(struct db *db)
{
	uv_timer_start(&db->timer, on_timer, (uint64_t)db->timeout_ms + ANSWER_GRACE_MS, 0);
	flush(db);
}

static void start_next(struct db *db)
{
	struct db_query *q = db->head;

	if (db->state != DB_READY)
		return;
	/* Not inside a transaction: its rollback would undo the setting. */
	if (db->setup_due && !(q && q->txn && q->step != TXN_BEGIN && q->step != TXN_RESOLVE)) {
		char ms[16];
		const char *params[1] = {ms};

		snprintf(ms, sizeof(ms), "%u", db->timeout_ms);
		if (!PQsendQueryParams(db->conn, "SELECT set_config('statement_timeout', $1, false)", 1, NULL,
				       params, NULL, NULL, 0)) {
			connection_lost(db, PQerrorMessage(db->conn));
			return;
		}
		db->setup_due = false;
		db->state = DB_SETUP;
		await_answer(db);
		return;
	}
	if (!q)
		return;
	if (!send_head(db, q)) {
		connection_lost(db, PQerrorMessage(db->conn));
		return;
	}
	db->state = DB_BUSY;
	await_answer(db);
}

/*
 * The pool member with the fewest queries queued or running, connected ones
 * first, then those connecting (none while every member waits to reconnect);
 * ties in turn.
 */
static struct db *least_busy(struct db *pool)
{
	struct db *best = NULL;
	int best_rank = 0;

	for (unsigned i = 0; i < pool->nmembers; i++) {
		struct db *m = pool->members[(pool->next_member + i) % pool->nmembers];
		int rank = db_connected(m) ? 2 : m->state == DB_CONNECTING ? 1 : 0;

		if (rank && (rank > best_rank || (rank == best_rank && m->queued < best->queued))) {
			best = m;
			best_rank = rank;
		}
	}
	pool->next_member = (pool->next_member + 1) % pool->nmembers;
	return best;
}

/* Whether 'db' takes a new entry: 0, or db_query's error. */
static int can_take(struct db *db)
{
	if (db->state == DB_CLOSING)
		return -ESHUTDOWN;
	if (db->refused)
		return -EROFS;
	if (db->queued >= NW_DB_QUEUE_MAX)
		return -ENOBUFS;
	if (db->refuse_every) {
		/* Drawn (xorshift64), not every Nth: a fixed period would refuse the same step of a cycle forever. */
		db->draw ^= db->draw << 13;
		db->draw ^= db->draw >> 7;
		db->draw ^= db->draw << 17;
		if (db->draw % db->refuse_every == 0)
			return -ENOBUFS;
	}
	return 0;
}

static void enqueue(struct db *db, struct db_query *q)
{
	if (db->tail)
		db->tail->next = q;
	else
		db->head = q;
	db->tail = q;
	db->queued++;
	start_next(db);
}

/*
 * The connection a query goes to ('db' itself, or a pool's least busy member)
 * and a new entry for it, or a negative error (as db_query's).
 */
static int new_query(struct db *db, const char *sql, int nparams, const char *const *params, struct db **to,
		     struct db_query **out)
{
	struct db_query *q;
	int rc = can_take(db);

	if (rc < 0)
		return rc;
	if (db->nmembers) {
		struct db *m = least_busy(db);

		return m ? new_query(m, sql, nparams, params, to, out) : -ENOTCONN;
	}
	q = calloc(1, sizeof(*q));
	if (!q || stmt_init(&q->one, sql, nparams, params) < 0) {
		free(q);
		return -ENOMEM;
	}
	*to = db;
	*out = q;
	return 0;
}

int db_query(struct db *db, const char *sql, int nparams, const char *const *params, db_cb cb, void *data)
{
	struct db_query *q;
	int rc = new_query(db, sql, nparams, params, &db, &q);

	if (rc < 0)
		return rc;
	q->cb = cb;
	q->data = data;
	enqueue(db, q);
	return 0;
}

struct db_txn *db_txn_new(void)
{
	struct db_txn *t = calloc(1, sizeof(*t));

	if (t)
		t->q.txn = true;
	return t;
}

void db_txn_add(struct db_txn *t, const char *sql, int nparams, const char *const *params)
{
	if (!t || t->error)
		return;
	if (t->q.nstmts == t->cap) {
		unsigned cap = t->cap ? 2 * t->cap : 8;
		struct db_stmt *grown = realloc(t->q.stmts, cap * sizeof(*grown));

		if (!grown) {
			t->error = -ENOMEM;
			return;
		}
		t->q.stmts = grown;
		t->cap = cap;
	}
	if (stmt_init(&t->q.stmts[t->q.nstmts], sql, nparams, params) < 0) {
		t->error = -ENOMEM;
		return;
	}
	t->q.nstmts++;
}

int db_txn_run(struct db *db, struct db_txn *t, db_cb cb, void *data)
{
	int rc = !t ? -ENOMEM : t->error ? t->error : db->nmembers ? -EINVAL : can_take(db);

	if (rc < 0) {
		if (t)
			query_free(&t->q);
		return rc;
	}
	t->q.cb = cb;
	t->q.data = data;
	enqueue(db, &t->q);
	return 0;
}

int db_copy(struct db *db, const char *sql, const char *data, size_t len, db_cb cb, void *cbdata)
{
	struct db_query *q;
	int rc = new_query(db, sql, 0, NULL, &db, &q);

	if (rc < 0)
		return rc;
	q->cb = cb;
	q->data = cbdata;
	q->is_copy = true;
	q->copy = data;
	q->copy_len = data ? len : 0;
	enqueue(db, q);
	return 0;
}

void db_set_timeout(struct db *db, unsigned timeout_ms)
{
	for (unsigned i = 0; i < db->nmembers; i++)
		db_set_timeout(db->members[i], timeout_ms);
	/* A pool has no connection of its own. */
	if (db->nmembers || db->timeout_ms == timeout_ms)
		return;
	db->timeout_ms = timeout_ms;
	db->setup_due = true;
	start_next(db);
}

static struct db *db_new(uv_loop_t *loop, const char *conninfo, const char *name, unsigned timeout_ms)
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
	db->timeout_ms = timeout_ms;
	db->backoff_ms = RECONNECT_MIN_MS;
	db->counts_writes = true;
	uv_timer_init(loop, &db->timer);
	db->timer.data = db;
	return db;
}

int db_open(uv_loop_t *loop, const char *conninfo, const char *name, unsigned timeout_ms, struct db **out)
{
	struct db *db = db_new(loop, conninfo, name, timeout_ms);
	const char *every = getenv("NUMWATCH_DB_REFUSE_EVERY");

	if (!db)
		return -ENOMEM;
	/*
	 * For tests (db_refusals): one query or transaction in N, drawn, is
	 * refused as a full queue would be, so that each caller's refusal path runs, which a
	 * real full queue or -ENOMEM reaches too rarely to test.
	 */
	if (every && atoi(every) > 0) {
		db->refuse_every = (unsigned)atoi(every);
		db->draw = 0x9e3779b97f4a7c15ull;
		log_warn("db %s: NUMWATCH_DB_REFUSE_EVERY: refusing one query in %u (a test setting)", name,
			 db->refuse_every);
	}
	connect_start(db);
	*out = db;
	return 0;
}

int db_open_pool(uv_loop_t *loop, const char *conninfo, const char *name, unsigned n, unsigned timeout_ms,
		 struct db **out)
{
	struct db *pool = db_new(loop, conninfo, name, timeout_ms);

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
		pool->members[i] = db_new(loop, conninfo, member, timeout_ms);
		if (!pool->members[i]) {
			db_close(pool);
			return -ENOMEM;
		}
		pool->nmembers++;
		pool->members[i]->counts_writes = false;
		pool->members[i]->fail_queue = true;
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
	return db->state == DB_READY || db->state == DB_BUSY || db->state == DB_SETUP;
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
