/* proc: child processes with process groups, capped capture and deadlines. */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bigbuf.h"
#include "caps.h"
#include "log.h"

/* After the child exits, how long we wait for stragglers holding its pipes. */
#define DRAIN_MS 1000
/* At start-up, how long the processes a previous daemon left get to die of their SIGKILL. */
#define LEFTOVER_WAIT_MS 5000

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
	bool guarded;                       /* known to the reaper and recorded in the state directory */
	int record;                         /* its record in the state directory (records.fds), or -1 */
	struct proc *live_prev, *live_next; /* the children still running, for a new reaper */
};

/*
 * Children must die with the daemon, however it dies (SIGKILL included).
 * Three layers: each child has PR_SET_PDEATHSIG (SIGKILL when the thread
 * that forked it ends: the loop thread, which is the main thread); the
 * reaper, a small process forked at start-up, kills every child's whole
 * process group (grandchildren too) once its pipe from the daemon closes;
 * and each group is recorded in state_dir/procs, so that a daemon started
 * after one whose reaper died too kills what is left (proc_init).
 */
static struct {
	char dir[PATH_MAX]; /* state_dir/procs; "" before proc_init */
	char boot_id[64];
	unsigned long long self_start; /* this daemon's start time (clock ticks after boot) */
	int reaper_fd;                 /* write end of the reaper's pipe, or -1 */
	pid_t reaper_pid;
	struct proc *live;
} guard = {.reaper_fd = -1};

/* Set (by the forking thread) only while uv_spawn forks: the child arms its death signal. */
static volatile pid_t spawn_parent;

/* Reads a small file (a /proc entry, a record) into buf, NUL-terminated; its length or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	ssize_t n;

	if (fd < 0)
		return -1;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* A process's group, start time (clock ticks after boot) and state letter, from /proc/PID/stat. */
static bool pid_stat(pid_t pid, pid_t *pgrp, unsigned long long *start, char *state)
{
	char path[64], buf[1024], *s;
	int field = 3;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	/* The command name (field 2) may hold spaces and parentheses: the fields start after the last ')'. */
	if (read_small(path, buf, sizeof(buf)) < 0 || !(s = strrchr(buf, ')')))
		return false;
	for (s++; *s && field <= 22; field++) {
		while (*s == ' ')
			s++;
		if (field == 3)
			*state = *s;
		else if (field == 5)
			*pgrp = (pid_t)strtol(s, NULL, 10);
		else if (field == 22)
			*start = strtoull(s, NULL, 10);
		s += strcspn(s, " ");
	}
	return field > 22;
}

/* Whether PID is a live process (not a zombie) that started at 'start'. */
static bool pid_is(pid_t pid, unsigned long long start)
{
	unsigned long long st;
	pid_t pgrp;
	char state;

	return pid_stat(pid, &pgrp, &st, &state) && st == start && state != 'Z';
}

