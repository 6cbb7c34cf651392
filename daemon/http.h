/*
 * http: the dashboard and REST server. libmicrohttpd runs on threads of its
 * own ([http] threads), which read requests and send replies, the kernel's
 * share of the work, away from the loop that runs the slots. A fresh cached
 * answer is sent by those threads alone (api_reply_cached); every other
 * request is handed to the libuv loop, its connection suspended until the
 * loop replies (at once, or from a query's callback), so neither side
 * blocks. The functions below are the loop's (http_start and http_stop
 * included); the threads reply only to requests they have not handed over.
 * Headers and bodies are capped (caps.h); an oversized request
 * is refused by libmicrohttpd with 431 or 413. A request whose target holds a
 * NUL byte (raw or %00) is refused with 400: decoded, it would be cut there.
 * A client that half-closes its socket after its request is still answered.
 */
#ifndef NW_HTTP_H
#define NW_HTTP_H

#include <stddef.h>

struct nwd;
struct http;
struct http_req;

int http_start(struct nwd *d, struct http **out);
void http_stop(struct http *h);
/* The port actually bound. */
unsigned http_port(const struct http *h);

/* Replies (at most once per request; may be called later, from a callback). Takes 'body'. */
void http_reply(struct http_req *r, unsigned status, const char *content_type, char *body, size_t len);
/*
 * A reply body shared by many requests (a cache's entry), reference counted:
 * http_body_new takes 'data' (malloc'ed; freed on failure too) and returns it
 * with one reference; http_reply_body takes a reference of its own.
 */
struct http_body;
struct http_body *http_body_new(char *data, size_t len, const char *content_type);
void http_body_ref(struct http_body *b);
void http_body_unref(struct http_body *b);
size_t http_body_len(const struct http_body *b);
void http_reply_body(struct http_req *r, unsigned status, struct http_body *b);
/* A JSON error: {"error": "<message>", "status": N}; bytes of the message that are not UTF-8 become \xHH. */
void http_reply_error(struct http_req *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A static file under the web root ('rel' already checked for ".."). */
void http_reply_file(struct http_req *r, const char *rel);
/* The API's state for a request waiting on a query (api_abandon clears it). */
void http_set_pending(struct http_req *r, void *pending);
void *http_pending(struct http_req *r);
/* A query-string argument, or NULL. */
const char *http_arg(struct http_req *r, const char *key);
/* A request header, or NULL. */
const char *http_header(struct http_req *r, const char *key);
/* The request body (POST), NUL-terminated; "" when none. */
const char *http_body(struct http_req *r, size_t *len);

#endif
