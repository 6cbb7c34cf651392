/*
 * proc: every child process the daemon starts (git, builds, runners) goes
 * through here. Each child gets its own process group and session, stdin from
 * /dev/null unless a pipe is asked for, an explicit environment, capped
 * capture of its output and a deadline; at the deadline (or proc_kill) the
 * whole group gets SIGTERM, then SIGKILL after a grace period. Children die
 * with the daemon, SIGKILL of the daemon included (proc_init).
 */
#ifndef NW_PROC_H
#define NW_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct proc;

struct proc_result {
	int64_t exit_status; /* exit code, or -1 when killed by a signal */
	int term_signal;     /* 0 when it exited by itself */
	bool timed_out;      /* killed by its deadline */
	const char *out;     /* captured stdout (and stderr when merged), NUL-terminated; borrowed */
	size_t out_len;
	bool out_truncated; /* more than out_max was printed; 'out' keeps the end */
	const char *err;    /* the tail of stderr (when not merged), NUL-terminated; borrowed */
	size_t err_len;
	uint64_t elapsed_ms;
};

/* Called once, when the child has exited and its output is drained. */
typedef void (*proc_done_cb)(struct proc *p, const struct proc_result *r, void *data);
/* Line mode: called for each '\n'-terminated stdout line (without the '\n'). */
typedef void (*proc_line_cb)(struct proc *p, const char *line, size_t len, void *data);
/* Line mode: a line longer than line_max arrived; the caller should kill the child. */
typedef void (*proc_overflow_cb)(struct proc *p, void *data);

struct proc_opts {
	const char *const *argv; /* argv[0] is looked up in PATH */
	const char *cwd;         /* NULL: the daemon's */
	const char *const *env;  /* NULL-terminated "K=V" list; the child sees only these */
	uint64_t timeout_ms;     /* 0: no deadline (line mode callers arm their own) */
	size_t out_max;          /* stdout capture cap (capture mode) */
	size_t err_max;          /* stderr tail cap */
	bool merge_stderr;       /* stderr goes into the stdout capture (build logs) */
	bool stdin_pipe;         /* keep a pipe to the child's stdin for proc_write */
	proc_line_cb on_line;    /* non-NULL: line mode instead of capturing stdout */
	proc_overflow_cb on_overflow;
	size_t line_max;
	proc_done_cb on_done;
	void *data;
};

/*
 * Once at start-up, before any child and before the loop runs: kills what a
 * previous daemon with this state directory left running (process groups
 * recorded in state_dir/procs whose guards died with it), then forks the
 * reaper, which SIGKILLs every child's process group when this daemon exits,
 * however it exits. Without it, children still die with the daemon's loop
 * thread (PR_SET_PDEATHSIG) but their own children do not.
 */
int proc_init(const char *state_dir);

/*
 * Starts a child. On success *out is the handle, owned by the module until on_done returns.
 * Only on the main thread (the loop's): a child's death signal follows the thread that forked it.
 */
int proc_spawn(uv_loop_t *loop, const struct proc_opts *opts, struct proc **out);

/* Writes to the child's stdin (copied; partial writes are queued by libuv). */
int proc_write(struct proc *p, const char *buf, size_t len);

/* SIGTERM to the child's group now, SIGKILL after the grace period. Idempotent. */
void proc_kill(struct proc *p);

/* Bytes the child has written to stderr so far: a mark for proc_err_since. */
size_t proc_err_total(const struct proc *p);
/* The stderr bytes written after 'mark' that the tail buffer still holds (borrowed). */
const char *proc_err_since(const struct proc *p, size_t mark, size_t *len);

/*
 * Line mode: the bytes of a line not yet ended by its '\n' (borrowed, not
 * NUL-terminated; *len is 0 when none is pending).
 */
const char *proc_partial_line(const struct proc *p, size_t *len);

/* The child's pid (its process group id too). */
int proc_pid(const struct proc *p);

/* Grace between SIGTERM and SIGKILL. */
#define PROC_KILL_GRACE_MS 2000

#endif