/* In the child of uv_spawn's fork, before exec: die with the daemon's loop thread. */
static void on_fork_child(void)
{
	if (!spawn_parent)
		return;
	/* If the daemon died before the death signal was armed, the child is re-parented: it goes too. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != spawn_parent)
		_exit(127);
}

/* Writes "numwatchd reaper: <a><n><b>\n" to stderr with async-signal-safe calls only. */
static void reaper_say(const char *a, long n, const char *b)
{
	char buf[256], num[24];
	size_t len = 0, k = 0;
	const char *parts[] = {"numwatchd reaper: ", a, NULL, b, "\n"};

	do
		num[k++] = (char)('0' + n % 10);
	while ((n /= 10) > 0 && k < sizeof(num));
	for (size_t i = 0; i < 5; i++) {
		if (i == 2) {
			while (k > 0 && len < sizeof(buf))
				buf[len++] = num[--k];
			continue;
		}
		for (const char *c = parts[i]; *c && len < sizeof(buf); c++)
			buf[len++] = *c;
	}
	if (write(STDERR_FILENO, buf, len) < 0)
		return;
}

/*
 * The reaper: forked from a daemon that may have threads, so it uses only
 * async-signal-safe calls. It reads the daemon's process groups from its
 * pipe (a positive pid: started; negative: ended) and, when the pipe closes
 * (the daemon exited, however), SIGKILLs every group still listed.
 */
__attribute__((noreturn)) static void reaper_main(int in)
{
	static pid_t groups[NW_PROC_GROUPS_MAX];
	static const int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGTSTP};
	unsigned char buf[4 * 256];
	struct sigaction ign = {.sa_handler = SIG_IGN};
	size_t have = 0, full = 0;
	long killed = 0;
	sigset_t none;

	/* Signals meant for the daemon (a terminal's ^C to its group, say) must not stop the reaper. */
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		sigaction(ignored[i], &ign, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_NAME, "numwatchd-reap");
	/* Hold nothing of the daemon's (its sockets, its end of this pipe): stdin is the pipe. */
	if (dup2(in, STDIN_FILENO) < 0)
		_exit(1);
	if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
		for (int fd = 3; fd < 65536; fd++)
			close(fd);
	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf + have, sizeof(buf) - have);
		size_t i;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		for (i = 0; i + sizeof(int32_t) <= have; i += sizeof(int32_t)) {
			int32_t v;
			size_t j, slot = NW_PROC_GROUPS_MAX;

			memcpy(&v, buf + i, sizeof(v));
			for (j = 0; j < NW_PROC_GROUPS_MAX; j++) {
				if (v > 0 && groups[j] == 0 && slot == NW_PROC_GROUPS_MAX)
					slot = j;
				if (v < 0 && groups[j] == -v)
					groups[j] = 0;
			}
			if (v > 0 && slot < NW_PROC_GROUPS_MAX)
				groups[slot] = v;
			else if (v > 0 && full++ == 0)
				reaper_say("more than ", NW_PROC_GROUPS_MAX,
					   " process groups: not all are guarded");
		}
		memmove(buf, buf + i, have - i);
		have -= i;
	}
	for (size_t j = 0; j < NW_PROC_GROUPS_MAX; j++)
		if (groups[j] > 0 && kill(-groups[j], SIGKILL) == 0)
			killed++;
	if (killed)
		reaper_say("the daemon is gone: killed ", killed, " process groups it left");
	_exit(0);
}

/* Tells the reaper of a group (pgid > 0: started; < 0: ended). */
static bool reaper_tell(int32_t pgid)
{
	ssize_t n;

	do
		n = write(guard.reaper_fd, &pgid, sizeof(pgid));
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(pgid);
}

static int reaper_start(void)
{
	int fds[2];
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(fds[0]);
		close(fds[1]);
		return -e;
	}
	if (pid == 0)
		reaper_main(fds[0]);
	close(fds[0]);
	/* A reaper that stops reading must not block the loop: a full pipe drops the message. */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	guard.reaper_fd = fds[1];
	guard.reaper_pid = pid;
	for (struct proc *p = guard.live; p; p = p->live_next)
		if (!reaper_tell(p->process.pid))
			break;
	return 0;
}

static void reaper_send(int32_t pgid)
{
	if (guard.reaper_fd < 0 || reaper_tell(pgid))
		return;
	if (errno == EAGAIN) {
		log_warn("proc: the reaper (pid %d) is not reading: process group %d is not guarded",
			 (int)guard.reaper_pid, (int)(pgid < 0 ? -pgid : pgid));
		return;
	}
	log_error("proc: the reaper (pid %d) is gone (%s): starting another", (int)guard.reaper_pid,
		  strerror(errno));
	close(guard.reaper_fd);
	guard.reaper_fd = -1;
	waitpid(guard.reaper_pid, NULL, WNOHANG);
	if (reaper_start() < 0)
		log_error("proc: cannot start a reaper: children will not die with the daemon");
}

/*
 * The records are files this daemon reuses, "DAEMONPID-N" in state_dir/procs,
 * each kept open: a child's start writes its group into a free one, its end
 * marks the record free (a group of 0), both one pwrite of RECORD_LEN bytes
 * at offset 0. A file created and deleted per child cost ext4 an inode's
 * allocation and release at every runner start: 4% of the daemon's time at
 * 64 slots, whose runners restart at every job (issue 17).
 */
#define RECORD_LEN 128
static struct {
	int *fds; /* by record number; -1 where the file could not be opened */
	unsigned n;
	unsigned *free; /* record numbers free for the next child */
	unsigned nfree;
} records;

