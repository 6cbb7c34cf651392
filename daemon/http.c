/* http: libmicrohttpd on threads of its own; the requests it cannot answer alone go to the loop. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "api.h"
#include "caps.h"
#include "log.h"
#include "nwd.h"
#include "protocol.h"

/* How long a connection may stay idle (no request, or a reply not read) before it is closed. */
#define IDLE_TIMEOUT_S 30
/* How long a stop waits for the replies the loop made to be sent. */
#define STOP_SEND_MS 1000

struct http {
	struct nwd *d;
	struct MHD_Daemon *mhd;
	uv_async_t wake;  /* requests handed to the loop */
	uv_idle_t resume; /* replies made on the loop, handed back to libmicrohttpd */
	unsigned port;
	int open_handles;
	pthread_mutex_t lock; /* guards 'inbox' and 'stopping', written by every thread */
	struct http_req *inbox, **inbox_tail;
	bool stopping;
	atomic_uint unsent; /* requests handed to the loop whose replies are not sent yet */
	/* The loop's own: requests it has taken and not answered, and answers not yet handed back. */
	struct http_req *waiting, *answered;
};

struct http_req {
	struct http *h;
	struct MHD_Connection *conn;
	bool started, dispatched, ready, too_large;
	/* Given to the loop (its connection with a longer timeout): the loop's until its reply is handed back. */
	bool handed;
	bool nul;                       /* the request target holds a NUL byte, raw or as %00 */
	size_t target_len;              /* the raw target's length as a C string (on_uri) */
	const char *method, *url;       /* libmicrohttpd's, valid while the request lives */
	struct http_req *next;          /* in the inbox, or in the loop's list of answered requests */
	struct http_req *wprev, *wnext; /* in the loop's list of waiting requests */
	unsigned status;
	const char *ctype;
	char *body;
	size_t len;
	int fd; /* a file to send instead of body, or -1 */
	size_t fd_size;
	struct http_body *shared; /* a shared body to send instead of body, or NULL */
	char *upload;
	size_t upload_len;
	void *pending;
};

/* A reply body shared by many requests: one libmicrohttpd response, queued on each connection. */
struct http_body {
	atomic_uint refs; /* taken and dropped on the loop and on libmicrohttpd's threads */
	size_t len;
	struct MHD_Response *resp;
};

static void add_headers(struct MHD_Response *resp, const char *content_type)
{
	MHD_add_response_header(resp, "Content-Type", content_type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
}

struct http_body *http_body_new(char *data, size_t len, const char *content_type)
{
	struct http_body *b = calloc(1, sizeof(*b));

	if (!b || !(b->resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE))) {
		free(b);
		free(data);
		return NULL;
	}
	add_headers(b->resp, content_type);
	atomic_init(&b->refs, 1);
	b->len = len;
	return b;
}

void http_body_ref(struct http_body *b)
{
	atomic_fetch_add(&b->refs, 1);
}

void http_body_unref(struct http_body *b)
{
	if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
		/* Connections still sending it hold libmicrohttpd's own references. */
		MHD_destroy_response(b->resp);
		free(b);
	}
}

size_t http_body_len(const struct http_body *b)
{
	return b->len;
}

