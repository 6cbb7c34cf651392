/*
 * api_internal: what the API's read routes (api.c), write routes
 * (api_write.c) and /metrics (api_metrics.c) share.
 */
#ifndef NW_API_INTERNAL_H
#define NW_API_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>

struct nwd;
struct http_req;
struct pending;

/* Continues a request once its query answered (replaces the default JSON pass-through). */
typedef void (*api_then_fn)(struct pending *p, PGresult *res, const char *error);

/* A request waiting for its query. */
struct pending {
	struct http_req *r; /* never NULL inside a then-function */
	struct nwd *d;
	const char *what; /* "commit" etc., for 404 messages */
	char key[64];
	bool text; /* reply text/plain instead of JSON */
	api_then_fn then;
	char token_name[64]; /* who wrote, once authenticated */
	const char *method, *path;
	char *body; /* a copy of the request body for writes */
};

/*
 * Runs 'sql' on the read connections for request 'r' and continues with
 * 'then' (NULL: pass the JSON through). 'key' is copied; 'body' (may be NULL)
 * is taken. The request may be answered before this returns.
 */
void api_ask(struct nwd *d, struct http_req *r, const char *sql, int n, const char *const *params,
	     const char *what, const char *key, char *body, api_then_fn then);
bool api_arg_uint(struct http_req *r, const char *key, unsigned dflt, unsigned max, unsigned *out);

/* POST and DELETE routes: bearer-token authentication, then the write. */
void api_write(struct nwd *d, struct http_req *r, const char *method, const char *path);
/* GET /metrics in the Prometheus text format. */
void api_metrics(struct nwd *d, struct http_req *r);

#endif