/* Writes 'line' as record 'r' (padded to RECORD_LEN: it overwrites whatever it held). */
static int record_write(unsigned r, const char *line)
{
	char buf[RECORD_LEN];
	size_t len = strlen(line);

	memset(buf, ' ', sizeof(buf));
	memcpy(buf, line, len < sizeof(buf) - 1 ? len : sizeof(buf) - 1);
	buf[sizeof(buf) - 1] = '\n';
	return pwrite(records.fds[r], buf, sizeof(buf), 0) == (ssize_t)sizeof(buf) ? 0 : -1;
}

/* A free record (a new file when none is free), or -1. */
static int record_take(void)
{
	char path[PATH_MAX + 48];
	unsigned *free_grown;
	int *fds, fd;

	if (records.nfree > 0)
		return (int)records.free[--records.nfree];
	fds = realloc(records.fds, (records.n + 1) * sizeof(*fds));
	if (!fds)
		return -1;
	records.fds = fds;
	/* Room to give every record back without allocating. */
	free_grown = realloc(records.free, (records.n + 1) * sizeof(*free_grown));
	if (!free_grown)
		return -1;
	records.free = free_grown;
	snprintf(path, sizeof(path), "%s/%d-%u", guard.dir, (int)getpid(), records.n + 1);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_warn("proc: cannot create the record '%s': %s", path, strerror(errno));
		return -1;
	}
	records.fds[records.n] = fd;
	return (int)records.n++;
}

/* Records the child's group: the group, its leader's start, this daemon and its start, the boot. */
static void record_add(struct proc *p, pid_t pgid)
{
	unsigned long long start;
	char line[RECORD_LEN];
	pid_t pgrp;
	char state;
	int r;

	p->record = -1;
	if (!guard.dir[0] || !pid_stat(pgid, &pgrp, &start, &state))
		return;
	if ((r = record_take()) < 0)
		return;
	snprintf(line, sizeof(line), "%d %llu %d %llu %s", (int)pgid, start, (int)getpid(), guard.self_start,
		 guard.boot_id);
	if (record_write((unsigned)r, line) < 0)
		log_warn("proc: cannot record process group %d in '%s': %s", (int)pgid, guard.dir,
			 strerror(errno));
	p->record = r;
}

/* The group is gone: its record is free (a start-up skips it) for the next child. */
static void record_del(struct proc *p)
{
	if (p->record < 0)
		return;
	/* A record left as it was names a group gone: the next start-up finds its leader's start changed. */
	(void)record_write((unsigned)p->record, "0 0 0 0 free");
	records.free[records.nfree++] = (unsigned)p->record;
	p->record = -1;
}

/*
 * SIGKILLs what is left of a recorded group: its leader when it is still
 * the process recorded, and every process of the group that started after
 * it (a group's id is not reused while the group has members, so those are
 * its descendants). Returns how many processes it signalled.
 */
