/* store: batched, idempotent trial writes with COPY. */
#include "store.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigbuf.h"
#include "caps.h"
#include "db.h"
#include "log.h"
#include "scan8.h"

#define RETRY_MS 1000

/* The COPY's columns, in the order rows are written (and sql/050's trial_stage has them). */
#define STORE_COLUMNS                                                                                        \
	"commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, case_digest, "       \
	"tensors,"                                                                                           \
	" digest, digests_differ, kernel_us, error, slot, host, sanitizer, sanitizer_status"

/* A batch's first try: straight into trials (fails whole on a row already stored). */
static const char copy_sql[] = "COPY trials (" STORE_COLUMNS ") FROM STDIN";
/* Its later tries: through the staging table, inserting only the rows not stored yet (sql/050_trial_path.sql). */
static const char stage_sql[] =
    "SELECT trial_stage_begin(); COPY pg_temp.trial_stage FROM STDIN; SELECT trial_stage_insert()";

/* A growing byte buffer. */
struct text {
	char *data;
	size_t len, cap;
	bool oom;
};

struct batch {
	struct store *store;
	struct batch *next; /* in the store's list of batches not yet written */
	char *data;         /* COPY text, one line per row (bigbuf: a runner's fork leaves it out) */
	size_t len, cap;
	unsigned rows;
	unsigned long long seq;
	unsigned tries;
	struct db *conn;
};

/* Someone waiting for every batch up to 'seq' to be written (store_flush_then). */
struct waiter {
	struct waiter *next;
	unsigned long long seq;
	store_flushed_cb cb;
	void *data;
};

struct store {
	uv_loop_t *loop;
	struct db **conns; /* nconns of them */
	unsigned nconns, next_conn;
	const char *host;
	struct text rows; /* the batch being filled */
	unsigned nrows;
	uv_timer_t flush_timer;
	struct batch *flying; /* batches sent or waiting for a retry */
	unsigned in_flight;
	unsigned long long next_seq;
	struct waiter *waiters;
	unsigned long long written, batches, conflicts;
	bool discarding; /* store_discard(): rows are dropped, failed batches not retried */
	bool closing;    /* store_free(): the connections are closing */
};

static void send_batch(struct batch *b);

static void text_reserve(struct text *t, size_t more)
{
	size_t cap;
	char *p;

	if (t->oom || t->len + more <= t->cap)
		return;
	cap = t->cap ? t->cap : 64 * 1024;
	while (cap < t->len + more)
		cap *= 2;
	/* Megabytes a batch, written while runners start: kept out of their forks (bigbuf.h). */
	p = bigbuf_realloc(t->data, t->cap, cap);
	if (!p) {
		t->oom = true;
		return;
	}
	t->data = p;
	t->cap = cap;
}

/* Inline where the room is there already (a row is some forty of these: issue 18). */
static inline void put(struct text *t, const char *s, size_t n)
{
	if (t->len + n > t->cap) {
		text_reserve(t, n);
		if (t->oom)
			return;
	}
	memcpy(t->data + t->len, s, n);
	t->len += n;
}

static inline void put_tab(struct text *t)
{
	if (t->len < t->cap)
		t->data[t->len++] = '\t';
	else
		put(t, "\t", 1);
}

static void put_null(struct text *t)
{
	put(t, "\\N", 2);
}

