/*
 * fuzz_http: one raw HTTP request, as any client on the network may send
 * it, through the daemon's real request path: libmicrohttpd's parser (the
 * request line, headers, query string), http.c (body capture and caps) and
 * the API's routing, argument and JSON body checks (api.c, api_write.c),
 * and the web root's static files. The server is http_start()'s, on an
 * ephemeral loopback port, driven by a libuv loop as in the daemon; the
 * request is sent on a fresh connection, which is then half-closed, and
 * the answer read to the end.
 *
 * There is no PostgreSQL: the API's connection pool refuses every query
 * (db_refuse), so a request that passes its checks gets the same 503 a
 * daemon gives while its database is down; everything before the query is
 * the real code. Checked besides the sanitizers' findings: the server
 * answers or waits idle within 10 seconds; an answer is a well-formed HTTP
 * response; every JSON answer
 * of ours with an error status is {"error": "...", "status": N} with N its
 * status.
 */
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "db.h"
#include "fuzz_util.h"
#include "http.h"
#include "log.h"
#include "nwd.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ANSWER_DEADLINE_MS 10000
#define RESPONSE_MAX       (4 * 1024 * 1024)

static uv_loop_t loop;
static struct nwd d;
static unsigned port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int rc;

	json_object_seed(1);
	log_set_level(LOG_LEVEL_ERROR);
	if (uv_loop_init(&loop) != 0)
		abort();
	d.loop = &loop;
	d.repo_id = 1;
	d.cfg.http_address = "127.0.0.1";
	d.cfg.http_port = 0;
	d.cfg.web_root = NW_WEB_ROOT;
	d.cfg.node_name = "fuzz";
	d.cfg.trials_per_commit = 8;
	d.started_ms = uv_now(&loop);
	/* A pool that never reaches a server and takes no query: requests that get that far answer 503. */
	rc = db_open_pool(&loop, "host=/nonexistent/numwatch-fuzz connect_timeout=1", "http", 1, 15000,
			  &d.db_http);
	if (rc < 0)
		abort();
	db_refuse(d.db_http, "fuzz: no database");
	d.db = d.db_http;
	rc = http_start(&d, &d.http);
	if (rc < 0) {
		fprintf(stderr, "fuzz_http: http_start: %d\n", rc);
		abort();
	}
	port = http_port(d.http);
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The value of header 'name' in the header block [h, end), or NULL; 'len' gets its length. */
static const char *header(const char *h, const char *end, const char *name, size_t *len)
{
	size_t n = strlen(name);

	for (const char *line = h; line < end;) {
		const char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);

		if (!eol)
			eol = end;
		if ((size_t)(eol - line) > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
			const char *v = line + n + 1;

			while (v < eol && *v == ' ')
				v++;
			*len = (size_t)(eol - v);
			return v;
		}
		line = eol + 2;
	}
	return NULL;
}

/*
 * Whether resp[0..len) holds a whole response: headers and as many body
 * bytes as Content-Length says (none for HEAD). A kept-alive connection
 * stays open after its answer, so the end of the answer is not the end of
 * the stream.
 */
static bool complete(const char *resp, size_t len, bool head)
{
	const char *end = memmem(resp, len, "\r\n\r\n", 4), *clen;
	size_t clen_len;
	char num[24];

	if (!end)
		return false;
	clen = header(resp, end + 2, "Content-Length", &clen_len);
	if (!clen || clen_len >= sizeof(num))
		return false; /* read to the end of the stream */
	memcpy(num, clen, clen_len);
	num[clen_len] = '\0';
	return head || len - (size_t)(end + 4 - resp) >= strtoull(num, NULL, 10);
}

/*
 * Whether the server has nothing left to do: no event waits in the loop and
 * no timer is due. Data sent on loopback is in the server's socket when
 * send() returns, so a server that is idle after it has read what it could
 * and answered what it would. (One that waits for the rest of a request
 * does not notice the half-close: libmicrohttpd in epoll mode stops reading
 * after a short read, and the end of the stream came with the data.)
 */
static bool server_idle(void)
{
	struct pollfd p = {.fd = uv_backend_fd(&loop), .events = POLLIN};

	return uv_backend_timeout(&loop) != 0 && poll(&p, 1, 0) == 0;
}

/*
 * Sends 'data', half-closes, and reads the answer into 'resp' until it is
 * complete, the server closes, or the server is idle (a request it waits to
 * see the rest of); then resets the connection, so that the server drops it
 * at once whatever state it is in.
 */
