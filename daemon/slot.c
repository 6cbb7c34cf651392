/* slot: one runner slot working through "trials" jobs. */
#include "slot.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder.h"
#include "caps.h"
#include "db.h"
#include "jobs.h"
#include "judge.h"
#include "log.h"
#include "nwd.h"
#include "proc.h"
#include "protocol.h"
#include "queries.h"
#include "sanitizer.h"
#include "stats.h"
#include "store.h"
#include "verdict.h"

#define CLAIM_POLL_MS   1000
#define RESTART_MIN_MS  100
#define RESTART_MAX_MS  1000
#define FINISH_RETRY_MS 500
#define FINISH_RETRIES  20
/*
 * A slot claims its next job once the job it runs has this many first runs
 * left (a part of a run by hand: 64 to 157 seeds; a plan: per_commit): the
 * claim and the load are then done by the time the last trial is, and a
 * job is held ahead for less than one job's trials.
 */
#define SLOT_AHEAD_SEEDS 64
/* The most part ends written by one statement (ends_send()); the others go with the next. */
#define NW_SLOT_ENDS_MAX 256
/*
 * How long the next runner waits for a stopped one's process group to go:
 * SIGKILL follows SIGTERM after PROC_KILL_GRACE_MS, so only a process stuck
 * in the kernel (a hung GPU driver) outlasts this.
 */
#define DYING_WAIT_MS (PROC_KILL_GRACE_MS + 5000)
/* Stored with a deterministic check's trial whose repeats gave different outputs. */
#define NONDETERMINISTIC_ERROR "repeats of this seed gave different outputs, but the check is deterministic"

enum slot_state {
	SLOT_IDLE,       /* no job; polling for one */
	SLOT_CLAIMING,   /* claim query in flight */
	SLOT_LOADING,    /* reading the job's stored trials */
	SLOT_STARTING,   /* runner started, hello sent */
	SLOT_RUNNING,    /* job in progress (a trial may be in flight) */
	SLOT_RESTARTING, /* waiting out a backoff before the next runner */
	SLOT_FINISHING,  /* verdict and job state being written */
	SLOT_STOPPED,
};

_Static_assert(SLOT_STOPPED + 1 == SLOT_STATES, "slot.h's SLOT_STATES names every state");
static const char *const state_names[] = {"idle",    "claiming",   "loading",   "starting",
					  "running", "restarting", "finishing", "stopped"};

struct seed_rec {
	unsigned long long seed;
	struct verdict_seed v;
	int next_attempt;
	double worst_ratio;
	double first_ratio; /* the first run's ratio, for the drift test */
	bool sent;          /* in a request awaiting its answer: not picked again (pipeline) */
};

/* A job this slot holds and what its seeds came to: the one it runs, or the one it claimed ahead. */
struct slot_work {
	struct job job;
	struct seed_rec *seeds; /* sorted by seed */
	unsigned nseeds;
	bool plan;         /* the commit's plan (reruns, a verdict) rather than a probe's seed list */
	bool reruns;       /* a seed list whose failures run again, as a plan's do (a baseline's probe) */
	bool first_failed; /* a seed's first run failed */
	/* A split search probe's other part failed: this part ends too (stop_siblings()). */
	bool sibling_failed;
	/* The job's lease ran out and another daemon claimed it: it is no longer this slot's to finish. */
	bool lease_lost;
};

/*
 * The job claimed ahead (issue 18): while a job runs, the slot claims and
 * loads its next one, so that it goes from one job's last trial to the next
 * job's first without waiting for the claim and the load on the daemon's
 * one scheduler connection. The slot's own claim, when it has no job, goes
 * the same way (the claimed job is then taken as soon as it is loaded).
 */
enum ahead_state {
	AHEAD_NONE,
	AHEAD_CLAIMING, /* the claim is in flight */
	AHEAD_HELD,     /* claimed; its stored trials are read once the job it overlaps has ended */
	AHEAD_LOADING,  /* its stored trials are being read (or wait for the store's flush) */
	AHEAD_READY,    /* claimed and loaded: the slot's next job */
};

/*
 * The end of a probe, of a part of a run by hand or of a sanitizer run,
 * written beside the slot's next job: its statement marks the job done only
 * once every seed's result is stored, and nothing of it needs the slot.
 * The slot renews its lease until it is written.
 */
enum end_state {
	END_STORING, /* waits for the store to write its trials */
	END_READY,   /* goes with the next statement of ends (ends_send()) */
	END_SENDING, /* in that statement */
	END_RETRY,   /* its rows were not all stored: tried again by the slot's end_retry timer */
};

struct part_end {
	struct part_end *next;
	struct slot *s;
	enum end_state state;
	long long job_id, commit_id;
	int check_id;
	char dtype[16], sha[41], check[64];
	unsigned long long lo, hi;      /* the job's seed list's range, for overlaps (ahead_overlaps()) */
	char *seeds;                    /* "{1,2,3}": the seeds that ran */
	unsigned long long first, last; /* the range of those */
	unsigned trials, failures;
	bool failed;
	int tries;
	bool due; /* tried again in this round of on_end_retry() */
};

struct slot {
	struct nwd *d;
	struct config_slot cfg;
	enum slot_state state;
	/* Where the slot's time goes (/metrics): per state, and with a trial in flight. */
	uint64_t state_since, state_ns[SLOT_STATES];
	uint64_t trial_since, trial_ns;
	/* With a request waiting behind the trial in flight (queued: a pipeline). */
	uint64_t ahead_since, ahead_ns;

	uv_timer_t wake;      /* claim polling and restart backoff */
	uv_timer_t deadline;  /* hello or trial deadline */
	uv_timer_t lease;     /* renews the leases of the jobs it holds */
	uv_timer_t reap;      /* the wait for a stopped runner's group to go */
	uv_timer_t end_retry; /* the next try of part ends whose rows were not all stored yet */
	int open_handles;
	bool draining;

	struct proc *runner;
	long long runner_commit;
	bool runner_ready;
	struct proto_hello hello; /* the runner's hello: the checks it declares */
	/*
	 * A runner stopped on purpose whose process group has not gone yet: no
	 * new runner starts before it has (on a GPU it still holds the device's
	 * memory), nor does a draining slot report stopped.
	 */
	struct proc *dying;
	/* Lines on stdout that are not protocol: since the last request (and the first of them), and in all. */
	unsigned stray;
	char stray_first[NW_PROTO_LINE_KEEP + 1];
	unsigned long long stray_total;

	bool has_job;
	struct slot_work w; /* the job it runs, while has_job */
	enum ahead_state ahead_state;
	struct slot_work ahead; /* the next job, from AHEAD_HELD on */
	bool ahead_tried;       /* a claim ahead was sent during the job that runs */
	struct part_end *ends;  /* part ends being written */
	int finish_tries;
	struct stats_seed *judged; /* the plan's results while the judge decides (judge.h) */
	bool infra_failed;

	bool in_trial;
	/*
	 * When the hello or the trial in flight is due (uv_now()): the deadline
	 * timer is not restarted at every trial but runs out at the earliest
	 * deadline it was set for, and then looks at this one (on_deadline()).
	 */
	uint64_t due_ms;
	/* runner_declares() for the runner's hello number hello_seq and the job declared_job. */
	unsigned hello_seq, declared_seq;
	long long declared_job;
	bool declared;
	long req_id;  /* the last request sent */
	long head_id; /* the request whose answer comes next: the trial in flight (cur) */
	/*
	 * A runner that declares a pipeline (issue 18) has the next first run's
	 * request in its pipe while it runs the head's: its seed index, attempt
	 * and id. It becomes the head when the head's answer comes; where the
	 * head ends otherwise (crash, timeout, fatal answer, protocol fault,
	 * lease loss, drain), it was not answered and its seed goes back
	 * (unsend()): sent again, never stored.
	 */
	bool queued;
	unsigned q_cur;
	int q_attempt;
	long q_id;
	/*
	 * Whether the head was sent ahead, and whether a runner of this commit
	 * answered one such request yet. A runner that declares a pipeline but reads one line
	 * at a time (and drops the rest) never answers a request sent ahead:
	 * its first one is not a timeout of the commit's but the runner's fault,
	 * and this commit's runners get one request at a time (ahead_off).
	 */
	bool head_ahead, ahead_answered, ahead_off;
	char runner_tool[16]; /* the sanitizer tool the runner runs under, "" for none */
	size_t san_mark;      /* stderr offset at the start of the trial in flight */
	enum sanitizer_status san_status;
	bool san_stop; /* the tool was refused: the job ends */
	unsigned cur;  /* index into seeds of the trial in flight */
	/* pick_seed(): every seed before these has run once / needs no rerun; a first run failed. */
	unsigned next_first, next_rerun;
	int cur_attempt;

	unsigned crash_streak;
	unsigned restarts;
	unsigned long long trials;
};

static void advance(struct slot *s);
static void claim(struct slot *s);
static void job_done(struct slot *s);
static void maybe_claim_ahead(struct slot *s);
static void work_release(struct slot_work *w);

static void set_state(struct slot *s, enum slot_state st)
{
	uint64_t now = uv_hrtime();

	s->state_ns[s->state] += now - s->state_since;
	s->state_since = now;
	s->state = st;
}

static void trial_ended(struct slot *s)
{
	if (s->in_trial)
		s->trial_ns += uv_hrtime() - s->trial_since;
	s->in_trial = false;
}

