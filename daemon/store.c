/* store: batched, idempotent trial writes. */
#include "store.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "db.h"
#include "log.h"

#define RETRY_MS 1000

static const char insert_sql[] =
    "INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen,"
    " case_digest, tensors, digest, digests_differ, kernel_us, error, slot, host, sanitizer,"
    " sanitizer_status)"
    " SELECT commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, case_digest,"
    " coalesce(tensors::jsonb, '[]'), digest, coalesce(digests_differ, 0), kernel_us, error, slot, $2,"
    " sanitizer, sanitizer_status"
    " FROM json_to_recordset($1::json) AS t(commit_id bigint, check_id int, dtype text, seed bigint,"
    " attempt smallint, outcome text, ratio float8, family text, shape bigint[], gen int,"
    " case_digest text, tensors text, digest text, digests_differ int, kernel_us float8, error text,"
    " slot text, sanitizer text, sanitizer_status text)"
    " ON CONFLICT DO NOTHING";

struct batch {
	struct store *store;
	char *json;
	unsigned rows;
};

struct store {
	uv_loop_t *loop;
	struct db *db;
	const char *host;
	json_t *rows; /* the batch being filled */
	uv_timer_t flush_timer;
	unsigned in_flight; /* batches sent or waiting for a retry */
	unsigned long long written;
	bool discarding; /* store_discard(): rows are dropped, failed batches not retried */
};

static void send_batch(struct batch *b);

static json_t *real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *text_or_null(const char *s)
{
	return s && *s ? json_string(s) : json_null();
}

static void on_retry(uv_timer_t *t)
{
	send_batch(t->data);
	uv_close((uv_handle_t *)t, (uv_close_cb)free);
}

static void on_inserted(PGresult *res, const char *error, void *data)
{
	struct batch *b = data;
	struct store *s = b->store;
	uv_timer_t *t;

	if (!error) {
		s->written += b->rows;
		s->in_flight--;
		free(b->json);
		free(b);
		return;
	}
	if (s->discarding) {
		s->in_flight--;
		free(b->json);
		free(b);
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

static void send_batch(struct batch *b)
{
	const char *params[2] = {b->json, b->store->host};

	if (db_query(b->store->db, insert_sql, 2, params, on_inserted, b) < 0)
		on_inserted(NULL, "cannot queue query", b);
}

void store_discard(struct store *s)
{
	s->discarding = true;
	uv_timer_stop(&s->flush_timer);
	json_array_clear(s->rows);
}

void store_flush(struct store *s)
{
	struct batch *b;

	uv_timer_stop(&s->flush_timer);
	if (json_array_size(s->rows) == 0)
		return;
	b = calloc(1, sizeof(*b));
	if (!b)
		return; /* keep the rows; the next add or flush tries again */
	b->json = json_dumps(s->rows, JSON_COMPACT);
	if (!b->json) {
		free(b);
		return;
	}
	b->store = s;
	b->rows = (unsigned)json_array_size(s->rows);
	json_array_clear(s->rows);
	s->in_flight++;
	send_batch(b);
}

static void on_flush_timer(uv_timer_t *t)
{
	store_flush(t->data);
}

static json_t *row_json(const struct trial_row *r)
{
	const struct proto_trial *t = r->result;
	json_t *o = json_object();
	json_t *shape;

	if (!o)
		return NULL;
	json_object_set_new(o, "commit_id", json_integer(r->commit_id));
	json_object_set_new(o, "check_id", json_integer(r->check_id));
	json_object_set_new(o, "dtype", json_string(r->dtype));
	json_object_set_new(o, "seed", json_integer((json_int_t)r->seed));
	json_object_set_new(o, "attempt", json_integer(r->attempt));
	json_object_set_new(o, "outcome", json_string(outcome_name(r->outcome)));
	json_object_set_new(o, "error", text_or_null(r->error));
	json_object_set_new(o, "slot", json_string(r->slot));
	json_object_set_new(o, "sanitizer", text_or_null(r->sanitizer));
	json_object_set_new(o, "sanitizer_status", text_or_null(r->sanitizer_status));
	if (!t)
		return o;
	json_object_set_new(o, "ratio", real_or_null(t->ratio));
	json_object_set_new(o, "family", text_or_null(t->family));
	if (t->ndim > 0 || t->family[0]) {
		shape = json_array();
		for (unsigned i = 0; i < t->ndim; i++)
			json_array_append_new(shape, json_integer(t->shape[i]));
		json_object_set_new(o, "shape", shape);
	}
	if (t->gen >= 0)
		json_object_set_new(o, "gen", json_integer(t->gen));
	/* NULL when the runner sent none (a runner older than case.digest). */
	json_object_set_new(o, "case_digest", text_or_null(t->case_digest));
	/* Passed as text and cast by PostgreSQL: parsing it here would only cost time. */
	if (t->tensors_json)
		json_object_set_new(o, "tensors", json_string(t->tensors_json));
	json_object_set_new(o, "digest", text_or_null(t->digest));
	json_object_set_new(o, "digests_differ", json_integer(t->digests_differ));
	json_object_set_new(o, "kernel_us", real_or_null(t->kernel_us));
	if (!r->error && t->error[0])
		json_object_set_new(o, "error", json_string(t->error));
	return o;
}

int store_add_trial(struct store *s, const struct trial_row *row)
{
	json_t *o;

	if (s->discarding)
		return 0;
	o = row_json(row);
	if (!o || json_array_append_new(s->rows, o) < 0)
		return -ENOMEM;
	if (json_array_size(s->rows) >= NW_STORE_BATCH_MAX)
		store_flush(s);
	else if (!uv_is_active((uv_handle_t *)&s->flush_timer))
		uv_timer_start(&s->flush_timer, on_flush_timer, STORE_FLUSH_MS, 0);
	return 0;
}

unsigned store_pending(const struct store *s)
{
	return s->in_flight + (json_array_size(s->rows) > 0);
}

unsigned long long store_written(const struct store *s)
{
	return s->written;
}

int store_init(uv_loop_t *loop, struct db *db, const char *host, struct store **out)
{
	struct store *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->rows = json_array();
	if (!s->rows) {
		free(s);
		return -ENOMEM;
	}
	s->loop = loop;
	s->db = db;
	s->host = host;
	uv_timer_init(loop, &s->flush_timer);
	s->flush_timer.data = s;
	*out = s;
	return 0;
}

static void on_store_closed(uv_handle_t *h)
{
	struct store *s = h->data;

	json_decref(s->rows);
	free(s);
}

void store_free(struct store *s)
{
	uv_close((uv_handle_t *)&s->flush_timer, on_store_closed);
}