static void put_ll(struct text *t, long long v)
{
	char tmp[24], *p = tmp + sizeof(tmp);
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	put(t, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* A double as PostgreSQL reads it back exactly (17 significant digits), NULL when not finite. */
static void put_real(struct text *t, double v)
{
	char tmp[40];
	int n;

	if (!isfinite(v)) {
		put_null(t);
		return;
	}
	n = snprintf(tmp, sizeof(tmp), "%.17g", v);
	put(t, tmp, (size_t)n);
}

/*
 * A text value in COPY's text format: backslash, tab, newline and carriage
 * return escaped. Bytes that are not valid UTF-8 (a runner's stderr tail may
 * hold anything) become '?': PostgreSQL would refuse the whole batch.
 */
static void put_text(struct text *t, const char *v)
{
	const unsigned char *c = (const unsigned char *)v, *end = c + strlen(v);

	for (;;) {
		const unsigned char *run = c;
		size_t n;

		/* Printable ASCII goes in runs, found eight bytes at a time (a trial's tensors: hundreds). */
		c = (const unsigned char *)scan8_skip((const char *)c, (const char *)end, '\\', 0, 0);
		while (*c >= 0x20 && *c < 0x80 && *c != '\\')
			c++;
		put(t, (const char *)run, (size_t)(c - run));
		if (!*c)
			return;
		switch (*c) {
		case '\\':
			put(t, "\\\\", 2);
			c++;
			continue;
		case '\t':
			put(t, "\\t", 2);
			c++;
			continue;
		case '\n':
			put(t, "\\n", 2);
			c++;
			continue;
		case '\r':
			put(t, "\\r", 2);
			c++;
			continue;
		}
		n = *c < 0x80 ? 1 : proto_utf8_len(c);
		if (n == 0) {
			put(t, "?", 1);
			c++;
		} else {
			put(t, (const char *)c, n);
			c += n;
		}
	}
}

/* NULL or "" is SQL NULL, as the store always wrote them. */
static void put_text_or_null(struct text *t, const char *v)
{
	if (v && *v)
		put_text(t, v);
	else
		put_null(t);
}

/* One row of the COPY, columns as STORE_COLUMNS lists them. */
static void put_row(struct text *t, const struct trial_row *r, const char *host)
{
	const struct proto_trial *p = r->result;
	const char *error = r->error;

	put_ll(t, r->commit_id);
	put_tab(t);
	put_ll(t, r->check_id);
	put_tab(t);
	put_text(t, r->dtype);
	put_tab(t);
	put_ll(t, (long long)r->seed);
	put_tab(t);
	put_ll(t, r->attempt);
	put_tab(t);
	put_text(t, outcome_name(r->outcome));
	put_tab(t);
	if (p) {
		/* The decoder's text of the double when it has one: no printf at every trial. */
		if (p->ratio_text[0])
			put(t, p->ratio_text, strlen(p->ratio_text));
		else
			put_real(t, p->ratio);
		put_tab(t);
		put_text_or_null(t, p->family);
		put_tab(t);
		if (p->ndim > 0 || p->family[0]) {
			put(t, "{", 1);
			for (unsigned i = 0; i < p->ndim; i++) {
				if (i)
					put(t, ",", 1);
				put_ll(t, p->shape[i]);
			}
			put(t, "}", 1);
		} else {
			put_null(t);
		}
		put_tab(t);
		if (p->gen >= 0)
			put_ll(t, p->gen);
		else
			put_null(t);
		put_tab(t);
		/* NULL when the runner sent none (a runner older than case.digest). */
		put_text_or_null(t, p->case_digest);
		put_tab(t);
		/* Stored as the runner sent it (re-encoded compactly by the decoder), cast by PostgreSQL. */
		put_text(t, p->tensors_json ? p->tensors_json : "[]");
		put_tab(t);
		put_text_or_null(t, p->digest);
		put_tab(t);
		put_ll(t, p->digests_differ);
		put_tab(t);
		if (p->kernel_us_text[0])
			put(t, p->kernel_us_text, strlen(p->kernel_us_text));
		else
			put_real(t, p->kernel_us);
		put_tab(t);
		if (!error && p->error[0])
			error = p->error;
	} else {
		/* No answer: ratio, family, shape, gen and case_digest NULL, tensors [], digest NULL, 0, kernel_us NULL. */
		static const char none[] = "\\N\t\\N\t\\N\t\\N\t\\N\t[]\t\\N\t0\t\\N\t";

		put(t, none, sizeof(none) - 1);
	}
	put_text_or_null(t, error);
	put_tab(t);
	put_text(t, r->slot);
	put_tab(t);
	put_text(t, host);
	put_tab(t);
	put_text_or_null(t, r->sanitizer);
	put_tab(t);
	put_text_or_null(t, r->sanitizer_status);
	put(t, "\n", 1);
}

static void batch_free(struct batch *b)
{
	bigbuf_free(b->data, b->cap);
	free(b);
}

/* The oldest batch not yet written (next_seq when none): every batch before it is written. */
static unsigned long long oldest_unwritten(const struct store *s)
{
	unsigned long long oldest = s->next_seq;

	for (const struct batch *b = s->flying; b; b = b->next)
		if (b->seq < oldest)
			oldest = b->seq;
	return oldest;
}

/* Calls the waiters whose batches are all written (in the order they waited). */
static void wake_waiters(struct store *s)
{
	unsigned long long oldest = oldest_unwritten(s);
	struct waiter **w = &s->waiters, *done = NULL, **tail = &done, *x;

	while ((x = *w)) {
		if (x->seq < oldest) {
			*w = x->next;
			x->next = NULL;
			*tail = x;
			tail = &x->next;
		} else {
			w = &x->next;
		}
	}
	/* Called after the list is settled: a callback may add a waiter. */
	while ((x = done)) {
		done = x->next;
		x->cb(x->data);
		free(x);
	}
}

/* The batch is written (or dropped): off the list, and whoever waited for it hears. */
static void batch_done(struct batch *b)
{
	struct store *s = b->store;
	struct batch **p = &s->flying;

	while (*p && *p != b)
		p = &(*p)->next;
	if (*p)
		*p = b->next;
	s->in_flight--;
	batch_free(b);
	wake_waiters(s);
}

static void on_retry(uv_timer_t *t)
{
	send_batch(t->data);
	uv_close((uv_handle_t *)t, (uv_close_cb)free);
}

static bool unique_violation(PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state && strcmp(state, "23505") == 0;
}

static void on_written(PGresult *res, const char *error, void *data)
{
	struct batch *b = data;
	struct store *s = b->store;
	uv_timer_t *t;

	if (!error) {
		s->written += b->rows;
		s->batches++;
		batch_done(b);
		return;
	}
	if (s->discarding || s->closing) {
		batch_done(b);
		return;
	}
	/* Some of its rows are stored already: at once through the staging table, which skips them. */
	if (b->tries == 1 && unique_violation(res)) {
		s->conflicts++;
		log_debug("store: %u trials meet rows already stored; writing the new ones", b->rows);
		send_batch(b);
		return;
	}
	log_warn("store: writing %u trials failed, retrying: %s", b->rows, error);
	t = malloc(sizeof(*t));
	if (!t) {
		send_batch(b);
		return;
	}
	uv_timer_init(s->loop, t);
	t->data = b;
	uv_timer_start(t, on_retry, RETRY_MS, 0);
}

/* The connection for the next batch: a connected one with the fewest queries waiting, in turn. */
static struct db *pick_conn(struct store *s)
{
	struct db *best = NULL;
	bool best_up = false;

	for (unsigned i = 0; i < s->nconns; i++) {
		struct db *c = s->conns[(s->next_conn + i) % s->nconns];
		bool up = db_connected(c);

		if (!best || (up && !best_up) || (up == best_up && db_backlog(c) < db_backlog(best))) {
			best = c;
			best_up = up;
		}
	}
	s->next_conn = (s->next_conn + 1) % s->nconns;
	return best;
}

static void send_batch(struct batch *b)
{
	struct store *s = b->store;
	int rc;

	/* A retry goes through the staging table: the first try may have committed before its answer was lost. */
	b->conn = pick_conn(s);
	rc = db_copy(b->conn, b->tries++ == 0 ? copy_sql : stage_sql, b->data, b->len, on_written, b);
	if (rc < 0)
		on_written(NULL, rc == -EROFS ? "the daemon refuses to write" : "cannot queue query", b);
}

void store_discard(struct store *s)
{
	s->discarding = true;
	uv_timer_stop(&s->flush_timer);
	/* The buffered rows are dropped as their batch would have been: whoever waits for it hears. */
	if (s->nrows > 0)
		s->next_seq++;
	s->rows.len = 0;
	s->nrows = 0;
	for (unsigned i = 0; i < s->nconns; i++)
		db_refuse(s->conns[i],
			  "the daemon refuses to write (its schema is older than the database's)");
	wake_waiters(s);
}

void store_flush(struct store *s)
{
	struct batch *b;

	uv_timer_stop(&s->flush_timer);
	if (s->nrows == 0 || s->discarding || s->closing)
		return;
	b = calloc(1, sizeof(*b));
	if (!b)
		return; /* keep the rows; the next add or flush tries again */
	b->store = s;
	b->data = s->rows.data;
	b->len = s->rows.len;
	b->cap = s->rows.cap;
	b->rows = s->nrows;
	b->seq = s->next_seq++;
	s->rows = (struct text){0};
	s->nrows = 0;
	b->next = s->flying;
	s->flying = b;
	s->in_flight++;
	send_batch(b);
}

int store_flush_then(struct store *s, store_flushed_cb cb, void *data)
{
	store_flush(s);
	return store_then(s, cb, data);
}

int store_then(struct store *s, store_flushed_cb cb, void *data)
{
	struct waiter *w;

	if (s->closing)
		return 0; /* the daemon is exiting: nobody hears */
	if (s->discarding || (s->nrows == 0 && oldest_unwritten(s) == s->next_seq)) {
		cb(data);
		return 0;
	}
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	/* Rows still buffered go out as batch next_seq (at the latest when the flush timer fires). */
	*w = (struct waiter){.seq = s->nrows > 0 ? s->next_seq : s->next_seq - 1, .cb = cb, .data = data};
	/* Appended: waiters hear in the order they came. */
	{
		struct waiter **p = &s->waiters;

		while (*p)
			p = &(*p)->next;
		*p = w;
	}
	return 0;
}

static void on_flush_timer(uv_timer_t *t)
{
	store_flush(t->data);
}

int store_add_trial(struct store *s, const struct trial_row *row)
{
	size_t mark = s->rows.len;

	if (s->discarding || s->closing)
		return 0;
	put_row(&s->rows, row, s->host);
	if (s->rows.oom) {
		/* The rows before this one are kept; this one is lost. */
		s->rows.oom = false;
		s->rows.len = mark;
		return -ENOMEM;
	}
	s->nrows++;
	if (s->nrows >= NW_STORE_BATCH_MAX || s->rows.len >= NW_STORE_BATCH_BYTES)
		store_flush(s);
	else if (!uv_is_active((uv_handle_t *)&s->flush_timer))
		uv_timer_start(&s->flush_timer, on_flush_timer, STORE_FLUSH_MS, 0);
	return 0;
}

unsigned store_pending(const struct store *s)
{
	return s->in_flight + (s->nrows > 0);
}

unsigned long long store_written(const struct store *s)
{
	return s->written;
}

unsigned long long store_batches(const struct store *s)
{
	return s->batches;
}

bool store_connected(const struct store *s)
{
	for (unsigned i = 0; i < s->nconns; i++)
		if (!db_connected(s->conns[i]))
			return false;
	return true;
}

unsigned long long store_conflicts(const struct store *s)
{
	return s->conflicts;
}

unsigned store_connections(const struct store *s)
{
	return s->nconns;
}

int store_init(uv_loop_t *loop, const char *conninfo, const char *host, unsigned timeout_ms, unsigned nconns,
	       struct store **out)
{
	struct store *s;

	if (nconns == 0 || nconns > NW_STORE_CONNECTIONS_MAX)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->conns = calloc(nconns, sizeof(*s->conns));
	if (!s->conns) {
		free(s);
		return -ENOMEM;
	}
	s->loop = loop;
	s->host = host;
	for (unsigned i = 0; i < nconns; i++) {
		char name[16];

		snprintf(name, sizeof(name), "store%u", i);
		if (db_open(loop, conninfo, name, timeout_ms, &s->conns[i]) < 0)
			break;
		s->nconns++;
	}
	if (s->nconns == 0) {
		free(s->conns);
		free(s);
		return -ENOMEM;
	}
	uv_timer_init(loop, &s->flush_timer);
	s->flush_timer.data = s;
	*out = s;
	return 0;
}

static void on_store_closed(uv_handle_t *h)
{
	struct store *s = h->data;

	bigbuf_free(s->rows.data, s->rows.cap);
	free(s->conns);
	free(s);
}

void store_close(struct store *s)
{
	struct waiter *w;

	if (s->closing)
		return;
	s->closing = true;
	uv_timer_stop(&s->flush_timer);
	/* Nobody hears any more: the daemon is exiting. */
	while ((w = s->waiters)) {
		s->waiters = w->next;
		free(w);
	}
	/* Their queued batches fail now (and are dropped: closing); their memory goes with them. */
	for (unsigned i = 0; i < s->nconns; i++)
		db_close(s->conns[i]);
}

void store_free(struct store *s)
{
	store_close(s);
	uv_close((uv_handle_t *)&s->flush_timer, on_store_closed);
}
