/*
 * api_write: the API's writes (POST, DELETE). Each needs a bearer token made
 * by `numwatch token create`; only its SHA-256 is stored, so the check is one
 * query. Bodies are JSON objects (capped by http.c); errors are JSON.
 */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_internal.h"
#include "caps.h"
#include "db.h"
#include "http.h"
#include "nwd.h"
#include "queries.h"

static const char auth_sql[] =
    "UPDATE tokens SET last_used = now()"
    " WHERE hash = sha256(convert_to($1, 'UTF8')) AND revoked_at IS NULL RETURNING name";

/* Validates the range and queues the bisection; the bisector picks it up. */
#define bisect_sql nwq_api_write_bisect /* sql/queries/api_write_bisect.sql */

/*
 * A run by hand: the given number of seeds at one commit, ahead of background
 * work, as jobs of NW_RUN_PART_SEEDS seeds each ($6) so that every slot of every
 * host takes a share: one job of 1000 seeds ran on one slot while the other
 * GPUs of the host idled. Returns the first part's id and the number of parts.
 */
#define run_sql nwq_api_write_run /* sql/queries/api_write_run.sql */

/* Re-run: rebuild a commit whose build failed, and queue its trials jobs again with their strikes cleared. */
#define rerun_sql nwq_api_write_rerun /* sql/queries/api_write_rerun.sql */

#define mute_sql nwq_api_write_mute /* sql/queries/api_write_mute.sql */

static const char unmute_sql[] =
    "WITH k AS (SELECT id FROM checks WHERE repo_id = $1 AND name = $2),"
    " del AS (DELETE FROM mutes WHERE check_id = (SELECT id FROM k) AND dtype = $3 RETURNING 1)"
    " SELECT (SELECT count(*) FROM k), 1, 1, (SELECT count(*) FROM del)";

#define TEXT_OF_(x) #x
#define TEXT_OF(x)  TEXT_OF_(x) /* a number's digits, as a query parameter */

enum write_kind { W_BISECT, W_RUN, W_RERUN, W_MUTE, W_UNMUTE };

static const char *str_field(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s && *s ? s : NULL;
}