static enum MHD_Result queue(struct http_req *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (r->handed)
		/* The reply is queued (once a request): the connection goes back to the default timeout (see handoff). */
		MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
	if (r->shared) {
		ret = MHD_queue_response(r->conn, r->status, r->shared->resp);
		http_body_unref(r->shared);
		r->shared = NULL;
		return ret;
	}
	if (r->fd >= 0) {
		resp = MHD_create_response_from_fd(r->fd_size, r->fd);
		r->fd = -1; /* libmicrohttpd closes it */
	} else {
		resp =
		    MHD_create_response_from_buffer(r->len, r->body ? r->body : (char *)"",
						    r->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
		r->body = NULL;
	}
	if (!resp)
		return MHD_NO;
	add_headers(resp, r->ctype);
	ret = MHD_queue_response(r->conn, r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void on_resume(uv_idle_t *idle);

static void waiting_unlink(struct http_req *r)
{
	if (r->wprev)
		r->wprev->wnext = r->wnext;
	else
		r->h->waiting = r->wnext;
	if (r->wnext)
		r->wnext->wprev = r->wprev;
	r->wprev = r->wnext = NULL;
}

/*
 * The reply is set. A request the loop answers is handed back to
 * libmicrohttpd from the loop's next idle turn (on_resume), not here: the
 * code that replied may still look at the request until its callback
 * returns, and once resumed the request may be sent and freed at once.
 */
static void set_ready(struct http_req *r)
{
	struct http *h = r->h;

	r->ready = true;
	if (r->handed) {
		waiting_unlink(r);
		r->next = h->answered;
		h->answered = r;
		uv_idle_start(&h->resume, on_resume);
	}
}

void http_reply(struct http_req *r, unsigned status, const char *content_type, char *body, size_t len)
{
	if (r->ready) {
		free(body);
		return;
	}
	r->status = status;
	r->ctype = content_type;
	r->body = body;
	r->len = len;
	set_ready(r);
}

void http_reply_body(struct http_req *r, unsigned status, struct http_body *b)
{
	if (r->ready)
		return;
	http_body_ref(b);
	r->status = status;
	r->shared = b;
	set_ready(r);
}

/*
 * Copies 'in' to 'out' (of outlen bytes, NUL-terminated, cut on a character)
 * with every byte that is not part of valid UTF-8 written as the text \xHH:
 * a message that quotes the request (a path with %ff in it) can then be
 * carried by JSON, and still shows what was sent.
 */
static void escape_utf8(const char *in, char *out, size_t outlen)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t o = 0;

	while (*s) {
		size_t n = proto_utf8_len(s);

		if (n == 0) {
			if (o + 4 >= outlen)
				break;
			snprintf(out + o, outlen - o, "\\x%02x", *s);
			o += 4;
			s++;
			continue;
		}
		if (o + n >= outlen)
			break;
		memcpy(out + o, s, n);
		o += n;
		s += n;
	}
	out[o] = '\0';
}

void http_reply_error(struct http_req *r, unsigned status, const char *fmt, ...)
{
	char msg[512], text[4 * sizeof(msg)], *body;
	va_list ap;
	json_t *o;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	escape_utf8(msg, text, sizeof(text));
	o = json_pack("{s:s, s:i}", "error", text, "status", (int)status);
	body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!body) {
		/* Out of memory: a fixed body still says what happened. */
		static const char fallback[] = "{\"error\":\"out of memory\",\"status\":500}";

		body = strdup(fallback);
		http_reply(r, 500, "application/json", body, body ? strlen(body) : 0);
		return;
	}
	http_reply(r, status, "application/json", body, strlen(body));
}

static const char *content_type(const char *path)
{
	static const struct {
		const char *ext, *type;
	} types[] = {
	    {".html", "text/html; charset=utf-8"},
	    {".js", "text/javascript; charset=utf-8"},
	    {".mjs", "text/javascript; charset=utf-8"},
	    {".css", "text/css; charset=utf-8"},
	    {".json", "application/json"},
	    {".svg", "image/svg+xml"},
	    {".png", "image/png"},
	    {".ico", "image/x-icon"},
	    {".map", "application/json"},
	    {".yaml", "text/yaml; charset=utf-8"},
	};
	const char *dot = strrchr(path, '.');

	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return "application/octet-stream";
}

void http_reply_file(struct http_req *r, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", r->h->d->cfg.web_root, rel);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		http_reply_error(r, 404, "no such page '/%s'", rel);
		return;
	}
	r->fd = fd;
	r->fd_size = (size_t)st.st_size;
	http_reply(r, 200, content_type(path), NULL, 0);
}

void http_set_pending(struct http_req *r, void *pending)
{
	r->pending = pending;
}

void *http_pending(struct http_req *r)
{
	return r->pending;
}

