/*
 * Every cap on something that comes from outside lives here, so that the
 * limits of the daemon can be read (and reviewed) in one place.
 */
#ifndef NW_CAPS_H
#define NW_CAPS_H

/* Runner protocol: one JSON object per line, at most this long (PROTOCOL.md). */
#define NW_PROTO_LINE_MAX (1024 * 1024)
/* How much of a bad protocol line is kept in the log and database. */
#define NW_PROTO_LINE_KEEP 512
/* Tensors reported by one trial response. */
#define NW_PROTO_TENSORS_MAX 16
/* Checks one runner may declare in its hello. */
#define NW_PROTO_CHECKS_MAX 256
/* Dtypes and families one check may declare. */
#define NW_PROTO_DTYPES_MAX   8
#define NW_PROTO_FAMILIES_MAX 32
/* Dimensions of a trial's shape. */
#define NW_PROTO_SHAPE_MAX 8
/* Short strings in protocol messages (names, dtypes, families, digests). */
#define NW_PROTO_NAME_MAX 64
/* Free text in protocol messages (error texts, runner and device names). */
#define NW_PROTO_TEXT_MAX 1024
/*
 * A hello's "pipeline" (trial requests a runner takes outstanding) is read up
 * to this; the daemon sends at most NW_SLOT_PIPELINE_MAX of them (slot.c).
 */
#define NW_PROTO_PIPELINE_MAX 1024
/*
 * Trial requests a slot keeps outstanding at a runner that declares a
 * pipeline (issue 18): one ahead of the trial that runs hides the daemon's
 * round trip; more would only hold more seeds out of other runners' reach.
 */
#define NW_SLOT_PIPELINE_MAX 2

/* Captured output of a child process (build log, runner stderr, git). */
#define NW_CAPTURE_MAX (256 * 1024)
/* Stderr tail stored with a crashed trial. */
#define NW_STDERR_TAIL_MAX 4096
/* Child process groups the reaper guards at once (every slot's runner, the build, git). */
#define NW_PROC_GROUPS_MAX 4096
/* Output of `git rev-list` for one poll (first-parent history). */
#define NW_GIT_OUTPUT_MAX (64 * 1024 * 1024)

/* Config file: longest line and longest value. */
#define NW_CONFIG_LINE_MAX  4096
#define NW_CONFIG_SLOTS_MAX 64
/* [build] env and [slots] env: variables in one list, and the longest variable name. */
#define NW_CONFIG_ENV_MAX      64
#define NW_CONFIG_ENV_NAME_MAX 64

/* HTTP: request headers and body, and URL length. */
#define NW_HTTP_HEADER_MAX      (16 * 1024)
#define NW_HTTP_BODY_MAX        (64 * 1024)
#define NW_HTTP_CONNECTIONS_MAX 1024
#define NW_HTTP_THREADS_MAX     64
#define NW_HTTP_PAGE_MAX        500
/* A bearer token's length (`numwatch token create` makes 67 bytes: "nw_" and 64 hex digits). */
#define NW_HTTP_TOKEN_MAX 256
/* Regressions that GET /api/v1/checks/{name} lists (the newest; GET /regressions?check= pages them all). */
#define NW_API_CHECK_REGRESSIONS 100
/*
 * Queries waiting on one PostgreSQL connection (db.c): past this db_query
 * answers -ENOBUFS, so that an outage cannot grow the queue without bound.
 */
#define NW_DB_QUEUE_MAX 4096
/*
 * Claims sent in one statement (jobs.c, job_claim_batch()): every slot's at
 * once (a slot has at most one claim out), the rest with the next.
 */
#define NW_CLAIM_BATCH_MAX NW_CONFIG_SLOTS_MAX
/* Times a transaction is started again after its connection dropped under it. */
#define NW_DB_TXN_TRIES 5
/* Connections to PostgreSQL for API reads (a pool: each query to the least busy). */
#define NW_HTTP_DB_POOL 4
/*
 * Connections for the judge's reads (a pool): verdicts of several jobs are
 * read at once, one per connection. One per NW_JUDGE_DB_SLOTS slots, from
 * NW_JUDGE_DB_POOL to NW_JUDGE_DB_POOL_MAX: with instant runners on 16
 * cores the judge's 4 connections were 70% busy at 8 slots and queued every
 * slot's verdict at 64 (bench/daemon-ceiling).
 */
