/*
 * api: the routes of the REST API (/api/v1/...) and the dashboard's static
 * files. Answers are built by PostgreSQL as JSON (one query per request on
 * the least busy of the daemon's read connections) and passed through
 * unchanged; a commit's answer is cached (see "The response cache" in api.c).
 */
#ifndef NW_API_H
#define NW_API_H

#include <stdbool.h>

struct nwd;
struct http_req;

/* Routes one request; replies now or from a query's callback. */
void api_handle(struct nwd *d, struct http_req *r, const char *method, const char *url);
/*
 * On one of libmicrohttpd's threads: answers a GET of a commit from the
 * response cache while its entry is fresh, without the loop; false: the
 * request is the loop's (api_handle).
 */
bool api_reply_cached(struct http_req *r, const char *method, const char *url);
/* The client is gone: a reply still owed to 'r' is dropped. */
void api_abandon(struct http_req *r);

/* Whether 's' looks like a commit id: 4 to 40 lowercase hex digits. */
bool api_valid_sha(const char *s);

#endif
