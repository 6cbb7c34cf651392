/* proc: child processes with process groups, capped capture and deadlines. */
#include "proc.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* After the child exits, how long we wait for stragglers holding its pipes. */
#define DRAIN_MS 1000

/* A byte buffer that keeps at most 'max' bytes: the newest ones. */
struct tailbuf {
	char *buf;
	size_t len, max;
	size_t total; /* bytes ever added */
	bool truncated;
};

struct proc {
	uv_loop_t *loop;
	uv_process_t process;
	uv_pipe_t in, out, err;
	uv_timer_t deadline, grace, drain;
	int open_handles;
	bool has_in, exited, out_eof, err_eof, done, killing, timed_out;
	int64_t exit_status;
	int term_signal;
	uint64_t started_ms;
	struct proc_opts opts;
	struct tailbuf out_buf, err_buf;
	char *line;
	size_t line_len;
	bool line_overflow;
};

static void tailbuf_add(struct tailbuf *t, const char *p, size_t n)
{
	t->total += n;
	if (t->max == 0)
		return;
	if (n >= t->max) {
		memcpy(t->buf, p + n - t->max, t->max);
		t->truncated = t->truncated || n > t->max || t->len > 0;
		t->len = t->max;
		return;
	}
	if (t->len + n > t->max) {
		size_t drop = t->len + n - t->max;
		memmove(t->buf, t->buf + drop, t->len - drop);
		t->len -= drop;
		t->truncated = true;
	}
	memcpy(t->buf + t->len, p, n);
	t->len += n;
}

static int tailbuf_init(struct tailbuf *t, size_t max)
{
	t->max = max;
	t->len = 0;
	t->truncated = false;
	t->buf = malloc(max + 1);
	return t->buf ? 0 : -ENOMEM;
}

static void on_handle_closed(uv_handle_t *h)
{
	struct proc *p = h->data;

	if (--p->open_handles > 0)
		return;
	free(p->out_buf.buf);
	free(p->err_buf.buf);
	free(p->line);
	free(p);
}

static void close_handle(struct proc *p, uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_handle_closed);
}

static void finish(struct proc *p)
{
	struct proc_result r = {0};

	if (p->done)
		return;
	p->done = true;
	uv_timer_stop(&p->deadline);
	uv_timer_stop(&p->grace);
	uv_timer_stop(&p->drain);
	p->out_buf.buf[p->out_buf.len] = '\0';
	p->err_buf.buf[p->err_buf.len] = '\0';
	r.exit_status = p->exit_status;
	r.term_signal = p->term_signal;
	r.timed_out = p->timed_out;
	r.out = p->out_buf.buf;
	r.out_len = p->out_buf.len;
	r.out_truncated = p->out_buf.truncated;
	r.err = p->err_buf.buf;
	r.err_len = p->err_buf.len;
	r.elapsed_ms = uv_now(p->loop) - p->started_ms;
	if (p->opts.on_done)
		p->opts.on_done(p, &r, p->opts.data);
	if (p->has_in)
		close_handle(p, (uv_handle_t *)&p->in);
	close_handle(p, (uv_handle_t *)&p->out);
	close_handle(p, (uv_handle_t *)&p->err);
	close_handle(p, (uv_handle_t *)&p->deadline);
	close_handle(p, (uv_handle_t *)&p->grace);
	close_handle(p, (uv_handle_t *)&p->drain);
	close_handle(p, (uv_handle_t *)&p->process);
}

static void maybe_finish(struct proc *p)
{
	if (p->exited && p->out_eof && p->err_eof)
		finish(p);
}

static void signal_group(struct proc *p, int sig)
{
	/* The child leads its own session, so its pid is its group id. */
	if (p->process.pid > 0)
		kill(-p->process.pid, sig);
}

static void on_grace(uv_timer_t *t)
{
	signal_group(t->data, SIGKILL);
}

static void on_drain(uv_timer_t *t)
{
	/* Something in the group still holds the pipes open: give up on it. */
	finish(t->data);
}

void proc_kill(struct proc *p)
{
	if (p->killing || p->done)
		return;
	p->killing = true;
	signal_group(p, SIGTERM);
	uv_timer_start(&p->grace, on_grace, PROC_KILL_GRACE_MS, 0);
}

static void on_deadline(uv_timer_t *t)
{
	struct proc *p = t->data;

	p->timed_out = true;
	proc_kill(p);
}

static void on_child_exit(uv_process_t *h, int64_t status, int sig)
{
	struct proc *p = h->data;

	p->exited = true;
	p->exit_status = sig ? -1 : status;
	p->term_signal = sig;
	/* Leave no stragglers of the group behind. */
	signal_group(p, SIGKILL);
	uv_timer_stop(&p->grace);
	uv_timer_start(&p->drain, on_drain, DRAIN_MS, 0);
	maybe_finish(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char slab[64 * 1024];

	/* Reads are consumed synchronously in the read callback, so one slab serves all. */
	(void)h;
	(void)suggested;
	buf->base = slab;
	buf->len = sizeof(slab);
}

static void feed_lines(struct proc *p, const char *s, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(s, '\n', n);
		size_t take = nl ? (size_t)(nl - s) : n;

		if (!p->line_overflow) {
			if (p->line_len + take > p->opts.line_max) {
				p->line_overflow = true;
				p->line_len = 0;
				if (p->opts.on_overflow)
					p->opts.on_overflow(p, p->opts.data);
			} else {
				memcpy(p->line + p->line_len, s, take);
				p->line_len += take;
			}
		}
		if (!nl)
			return;
		if (!p->line_overflow && !p->done && !p->killing)
			p->opts.on_line(p, p->line, p->line_len, p->opts.data);
		p->line_overflow = false;
		p->line_len = 0;
		s = nl + 1;
		n -= take + 1;
	}
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct proc *p = s->data;
	bool is_out = s == (uv_stream_t *)&p->out;

	if (nread < 0) {
		uv_read_stop(s);
		if (is_out)
			p->out_eof = true;
		else
			p->err_eof = true;
		maybe_finish(p);
		return;
	}
	if (nread == 0)
		return;
	if (!is_out && !p->opts.merge_stderr)
		tailbuf_add(&p->err_buf, buf->base, (size_t)nread);
	else if (!is_out)
		tailbuf_add(&p->out_buf, buf->base, (size_t)nread);
	else if (p->opts.on_line)
		feed_lines(p, buf->base, (size_t)nread);
	else
		tailbuf_add(&p->out_buf, buf->base, (size_t)nread);
}