static size_t exchange(const uint8_t *data, size_t size, bool head, char *resp, size_t cap)
{
	struct linger reset = {.l_onoff = 1, .l_linger = 0};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	uint64_t deadline = now_ms() + ANSWER_DEADLINE_MS;
	size_t sent = 0, got = 0;
	bool writing = true, done = false;
	int fd, idle = 0;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		abort();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
		fuzz_fail("cannot connect to the server: %s", strerror(errno));
	while (!done && idle < 2) {
		struct pollfd p[2] = {{.fd = fd, .events = POLLIN | (writing ? POLLOUT : 0)},
				      {.fd = uv_backend_fd(&loop), .events = POLLIN}};
		int timeout = uv_backend_timeout(&loop);
		uint64_t t = now_ms();

		if (t > deadline)
			fuzz_fail("server neither answered nor went idle within %d ms (%zu of %zu bytes "
				  "sent, %zu received)",
				  ANSWER_DEADLINE_MS, sent, size, got);
		if (timeout < 0 || timeout > 50)
			timeout = 50;
		if (!writing && server_idle())
			timeout = 0; /* nothing will come unless it is already there */
		if (poll(p, 2, timeout) < 0 && errno != EINTR)
			abort();
		if (writing && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = size > sent ? send(fd, data + sent, size - sent, MSG_NOSIGNAL) : 0;

			if (n > 0)
				sent += (size_t)n;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) || sent == size) {
				/* All sent, or the server stopped reading (it answers or closes). */
				shutdown(fd, SHUT_WR);
				writing = false;
			}
		}
		if (p[0].revents & (POLLIN | POLLERR | POLLHUP)) {
			ssize_t n = recv(fd, resp + got, cap - got, 0);

			if (n > 0)
				got += (size_t)n;
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || got == cap ||
			    (n > 0 && complete(resp, got, head)))
				done = true;
		}
		uv_run(&loop, UV_RUN_NOWAIT);
		idle = !writing && server_idle() ? idle + 1 : 0;
	}
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
	close(fd);
	/* Lets the server finish with the connection before the next input. */
	uv_run(&loop, UV_RUN_NOWAIT);
	return got;
}

static void check_response(const char *resp, size_t len, bool head)
{
	const char *end = memmem(resp, len, "\r\n\r\n", 4), *body, *ctype, *clen;
	size_t ctype_len, clen_len, body_len;
	unsigned status;
	json_t *o;
	char num[24];

	if (len == 0)
		return; /* closed without a word: a request the server could not parse far enough */
	if (len < 12 || strncmp(resp, "HTTP/1.", 7) != 0 || sscanf(resp + 9, "%3u", &status) != 1 ||
	    status < 100 || status > 599)
		fuzz_fail("not an HTTP response: '%.60s'", resp);
	if (!end)
		fuzz_fail("response headers do not end: '%.200s'", resp);
	body = end + 4;
	body_len = len - (size_t)(body - resp);
	ctype = header(resp, end + 2, "Content-Type", &ctype_len);
	clen = header(resp, end + 2, "Content-Length", &clen_len);
	if (clen && clen_len < sizeof(num)) {
		memcpy(num, clen, clen_len);
		num[clen_len] = '\0';
		unsigned long long want = strtoull(num, NULL, 10);

		/* More may follow: the answers to pipelined requests. */
		if (!head && want > body_len)
			fuzz_fail("Content-Length %s, body of %zu bytes", num, body_len);
		if (want < body_len)
			body_len = (size_t)want;
	}
	if (head || status < 400 || !ctype || ctype_len < 16 || strncmp(ctype, "application/json", 16) != 0)
		return;
	o = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "error")) ||
	    json_integer_value(json_object_get(o, "status")) != (json_int_t)status)
		fuzz_fail("%u answer's body is not {\"error\": ..., \"status\": %u}: '%.*s'", status, status,
			  (int)(body_len > 300 ? 300 : body_len), body);
	json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char resp[RESPONSE_MAX];
	bool head;
	size_t len;

	/*
	 * A HEAD answer has no body. Where libmicrohttpd finds the request line
	 * in bytes before it is its business: any "HEAD" counts.
	 */
	head = memmem(data, size, "HEAD", 4) != NULL;
	len = exchange(data, size, head, resp, sizeof(resp));

	check_response(resp, len, head);
	return 0;
}