static bool is_name(const char *s)
{
	if (!s || strlen(s) >= NW_PROTO_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-+:", *s))
			return false;
	return true;
}

/*
 * Whether a bearer token can be one `numwatch token create` made (printable
 * ASCII, bounded). Anything else is no token, answered 401 without a lookup:
 * the lookup's UTF-8 conversion would fail on bytes that are not UTF-8.
 */
static bool token_plausible(const char *t)
{
	size_t n = 0;

	for (; t[n]; n++)
		if (n >= NW_HTTP_TOKEN_MAX || t[n] <= ' ' || t[n] > '~')
			return false;
	return n > 0;
}

/*
 * Write answers are (first key found, second found, third found, result);
 * the messages say which input was not found.
 */
static void on_written(struct pending *p, PGresult *res, const char *error)
{
	static const char *const missing[][3] = {
	    [W_BISECT] = {"unknown check or dtype", "no reachable commit matches 'good'",
			  "no reachable commit matches 'bad'"},
	    [W_RUN] = {"unknown commit", "unknown check or dtype", ""},
	    [W_RERUN] = {"unknown commit", "", ""},
	    [W_MUTE] = {"unknown check", "", ""},
	    [W_UNMUTE] = {"unknown check", "", ""},
	};
	enum write_kind kind = (enum write_kind)(p->key[0] - 'a');
	const char *result;
	char body[256];

	if (error) {
		const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

		if (state && strncmp(state, "22", 2) == 0)
			http_reply_error(p->r, 400, "invalid value: %s",
					 PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		else
			http_reply_error(p->r, 503, "database unavailable: %s", error);
		return;
	}
	for (int i = 0; i < 3; i++) {
		const char *n = PQgetvalue(res, 0, i);

		if (strcmp(n, "0") == 0) {
			http_reply_error(p->r, 404, "%s", missing[kind][i]);
			return;
		}
		if (strcmp(n, "1") != 0) {
			http_reply_error(p->r, 400, "ambiguous commit id: give more digits");
			return;
		}
	}
	result = db_get(res, 0, 3);
	switch (kind) {
	case W_BISECT:
		if (!result) {
			http_reply_error(p->r, 400, "'good' must come before 'bad' in the branch's history");
			return;
		}
		snprintf(body, sizeof(body), "{\"id\":%s,\"url\":\"/api/v1/bisections/%s\"}", result, result);
		break;
	case W_RUN:
		snprintf(body, sizeof(body), "{\"job\":%s}", result ? result : "null");
		break;
	case W_RERUN:
		snprintf(body, sizeof(body), "{\"requeued\":%s}", result ? result : "0");
		break;
	case W_MUTE:
		snprintf(body, sizeof(body), "{\"muted_until\":\"%s\"}", result ? result : "");
		break;
	case W_UNMUTE:
		snprintf(body, sizeof(body), "{\"removed\":%s}", result ? result : "0");
		break;
	}
	http_reply(p->r, kind == W_BISECT || kind == W_RUN ? 201 : 200, "application/json", strdup(body),
		   strlen(body));
}

/* Authenticated: parse again what api_write validated, and write. */
static void on_authenticated(struct pending *p, PGresult *res, const char *error)
{
	enum write_kind kind = (enum write_kind)(p->key[0] - 'a');
	json_t *o = p->body ? json_loads(p->body, 0, NULL) : json_object();
	char repo[16], who[96], trials[24], part[24];
	json_int_t ntrials;
	const char *params[6] = {repo};
	const char *sql = NULL;
	int n = 0;

	if (error) {
		http_reply_error(p->r, 503, "database unavailable: %s", error);
		goto out;
	}
	if (PQntuples(res) != 1) {
		http_reply_error(p->r, 401, "invalid or revoked token");
		goto out;
	}
	snprintf(repo, sizeof(repo), "%d", p->d->repo_id);
	snprintf(who, sizeof(who), "token:%s", PQgetvalue(res, 0, 0));
	switch (kind) {
	case W_BISECT:
		sql = bisect_sql;
		params[1] = str_field(o, "good");
		params[2] = str_field(o, "bad");
		params[3] = str_field(o, "check");
		params[4] = str_field(o, "dtype");
		params[5] = who;
		n = 6;
		break;
	case W_RUN:
		sql = run_sql;
		params[1] = str_field(o, "commit");
		params[2] = str_field(o, "check");
		params[3] = str_field(o, "dtype");
		ntrials = json_integer_value(json_object_get(o, "trials"))
			      ?: (json_int_t)p->d->cfg.trials_per_commit;
		snprintf(trials, sizeof(trials), "%lld", (long long)ntrials);
		snprintf(part, sizeof(part), "%lld", nw_run_part_seeds((long long)ntrials));
		params[4] = trials;
		params[5] = part;
		n = 6;
		break;
	case W_RERUN:
		sql = rerun_sql;
		params[1] = p->key + 1;
		n = 2;
		break;
	case W_MUTE:
		sql = mute_sql;
		params[1] = p->key + 1;
		params[2] = str_field(o, "dtype") ? str_field(o, "dtype") : "*";
		params[3] = str_field(o, "until");
		params[4] = str_field(o, "reason") ? str_field(o, "reason") : "";
		params[5] = who;
		n = 6;
		break;
	case W_UNMUTE:
		sql = unmute_sql;
		params[1] = p->key + 1;
		params[2] = p->body ? p->body : "*";
		n = 3;
		break;
	}
	{
		/* The kind travels in the key, as a letter: the request may be answered before api_ask returns. */
		char key[2] = {(char)('a' + kind), '\0'};

		api_ask(p->d, p->r, sql, n, params, "write", key, NULL, on_written);
	}
out:
	json_decref(o);
}

/* Validates a write before touching the database: 400s need no token lookup to be precise. */
static bool validate(struct http_req *r, enum write_kind kind, json_t *o)
{
	const char *a, *b;
	json_t *t;

	switch (kind) {
	case W_BISECT:
		a = str_field(o, "good");
		b = str_field(o, "bad");
		if (!a || !b || !api_valid_sha(a) || !api_valid_sha(b)) {
			http_reply_error(
			    r, 400, "'good' and 'bad' must be commit ids (4 to 40 lowercase hex digits)");
			return false;
		}
		if (!is_name(str_field(o, "check")) || !is_name(str_field(o, "dtype"))) {
			http_reply_error(r, 400, "'check' and 'dtype' are required");
			return false;
		}
		return true;
	case W_RUN:
		a = str_field(o, "commit");
		if (!a || !api_valid_sha(a) || !is_name(str_field(o, "check")) ||
		    !is_name(str_field(o, "dtype"))) {
			http_reply_error(r, 400, "'commit', 'check' and 'dtype' are required");
			return false;
		}
		t = json_object_get(o, "trials");
		if (t && (!json_is_integer(t) || json_integer_value(t) < 1 ||
			  json_integer_value(t) > NW_TRIALS_MAX)) {
			http_reply_error(r, 400, "'trials' must be an integer from 1 to %d", NW_TRIALS_MAX);
			return false;
		}
		return true;
	case W_MUTE:
		if (!str_field(o, "until")) {
			http_reply_error(r, 400, "'until' (a date) is required");
			return false;
		}
		if (str_field(o, "dtype") && !is_name(str_field(o, "dtype")) &&
		    strcmp(str_field(o, "dtype"), "*")) {
			http_reply_error(r, 400, "malformed 'dtype'");
			return false;
		}
		return true;
	default:
		return true;
	}
}

void api_write(struct nwd *d, struct http_req *r, const char *method, const char *path)
{
	bool post = strcmp(method, "POST") == 0;
	const char *auth = http_header(r, "Authorization");
	char key[64] = {0}, name[NW_PROTO_NAME_MAX];
	enum write_kind kind;
	const char *body, *rest;
	const char *params[1];
	char *copy = NULL;
	json_error_t jerr;
	json_t *o = NULL;
	size_t len;

	/* Route first: an unknown endpoint is a 404 whoever asks. */
	if (post && strcmp(path, "/bisections") == 0) {
		kind = W_BISECT;
	} else if (post && strcmp(path, "/runs") == 0) {
		kind = W_RUN;
	} else if (post && strncmp(path, "/commits/", 9) == 0 && (rest = strchr(path + 9, '/')) &&
		   strcmp(rest, "/rerun") == 0 && (size_t)(rest - path - 9) < sizeof(key) - 1) {
		kind = W_RERUN;
		memcpy(key + 1, path + 9, (size_t)(rest - path - 9));
		if (!api_valid_sha(key + 1)) {
			http_reply_error(r, 400, "malformed commit id");
			return;
		}
	} else if (strncmp(path, "/checks/", 8) == 0 && (rest = strchr(path + 8, '/')) &&
		   strcmp(rest, "/mute") == 0 && (size_t)(rest - path - 8) < sizeof(name)) {
		kind = post ? W_MUTE : W_UNMUTE;
		memcpy(name, path + 8, (size_t)(rest - path - 8));
		name[rest - path - 8] = '\0';
		if (!is_name(name)) {
			http_reply_error(r, 400, "malformed check name");
			return;
		}
		snprintf(key + 1, sizeof(key) - 1, "%s", name);
	} else {
		http_reply_error(r, post ? 404 : 405, "no such endpoint for %s '/api/v1%s'", method, path);
		return;
	}
	body = http_body(r, &len);
	if (post && len > 0) {
		o = json_loadb(body, len, 0, &jerr);
		if (!json_is_object(o)) {
			http_reply_error(r, 400, "body is not a JSON object: %s",
					 o ? "wrong type" : jerr.text);
			json_decref(o);
			return;
		}
	} else if (post) {
		o = json_object();
	}
	if (post && !validate(r, kind, o)) {
		json_decref(o);
		return;
	}
	json_decref(o);
	if (d->read_only) {
		http_reply_error(r, 503, "this daemon refuses to write: %s", d->refused);
		return;
	}
	if (!auth || strncmp(auth, "Bearer ", 7) != 0 || !auth[7]) {
		http_reply_error(r, 401,
				 "this write needs 'Authorization: Bearer TOKEN' (numwatch token create)");
		return;
	}
	if (!token_plausible(auth + 7)) {
		http_reply_error(r, 401, "invalid or revoked token");
		return;
	}
	params[0] = auth + 7;
	key[0] = (char)('a' + kind);
	if (kind == W_UNMUTE) {
		const char *dt = http_arg(r, "dtype");

		copy = strdup(dt && *dt ? dt : "*");
	} else if (len > 0) {
		copy = strndup(body, len);
	}
	api_ask(d, r, auth_sql, 1, params, "token", key, copy, on_authenticated);
}
