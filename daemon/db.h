/*
 * db: a PostgreSQL connection driven by the libuv loop (libpq's asynchronous
 * API on a uv_poll_t). Queries are queued and run one at a time in order. A
 * lost connection fails the query in flight, keeps the queue, and reconnects
 * with backoff; a transaction (db_txn) is one entry of the queue, run again
 * from its start on the next connection when the connection drops under it.
 * Every connection has a statement_timeout, and a query whose answer does not
 * come within it (plus a grace) drops the connection. Queries are always
 * parameterised.
 */
#ifndef NW_DB_H
#define NW_DB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct db;

/*
 * Called once per query. On success 'res' is the query's result (borrowed:
 * freed after the callback returns) and 'error' is NULL; on failure 'res' may
 * be NULL and 'error' says what went wrong.
 */
typedef void (*db_cb)(PGresult *res, const char *error, void *data);

/*
 * Opens a connection (asynchronously); 'name' labels its log lines. Each
 * statement may run 'timeout_ms' (its statement_timeout; see db_set_timeout).
 */
int db_open(uv_loop_t *loop, const char *conninfo, const char *name, unsigned timeout_ms, struct db **out);
/*
 * Opens a pool of 'n' connections behind one handle, for independent reads
 * that someone waits for: each query goes to the connected member with the
 * fewest queries queued or running, so queries on a pool run concurrently and
 * in no particular order (no transaction on a pool). A pool does not wait out
 * an outage: a query finding no member connected or connecting is refused
 * (-ENOTCONN), and a member that loses its connection fails its whole queue.
 * db_close closes every member.
 */
int db_open_pool(uv_loop_t *loop, const char *conninfo, const char *name, unsigned n, unsigned timeout_ms,
		 struct db **out);
/*
 * Sets the statement_timeout of the connection (each member of a pool), from
 * the next query on; a query's answer is awaited that long plus a grace, then
 * the connection is dropped (the server or the network is gone).
 */
void db_set_timeout(struct db *db, unsigned timeout_ms);

/*
 * Queues a query. 'sql' is borrowed and must outlive the query (use string
 * literals); 'params' are copied (a NULL entry is SQL NULL). 'cb' may be NULL.
 * Returns 0, or a negative error and then 'cb' is never called: -ENOMEM,
 * -ENOBUFS (NW_DB_QUEUE_MAX queries wait already; or, on a db_open connection
 * with NUMWATCH_DB_REFUSE_EVERY=N in the environment, one query in N: a
 * test setting), -ENOTCONN (a pool with no connection), -EROFS (db_refuse),
 * -ESHUTDOWN (db_close).
 */
int db_query(struct db *db, const char *sql, int nparams, const char *const *params, db_cb cb, void *data);

/*
 * A transaction: statements that commit together or not at all. They are
 * sent one after the other between BEGIN and COMMIT on one connection, with
 * nothing else in between. When the connection drops before COMMIT, the
 * transaction runs again from its start on the next connection (at most
 * NW_DB_TXN_TRIES times); when it drops during COMMIT, the next connection
 * asks the server whether it committed (pg_xact_status) before deciding.
 * A statement that fails rolls the transaction back and fails it.
 */
struct db_txn;

/* A new, empty transaction (NULL when out of memory: db_txn_run(NULL) fails with -ENOMEM). */
struct db_txn *db_txn_new(void);
/*
 * Adds a statement, as db_query takes it (no callback: the transaction answers
 * once). A failure (out of memory) is kept and answered by db_txn_run.
 */
void db_txn_add(struct db_txn *t, const char *sql, int nparams, const char *const *params);
/*
 * Queues the transaction; takes ownership of 't' whatever it returns. 'cb'
 * hears once: error NULL when it committed ('res' may then be NULL), else
 * the error and, where a statement failed, its result. Returns 0, or a
 * negative error (as db_query's) and then 'cb' is never called.
 */
int db_txn_run(struct db *db, struct db_txn *t, db_cb cb, void *data);

/*
 * Queues a COPY ... FROM STDIN. 'sql' (borrowed, a literal) is sent with the
 * simple query protocol and holds one COPY FROM STDIN, possibly between other
 * statements (no parameters; they all run in one implicit transaction, so an
 * error rolls back every one of them); 'data' (COPY's text format, 'len'
 * bytes) is sent for the COPY. 'data' is borrowed: it must stay valid until
 * 'cb' has run. 'cb' hears once, as for db_query: the last statement's
 * result, or the first error.
 */
int db_copy(struct db *db, const char *sql, const char *data, size_t len, db_cb cb, void *cbdata);

/*
 * From now on the connection takes no query (db_query answers -EROFS): the
 * daemon refuses to write. The query in flight finishes; the queued ones
 * fail at once with 'why' (their callbacks run before this returns).
 */
void db_refuse(struct db *db, const char *why);

/* Whether nothing is queued or running (used to drain on shutdown). */
bool db_idle(const struct db *db);
/* Queries queued or running. */
unsigned db_backlog(const struct db *db);
/* Whether the connection is up. */
bool db_connected(const struct db *db);

/*
 * Writes completed so far by this process: every query that finished (or
 * failed) on a connection from db_open, plus db_count_write() calls (writes
 * sent through a pool). A query sent after the count moved past a write sees
 * that write, so a cache may tag what a read returned with the count taken
 * when the read was sent and drop it once the count moves. Writes by other
 * processes are not counted. Safe to call from any thread.
 */
uint64_t db_writes(void);
void db_count_write(void);

/* Fails every queued query, closes the connection, frees 'db' once its handles are closed. */
void db_close(struct db *db);

/* Helpers for reading results. */
static inline const char *db_get(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}
long long db_get_ll(PGresult *res, int row, int col, long long fallback);
double db_get_double(PGresult *res, int row, int col, double fallback);

#endif
