/*
 * db: a PostgreSQL connection driven by the libuv loop (libpq's asynchronous
 * API on a uv_poll_t). Queries are queued and run one at a time in order, so a
 * caller may queue "BEGIN", statements and "COMMIT" back to back to make a
 * transaction (not on a pool of connections: see db_open_pool). A lost connection fails the query in flight, keeps the queue,
 * and reconnects with backoff. Queries are always parameterised.
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

/* Opens a connection (asynchronously); 'name' labels its log lines. */
int db_open(uv_loop_t *loop, const char *conninfo, const char *name, struct db **out);
/*
 * Opens a pool of 'n' connections behind one handle, for independent reads:
 * each query goes to the connected member with the fewest queries queued or
 * running, so queries on a pool run concurrently and in no particular order
 * (never queue a transaction on a pool). db_close closes every member.
 */
int db_open_pool(uv_loop_t *loop, const char *conninfo, const char *name, unsigned n, struct db **out);

/*
 * Queues a query. 'sql' is borrowed and must outlive the query (use string
 * literals); 'params' are copied (a NULL entry is SQL NULL). 'cb' may be NULL.
 */
int db_query(struct db *db, const char *sql, int nparams, const char *const *params, db_cb cb, void *data);

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
 * processes are not counted.
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
