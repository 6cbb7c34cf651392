/*
 * config: the daemon's INI configuration file (parsed with inih).
 *
 * Pure module: no libuv, libpq or libmicrohttpd. Every option is documented in
 * docs/configuration.md. A bad file is refused with "file:line: what is wrong";
 * on SIGHUP the daemon loads a new struct config and keeps the old one if the
 * new file is bad.
 */
#ifndef NW_CONFIG_H
#define NW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "caps.h"

/*
 * One runner slot: a GPU index, or the host (CPU) build. Several slots may
 * share one GPU ("0*4" in the file): each runs its own runner process.
 */
struct config_slot {
	/* Unique: "gpuN" for the first slot of GPU N, then "gpuN.1", "gpuN.2", ...; host slots are
	 * "host", "host1", "host2", ... */
	char name[16];
	int gpu;       /* GPU index for CUDA_VISIBLE_DEVICES, or -1 for a host slot */
	unsigned peer; /* this slot's place among the slots of its GPU: 0 for "gpuN", k for "gpuN.k"
			  (0 for host slots) */
};

/*
 * One variable of [build] env or [slots] env: set to 'value', or passed through
 * from the daemon's environment (value NULL; left out where the daemon has none).
 */
struct config_env_var {
	char name[NW_CONFIG_ENV_NAME_MAX];
	char *value; /* owned; NULL: pass through */
};

/* A [build] env or [slots] env list, in the order of the file. */
struct config_env {
	struct config_env_var *vars; /* owned */
	unsigned n;
};

struct config {
	/* [daemon] */
	char *state_dir;          /* worktrees, build directories and the git mirror live here */
	char *database;           /* libpq connection string */
	char *node_name;          /* owner name for job leases; default: the host name */
	unsigned lease_s;         /* a claimed job's lease; another daemon takes it over after this */
	unsigned query_timeout_s; /* statement_timeout of the scheduler's connection */

	/* [repository] */
	char *repo_name;          /* short name shown on the dashboard */
	char *repo_url;           /* a local path or any URL git can fetch */
	char *repo_branch;        /* branch whose first-parent history is watched */
	unsigned poll_interval_s; /* seconds between polls */
	unsigned history_max;     /* commits imported on the first poll (newest first) */

	/* [build] */
	char *build_command; /* run with /bin/sh -c in the worktree */
	unsigned build_timeout_s;
	char *runner_host;      /* runner for host slots, relative to the build directory */
	char *runner_cuda;      /* runner for GPU slots, relative to the build directory */
	unsigned build_log_max; /* bytes of build log kept (capped by NW_CAPTURE_MAX) */
	/*
	 * What the build's identity (builds.runner_hash) is made of besides the
	 * runner files: git pathspec globs of the commit's tracked files (every
	 * file under src/ and setup.py, say; "" for none) and, always,
	 * $NUMWATCH_BUILD_DIR/numwatch-identity when the build writes it.
	 */
	char *build_identity;
	struct config_env build_env; /* [build] env: the build command's extra variables */
	struct config_env slots_env; /* [slots] env: the runners' extra variables (hello included) */

	/* [trials] */
	unsigned trials_per_commit; /* seeds 0..n-1 for every check x dtype */
	char *trials_checks;        /* comma-separated globs of the checks to run ("softmax.*"); empty: all */
	unsigned trials_max;        /* adaptive trials stop here: seeds per commit x check x dtype at most */
	unsigned trial_timeout_s;   /* deadline for one trial response */
	unsigned repeats;           /* "repeats" sent with every trial */
	unsigned hello_timeout_s;   /* deadline for the runner's hello answer */

	/* [sanitizer] */
	char *sanitizer_tools;             /* "memcheck,racecheck": empty = off */
	unsigned sanitizer_every;          /* one seed in this many of the plan runs under each tool */
	unsigned sanitizer_commits;        /* ... on one commit in this many (by first-parent position) */
	char *sanitizer_path;              /* the compute-sanitizer binary */
	unsigned sanitizer_timeout_factor; /* sanitizer trials get the trial timeout times this */

	/* [slots] */
	struct config_slot slots[NW_CONFIG_SLOTS_MAX];
	unsigned nslots;
	int slots_gpus; /* the host's GPU count, or -1 ('auto'): the driver's list (gpus.c) */

	/* [store] */
	unsigned
	    store_connections; /* the store's COPY connections: the file's, or config_store_connections() */