static unsigned kill_group_left(pid_t pgid, unsigned long long leader_start)
{
	unsigned long long start;
	unsigned n = 0;
	struct dirent *e;
	pid_t pgrp;
	char state;
	DIR *d;

	if (pid_stat(pgid, &pgrp, &start, &state) && start != leader_start)
		return 0; /* the id is another process's now: not ours */
	d = opendir("/proc");
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);

		if (pid > 0 && pid_stat(pid, &pgrp, &start, &state) && pgrp == pgid &&
		    start >= leader_start && state != 'Z' && kill(pid, SIGKILL) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Kills what a previous daemon with this state directory left running (its reaper died with it). */
static void kill_leftovers(void)
{
	unsigned long long t0 = uv_hrtime(), start, dstart;
	unsigned groups = 0, killed = 0, n;
	char path[PATH_MAX + 300], line[256], boot[64];
	struct dirent *e;
	int pgid, dpid;
	DIR *d;

	d = opendir(guard.dir);
	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "%s/%s", guard.dir, e->d_name);
		if (read_small(path, line, sizeof(line)) >= 0 &&
		    sscanf(line, "%d %llu %d %llu %63s", &pgid, &start, &dpid, &dstart, boot) == 5 &&
		    pgid == 0) {
			unlink(path); /* a free record */
			continue;
		}
		if (read_small(path, line, sizeof(line)) < 0 ||
		    sscanf(line, "%d %llu %d %llu %63s", &pgid, &start, &dpid, &dstart, boot) != 5 ||
		    pgid <= 0) {
			log_warn("proc: '%s' is no process group record: removed", path);
			unlink(path);
			continue;
		}
		if (strcmp(boot, guard.boot_id) != 0) {
			unlink(path); /* from before a reboot: nothing of it runs */
			continue;
		}
		if (dpid != getpid() && pid_is(dpid, dstart)) {
			log_warn("proc: process group %d belongs to numwatchd %d, which still runs with this "
				 "state "
				 "directory: left alone",
				 pgid, dpid);
			continue;
		}
		/* Members may fork while they are killed: again until none is left or the deadline passes. */
		n = 0;
		for (unsigned k; (k = kill_group_left(pgid, start)) > 0 &&
				 uv_hrtime() - t0 < LEFTOVER_WAIT_MS * 1000000ULL;) {
			struct timespec ts = {0, 50 * 1000000L};

			n += k;
			nanosleep(&ts, NULL);
		}
		if (n) {
			groups++;
			killed += n;
		}
		unlink(path);
	}
	closedir(d);
	if (killed)
		log_warn(
		    "proc: killed %u processes in %u process groups that a previous numwatchd left running",
		    killed, groups);
}

int proc_init(const char *state_dir)
{
	char path[64];
	pid_t pgrp;
	char state;
	int rc;

	if ((size_t)snprintf(guard.dir, sizeof(guard.dir), "%s/procs", state_dir) >= sizeof(guard.dir)) {
		guard.dir[0] = '\0';
		return -ENAMETOOLONG;
	}
	if (mkdir(guard.dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		log_error("cannot create '%s': %s", guard.dir, strerror(errno));
		guard.dir[0] = '\0';
		return rc;
	}
	snprintf(path, sizeof(path), "/proc/sys/kernel/random/boot_id");
	if (read_small(path, guard.boot_id, sizeof(guard.boot_id)) < 0)
		snprintf(guard.boot_id, sizeof(guard.boot_id), "unknown");
	guard.boot_id[strcspn(guard.boot_id, "\n")] = '\0';
	if (!pid_stat(getpid(), &pgrp, &guard.self_start, &state))
		guard.self_start = 0;
	kill_leftovers();
	rc = reaper_start();
	if (rc < 0)
		log_error("proc: cannot start the reaper: %s", strerror(-rc));
	return rc;
}

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
	bigbuf_free(p->line, p->opts.line_max + 1);
	free(p);
}

static void close_handle(struct proc *p, uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_handle_closed);
}