/*
 * The request behind the head will not be answered (the runner stops, or the
 * job ends here): its seed goes back to be picked again, on the next runner
 * or by whoever takes the job. Nothing of it is stored: the runner never
 * answered it, and the seed's trial is the one sent again.
 */
static void unsend(struct slot *s)
{
	if (!s->queued)
		return;
	s->queued = false;
	s->ahead_ns += uv_hrtime() - s->ahead_since;
	if (s->q_cur < s->w.nseeds) {
		s->w.seeds[s->q_cur].sent = false;
		log_debug(
		    "slot %s: %.12s %s %s seed %llu: its request, behind one that was not answered, goes"
		    " back (sent again)",
		    s->cfg.name, s->w.job.sha, s->w.job.check, s->w.job.dtype, s->w.seeds[s->q_cur].seed);
	}
	s->d->metrics.trials_resent++;
}

/* Stops talking to the runner: its group is killed, and its end awaited only as s->dying. */
static void drop_runner(struct slot *s)
{
	unsend(s);
	uv_timer_stop(&s->deadline);
	trial_ended(s);
	s->runner_ready = false;
	if (s->runner) {
		proc_kill(s->runner);
		if (!s->dying)
			s->dying = s->runner;
		s->runner = NULL;
	}
}

/* The stopped runner's group is gone (or given up on): what waited for it goes on. */
static void runner_gone(struct slot *s)
{
	uv_timer_stop(&s->reap);
	if (s->state == SLOT_RUNNING)
		advance(s);
	else if (s->draining && s->state == SLOT_IDLE)
		slot_drain(s);
}

static void on_reap_deadline(uv_timer_t *t)
{
	struct slot *s = t->data;

	if (!s->dying)
		return;
	log_error("slot %s: runner %d is still there %d s after it was stopped, SIGKILL included (stuck in"
		  " the kernel?); going on without it",
		  s->cfg.name, proc_pid(s->dying), DYING_WAIT_MS / 1000);
	s->dying = NULL;
	runner_gone(s);
}

/* Whether a stopped runner's group has yet to go; runner_gone() follows when it has. */
static bool wait_for_dying(struct slot *s)
{
	if (!s->dying)
		return false;
	if (!uv_is_active((uv_handle_t *)&s->reap))
		uv_timer_start(&s->reap, on_reap_deadline, DYING_WAIT_MS, 0);
	return true;
}

/* Whether the work is a part of the same search probe as the failed job. */
static bool is_sibling(const struct slot_work *w, const struct job *failed)
{
	return w->job.stop_on_failure && w->job.bisection_id == failed->bisection_id &&
	       w->job.commit_id == failed->commit_id && w->job.round == failed->round;
}

/*
 * A failure ends a search probe, and so every part of it: the bisector split
 * one probe at one commit over several slots (bisector.c queue_parts), and
 * its other parts' further trials there would only cost time. The parts
 * share bisection, commit and round (a job whose lease ran out may still run
 * on its old slot while the next round's starts). Only this daemon's slots
 * hear of it; a part on another host runs to its own end.
 * Measured with bench/bisect-sim, 128 commits, 4 slots: at q = 0.05, 451
 * trials and 129 trial-times of wall with each part to its own failure, 418
 * and 111 with the parts ending together.
 */
static void stop_siblings(struct slot *s)
{
	for (unsigned i = 0; i < s->d->nslots; i++) {
		struct slot *o = s->d->slots[i];

		if (o != s && o->has_job && is_sibling(&o->w, &s->w.job))
			o->w.sibling_failed = true;
		/* A part claimed ahead, here or on another slot, ends before its first trial. */
		if (o->ahead_state >= AHEAD_HELD && is_sibling(&o->ahead, &s->w.job))
			o->ahead.sibling_failed = true;
	}
}

static void record(struct slot *s, enum outcome outcome, const struct proto_trial *result, const char *error)
{
	struct seed_rec *rec = &s->w.seeds[s->cur];
	struct trial_row row = {
	    .commit_id = s->w.job.commit_id,
	    .check_id = s->w.job.check_id,
	    .dtype = s->w.job.dtype,
	    .seed = rec->seed,
	    .attempt = s->cur_attempt,
	    .outcome = outcome,
	    .result = result,
	    .error = error,
	    .slot = s->cfg.name,
	    .sanitizer = s->w.job.tool[0] ? s->w.job.tool : NULL,
	    .sanitizer_status = s->w.job.tool[0] ? sanitizer_status_name(s->san_status) : NULL,
	};

	/* The deadline timer is left to run out: on_deadline() finds nothing due (issue 18). */
	trial_ended(s);
	rec->sent = false;
	if (store_add_trial(s->d->store, &row) < 0)
		log_error("slot %s: out of memory storing a trial", s->cfg.name);
	s->trials++;
	s->d->metrics.trials[outcome]++;
	rec->next_attempt = s->cur_attempt + 1;
	if (result && isfinite(result->ratio) && !(result->ratio <= rec->worst_ratio))
		rec->worst_ratio = result->ratio;
	if (outcome == OUTCOME_INFRA_ERROR)
		return;
	if (rec->v.first == OUTCOME_NONE) {
		rec->v.first = outcome;
		rec->first_ratio = result ? result->ratio : NAN;
		s->w.first_failed = s->w.first_failed || outcome_is_failure(outcome);
		if (s->w.job.stop_on_failure && s->w.job.bisection_id && outcome_is_failure(outcome))
			stop_siblings(s);
	} else if (rec->v.second == OUTCOME_NONE) {
		rec->v.second = outcome;
	}
}

static void on_wake(uv_timer_t *t)
{
	struct slot *s = t->data;

	if (s->state == SLOT_IDLE)
		claim(s);
	else if (s->state == SLOT_RESTARTING) {
		set_state(s, SLOT_RUNNING);
		advance(s);
	}
}

static void restart_later(struct slot *s)
{
	unsigned ms = RESTART_MIN_MS << (s->crash_streak < 6 ? s->crash_streak : 6);

	if (ms > RESTART_MAX_MS)
		ms = RESTART_MAX_MS;
	s->restarts++;
	s->d->metrics.runner_restarts++;
	set_state(s, SLOT_RESTARTING);
	uv_timer_start(&s->wake, on_wake, ms, 0);
}

static void finish_job(struct slot *s, bool infra_failed);

/* An infrastructure fault: counts against the job, never against the commit. */
static void strike(struct slot *s, const char *why)
{
	s->w.job.strikes++;
	jobs_strike(s->d, s->w.job.id, s->w.job.strikes);
	log_warn("slot %s: %.12s %s %s: strike %d of %d: %s", s->cfg.name, s->w.job.sha, s->w.job.check,
		 s->w.job.dtype, s->w.job.strikes, SLOT_MAX_STRIKES, why);
	drop_runner(s);
	if (s->w.job.strikes >= SLOT_MAX_STRIKES)
		finish_job(s, true);
	else
		restart_later(s);
}

/* The runner could not start serving: the reason is stored with the seed it was started for. */
static void hello_failed(struct slot *s, const char *why)
{
	record(s, OUTCOME_INFRA_ERROR, NULL, why);
	strike(s, why);
}

/*
 * A protocol line while no exchange is in progress (between jobs, or while
 * a job's end is written): nothing to strike, and no trial to store it
 * with. The runner is stopped; the next job starts a new one.
 */
static void unrequested(struct slot *s, const char *line, size_t len, const char *what)
{
	char text[128];

	proto_clean_text(text, sizeof(text), line ? line : "", line ? len : 0, false);
	log_warn("slot %s: its runner wrote %s with no request in flight; stopping it: '%s'", s->cfg.name,
		 what, text);
	drop_runner(s);
	if (s->state == SLOT_RUNNING)
		advance(s);
}