#define NW_JUDGE_DB_POOL     4
#define NW_JUDGE_DB_POOL_MAX 16
#define NW_JUDGE_DB_SLOTS    4
/*
 * API response cache (api.c), keyed by request path: entries, bytes in all
 * (larger answers are not cached), and how old an answer may be when served,
 * in ms: an entry is dropped at once when this daemon writes, but writes by
 * other daemons sharing the database show only once it has expired.
 */
#define NW_API_CACHE_ENTRIES 1024
#define NW_API_CACHE_BYTES   (64 * 1024 * 1024)
#define NW_API_CACHE_TTL_MS  1000

/* Trials buffered before a flush is forced (the store writes in batches). */
#define NW_STORE_BATCH_MAX 2048
/* Bytes of COPY data buffered before a flush is forced (a trial's tensors may be long). */
#define NW_STORE_BATCH_BYTES (8 * 1024 * 1024)
/*
 * The store's own connections to PostgreSQL ([store] connections): batches
 * are written on several at once. Each is a server process, up to a core
 * while it writes, and one of max_connections (100 by default), which every
 * daemon sharing the database draws on.
 */
#define NW_STORE_CONNECTIONS_MAX 32
/* Their default: one per this many slots (a GPU's usual share, 8 slots on one GPU), within the bounds below. */
#define NW_STORE_SLOTS_PER_CONNECTION    8
#define NW_STORE_CONNECTIONS_MIN_DEFAULT 2
#define NW_STORE_CONNECTIONS_MAX_DEFAULT 8
/* Trials per commit x check x dtype (config upper bound). */
#define NW_TRIALS_MAX 100000
/*
 * A run by hand (POST /api/v1/runs) is queued as jobs of this many seeds, so
 * that the slots of every GPU share it; a job's claim costs about one
 * trial's time, so parts much smaller would be overhead. A large run is cut
 * into at most NW_RUN_PARTS_MAX parts, larger ones: each part's claim, load
 * and end are round trips on the daemon's scheduler connection (10000 seeds
 * of 24 checks in parts of 64 kept 4 x H100 slots claiming and finishing
 * two thirds of their time).
 */
#define NW_RUN_PART_SEEDS 64
#define NW_RUN_PARTS_MAX  64

/* Seeds in each part of a run of n seeds. */
static inline long long nw_run_part_seeds(long long n)
{
	return n > (long long)NW_RUN_PART_SEEDS * NW_RUN_PARTS_MAX
		   ? (n + NW_RUN_PARTS_MAX - 1) / NW_RUN_PARTS_MAX
		   : NW_RUN_PART_SEEDS;
}

/*
 * `numwatch repro --runs N`: the most runs a culprit mail suggests (a failure
 * rarer than about 1 in 2000 runs is left to the dashboard's numbers), and
 * the failing answers a repro of many runs prints whole (the rest are counted).
 */
#define NW_REPRO_RUNS_MAIL_MAX 10000
#define NW_REPRO_PRINT_MAX     3

/* Mail (mail.c, mailer.c). */
/* An address (RFC 5321's limit on a forward path). */
#define MAIL_ADDRESS_MAX 254
/* A display name in the From option. */
#define MAIL_NAME_MAX 64
/* [mail] password_file: the whole file (its first line is the password). */
#define MAIL_PASSWORD_FILE_MAX 4096
/* Recipients of one mail: the author and the configured list. */
#define MAIL_RECIPIENTS_MAX 64
/* Bytes of a commit title in a subject or body (cut on a character boundary, "..." added). */
#define MAIL_TITLE_MAX 200
/* Bytes of other outside text in a body: names, check names, a trial's error. */
#define MAIL_FIELD_MAX 400
/* Other checks a culprit mail lists besides its own (the rest are on the dashboard). */
#define MAIL_ALSO_MAX 32
/* A composed body, and a whole formatted message. */
#define MAIL_BODY_MAX    (64 * 1024)
#define MAIL_MESSAGE_MAX (128 * 1024)
/* A formatted Date header value: "Thu, 05 Mar 2026 12:00:00 +0000". */
#define MAIL_DATE_MAX 40
/* A Message-ID, angle brackets included. */
#define MAIL_MESSAGE_ID_MAX 320

#endif