	/* [http] */
	char *http_address; /* listen address, e.g. "127.0.0.1" */
	unsigned http_port;
	unsigned http_threads; /* libmicrohttpd's threads, which serve connections and cached replies */
	unsigned http_query_timeout_s; /* statement_timeout of the API's read connections */
	char *web_root;                /* directory holding the dashboard's static files */
	char *public_url;              /* base of the links the daemon prints; default http://address:port */

	/* [mail] (mail.c composes, mailer.c sends) */
	char *mail_smtp_url;      /* smtp:// or smtps:// URL; empty: mail is appended to mail_mbox */
	char *mail_from;          /* From: "addr" or "Name <addr>"; default numwatch@<host name> */
	char *mail_to;            /* comma-separated recipients of every mail (may be empty) */
	char *mail_starttls;      /* "no", "try" or "yes" (smtp:// only) */
	char *mail_username;      /* empty: no login */
	char *mail_password;      /* from 'password', or the first line of 'password_file' */
	char *mail_password_file; /* NULL when not set */
	char *mail_mbox;          /* default <state_dir>/mail.mbox */
	unsigned mail_rate_limit; /* mails per hour; more wait */
	bool mail_send_to_author; /* the culprit's author is a recipient */
	unsigned mail_timeout_s;  /* deadline of one SMTP session */
	unsigned mail_retry_s;    /* first retry after a failed send; doubles up to an hour */

	/* [verdict]: stats_verdict_params (stats.h); [trials] max is its max_trials */
	double verdict_p0_floor;  /* the lowest baseline failure rate the SPRT assumes */
	double verdict_p1;        /* the SPRT's H1 rate at least ... */
	double verdict_p1_factor; /* ... and at least this times p0 */
	double verdict_alpha;     /* the SPRT's chance of flagging a commit at the baseline's rate */
	double verdict_beta;      /* the SPRT's chance of missing one at p1 */
	unsigned verdict_min_trials;
	double verdict_mcnemar_alpha; /* one-sided p below which discordant seeds flag a regression */
	double verdict_drift_factor;  /* median error growth that counts as drift ... */
	double verdict_drift_alpha;   /* ... with a signed-rank p below this */

	/* [bisect]: bisect_params (bisect.h) */
	double bisect_confidence;   /* the search stops when one hypothesis holds this much */
	double bisect_prior_none;   /* prior probability of "no culprit" (the first signal was a flake) */
	unsigned bisect_max_trials; /* a search's budget: past it nobody is blamed */
	bool bisect_automatic;      /* open regressions get a bisection by themselves (else by hand only) */
};

/*
 * Loads and validates 'path' into 'cfg' (which must not hold a loaded config).
 * Options missing from the file take their documented defaults. Returns 0, or
 * a negative errno-style code with a message "path:line: what is wrong" in
 * 'err' (line 0 for whole-file problems such as a missing required option).
 */
int config_load(struct config *cfg, const char *path, char *err, size_t errlen);

/*
 * The default of [store] connections for a daemon of 'nslots' slots: one per
 * NW_STORE_SLOTS_PER_CONNECTION slots, at least NW_STORE_CONNECTIONS_MIN_DEFAULT
 * and at most NW_STORE_CONNECTIONS_MAX_DEFAULT (caps.h).
 */
unsigned config_store_connections(unsigned nslots);
/*
 * The judge's read connections for 'nslots' slots: one per NW_JUDGE_DB_SLOTS
 * slots, from NW_JUDGE_DB_POOL to NW_JUDGE_DB_POOL_MAX (caps.h): a slot's
 * verdict waits for one of them.
 */
unsigned config_judge_connections(unsigned nslots);

/*
 * The settings every daemon sharing a database must agree on, since they
 * decide what a verdict or a bisection says ([trials] per_commit, max,
 * checks, timeout, repeats; [verdict]; [bisect]; [sanitizer] tools, every,
 * commits; the repository's name and branch; the runners' names): one
 * "section.key=value" line each, in a fixed order, into 'out' (at most 'len'
 * bytes with the NUL). Returns 0, or -ENOSPC when it does not fit.
 */
int config_shared(const struct config *cfg, char *out, size_t len);
/* A digest of a config_shared() text: 16 hex digits (64-bit FNV-1a) and a NUL. */
void config_digest(const char *text, char out[17]);
/*
 * The keys whose values differ between two config_shared() texts (or that
 * one of them lacks), as "trials.per_commit, verdict.alpha" into 'out'
 * (truncated to 'len' bytes with the NUL; "" when they agree).
 */
void config_shared_diff(const char *a, const char *b, char *out, size_t len);

/* Frees every string 'cfg' holds and zeroes it. */
void config_release(struct config *cfg);

#endif