const char *http_arg(struct http_req *r, const char *key)
{
	return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_header(struct http_req *r, const char *key)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

const char *http_body(struct http_req *r, size_t *len)
{
	if (len)
		*len = r->upload_len;
	return r->upload ? r->upload : "";
}

/* Links a request the loop takes into its list of waiting ones (set_ready unlinks it). */
static void take(struct http *h, struct http_req *r)
{
	r->next = NULL;
	r->wprev = NULL;
	r->wnext = h->waiting;
	if (h->waiting)
		h->waiting->wprev = r;
	h->waiting = r;
}

/* The loop: requests handed over by libmicrohttpd's threads. */
static struct http_req *take_inbox(struct http *h)
{
	struct http_req *r;

	pthread_mutex_lock(&h->lock);
	r = h->inbox;
	h->inbox = NULL;
	h->inbox_tail = &h->inbox;
	pthread_mutex_unlock(&h->lock);
	return r;
}

static void on_wake(uv_async_t *a)
{
	struct http *h = a->data;
	struct http_req *r = take_inbox(h), *next;

	for (; r; r = next) {
		next = r->next;
		take(h, r);
		api_handle(h->d, r, r->method, r->url);
	}
}

/* The loop's idle turn: the requests it answered go back to libmicrohttpd, which sends them. */
static void on_resume(uv_idle_t *idle)
{
	struct http *h = idle->data;
	struct http_req *r = h->answered, *next;

	h->answered = NULL;
	uv_idle_stop(idle);
	for (; r; r = next) {
		next = r->next;
		/* From here on the request is libmicrohttpd's: it may be sent and freed at once. */
		MHD_resume_connection(r->conn);
	}
}

/*
 * On a libmicrohttpd thread: the request goes to the loop, its connection
 * suspended until the loop's reply comes back (on_resume); from then on the
 * loop owns it. False: the daemon is stopping, and it was answered here.
 */
static bool handoff(struct http_req *r)
{
	struct http *h = r->h;

	pthread_mutex_lock(&h->lock);
	if (h->stopping) {
		pthread_mutex_unlock(&h->lock);
		http_reply_error(r, 503, "the daemon is stopping");
		return false;
	}
	/*
	 * libmicrohttpd 0.9.75 marks a resumed connection readable and, unless
	 * it looks at the connection's state first, reads before it writes: a
	 * client that half-closed its socket after the request then reads as
	 * gone, and is closed unanswered. It looks at the state first (and so
	 * queues the reply, and writes) for every connection with a timeout of
	 * its own, and for the one idle longest among the others: so this one
	 * gets a timeout of its own until its reply is queued (queue()).
	 */
	MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S + 1);
	r->handed = true;
	atomic_fetch_add(&h->unsent, 1);
	MHD_suspend_connection(r->conn);
	r->next = NULL;
	*h->inbox_tail = r;
	h->inbox_tail = &r->next;
	pthread_mutex_unlock(&h->lock);
	uv_async_send(&h->wake);
	return true;
}

/* On a libmicrohttpd thread. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_size,
				  void **con_cls)
{
	struct http_req *r = *con_cls;

	/* on_uri made it; none means it was out of memory: the connection is closed. */
	if (!r)
		return MHD_NO;
	if (!r->started) {
		/*
		 * The headers are in; the body (if any) comes with the next calls.
		 * 'url' is where on_uri's target started and 'version' follows the
		 * target's end: a raw NUL made on_uri's target shorter than that.
		 */
		r->started = true;
		if ((uintptr_t)version > (uintptr_t)url &&
		    (uintptr_t)version - (uintptr_t)url - 1 != r->target_len)
			r->nul = true;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		/* Bodies are capped; the rest of an oversized one is read and dropped. */
		if (!r->too_large && r->upload_len + *upload_size <= NW_HTTP_BODY_MAX) {
			char *grown = realloc(r->upload, r->upload_len + *upload_size + 1);

			if (!grown)
				return MHD_NO;
			memcpy(grown + r->upload_len, upload_data, *upload_size);
			r->upload = grown;
			r->upload_len += *upload_size;
			r->upload[r->upload_len] = '\0';
		} else {
			r->too_large = true;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (!r->dispatched) {
		r->dispatched = true;
		r->method = method;
		r->url = url;
		if (r->nul)
			/* libmicrohttpd cuts the decoded path at the NUL: '/%00' would be '/'. */
			http_reply_error(r, 400, "the request target holds a NUL byte (%%00)");
		else if (r->too_large)
			http_reply_error(r, 413, "request body larger than %d bytes", NW_HTTP_BODY_MAX);
		else if (!api_reply_cached(r, method, url) && handoff(r))
			return MHD_YES; /* the loop's now (not even r->ready is read): called again once resumed */
	}
	if (!r->ready)
		return MHD_YES;
	return queue(r);
}

/*
 * A request starts: its state is made here, where the target is seen as the
 * client sent it, before libmicrohttpd decodes it (and cuts it at a %00).
 */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->h = cls;
	r->conn = conn;
	r->fd = -1;
	if (uri) {
		/* libmicrohttpd decodes %XY for hex X and Y only: this is the encoded way to a NUL. */
		r->nul = strstr(uri, "%00") != NULL;
		r->target_len = strlen(uri);
	}
	return r;
}