static void init_timer(struct proc *p, uv_timer_t *t)
{
	uv_timer_init(p->loop, t);
	t->data = p;
	p->open_handles++;
}

int proc_spawn(uv_loop_t *loop, const struct proc_opts *opts, struct proc **out)
{
	uv_process_options_t po = {0};
	uv_stdio_container_t stdio[3];
	struct proc *p;
	int rc;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->opts = *opts;
	rc = tailbuf_init(&p->out_buf, opts->on_line ? 0 : opts->out_max);
	if (!rc)
		rc = tailbuf_init(&p->err_buf, opts->err_max);
	if (!rc && opts->on_line) {
		p->line = malloc(opts->line_max + 1);
		if (!p->line)
			rc = -ENOMEM;
	}
	if (rc) {
		free(p->out_buf.buf);
		free(p->err_buf.buf);
		free(p);
		return rc;
	}

	uv_pipe_init(loop, &p->out, 0);
	uv_pipe_init(loop, &p->err, 0);
	p->out.data = p->err.data = p;
	p->open_handles += 2;
	if (opts->stdin_pipe) {
		uv_pipe_init(loop, &p->in, 0);
		p->in.data = p;
		p->has_in = true;
		p->open_handles++;
		stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
		stdio[0].data.stream = (uv_stream_t *)&p->in;
	} else {
		stdio[0].flags = UV_IGNORE; /* libuv opens /dev/null */
	}
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&p->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&p->err;
	init_timer(p, &p->deadline);
	init_timer(p, &p->grace);
	init_timer(p, &p->drain);

	po.file = opts->argv[0];
	po.args = (char **)opts->argv;
	po.env = (char **)opts->env;
	po.cwd = opts->cwd;
	po.stdio = stdio;
	po.stdio_count = 3;
	po.exit_cb = on_child_exit;
	/* DETACHED makes the child a session (and process group) leader. */
	po.flags = UV_PROCESS_DETACHED;
	p->process.data = p;
	p->started_ms = uv_now(loop);

	rc = uv_spawn(loop, &p->process, &po);
	if (rc) {
		/* libuv requires the process handle to be closed even on failure. */
		p->open_handles++;
		p->done = true;
		if (opts->stdin_pipe)
			close_handle(p, (uv_handle_t *)&p->in);
		close_handle(p, (uv_handle_t *)&p->out);
		close_handle(p, (uv_handle_t *)&p->err);
		close_handle(p, (uv_handle_t *)&p->deadline);
		close_handle(p, (uv_handle_t *)&p->grace);
		close_handle(p, (uv_handle_t *)&p->drain);
		close_handle(p, (uv_handle_t *)&p->process);
		return rc;
	}
	p->open_handles++; /* the process handle */
	uv_read_start((uv_stream_t *)&p->out, on_alloc, on_read);
	uv_read_start((uv_stream_t *)&p->err, on_alloc, on_read);
	if (opts->timeout_ms)
		uv_timer_start(&p->deadline, on_deadline, opts->timeout_ms, 0);
	*out = p;
	return 0;
}

struct write_req {
	uv_write_t req;
	char data[];
};

static void on_written(uv_write_t *req, int status)
{
	/* A failed write means the child is gone; its exit is reported by on_child_exit. */
	(void)status;
	free(req);
}

int proc_write(struct proc *p, const char *buf, size_t len)
{
	struct write_req *w;
	uv_buf_t b;
	int rc;

	if (!p->has_in || p->done || p->exited)
		return -EPIPE;
	/* Most writes (a trial request) go whole into the pipe at once: no copy, no request. */
	if (uv_stream_get_write_queue_size((uv_stream_t *)&p->in) == 0) {
		b = uv_buf_init((char *)buf, (unsigned)len);
		rc = uv_try_write((uv_stream_t *)&p->in, &b, 1);
		if (rc == (int)len)
			return 0;
		if (rc > 0) {
			buf += rc;
			len -= (size_t)rc;
		} else if (rc != UV_EAGAIN) {
			return rc;
		}
	}
	w = malloc(sizeof(*w) + len);
	if (!w)
		return -ENOMEM;
	memcpy(w->data, buf, len);
	b = uv_buf_init(w->data, (unsigned)len);
	rc = uv_write(&w->req, (uv_stream_t *)&p->in, &b, 1, on_written);
	if (rc)
		free(w);
	return rc;
}

int proc_pid(const struct proc *p)
{
	return p->process.pid;
}

size_t proc_err_total(const struct proc *p)
{
	return p->err_buf.total;
}

const char *proc_err_since(const struct proc *p, size_t mark, size_t *len)
{
	const struct tailbuf *t = &p->err_buf;
	size_t start = t->total - t->len; /* total offset of buf[0] */

	if (mark < start)
		mark = start; /* the oldest of it is gone: what is left */
	if (mark > t->total)
		mark = t->total;
	*len = t->total - mark;
	return t->buf + (mark - start);
}