/* The pipes and timers of p (the process handle is closed apart: it may not be open yet). */
static void close_handles(struct proc *p)
{
	if (p->has_in)
		close_handle(p, (uv_handle_t *)&p->in);
	close_handle(p, (uv_handle_t *)&p->out);
	close_handle(p, (uv_handle_t *)&p->err);
	close_handle(p, (uv_handle_t *)&p->deadline);
	close_handle(p, (uv_handle_t *)&p->grace);
	close_handle(p, (uv_handle_t *)&p->drain);
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
	close_handles(p);
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
	if (p->guarded) {
		p->guarded = false;
		if (p->live_prev)
			p->live_prev->live_next = p->live_next;
		else
			guard.live = p->live_next;
		if (p->live_next)
			p->live_next->live_prev = p->live_prev;
		reaper_send(-(int32_t)p->process.pid);
		record_del(p);
	}
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

		/* A whole line in what was read (a runner's answer, as a rule): handed over where it is. */
		if (nl && p->line_len == 0 && !p->line_overflow && take <= p->opts.line_max) {
			if (!p->done && !p->killing)
				p->opts.on_line(p, s, take, p->opts.data);
			s = nl + 1;
			n -= take + 1;
			continue;
		}
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

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int proc_spawn(uv_loop_t *loop, const struct proc_opts *opts, struct proc **out)
{
	static bool atfork_set;
	uv_process_options_t po = {0};
	uv_stdio_container_t stdio[3];
	int in_fds[2] = {-1, -1}, out_fds[2] = {-1, -1}, err_fds[2] = {-1, -1};
	struct proc *p;
	int rc;

	/* The death signal follows the thread that forks: only the main thread lives as long as the daemon. */
	if ((pid_t)syscall(SYS_gettid) != getpid())
		return UV_EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->opts = *opts;
	p->record = -1;
	rc = tailbuf_init(&p->out_buf, opts->on_line ? 0 : opts->out_max);
	if (!rc)
		rc = tailbuf_init(&p->err_buf, opts->err_max);
	if (!rc && opts->on_line) {
		/* Up to a MiB a runner, kept out of the next runners' forks (bigbuf.h). */
		p->line = bigbuf_alloc(opts->line_max + 1);
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
	}
	init_timer(p, &p->deadline);
	init_timer(p, &p->grace);
	init_timer(p, &p->drain);
	/*
	 * Pipes, not the socket pairs libuv's UV_CREATE_PIPE makes: a runner's
	 * request and answer cross them at every trial, and a pipe's write and
	 * read cost the kernel less than a socket's (no buffer allocated and
	 * charged per message: issue 18). The daemon's ends go to the handles
	 * (close-on-exec: no child inherits them); the child's are its stdio.
	 */
	if (pipe2(out_fds, O_CLOEXEC) < 0 || pipe2(err_fds, O_CLOEXEC) < 0 ||
	    (opts->stdin_pipe && pipe2(in_fds, O_CLOEXEC) < 0)) {
		rc = -errno;
		goto fail;
	}
	if ((rc = uv_pipe_open(&p->out, out_fds[0])) < 0)
		goto fail;
	out_fds[0] = -1;
	if ((rc = uv_pipe_open(&p->err, err_fds[0])) < 0)
		goto fail;
	err_fds[0] = -1;
	if (opts->stdin_pipe) {
		if ((rc = uv_pipe_open(&p->in, in_fds[1])) < 0)
			goto fail;
		in_fds[1] = -1;
		stdio[0].flags = UV_INHERIT_FD;
		stdio[0].data.fd = in_fds[0];
	} else {
		stdio[0].flags = UV_IGNORE; /* libuv opens /dev/null */
	}
	stdio[1].flags = UV_INHERIT_FD;
	stdio[1].data.fd = out_fds[1];
	stdio[2].flags = UV_INHERIT_FD;
	stdio[2].data.fd = err_fds[1];

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

	if (!atfork_set) {
		if (pthread_atfork(NULL, NULL, on_fork_child) == 0)
			atfork_set = true;
	}
	spawn_parent = getpid();
	rc = uv_spawn(loop, &p->process, &po);
	spawn_parent = 0;
	/* The child has its ends (or was not started): the daemon keeps only its own. */
	close_fd(&in_fds[0]);
	close_fd(&out_fds[1]);
	close_fd(&err_fds[1]);
	if (rc) {
		/* libuv requires the process handle to be closed even on failure. */
		p->open_handles++;
		close_handle(p, (uv_handle_t *)&p->process);
		goto fail;
	}
	p->open_handles++; /* the process handle */
	p->guarded = true;
	p->live_next = guard.live;
	if (guard.live)
		guard.live->live_prev = p;
	guard.live = p;
	reaper_send(p->process.pid);
	record_add(p, p->process.pid);
	uv_read_start((uv_stream_t *)&p->out, on_alloc, on_read);
	uv_read_start((uv_stream_t *)&p->err, on_alloc, on_read);
	if (opts->timeout_ms)
		uv_timer_start(&p->deadline, on_deadline, opts->timeout_ms, 0);
	*out = p;
	return 0;

fail:
	/* The fds no handle holds, then the handles (the last one closed frees p). */
	for (int i = 0; i < 2; i++) {
		close_fd(&in_fds[i]);
		close_fd(&out_fds[i]);
		close_fd(&err_fds[i]);
	}
	p->done = true;
	close_handles(p);
	return rc;
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

const char *proc_partial_line(const struct proc *p, size_t *len)
{
	*len = p->line && !p->line_overflow ? p->line_len : 0;
	return p->line;
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