static void protocol_fault(struct slot *s, const char *line, size_t len, const char *err)
{
	char why[NW_PROTO_LINE_KEEP + NW_PROTO_TEXT_MAX];
	int keep = len > NW_PROTO_LINE_KEEP ? NW_PROTO_LINE_KEEP : (int)len;

	if (line)
		snprintf(why, sizeof(why), "protocol_error: %s: '%.*s'%s", err, keep, line,
			 len > NW_PROTO_LINE_KEEP ? "..." : "");
	else
		snprintf(why, sizeof(why), "protocol_error: %s", err);
	/* The line is untrusted bytes: keep it printable ASCII so it can be stored and logged. */
	for (char *c = why; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
			*c = '?';
	if (s->state == SLOT_STARTING)
		hello_failed(s, why);
	else if (s->in_trial) {
		/* A first request sent ahead answered wrongly: a runner that drops what waits in its pipe. */
		if (s->head_ahead && !s->ahead_answered) {
			log_warn("slot %s: %.12s: the runner declares a pipeline of %u but did not answer the"
				 " first request sent ahead; this commit's runners get one request at a time",
				 s->cfg.name, s->w.job.sha, s->hello.pipeline);
			s->ahead_off = true;
		}
		record(s, OUTCOME_INFRA_ERROR, NULL, why);
		strike(s, why);
	} else {
		unrequested(s, line, len, err);
	}
}

static void on_deadline(uv_timer_t *t)
{
	struct slot *s = t->data;
	bool hello = s->state == SLOT_STARTING;
	unsigned limit = hello ? s->d->cfg.hello_timeout_s : s->d->cfg.trial_timeout_s;
	const char *partial = NULL;
	size_t plen = 0;
	char why[256];

	if (!hello && !s->in_trial)
		return;
	/* Set for an earlier trial: the one in flight is due later. */
	if (uv_now(s->d->loop) < s->due_ms) {
		uv_timer_start(&s->deadline, on_deadline, s->due_ms - uv_now(s->d->loop), 0);
		return;
	}
	if (s->runner)
		partial = proc_partial_line(s->runner, &plen);
	if (plen > 0) {
		/* It began its answer and stopped: a writer that does not flush, not a kernel that hangs. */
		snprintf(why, sizeof(why),
			 "no complete %s within %u s, only %zu bytes of a line without its newline (does the"
			 " runner flush stdout after each line?)",
			 hello ? "hello" : "answer", limit, plen);
		protocol_fault(s, partial, plen, why);
		return;
	}
	if (s->stray > 0) {
		/* Output on stdout instead of an answer: the runner's fault, whatever its kernel did. */
		snprintf(
		    why, sizeof(why),
		    "no %s within %u s, only %u line%s on stdout that %s not protocol (a runner's own output"
		    " belongs on stderr)",
		    hello ? "hello" : "answer", limit, s->stray, s->stray == 1 ? "" : "s",
		    s->stray == 1 ? "is" : "are");
		protocol_fault(s, s->stray_first, strlen(s->stray_first), why);
		return;
	}
	if (hello) {
		snprintf(why, sizeof(why), "runner did not answer hello within %u s", limit);
		hello_failed(s, why);
		return;
	}
	if (s->head_ahead && !s->ahead_answered) {
		snprintf(why, sizeof(why),
			 "no answer within %u s to the first request sent behind another: the runner declares"
			 " a pipeline of %u but may read one line at a time; this commit's runners get one"
			 " request at a time from now on",
			 limit, s->hello.pipeline);
		s->ahead_off = true;
		record(s, OUTCOME_INFRA_ERROR, NULL, why);
		strike(s, why);
		return;
	}
	snprintf(why, sizeof(why), "no answer within %u s", s->d->cfg.trial_timeout_s);
	log_warn("slot %s: %.12s %s %s seed %llu: %s", s->cfg.name, s->w.job.sha, s->w.job.check,
		 s->w.job.dtype, s->w.seeds[s->cur].seed, why);
	record(s, OUTCOME_TIMEOUT, NULL, why);
	drop_runner(s);
	s->crash_streak++;
	restart_later(s);
}

static void handle_hello(struct slot *s, const char *line, size_t len)
{
	struct proto_hello hello = {0};
	char err[256];

	if (proto_parse_hello(line, len, &hello, err, sizeof(err)) < 0) {
		protocol_fault(s, line, len, err);
		return;
	}
	log_debug("slot %s: runner '%s' (%s, %s) ready for %.12s", s->cfg.name, hello.runner, hello.backend,
		  hello.device_name, s->w.job.sha);
	if (hello.pipeline_ignored)
		log_warn("slot %s: %.12s: the runner's hello has a 'pipeline' that is not a whole number of 1"
			 " or more; one request at a time",
			 s->cfg.name, s->w.job.sha);
	proto_hello_release(&s->hello);
	s->hello = hello; /* its checks are the slot's now */
	s->hello_seq++;
	uv_timer_stop(&s->deadline);
	s->runner_ready = true;
	set_state(s, SLOT_RUNNING);
	advance(s);
}

/*
 * A trial under compute-sanitizer: what the tool wrote to stderr during the
 * trial decides. A report fails the trial (stored with the report); a refusal
 * (the GPU or driver does not support the tool) is stored as skipped, never as
 * passed, and ends the job, since every other seed would be refused too.
 * Returns true when it recorded the trial itself.
 */
static bool sanitized(struct slot *s, enum outcome *outcome, const struct proto_trial *t)
{
	char excerpt[1024];
	size_t len;
	const char *text = proc_err_since(s->runner, s->san_mark, &len);

	s->san_status = sanitizer_scan(text, len, excerpt, sizeof(excerpt));
	if (s->san_status == SANITIZER_SKIPPED) {
		log_warn("slot %s: compute-sanitizer %s skipped on this device: %s", s->cfg.name,
			 s->w.job.tool, excerpt);
		record(s, OUTCOME_INFRA_ERROR, t, excerpt);
		drop_runner(s);
		s->san_stop = true;
		finish_job(s, false);
		return true;
	}
	if (s->san_status == SANITIZER_REPORT) {
		log_warn("slot %s: %.12s %s %s seed %llu: compute-sanitizer %s report", s->cfg.name,
			 s->w.job.sha, s->w.job.check, s->w.job.dtype, s->w.seeds[s->cur].seed,
			 s->w.job.tool);
		record(s, OUTCOME_FAIL, t, excerpt);
		advance(s);
		return true;
	}
	return false;
}

static void handle_trial(struct slot *s, const char *line, size_t len)
{
	struct proto_trial t = {0};
	enum outcome outcome;
	char err[256];
	int rc = proto_parse_trial(line, len, s->head_id, &t, err, sizeof(err));

	if (rc < 0) {
		proto_trial_release(&t);
		protocol_fault(s, line, len, err);
		return;
	}
	s->ahead_answered = s->ahead_answered || s->head_ahead;
	outcome = t.verdict;
	if (s->w.job.tool[0] && sanitized(s, &outcome, &t)) {
		proto_trial_release(&t);
		return;
	}
	if (t.nonfinite[0] && outcome != OUTCOME_ERROR) {
		/* A ratio that is not finite measured output that is not finite: whatever the runner concluded. */
		char why[160];

		snprintf(
		    why, sizeof(why),
		    "%s: a trial whose ratio is not finite fails (NaN and Infinity are not JSON: a runner"
		    " writes null and says why in its verdict)",
		    t.nonfinite);
		log_info("slot %s: %.12s %s %s seed %llu: %s", s->cfg.name, s->w.job.sha, s->w.job.check,
			 s->w.job.dtype, s->w.seeds[s->cur].seed, why);
		s->crash_streak = 0;
		record(s, OUTCOME_FAIL, &t, why);
		proto_trial_release(&t);
		advance(s);
		return;
	}
	if (outcome == OUTCOME_ERROR && t.fatal) {
		/* The runner's device context is gone: a property of the commit (PROTOCOL.md). */
		outcome = OUTCOME_CRASH;
		record(s, outcome, &t, t.error);
		proto_trial_release(&t);
		drop_runner(s);
		s->crash_streak++;
		restart_later(s);
		return;
	}
	s->crash_streak = 0;
	/*
	 * PRODUCT.md: a deterministic check's repeats of one seed must give
	 * identical digests. Outputs that differ run to run break that claim
	 * (a race) even within tolerance, so the trial fails, and verdicts,
	 * failure rates and bisections count it as any failure.
	 */
	if (outcome == OUTCOME_PASS && s->w.job.deterministic && t.digests_differ > 0) {
		record(s, OUTCOME_FAIL, &t, NONDETERMINISTIC_ERROR);
		proto_trial_release(&t);
		advance(s);
		return;
	}
	record(s, outcome, &t, NULL);
	proto_trial_release(&t);
	advance(s);
}

/*
 * A line that cannot be an answer (a library's banner, a debug print): it is
 * left out, and the answer still awaited; the log says so once per runner.
 */
static void stray_line(struct slot *s, const char *line, size_t len)
{
	char text[NW_PROTO_LINE_KEEP + 1];

	proto_clean_text(text, sizeof(text), line, len, false);
	if (s->stray++ == 0)
		snprintf(s->stray_first, sizeof(s->stray_first), "%s", text);
	if (s->stray_total++ == 0)
		log_warn("slot %s: %.12s: the runner wrote a line to stdout that is not protocol; left out (a"
			 " runner's own output belongs on stderr): '%s'",
			 s->cfg.name, s->w.job.sha, text);
	else
		log_debug("slot %s: %.12s: stray line on stdout: '%s'", s->cfg.name, s->w.job.sha, text);
}

static void on_line(struct proc *p, const char *line, size_t len, void *data)
{
	struct slot *s = data;

	if (p != s->runner)
		return;
	if (!proto_line_is_message(line, len))
		stray_line(s, line, len);
	else if (s->state == SLOT_STARTING)
		handle_hello(s, line, len);
	else if (s->in_trial)
		handle_trial(s, line, len);
	else
		unrequested(s, line, len, "a line");
}

static void on_overflow(struct proc *p, void *data)
{
	struct slot *s = data;
	char why[64];

	snprintf(why, sizeof(why), "a line longer than %d bytes", NW_PROTO_LINE_MAX);
	if (p == s->runner)
		protocol_fault(s, NULL, 0, why);
}

/* Runner output in a line of the log: its newlines and tabs become spaces. */
static void one_line(char *text)
{
	for (; *text; text++)
		if (*text == '\n' || *text == '\t')
			*text = ' ';
}

static void on_runner_done(struct proc *p, const struct proc_result *r, void *data)
{
	struct slot *s = data;
	char why[NW_STDERR_TAIL_MAX + 256], logged[sizeof(why)], tail[1024 + 1];
	size_t tail_len = r->err_len > 1024 ? 1024 : r->err_len;

	if (p == s->dying) {
		s->dying = NULL;
		runner_gone(s);
		return;
	}
	if (p != s->runner)
		return; /* a runner we dropped on purpose */
	s->runner = NULL;
	s->runner_ready = false;
	unsend(s); /* the head's end below is recorded as ever; the request behind it goes back */
	/* Stored and logged: valid UTF-8 (the cut may split a character), no NUL or control bytes. */
	proto_clean_text(tail, sizeof(tail), r->err + r->err_len - tail_len, tail_len, true);
	if (r->term_signal)
		snprintf(why, sizeof(why), "runner killed by signal %d; stderr: %s", r->term_signal, tail);
	else if (r->exit_status == 0 && s->in_trial)
		/* Not a crash: nothing but bye ends a runner, so the runner quit, whatever the kernel did. */
		snprintf(why, sizeof(why),
			 "runner exited with status 0 without answering (a runner exits only after bye); "
			 "stderr: %s",
			 tail);
	else
		snprintf(why, sizeof(why), "runner exited with status %lld; stderr: %s",
			 (long long)r->exit_status, tail);
	snprintf(logged, sizeof(logged), "%s", why);
	one_line(logged);
	if (s->in_trial && !r->term_signal && r->exit_status == 0) {
		record(s, OUTCOME_INFRA_ERROR, NULL, why);
		strike(s, logged);
	} else if (s->in_trial) {
		log_warn("slot %s: %.12s %s %s seed %llu: crash: %s", s->cfg.name, s->w.job.sha,
			 s->w.job.check, s->w.job.dtype, s->w.seeds[s->cur].seed, logged);
		record(s, OUTCOME_CRASH, NULL, why);
		s->crash_streak++;
		restart_later(s);
	} else if (s->state == SLOT_STARTING && s->w.job.tool[0]) {
		/* The runner died under the sanitizer before its hello: the tool refused this device. */
		s->san_status = SANITIZER_SKIPPED;
		record(s, OUTCOME_INFRA_ERROR, NULL, why);
		s->san_stop = true;
		finish_job(s, false);
	} else if (s->state == SLOT_STARTING) {
		record(s, OUTCOME_INFRA_ERROR, NULL, why);
		strike(s, logged);
	}
}

static int start_runner(struct slot *s)
{
	const struct config *cfg = &s->d->cfg;
	char build_dir[PATH_MAX], path[PATH_MAX], gpu[32];
	const char *extra[3] = {"NUMWATCH_PROTOCOL=1", gpu, NULL};
	const char *argv[2] = {path, NULL};
	/* Under a sanitizer its reports go to stderr, beside the runner's own log: the protocol stays clean. */
	const char *san_argv[] = {cfg->sanitizer_path, "--tool", s->w.job.tool, "--log-file", "/dev/stderr",
				  "--launch-timeout",  "120",    path,          NULL};
	struct proc_opts o = {0};
	char **env;
	int rc;

	snprintf(build_dir, sizeof(build_dir), "%s/builds/%s", cfg->state_dir, s->w.job.sha);
	snprintf(path, sizeof(path), "%s/%s", build_dir,
		 s->cfg.gpu < 0 ? cfg->runner_host : cfg->runner_cuda);
	if (s->cfg.gpu < 0)
		snprintf(gpu, sizeof(gpu), "CUDA_VISIBLE_DEVICES=");
	else
		snprintf(gpu, sizeof(gpu), "CUDA_VISIBLE_DEVICES=%d", s->cfg.gpu);
	env = nwd_runner_env(s->d, extra);
	if (!env)
		return -ENOMEM;
	o.argv = s->w.job.tool[0] ? san_argv : argv;
	o.cwd = build_dir;
	o.env = (const char *const *)env;
	o.err_max = NW_STDERR_TAIL_MAX;
	o.stdin_pipe = true;
	o.on_line = on_line;
	o.on_overflow = on_overflow;
	o.line_max = NW_PROTO_LINE_MAX;
	o.on_done = on_runner_done;
	o.data = s;
	proto_hello_release(&s->hello);
	s->stray = 0;
	s->stray_total = 0;
	rc = proc_spawn(s->d->loop, &o, &s->runner);
	nwd_env_free(env);
	if (rc < 0) {
		char why[PATH_MAX + 64];

		s->runner = NULL;
		snprintf(why, sizeof(why), "cannot start runner '%s': %s", o.argv[0], uv_strerror(rc));
		if (rc == UV_ENOENT && !s->w.job.tool[0]) {
			/*
			 * This host's build of the commit is gone (its state directory was
			 * wiped): not the job's fault. The host forgets it built the commit,
			 * so that it builds it again before it claims the commit's jobs.
			 */
			log_warn("slot %s: %.12s: %s; building it here again", s->cfg.name, s->w.job.sha,
				 why);
			builder_forget(s->d, s->w.job.commit_id);
			jobs_release(s->d, s->w.job.id);
			job_done(s);
			return rc;
		}
		if (s->w.job.tool[0]) {
			/* No compute-sanitizer on this host: skipped, not passed, and the job ends. */
			s->san_status = SANITIZER_SKIPPED;
			record(s, OUTCOME_INFRA_ERROR, NULL, why);
			s->san_stop = true;
			finish_job(s, false);
			return rc;
		}
		hello_failed(s, why);
		return rc;
	}
	if (s->runner_commit != s->w.job.commit_id) {
		/* Another commit's runner: whether it reads its pipe whole is still to be seen. */
		s->ahead_off = false;
		s->ahead_answered = false;
	}
	s->runner_commit = s->w.job.commit_id;
	snprintf(s->runner_tool, sizeof(s->runner_tool), "%s", s->w.job.tool);
	set_state(s, SLOT_STARTING);
	s->due_ms = uv_now(s->d->loop) + (uint64_t)cfg->hello_timeout_s * 1000;
	uv_timer_start(&s->deadline, on_deadline, (uint64_t)cfg->hello_timeout_s * 1000, 0);
	{
		char *line = proto_hello_request();

		if (!line || proc_write(s->runner, line, strlen(line)) < 0)
			log_warn("slot %s: cannot write hello", s->cfg.name);
		free(line);
	}
	return 0;
}

/*
 * The next seed whose first run is neither done nor in a request awaiting its
 * answer. Past the cursor it steps over the seeds in flight (at most
 * NW_SLOT_PIPELINE_MAX) and, in a job resumed with gaps, seeds already run.
 */
static bool pick_first_run(struct slot *s, unsigned *index)
{
	while (s->next_first < s->w.nseeds && s->w.seeds[s->next_first].v.first != OUTCOME_NONE)
		s->next_first++;
	for (unsigned i = s->next_first; i < s->w.nseeds; i++)
		if (s->w.seeds[i].v.first == OUTCOME_NONE && !s->w.seeds[i].sent) {
			*index = i;
			return true;
		}
	return false;
}

/* The next seed to run: every seed once, then (for a plan or a baseline's probe) reruns of seeds that failed once. */
static bool pick_seed(struct slot *s, unsigned *index)
{
	if (s->san_stop)
		return false;
	/* A search probe ends at its first failure, or a sibling part's: one says what it came to learn. */
	if (s->w.job.stop_on_failure && s->w.sibling_failed)
		return false;
	if (s->w.job.stop_on_failure && s->w.first_failed)
		return false;
	/*
	 * Cursors, not scans from the start, at every trial: a seed's first run
	 * is never undone, and once every seed ran once, a rerun is only ever
	 * done (a plan that grows adds seeds after both cursors).
	 */
	while (s->next_first < s->w.nseeds && s->w.seeds[s->next_first].v.first != OUTCOME_NONE)
		s->next_first++;
	if (s->next_first < s->w.nseeds && !s->w.seeds[s->next_first].sent) {
		*index = s->next_first;
		return true;
	}
	if (s->next_first < s->w.nseeds)
		return pick_first_run(s, index);
	if (!s->w.plan && !s->w.reruns)
		return false;
	while (s->next_rerun < s->w.nseeds && !verdict_seed_needs_rerun(&s->w.seeds[s->next_rerun].v))
		s->next_rerun++;
	if (s->next_rerun < s->w.nseeds) {
		*index = s->next_rerun;
		return true;
	}
	return false;
}

/* Whether the hello lists the job's check at the job's dtype. */
static bool hello_declares(const struct proto_hello *h, const struct job *job)
{
	for (unsigned i = 0; i < h->nchecks; i++) {
		const struct proto_check *c = &h->checks[i];

		if (strcmp(c->check, job->check) != 0)
			continue;
		for (unsigned k = 0; k < c->ndtypes; k++)
			if (strcmp(c->dtypes[k], job->dtype) == 0)
				return true;
		return false;
	}
	return false;
}

/* hello_declares() for the runner's hello and the job, looked up once per hello and job (issue 18). */
static bool runner_declares(struct slot *s)
{
	if (s->declared_seq != s->hello_seq || s->declared_job != s->w.job.id) {
		s->declared = hello_declares(&s->hello, &s->w.job);
		s->declared_seq = s->hello_seq;
		s->declared_job = s->w.job.id;
	}
	return s->declared;
}

/* Writes a trial request for seeds[seed] at its next attempt; its id is s->req_id. */
static int send_trial(struct slot *s, unsigned seed)
{
	char req[NW_PROTO_REQUEST_MAX], *line;
	size_t len;

	s->req_id++;
	/* Written on the stack (no allocation at every trial), or by proto_trial_request() when it cannot be. */
	len = proto_trial_request_buf(req, sizeof(req), s->req_id, s->w.job.check, s->w.job.dtype,
				      s->w.seeds[seed].seed, s->d->cfg.repeats);
	line = len ? NULL
		   : proto_trial_request(s->req_id, s->w.job.check, s->w.job.dtype, s->w.seeds[seed].seed,
					 s->d->cfg.repeats, NULL);
	if (!len && !line) {
		s->req_id--;
		return -ENOMEM;
	}
	s->w.seeds[seed].sent = true;
	if (proc_write(s->runner, len ? req : line, len ? len : strlen(line)) < 0)
		log_debug("slot %s: write to runner failed; waiting for its exit", s->cfg.name);
	free(line);
	return 0;
}

/*
 * The trial in flight (cur) is the head from now on: the runner's answer is
 * awaited for it, and its deadline counts from here. A request sent behind
 * an earlier one becomes the head when that one's answer comes, so a slow
 * trial does not eat the time of the one behind it.
 */
static void head_starts(struct slot *s)
{
	uint64_t timeout = (uint64_t)s->d->cfg.trial_timeout_s * 1000 *
			   (s->w.job.tool[0] ? s->d->cfg.sanitizer_timeout_factor : 1);

	s->in_trial = true;
	s->trial_since = uv_hrtime();
	s->stray = 0;
	s->san_mark = proc_err_total(s->runner);
	s->san_status = SANITIZER_CLEAN;
	s->due_ms = uv_now(s->d->loop) + timeout;
	/*
	 * The timer still set for an earlier trial runs out first, and
	 * on_deadline() sets it again for this one: no timer restarted at
	 * every trial (issue 18). One set for later than this trial's deadline
	 * (a sanitizer's longer one) is set again now.
	 */
	if (!uv_is_active((uv_handle_t *)&s->deadline) || uv_timer_get_due_in(&s->deadline) > timeout)
		uv_timer_start(&s->deadline, on_deadline, timeout, 0);
}

/*
 * Whether the job's next request may go out before the answer to the one in
 * flight: only where no answer can change what is sent (issue 18). A
 * search probe (stop_on_failure) ends at its first failure, so its probes
 * run one trial at a time and their counts stay what they were; a
 * sanitizer's report is read from stderr between one request and the next;
 * reruns depend on first runs' results (pick_first_run() takes first runs only).
 */
static bool may_send_ahead(const struct slot *s)
{
	return NW_SLOT_PIPELINE_MAX >= 2 && s->hello.pipeline >= 2 && !s->ahead_off && s->in_trial &&
	       !s->queued && !s->w.job.stop_on_failure && !s->w.job.tool[0] && !s->san_stop &&
	       !s->w.lease_lost && !s->draining;
}

/* A runner that declares a pipeline gets the next first run while it runs the head's. */
static void send_ahead(struct slot *s)
{
	unsigned seed;

	if (!may_send_ahead(s) || !pick_first_run(s, &seed))
		return;
	if (send_trial(s, seed) < 0)
		return; /* out of memory: the seed is sent after the head's answer instead */
	s->queued = true;
	s->q_cur = seed;
	s->q_attempt = s->w.seeds[seed].next_attempt;
	s->q_id = s->req_id;
	s->ahead_since = uv_hrtime();
}

static void advance(struct slot *s)
{
	unsigned seed;

	if (!s->has_job || s->state != SLOT_RUNNING || s->in_trial)
		return;
	if (s->w.lease_lost) {
		/* Its trials so far are stored (idempotently); its end is the new owner's to write. */
		drop_runner(s);
		job_done(s);
		return;
	}
	if (s->draining) {
		/*
		 * The job goes back: whoever takes it runs the seed sent ahead, so
		 * this runner must not (drop_runner() unsends it and stops it).
		 */
		if (s->queued)
			drop_runner(s);
		jobs_release(s->d, s->w.job.id);
		work_release(&s->w);
		s->has_job = false;
		set_state(s, SLOT_IDLE);
		slot_drain(s);
		return;
	}
	if (s->queued) {
		/* The request sent behind the head's answer is the head now, and the next goes behind it. */
		s->queued = false;
		s->ahead_ns += uv_hrtime() - s->ahead_since;
		s->cur = s->q_cur;
		s->cur_attempt = s->q_attempt;
		s->head_id = s->q_id;
		s->head_ahead = true;
		head_starts(s);
		maybe_claim_ahead(s);
		send_ahead(s);
		return;
	}
	if (!pick_seed(s, &seed)) {
		finish_job(s, false);
		return;
	}
	if (!s->runner || s->runner_commit != s->w.job.commit_id || !s->runner_ready ||
	    strcmp(s->runner_tool, s->w.job.tool) != 0) {
		s->cur = seed; /* a runner that cannot start is recorded against this seed */
		s->cur_attempt = s->w.seeds[seed].next_attempt;
		drop_runner(s);
		if (wait_for_dying(s))
			return; /* runner_gone() comes back here */
		start_runner(s);
		return;
	}
	s->cur = seed;
	s->cur_attempt = s->w.seeds[seed].next_attempt;
	if (!runner_declares(s)) {
		char why[256];

		/* Zero checks, or not this one: a runner that cannot serve the job, not a failing trial. */
		snprintf(
		    why, sizeof(why),
		    "the runner's hello does not declare check '%s' at dtype '%s' (it declares %u check%s)",
		    s->w.job.check, s->w.job.dtype, s->hello.nchecks, s->hello.nchecks == 1 ? "" : "s");
		record(s, OUTCOME_INFRA_ERROR, NULL, why);
		strike(s, why);
		return;
	}
	maybe_claim_ahead(s);
	/* The head's state before its request: the runner's stderr from here on is this trial's. */
	s->head_ahead = false;
	head_starts(s);
	if (send_trial(s, seed) < 0) {
		log_error("slot %s: out of memory", s->cfg.name);
		trial_ended(s);
		restart_later(s);
		return;
	}
	s->head_id = s->req_id;
	send_ahead(s);
}

static void on_renewed(long long job_id, bool held, void *data)
{
	struct slot *s = data;
	struct slot_work *w = NULL;

	if (held)
		return;
	if (s->has_job && s->w.job.id == job_id)
		w = &s->w;
	else if (s->ahead_state >= AHEAD_HELD && s->ahead.job.id == job_id)
		w = &s->ahead;
	if (!w || w->lease_lost)
		return;
	log_warn("slot %s: job %lld (%.12s %s %s): its lease ran out and another daemon took it over;"
		 " leaving it to that one",
		 s->cfg.name, w->job.id, w->job.sha, w->job.check, w->job.dtype);
	w->lease_lost = true;
}

/* Renews the lease of every job the slot holds: the one it runs, the one claimed ahead, the ends being written. */
static void on_lease(uv_timer_t *t)
{
	struct slot *s = t->data;

	if (s->has_job)
		jobs_renew(s->d, s->w.job.id, on_renewed, s);
	if (s->ahead_state >= AHEAD_HELD)
		jobs_renew(s->d, s->ahead.job.id, on_renewed, s);
	for (struct part_end *e = s->ends; e; e = e->next)
		jobs_renew(s->d, e->job_id, NULL, NULL);
	/* Read at every renewal: a reload may change the lease. */
	uv_timer_start(&s->lease, on_lease, (uint64_t)s->d->cfg.lease_s * 1000 / 3, 0);
}

static void work_release(struct slot_work *w)
{
	free(w->seeds);
	free(w->job.seeds);
	memset(w, 0, sizeof(*w));
}

/* Takes the claimed job (and its seed list) into 'w', its seeds not yet run. */
static int work_init(struct slot *s, struct slot_work *w, struct job *job)
{
	memset(w, 0, sizeof(*w));
	w->job = *job;
	job->seeds = NULL;
	w->plan = w->job.seeds == NULL;
	w->nseeds = w->plan ? s->d->cfg.trials_per_commit : w->job.nseeds;
	w->seeds = calloc(w->nseeds ? w->nseeds : 1, sizeof(*w->seeds));
	if (!w->seeds) {
		work_release(w);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < w->nseeds; i++) {
		w->seeds[i].seed = w->plan ? i : w->job.seeds[i];
		w->seeds[i].worst_ratio = w->seeds[i].first_ratio = NAN;
	}
	return 0;
}

/* The seeds a job may run: a plan's from 0 up (it may grow), a seed list's from its first to its last. */
static void work_range(const struct slot_work *w, unsigned long long *lo, unsigned long long *hi)
{
	*lo = w->plan || w->nseeds == 0 ? 0 : w->seeds[0].seed;
	*hi = w->plan ? ULLONG_MAX : w->nseeds == 0 ? 0 : w->seeds[w->nseeds - 1].seed;
}

static bool same_pair(const struct job *a, long long commit_id, int check_id, const char *dtype)
{
	return a->commit_id == commit_id && a->check_id == check_id && strcmp(a->dtype, dtype) == 0;
}

/*
 * Whether the job claimed ahead may run seeds that the slot's job, or a part
 * whose end is being written, ran: its stored trials (which give each seed's
 * next attempt) are then read only once those trials are stored.
 */
static bool ahead_overlaps(const struct slot *s)
{
	const struct job *a = &s->ahead.job;
	unsigned long long lo, hi, wlo, whi;

	work_range(&s->ahead, &lo, &hi);
	if (s->has_job && same_pair(a, s->w.job.commit_id, s->w.job.check_id, s->w.job.dtype)) {
		work_range(&s->w, &wlo, &whi);
		if (lo <= whi && wlo <= hi)
			return true;
	}
	for (const struct part_end *e = s->ends; e; e = e->next)
		if (same_pair(a, e->commit_id, e->check_id, e->dtype) && lo <= e->hi && e->lo <= hi)
			return true;
	return false;
}

static struct seed_rec *find_seed(struct slot_work *w, unsigned long long seed)
{
	unsigned lo = 0, hi = w->nseeds;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (w->seeds[mid].seed == seed)
			return &w->seeds[mid];
		if (w->seeds[mid].seed < seed)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Adaptive trials: the evidence is ambiguous, so the plan grows by 'more' seeds (paired: the same next seeds everywhere). */
static bool extend_plan(struct slot *s, struct slot_work *w, unsigned more)
{
	unsigned cap = s->d->cfg.trials_max, n = w->nseeds;
	struct seed_rec *grown;

	if (n >= cap || more == 0)
		return false;
	if (more > cap - n)
		more = cap - n;
	grown = realloc(w->seeds, (n + more) * sizeof(*grown));
	if (!grown)
		return false;
	w->seeds = grown;
	for (unsigned i = n; i < n + more; i++) {
		memset(&grown[i], 0, sizeof(grown[i]));
		grown[i].seed = grown[n - 1].seed + 1 + (i - n);
		grown[i].worst_ratio = grown[i].first_ratio = NAN;
	}
	w->nseeds = n + more;
	log_info("verdict %.12s %s %s: ambiguous after %u seeds; running %u more", w->job.sha, w->job.check,
		 w->job.dtype, n, more);
	return true;
}

/*
 * The job's stored trials (sql/queries/slot_load.sql): each seed's next
 * attempt, and the runs that count; the job's rerun flag and grown plan come
 * with every row (a row of its own, the trial's columns NULL, where none is
 * stored).
 */
static void work_load(struct slot *s, struct slot_work *w, PGresult *res)
{
	int rows = PQntuples(res);

	if (rows > 0)
		w->reruns = !w->plan && strcmp(PQgetvalue(res, 0, 5), "t") == 0;
	/*
	 * A plan that grew (adaptive trials) before it was looked at again, taken
	 * over or restarted keeps its extra seeds: as many as the job recorded
	 * (jobs_grow()), not as the highest seed stored at the commit says, which
	 * counts a bisection's fresh seeds there too.
	 */
	if (w->plan && rows > 0) {
		long long planned = db_get_ll(res, 0, 6, 0);

		if (planned > (long long)w->nseeds && planned <= (long long)s->d->cfg.trials_max)
			extend_plan(s, w, (unsigned)(planned - w->nseeds));
	}
	for (int i = 0; i < rows; i++) {
		long long seed = db_get_ll(res, i, 0, -1);
		int attempt = (int)db_get_ll(res, i, 1, 0);
		enum outcome o = outcome_parse(PQgetvalue(res, i, 2));
		struct seed_rec *rec;

		rec = seed < 0 ? NULL : find_seed(w, (unsigned long long)seed);
		if (!rec)
			continue;
		if (attempt + 1 > rec->next_attempt)
			rec->next_attempt = attempt + 1;
		if (!PQgetisnull(res, i, 3)) {
			double r = db_get_double(res, i, 3, NAN);

			if (!(r <= rec->worst_ratio))
				rec->worst_ratio = r;
		}
		if (o == OUTCOME_INFRA_ERROR || o == OUTCOME_NONE)
			continue;
		/* A sanitizer job runs its seeds again under its tool: only that tool's results count. */
		if (w->job.tool[0] && strcmp(PQgetvalue(res, i, 4), w->job.tool) != 0)
			continue;
		if (rec->v.first == OUTCOME_NONE) {
			rec->v.first = o;
			rec->first_ratio = db_get_double(res, i, 3, NAN);
			w->first_failed = w->first_failed || outcome_is_failure(o);
		} else if (rec->v.second == OUTCOME_NONE) {
			rec->v.second = o;
		}
	}
}

/* No job and none coming: the slot polls for one (or, draining, stops). */
static void no_job(struct slot *s)
{
	set_state(s, SLOT_IDLE);
	if (s->draining)
		slot_drain(s);
	else
		uv_timer_start(&s->wake, on_wake, CLAIM_POLL_MS, 0);
}

/* The job claimed ahead is not to run here: it goes back to the queue. */
static void drop_ahead(struct slot *s)
{
	jobs_release(s->d, s->ahead.job.id);
	work_release(&s->ahead);
	s->ahead_state = AHEAD_NONE;
}

static void take_ahead(struct slot *s);

static void on_ahead_loaded(PGresult *res, const char *error, void *data)
{
	struct slot *s = data;

	if (error)
		log_warn("slot %s: cannot read trials of job %lld: %s", s->cfg.name, s->ahead.job.id, error);
	if (error || s->draining) {
		drop_ahead(s);
		if (s->has_job)
			return;
		/* An error: the next claim comes after the poll's pause, not at once (a pool may be reconnecting). */
		no_job(s);
		return;
	}
	work_load(s, &s->ahead, res);
	s->ahead_state = AHEAD_READY;
	if (!s->has_job)
		take_ahead(s);
}

/*
 * A plan reads every trial of its check x dtype (it may have grown); a probe
 * or a part of a run by hand only the range of its own seeds, so that a
 * part's load does not grow with the run (others are ignored).
 */
static void load_ahead(void *data)
{
	struct slot *s = data;
	char commit[24], check[16], lo[24], hi[24], id[24];
	const char *params[6] = {commit, check, s->ahead.job.dtype, "0", NULL, id};
	unsigned long long first, last;

	s->ahead_state = AHEAD_LOADING;
	if (!s->has_job)
		set_state(s, SLOT_LOADING);
	snprintf(commit, sizeof(commit), "%lld", s->ahead.job.commit_id);
	snprintf(check, sizeof(check), "%d", s->ahead.job.check_id);
	snprintf(id, sizeof(id), "%lld", s->ahead.job.id);
	if (!s->ahead.plan && s->ahead.nseeds > 0) {
		work_range(&s->ahead, &first, &last);
		snprintf(lo, sizeof(lo), "%llu", first);
		snprintf(hi, sizeof(hi), "%llu", last);
		params[3] = lo;
		params[4] = hi;
	}
	/* A read: on the judge's pool, beside the claims and ends on the one scheduler connection. */
	if (db_query(s->d->db_judge, nwq_slot_load, 6, params, on_ahead_loaded, s) < 0)
		on_ahead_loaded(NULL, "cannot queue the query", s);
}

/* The overlapping trials are stored first (store_flush_then), then the job claimed ahead is read. */
static void load_ahead_after_flush(struct slot *s)
{
	s->ahead_state = AHEAD_LOADING;
	if (!s->has_job)
		set_state(s, SLOT_LOADING);
	if (store_flush_then(s->d->store, load_ahead, s) < 0)
		load_ahead(s);
}

static void on_claim_answer(struct job *job, void *data)
{
	struct slot *s = data;

	s->ahead_state = AHEAD_NONE;
	if (job && s->has_job && job->id == s->w.job.id) {
		/* The slot's own job, its lease run out while it runs: still the slot's, not a second one. */
		free(job->seeds);
		job = NULL;
	}
	if (job && (s->draining || work_init(s, &s->ahead, job) < 0)) {
		jobs_release(s->d, job->id);
		free(job->seeds);
		job = NULL;
	}
	if (!job) {
		if (!s->has_job)
			no_job(s);
		return;
	}
	log_debug("slot %s: job %lld: %.12s %s %s%s", s->cfg.name, s->ahead.job.id, s->ahead.job.sha,
		  s->ahead.job.check, s->ahead.job.dtype, s->has_job ? " (next)" : "");
	if (!ahead_overlaps(s))
		load_ahead(s);
	else if (s->has_job)
		s->ahead_state = AHEAD_HELD; /* read when the slot's job ends (job_done) */
	else
		load_ahead_after_flush(s);
}

/* Claims a job into s->ahead: the next one while a job runs, or the slot's own when it has none. */
static void claim_ahead(struct slot *s)
{
	if (s->draining || s->ahead_state != AHEAD_NONE)
		return;
	s->ahead_state = AHEAD_CLAIMING;
	/*
	 * compute-sanitizer runs on GPU slots, and only on the first slot of a
	 * GPU ("gpuN", not "gpuN.1"): a sanitized runner is slow and needs much
	 * more GPU memory, so a shared GPU holds at most one, as it did when
	 * every GPU had one slot.
	 */
	jobs_claim(s->d, s->cfg.gpu >= 0 && s->cfg.peer == 0 ? "trials,probe,sanitize" : "trials,probe",
		   s->has_job  ? s->w.job.commit_id
		   : s->runner ? s->runner_commit
			       : 0,
		   s->cfg.gpu >= 0, on_claim_answer, s);
}

static void claim(struct slot *s)
{
	if (s->draining || s->state != SLOT_IDLE || s->ahead_state != AHEAD_NONE)
		return;
	uv_timer_stop(&s->wake);
	set_state(s, SLOT_CLAIMING);
	claim_ahead(s);
}

/* The slot has no job: the one claimed ahead (loaded) becomes its job. */
static void take_ahead(struct slot *s)
{
	s->w = s->ahead;
	memset(&s->ahead, 0, sizeof(s->ahead));
	s->ahead_state = AHEAD_NONE;
	s->ahead_tried = false;
	s->has_job = true;
	s->next_first = s->next_rerun = 0;
	if (s->w.lease_lost) {
		/* Another daemon took it over before it started here: nothing of it is this slot's. */
		job_done(s);
		return;
	}
	if (s->w.job.strikes >= SLOT_MAX_STRIKES) {
		finish_job(s, true);
		return;
	}
	set_state(s, SLOT_RUNNING);
	advance(s);
}

/* The slot's job is over (its end written or on its way, or the job given back): the next one. */
static void job_done(struct slot *s)
{
	unsend(s); /* a request behind the last answer, where the job ends before it (its lease lost) */
	work_release(&s->w);
	s->san_stop = false;
	s->has_job = false;
	s->ahead_tried = false;
	if (s->draining) {
		if (s->ahead_state == AHEAD_HELD || s->ahead_state == AHEAD_READY)
			drop_ahead(s);
		set_state(s, SLOT_IDLE);
		slot_drain(s);
		return;
	}
	switch (s->ahead_state) {
	case AHEAD_NONE:
		set_state(s, SLOT_IDLE);
		claim(s);
		break;
	case AHEAD_CLAIMING:
		set_state(s, SLOT_CLAIMING); /* on_claim_answer() goes on */
		break;
	case AHEAD_HELD:
		load_ahead_after_flush(s);
		break;
	case AHEAD_LOADING:
		set_state(s, SLOT_LOADING); /* on_ahead_loaded() goes on */
		break;
	case AHEAD_READY:
		take_ahead(s);
		break;
	}
}

/* Claims the next job once the one running has at most SLOT_AHEAD_SEEDS first runs to go. */
static void maybe_claim_ahead(struct slot *s)
{
	if (s->ahead_tried || s->ahead_state != AHEAD_NONE || s->draining || s->d->draining)
		return;
	if (s->w.nseeds - s->next_first > SLOT_AHEAD_SEEDS)
		return;
	s->ahead_tried = true; /* once per job: a queue found empty is not asked again at every trial */
	claim_ahead(s);
}

static void write_verdict(struct slot *s, bool infra_failed);

/* The verdict is retried the way it was first written (failed or done). */
static void on_finish_retry(uv_timer_t *t)
{
	struct slot *s = t->data;

	write_verdict(s, s->infra_failed);
}

/*
 * The verdict was written, or not yet: its statement only marks the job done
 * once every seed's result is stored, and the last batch may still be on its way.
 */
static void job_written(struct slot *s, bool written, const char *error)
{
	if (written) {
		nwd_kick_bisector(s->d);
		job_done(s);
		return;
	}
	if (++s->finish_tries >= FINISH_RETRIES) {
		log_warn(
		    "slot %s: job %lld (%.12s %s %s): results not all stored yet (%s); giving the job back",
		    s->cfg.name, s->w.job.id, s->w.job.sha, s->w.job.check, s->w.job.dtype,
		    error ? error : "rows missing");
		jobs_release(s->d, s->w.job.id);
		job_done(s);
		return;
	}
	store_flush(s->d->store);
	uv_timer_start(&s->wake, on_finish_retry, FINISH_RETRY_MS, 0);
}

static void on_judged(void *data, enum judge_result r, unsigned more)
{
	struct slot *s = data;

	free(s->judged);
	s->judged = NULL;
	switch (r) {
	case JUDGE_DONE:
		job_written(s, true, NULL);
		return;
	case JUDGE_NOT_STORED:
		job_written(s, false, NULL);
		return;
	case JUDGE_MORE:
		if (extend_plan(s, &s->w, more)) {
			jobs_grow(s->d, s->w.job.id, s->w.nseeds);
			set_state(s, SLOT_RUNNING);
			advance(s);
			return;
		}
		/* At [trials] max the verdict stays as the evidence stands. */
		log_warn("slot %s: job %lld: cannot grow the plan; giving the job back", s->cfg.name,
			 s->w.job.id);
		break;
	case JUDGE_REQUEUED:
		nwd_kick(s->d);
		job_done(s);
		return;
	case JUDGE_FAILED:
		break;
	}
	jobs_release(s->d, s->w.job.id);
	job_done(s);
}

/* The plan's trials are stored: the judge decides against the state just before this commit. */
static void judge_now(void *data)
{
	struct slot *s = data;
	bool infra_failed = s->infra_failed;
	double worst = NAN;
	int rc;

	free(s->judged);
	s->judged = calloc(s->w.nseeds ? s->w.nseeds : 1, sizeof(*s->judged));
	if (!s->judged) {
		on_judged(s, JUDGE_FAILED, 0);
		return;
	}
	for (unsigned i = 0; i < s->w.nseeds; i++) {
		const struct seed_rec *r = &s->w.seeds[i];

		s->judged[i] = (struct stats_seed){.seed = (int64_t)r->seed,
						   .cand_first = r->v.first,
						   .cand_rerun = r->v.second,
						   .cand_ratio = r->first_ratio};
		if (!isnan(r->worst_ratio) && !(r->worst_ratio <= worst))
			worst = r->worst_ratio;
	}
	rc = judge_verdict(s->d, &s->w.job, s->judged, s->w.nseeds, worst, infra_failed, on_judged, s);
	if (rc < 0) {
		log_error("slot %s: cannot judge %.12s %s %s: %s", s->cfg.name, s->w.job.sha, s->w.job.check,
			  s->w.job.dtype, strerror(-rc));
		on_judged(s, JUDGE_FAILED, 0);
	}
}

/* The plan is complete: once its trials are stored, the judge decides. */
static void write_verdict(struct slot *s, bool infra_failed)
{
	s->infra_failed = infra_failed;
	/* The store writes on its own connections: the verdict waits for them, not for a retry. */
	if (store_flush_then(s->d->store, judge_now, s) < 0)
		judge_now(s);
}

static void end_free(struct part_end *e)
{
	struct part_end **p = &e->s->ends;

	while (*p && *p != e)
		p = &(*p)->next;
	if (*p)
		*p = e->next;
	free(e->seeds);
	free(e);
}

/* A part's end is written or given up: a draining slot may stop once none is left. */
static void end_over(struct part_end *e)
{
	struct slot *s = e->s;

	end_free(e);
	if (s->draining && s->state == SLOT_IDLE && !s->ends)
		slot_drain(s);
}

static void ends_send(struct nwd *d);

/* The end's trials are stored: it goes with the next statement of ends. */
static void end_stored(void *data)
{
	struct part_end *e = data;

	e->state = END_READY;
	ends_send(e->s->d);
}

/* The ends whose rows were not all stored go again, each once, the store flushed first. */
static void on_end_retry(uv_timer_t *t)
{
	struct slot *s = t->data;
	struct part_end *e;

	for (e = s->ends; e; e = e->next)
		e->due = e->state == END_RETRY;
	/* From the list's head each time: an end that fails again at once may be freed. */
	for (e = s->ends; e;) {
		if (!e->due) {
			e = e->next;
			continue;
		}
		e->due = false;
		e->state = END_STORING;
		if (store_flush_then(s->d->store, end_stored, e) < 0)
			end_stored(e);
		e = s->ends;
	}
}

/* What the statement said of one end: its job is marked, or its rows are not all stored yet. */
static void end_answered(struct part_end *e, bool marked, const char *error)
{
	struct slot *s = e->s;

	/* A daemon that refuses to write gives its jobs up: their leases run out. */
	if (marked || s->d->read_only) {
		end_over(e);
		return;
	}
	if (++e->tries >= FINISH_RETRIES) {
		log_warn(
		    "slot %s: job %lld (%.12s %s %s): results not all stored yet (%s); giving the job back",
		    s->cfg.name, e->job_id, e->sha, e->check, e->dtype, error ? error : "rows missing");
		jobs_release(s->d, e->job_id);
		end_over(e);
		return;
	}
	/* The last batch may still be on its way: sent now, and the end tried again a little later. */
	store_flush(s->d->store);
	e->state = END_RETRY;
	if (!uv_is_active((uv_handle_t *)&s->end_retry))
		uv_timer_start(&s->end_retry, on_end_retry, FINISH_RETRY_MS, 0);
}

/*
 * The statement of ends in flight: one at a time for the whole daemon, so
 * that the ends that come ready meanwhile, on any slot, go together in the
 * next one (the loop is the daemon's one thread).
 */
static struct {
	bool in_flight;
	unsigned n;
	struct part_end *ends[NW_SLOT_ENDS_MAX];
} ends_batch;

static void on_ends_written(PGresult *res, const char *error, void *data)
{
	struct nwd *d = data;
	unsigned n = ends_batch.n;
	struct part_end *ends[NW_SLOT_ENDS_MAX];
	int rows = error ? 0 : PQntuples(res);
	bool any = false;

	/* Copied first: an answer may free a slot's ends, or send the next statement. */
	memcpy(ends, ends_batch.ends, n * sizeof(*ends));
	ends_batch.in_flight = false;
	ends_batch.n = 0;
	for (unsigned i = 0; i < n; i++) {
		bool marked = false;

		for (int r = 0; r < rows && !marked; r++)
			marked = db_get_ll(res, r, 0, 0) == ends[i]->job_id &&
				 strcmp(PQgetvalue(res, r, 1), "t") == 0;
		any = any || marked;
		end_answered(ends[i], marked, error);
	}
	if (any)
		nwd_kick_bisector(d);
	ends_send(d);
}

/* Sends the ends that are ready, of every slot, as one statement (sql/065 part_ends()), unless one is in flight. */
static void ends_send(struct nwd *d)
{
	json_t *list;
	char *text = NULL;
	const char *params[1];

	if (ends_batch.in_flight)
		return;
	list = json_array();
	for (unsigned i = 0; list && i < d->nslots && ends_batch.n < NW_SLOT_ENDS_MAX; i++)
		for (struct part_end *e = d->slots[i]->ends; e && ends_batch.n < NW_SLOT_ENDS_MAX;
		     e = e->next) {
			if (e->state != END_READY)
				continue;
			if (json_array_append_new(
				list,
				json_pack("{sI sI si ss ss si si sb sI sI}", "id", (json_int_t)e->job_id,
					  "commit_id", (json_int_t)e->commit_id, "check_id", e->check_id,
					  "dtype", e->dtype, "seeds", e->seeds, "trials", (int)e->trials,
					  "failures", (int)e->failures, "failed", e->failed, "lo",
					  (json_int_t)e->first, "hi", (json_int_t)e->last)) < 0)
				break;
			e->state = END_SENDING;
			ends_batch.ends[ends_batch.n++] = e;
		}
	if (ends_batch.n == 0) {
		json_decref(list);
		return;
	}
	ends_batch.in_flight = true;
	text = list ? json_dumps(list, JSON_COMPACT) : NULL;
	json_decref(list);
	params[0] = text;
	if (!text)
		on_ends_written(NULL, "out of memory", d);
	else if (db_query(d->db, "SELECT job_id, marked FROM part_ends($1::jsonb)", 1, params,
			  on_ends_written, d) < 0)
		on_ends_written(NULL, "cannot queue the query", d);
	free(text);
}

/*
 * The end of the slot's job, a list of seeds, goes on its way: it is written
 * once the store has written the job's trials (without hurrying the store's
 * batch), together with other slots' ends, while the slot goes on with its
 * next job.
 */
static int part_end_start(struct slot *s, bool infra_failed)
{
	const struct slot_work *w = &s->w;
	struct part_end *e = calloc(1, sizeof(*e));
	size_t cap = 2 + (size_t)w->nseeds * 22, len = 0;

	if (!e || !(e->seeds = malloc(cap))) {
		free(e);
		return -ENOMEM;
	}
	e->s = s;
	e->job_id = w->job.id;
	e->commit_id = w->job.commit_id;
	e->check_id = w->job.check_id;
	e->failed = infra_failed;
	snprintf(e->dtype, sizeof(e->dtype), "%s", w->job.dtype);
	snprintf(e->sha, sizeof(e->sha), "%s", w->job.sha);
	snprintf(e->check, sizeof(e->check), "%s", w->job.check);
	e->seeds[len++] = '{';
	for (unsigned i = 0; i < w->nseeds; i++) {
		if (w->seeds[i].v.first == OUTCOME_NONE)
			continue; /* a probe that stopped at its first failure left these */
		len += (size_t)snprintf(e->seeds + len, cap - len, "%s%llu", e->trials ? "," : "",
					w->seeds[i].seed);
		if (!e->trials)
			e->first = w->seeds[i].seed;
		e->last = w->seeds[i].seed;
		e->trials++;
		e->failures += outcome_is_failure(w->seeds[i].v.first);
	}
	e->seeds[len++] = '}';
	e->seeds[len] = '\0';
	work_range(w, &e->lo, &e->hi);
	log_info("%s %.12s %s %s: %u of %u seeds failed",
		 w->job.bisection_id ? "probe"
		 : w->job.tool[0]    ? w->job.tool
				     : "run by hand",
		 w->job.sha, w->job.check, w->job.dtype, e->failures, e->trials);
	e->state = END_STORING;
	e->next = s->ends;
	s->ends = e;
	if (store_then(s->d->store, end_stored, e) < 0)
		end_stored(e);
	return 0;
}

static void finish_job(struct slot *s, bool infra_failed)
{
	s->finish_tries = 0;
	if (s->w.plan) {
		set_state(s, SLOT_FINISHING);
		write_verdict(s, infra_failed);
		return;
	}
	if (part_end_start(s, infra_failed) < 0) {
		log_error("slot %s: out of memory writing the end of job %lld; giving it back", s->cfg.name,
			  s->w.job.id);
		jobs_release(s->d, s->w.job.id);
	}
	job_done(s);
}

bool slot_idle(const struct slot *s)
{
	return s->state == SLOT_IDLE && !s->draining;
}

void slot_kick(struct slot *s)
{
	if (s->state == SLOT_IDLE)
		claim(s);
}

void slot_drain(struct slot *s)
{
	if (s->state == SLOT_STOPPED)
		return;
	s->draining = true;
	/* A job claimed ahead goes back at once; one being claimed or read, when its answer comes. */
	if (s->ahead_state == AHEAD_HELD || s->ahead_state == AHEAD_READY)
		drop_ahead(s);
	if (s->state == SLOT_RESTARTING && s->has_job) {
		uv_timer_stop(&s->wake);
		jobs_release(s->d, s->w.job.id);
		job_done(s); /* comes back here, idle */
		return;
	}
	if (s->state != SLOT_IDLE || s->ahead_state != AHEAD_NONE)
		return; /* what is in flight finishes first, then comes back here */
	uv_timer_stop(&s->wake);
	if (s->runner) {
		char *bye = proto_bye_request();

		/* A polite bye; proc kills the group if it lingers. */
		if (bye)
			proc_write(s->runner, bye, strlen(bye));
		free(bye);
		drop_runner(s);
	}
	/* Its group must be gone before the daemon exits, or a runner ignoring SIGTERM outlives it. */
	if (wait_for_dying(s))
		return; /* runner_gone() comes back here */
	/* The ends on their way are written (or given back) first: a restart finds the jobs done. */
	if (s->ends)
		return; /* end_over() comes back here */
	set_state(s, SLOT_STOPPED);
	nwd_service_stopped(s->d);
}

int slot_start(struct nwd *d, const struct config_slot *cfg, struct slot **out)
{
	struct slot *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->d = d;
	s->cfg = *cfg;
	s->state_since = uv_hrtime();
	uv_timer_init(d->loop, &s->wake);
	uv_timer_init(d->loop, &s->deadline);
	uv_timer_init(d->loop, &s->lease);
	uv_timer_init(d->loop, &s->reap);
	uv_timer_init(d->loop, &s->end_retry);
	s->wake.data = s->deadline.data = s->lease.data = s->reap.data = s->end_retry.data = s;
	s->open_handles = 5;
	/* Renews whatever the slot holds then, a third of the lease apart. */
	uv_timer_start(&s->lease, on_lease, (uint64_t)d->cfg.lease_s * 1000 / 3, 0);
	set_state(s, SLOT_IDLE);
	claim(s);
	*out = s;
	return 0;
}

static void on_slot_handle_closed(uv_handle_t *h)
{
	struct slot *s = h->data;

	if (--s->open_handles == 0) {
		work_release(&s->w);
		work_release(&s->ahead);
		while (s->ends)
			end_free(s->ends);
		free(s->judged);
		proto_hello_release(&s->hello);
		free(s);
	}
}

void slot_free(struct slot *s)
{
	drop_runner(s);
	uv_close((uv_handle_t *)&s->wake, on_slot_handle_closed);
	uv_close((uv_handle_t *)&s->deadline, on_slot_handle_closed);
	uv_close((uv_handle_t *)&s->lease, on_slot_handle_closed);
	uv_close((uv_handle_t *)&s->reap, on_slot_handle_closed);
	uv_close((uv_handle_t *)&s->end_retry, on_slot_handle_closed);
}

void slot_status(const struct slot *s, struct slot_status *out)
{
	out->name = s->cfg.name;
	out->gpu = s->cfg.gpu;
	out->state = state_names[s->state];
	out->commit = s->has_job ? s->w.job.sha : "";
	out->check = s->has_job ? s->w.job.check : "";
	out->dtype = s->has_job ? s->w.job.dtype : "";
	out->runner_pid = s->runner ? proc_pid(s->runner) : 0;
	out->restarts = s->restarts;
	out->trials = s->trials;
	{
		uint64_t now = uv_hrtime();

		for (int i = 0; i < SLOT_STATES; i++)
			out->state_s[i] =
			    (double)(s->state_ns[i] + (i == (int)s->state ? now - s->state_since : 0)) / 1e9;
		out->trial_s = (double)(s->trial_ns + (s->in_trial ? now - s->trial_since : 0)) / 1e9;
		out->ahead_s = (double)(s->ahead_ns + (s->queued ? now - s->ahead_since : 0)) / 1e9;
	}
}

const char *slot_state_name(int state)
{
	return state >= 0 && state < SLOT_STATES ? state_names[state] : "";
}