/* On a libmicrohttpd thread (or http_stop's, in MHD_stop_daemon). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode code)
{
	struct http_req *r = *con_cls;

	if (!r)
		return;
	*con_cls = NULL;
	if (r->handed && !r->ready) {
		/* The loop still holds it; http_stop answers every such request before stopping. */
		log_error("http: a connection closed while its request was being answered");
		return;
	}
	if (r->handed)
		atomic_fetch_sub(&r->h->unsent, 1);
	if (r->fd >= 0)
		close(r->fd);
	http_body_unref(r->shared);
	free(r->body);
	free(r->upload);
	free(r);
}

static void on_http_closed(uv_handle_t *handle)
{
	struct http *h = handle->data;

	if (--h->open_handles == 0) {
		pthread_mutex_destroy(&h->lock);
		free(h);
	}
}

static void close_handles(struct http *h)
{
	uv_close((uv_handle_t *)&h->wake, on_http_closed);
	uv_close((uv_handle_t *)&h->resume, on_http_closed);
}

int http_start(struct nwd *d, struct http **out)
{
	struct http *h = calloc(1, sizeof(*h));
	struct sockaddr_in sa = {0};
	const union MHD_DaemonInfo *info;
	unsigned threads = d->cfg.http_threads;
	int rc;

	if (!h)
		return -ENOMEM;
	h->d = d;
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)d->cfg.http_port);
	if (inet_pton(AF_INET, d->cfg.http_address, &sa.sin_addr) != 1) {
		log_error("http: invalid listen address '%s'", d->cfg.http_address);
		free(h);
		return -EINVAL;
	}
	rc = pthread_mutex_init(&h->lock, NULL);
	if (rc) {
		free(h);
		return -rc;
	}
	h->inbox_tail = &h->inbox;
	uv_async_init(d->loop, &h->wake, on_wake);
	uv_idle_init(d->loop, &h->resume);
	h->wake.data = h;
	h->resume.data = h;
	h->open_handles = 2;
	/* One thread polls when threads is 1; libmicrohttpd's pool takes 2 or more. */
	h->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME,
				  (uint16_t)d->cfg.http_port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
				  (struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE,
				  threads > 1 ? threads : 0u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
				  (size_t)NW_HTTP_HEADER_MAX * 2, MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)NW_HTTP_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
				  (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				  MHD_OPTION_URI_LOG_CALLBACK, on_uri, h, MHD_OPTION_END);
	if (!h->mhd) {
		log_error("http: cannot listen on %s:%u: %s", d->cfg.http_address, d->cfg.http_port,
			  strerror(errno));
		close_handles(h);
		return -EADDRINUSE;
	}
	info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : d->cfg.http_port;
	*out = h;
	return 0;
}

unsigned http_port(const struct http *h)
{
	return h->port;
}

/*
 * Stops serving. Every request the loop holds is answered first (503 for
 * those still waiting on a query, which is abandoned), since libmicrohttpd
 * cannot stop with a connection suspended; new requests are answered 503
 * by the threads themselves meanwhile.
 */
void http_stop(struct http *h)
{
	struct http_req *r, *next;

	pthread_mutex_lock(&h->lock);
	h->stopping = true;
	pthread_mutex_unlock(&h->lock);
	for (r = take_inbox(h); r; r = next) {
		next = r->next;
		take(h, r);
	}
	while ((r = h->waiting)) {
		api_abandon(r);
		http_reply_error(r, 503, "the daemon is stopping");
	}
	on_resume(&h->resume);
	/* The replies go out before the connections close, for a client that reads them in time. */
	for (unsigned ms = 0; atomic_load(&h->unsent) > 0 && ms < STOP_SEND_MS; ms++)
		uv_sleep(1);
	MHD_stop_daemon(h->mhd);
	close_handles(h);
}
