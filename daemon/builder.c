/* builder: worktree, build command, runner hash, hello, store. */
#include "builder.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "db.h"
#include "jobs.h"
#include "log.h"
#include "nwd.h"
#include "poller.h"
#include "proc.h"
#include "protocol.h"
#include "queries.h"
#include "slot.h"

#define CLAIM_POLL_MS 1000
/* After a failed worktree (this host's mirror lacks the commit): time for the fetch to land. */
#define CLAIM_BACKOFF_MS        5000
#define HOUSEKEEPING_TIMEOUT_MS (120 * 1000)

struct builder {
	struct nwd *d;
	uv_timer_t timer;
	uv_timer_t lease; /* renews the build job's lease while it builds */
	bool busy, draining, stopped;
	/*
	 * A per-host build: the commit was built first elsewhere (builds holds
	 * that), and this host builds it too, for its own slots, since a host
	 * runs only runners it built itself. No job: host_build_next() chose it.
	 */
	bool local;
	bool lease_lost; /* the build job's lease ran out and another daemon took it over */
	struct job job;
	struct proc *child; /* the build command, while it runs */
	char worktree[PATH_MAX];
	char build_dir[PATH_MAX];
	char host_runner[PATH_MAX];
	char cuda_runner[PATH_MAX];
	char *log;       /* the build's output */
	char status[16]; /* builds.status */
	char hash[320];  /* the runner files' hashes, then the declared identity's, joined by '+' */
	/*
	 * Each runner's identity as hosts compare their builds of one commit
	 * (host_builds): its sha256, then the declared identity's digests, joined
	 * by '+'; "" when the build made no such runner.
	 */
	char host_hash[256], cuda_hash[256];
	char tree[80];                 /* the commit's tree */
	char repro[NW_PROTO_TEXT_MAX]; /* the runner's repro template from its hello, "" if none */
	bool identity_warned;          /* the identity warning was logged (once while it holds) */
	uint64_t started_ms;
	long long started_wall;
	/* The checks the runners declared, by name, each with the backends that did ("host", "cuda"). */
	json_t *checks;
	bool asked_host, asked_cuda; /* the runner answered hello */
	bool hello_cuda;             /* the hello in flight is the CUDA runner's */
	uint64_t retry_ms;           /* the next claim's wait, when not the usual */
};

static void claim(struct builder *b);

/* Which configured variables a child sees besides the base list: none, [build] env or [slots] env. */
enum env_kind { ENV_BASE, ENV_BUILD, ENV_RUNNER };

static int spawn(struct builder *b, const char *const *argv, const char *cwd, enum env_kind kind,
		 const char *const *extra_env, uint64_t timeout_ms, size_t out_max, bool merge,
		 proc_done_cb cb, struct proc **child)
{
	struct proc_opts o = {0};
	struct proc *p;
	char **env = kind == ENV_BUILD    ? nwd_build_env(b->d, extra_env)
		     : kind == ENV_RUNNER ? nwd_runner_env(b->d, extra_env)
					  : nwd_env(b->d, extra_env);
	int rc;

	if (!env)
		return -ENOMEM;
	o.argv = argv;
	o.cwd = cwd;
	o.env = (const char *const *)env;
	o.timeout_ms = timeout_ms;
	o.out_max = out_max;
	o.err_max = 4096;
	o.merge_stderr = merge;
	o.on_done = cb;
	o.data = b;
	rc = proc_spawn(b->d->loop, &o, &p);
	nwd_env_free(env);
	if (!rc && child)
		*child = p;
	return rc;
}

static bool failed(const struct proc_result *r)
{
	return r->timed_out || r->term_signal || r->exit_status != 0;
}

static void on_wake(uv_timer_t *t)
{
	claim(t->data);
}

static void on_cleaned(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;

	b->busy = false;
	uv_timer_stop(&b->lease);
	free(b->log);
	b->log = NULL;
	json_decref(b->checks);
	b->checks = NULL;
	if (b->draining) {
		builder_drain(b);
		return;
	}
	claim(b);
}

/* The worktree is only needed while building; the runner lives in the build directory. */
static void cleanup(struct builder *b)
{
	char mirror[PATH_MAX];
	const char *argv[] = {"git", "-C", mirror, "worktree", "remove", "--force", b->worktree, NULL};

	snprintf(mirror, sizeof(mirror), "%s/mirror.git", b->d->cfg.state_dir);
	if (spawn(b, argv, NULL, ENV_BASE, NULL, HOUSEKEEPING_TIMEOUT_MS, 4096, true, on_cleaned, NULL) < 0)
		on_cleaned(NULL, NULL, b);
}

/* Logs identity_warning() (sql/030) once while it holds: the health page shows it all along. */
static void on_identity_checked(PGresult *res, const char *error, void *data)
{
	struct builder *b = data;
	const char *warning = error ? NULL : db_get(res, 0, 0);

	if (error) {
		log_warn("build: cannot check the build identities: %s", error);
		return;
	}
	if (warning && !b->identity_warned)
		log_warn("builds of %s: %s", b->d->cfg.repo_name, warning);
	b->identity_warned = warning != NULL;
}

static void on_stored(PGresult *res, const char *error, void *data)
{
	struct builder *b = data;
	char repo[16];
	const char *params[1] = {repo};

	if (error) {
		/* Nothing of it was stored (one transaction): the job goes back and the commit is built again. */
		log_error("build %.12s: storing the result failed: %s", b->job.sha, error);
		jobs_release(b->d, b->job.id);
	} else {
		nwd_kick(b->d);
		if (strcmp(b->status, "ok") == 0) {
			snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
			if (db_query(b->d->db, "SELECT identity_warning($1)", 1, params, on_identity_checked,
				     b) < 0)
				on_identity_checked(NULL, "cannot queue the query", b);
		}
	}
	cleanup(b);
}

#define build_sql nwq_builder_build /* sql/queries/builder_build.sql */

/* This host's build of the commit (host_build_record(), sql/040): which of its runners are the commit's. */
static const char host_build_sql[] = "SELECT * FROM host_build_record($1, $2, $3, $4, $5, $6, $7)";

#define checks_sql nwq_builder_checks /* sql/queries/builder_checks.sql */

/* Every 'every'th seed of the plan again under each sanitizer tool, on GPU slots, behind the plan. */
#define sanitize_sql nwq_builder_sanitize /* sql/queries/builder_sanitize.sql */

static const char failed_stats_sql[] =
    "INSERT INTO stats (commit_id, check_id, dtype, trials, failures, infra_errors, verdict)"
    " SELECT $1, k.id, d, 0, 0, 0, 'build_failed' FROM checks k, unnest(k.dtypes) AS d WHERE k.repo_id = $2"
    " ON CONFLICT (commit_id, check_id, dtype) DO UPDATE SET verdict = 'build_failed', updated_at = now()";

static bool has_slot(const struct config *cfg, bool gpu)
{
	for (unsigned i = 0; i < cfg->nslots; i++)
		if ((cfg->slots[i].gpu >= 0) == gpu)
			return true;
	return false;
}

static void on_local_stored(PGresult *res, const char *error, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	bool host_ok, cuda_ok;

	if (error || PQntuples(res) != 1) {
		log_error("build %.12s: storing this host's build failed: %s", b->job.sha,
			  error ? error : "no answer");
		cleanup(b);
		return;
	}
	host_ok = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	cuda_ok = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	if (strcmp(b->status, "ok") != 0)
		log_warn("build %.12s: %s here, though it built elsewhere: this host runs none of its jobs",
			 b->job.sha, b->status);
	else if ((has_slot(cfg, false) && !host_ok) || (has_slot(cfg, true) && !cuda_ok))
		log_warn("build %.12s: this host's runner differs from the commit's first build (runner %s):"
			 " its slots run none of the commit's jobs (is the build reproducible?)",
			 b->job.sha, b->hash);
	else
		log_info("build %.12s: built here too, runner identical to the first build's", b->job.sha);
	nwd_kick(b->d);
	cleanup(b);
}

/* A per-host build: only host_builds learns of it (the commit's build, checks and jobs are the first builder's). */
static void store_local(struct builder *b)
{
	char commit[24], duration[24];
	const char *params[7] = {commit,
				 b->d->cfg.node_name,
				 b->status,
				 b->host_hash[0] ? b->host_hash : NULL,
				 b->cuda_hash[0] ? b->cuda_hash : NULL,
				 duration,
				 strcmp(b->status, "ok") == 0 ? NULL : (b->log ? b->log : "")};
	uint64_t ms = uv_now(b->d->loop) - b->started_ms;

	snprintf(commit, sizeof(commit), "%lld", b->job.commit_id);
	snprintf(duration, sizeof(duration), "%llu", (unsigned long long)ms);
	nwd_count_build(b->d, b->status, (double)ms / 1000.0);
	if (db_query(b->d->db, host_build_sql, 7, params, on_local_stored, b) < 0)
		on_local_stored(NULL, "cannot queue the query", b);
}

/*
 * Stores the build, its checks and trials jobs (or build_failed verdicts) and
 * the job's end in one transaction: the job is never done without them.
 */
static void store(struct builder *b, const char *checks_json)
{
	char commit[24], started[24], duration[24], repo[16];
	const char *host_hash = b->host_hash[0] ? b->host_hash : NULL;
	const char *cuda_hash = b->cuda_hash[0] ? b->cuda_hash : NULL;
	const char *bparams[13] = {commit,
				   b->status,
				   b->log ? b->log : "",
				   b->hash[0] ? b->hash : NULL,
				   started,
				   duration,
				   b->d->cfg.node_name,
				   b->tree[0] ? b->tree : NULL,
				   b->repro[0] ? b->repro : NULL,
				   b->d->cfg.runner_host,
				   b->d->cfg.runner_cuda,
				   host_hash,
				   cuda_hash};
	const char *hparams[7] = {commit, b->d->cfg.node_name, b->status, host_hash, cuda_hash, duration,
				  NULL};
	const char *cparams[4] = {repo, checks_json, commit,
				  b->d->cfg.trials_checks ? b->d->cfg.trials_checks : ""};
	const char *fparams[2] = {commit, repo};
	bool ok = strcmp(b->status, "ok") == 0;
	uint64_t ms = uv_now(b->d->loop) - b->started_ms;
	struct db_txn *t;

	if (b->lease_lost) {
		log_warn(
		    "build %.12s: its lease ran out and another daemon took it over; leaving it to that one",
		    b->job.sha);
		cleanup(b);
		return;
	}
	if (b->local) {
		store_local(b);
		return;
	}
	snprintf(commit, sizeof(commit), "%lld", b->job.commit_id);
	snprintf(started, sizeof(started), "%lld", b->started_wall);
	snprintf(duration, sizeof(duration), "%llu", (unsigned long long)ms);
	snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
	nwd_count_build(b->d, b->status, (double)ms / 1000.0);
	log_info("build %.12s: %s in %.1f s%s%s", b->job.sha, b->status, (double)ms / 1000.0,
		 ok ? ", runner " : "", ok ? b->hash : "");
	t = db_txn_new();
	db_txn_add(t, build_sql, 13, bparams);
	db_txn_add(t, host_build_sql, 7, hparams);
	if (ok)
		db_txn_add(t, checks_sql, 4, cparams);
	if (ok && b->d->cfg.sanitizer_tools && *b->d->cfg.sanitizer_tools && has_slot(&b->d->cfg, true)) {
		char per[16], every[16], commits[16];
		const char *sparams[6] = {commit, b->d->cfg.sanitizer_tools, per, every, repo, commits};

		snprintf(per, sizeof(per), "%u", b->d->cfg.trials_per_commit);
		snprintf(every, sizeof(every), "%u", b->d->cfg.sanitizer_every);
		snprintf(commits, sizeof(commits), "%u", b->d->cfg.sanitizer_commits);
		db_txn_add(t, sanitize_sql, 6, sparams);
	}
	if (!ok)
		db_txn_add(t, failed_stats_sql, 2, fparams);
	jobs_finish_in(t, b->job.id);
	if (db_txn_run(b->d->db, t, on_stored, b) < 0)
		on_stored(NULL, "cannot queue the transaction", b);
}

/* Appends a line to the build's log (it is stored with the build). */
static void log_append(struct builder *b, const char *line)
{
	size_t n = b->log ? strlen(b->log) : 0;
	char *log = realloc(b->log, n + strlen(line) + 2);

	if (!log)
		return;
	sprintf(log + n, "%s%s", n && log[n - 1] != '\n' ? "\n" : "", line);
	b->log = log;
}

static void fail(struct builder *b, const char *status, const char *why)
{
	log_append(b, why);
	snprintf(b->status, sizeof(b->status), "%s", status);
	store(b, NULL);
}

/*
 * The checks as checks_sql reads them. What each needs is known where both
 * runners were asked: a check only the CUDA runner declares needs a GPU
 * slot, one only the host runner declares a host slot; else any slot.
 */
static char *checks_json(struct builder *b)
{
	json_t *arr = json_array(), *c;
	const char *name;
	char *out;

	json_object_foreach(b->checks, name, c)
	{
		bool host = json_is_true(json_object_get(c, "host")),
		     cuda = json_is_true(json_object_get(c, "cuda"));
		json_t *o = json_deep_copy(c);

		json_object_del(o, "host");
		json_object_del(o, "cuda");
		if (b->asked_host && b->asked_cuda && host != cuda)
			json_object_set_new(o, "needs", json_string(cuda ? "gpu" : "host"));
		json_array_append_new(arr, o);
	}
	out = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
	json_decref(arr);
	return out;
}

static void ask_hello(struct builder *b);

/* A runner's hello: which checks this build offers on its backend. */
static void on_hello(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	bool cuda = b->hello_cuda;
	const char *runner = cuda ? b->cuda_runner : b->host_runner;
	/* The runners this host's slots use must answer; the host runner of a GPU-only host need not. */
	bool required = cuda || has_slot(cfg, false);
	struct proto_hello hello = {0};
	char err[512], why[PATH_MAX + 700];
	const char *line = r->out, *nl;

	/* Lines that cannot be the answer (a library's banner on import) are output, not the hello. */
	while ((nl = strchr(line, '\n')) && !proto_line_is_message(line, (size_t)(nl - line)))
		line = nl + 1;
	if (!nl)
		snprintf(why, sizeof(why), "numwatch: runner '%s' gave no hello (exit %lld%s): %.300s",
			 runner, (long long)r->exit_status, r->timed_out ? ", timed out" : "", r->err);
	else if (proto_parse_hello(line, (size_t)(nl - line), &hello, err, sizeof(err)) < 0)
		snprintf(why, sizeof(why), "numwatch: runner '%s' answered hello badly: %s", runner, err);
	else
		why[0] = '\0';
	if (why[0] && required) {
		fail(b, "no_runner", why);
		return;
	}
	if (why[0]) {
		log_warn("build %.12s: %s (which checks need a GPU is not known)", b->job.sha, why);
	} else {
		/* The repro template of the runner the first slot uses, else the other's. */
		if (!b->repro[0] || cuda == (cfg->nslots > 0 && cfg->slots[0].gpu >= 0))
			snprintf(b->repro, sizeof(b->repro), "%s", hello.repro);
		for (unsigned i = 0; i < hello.nchecks; i++) {
			const struct proto_check *c = &hello.checks[i];
			json_t *o = json_object_get(b->checks, c->check);

			if (!o) {
				json_t *dt = json_array(), *fam = json_array();

				for (unsigned k = 0; k < c->ndtypes; k++)
					json_array_append_new(dt, json_string(c->dtypes[k]));
				for (unsigned k = 0; k < c->nfamilies; k++)
					json_array_append_new(fam, json_string(c->families[k]));
				o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:b}", "name", c->check, "op", c->op,
					      "pass", c->pass, "dtypes", dt, "families", fam, "deterministic",
					      c->deterministic);
				json_object_set_new(b->checks, c->check, o);
			}
			json_object_set_new(o, cuda ? "cuda" : "host", json_true());
		}
		if (cuda)
			b->asked_cuda = true;
		else
			b->asked_host = true;
	}
	proto_hello_release(&hello);
	if (!cuda && b->cuda_hash[0] && has_slot(cfg, true)) {
		b->hello_cuda = true;
		ask_hello(b);
		return;
	}
	if (json_object_size(b->checks) == 0) {
		/* Nothing to judge the commit on; stored, it would stay pending for ever. */
		fail(b, "no_runner", "numwatch: the runners' hello declares no checks");
		return;
	}
	{
		char *json = checks_json(b);

		if (!json) {
			fail(b, "no_runner", "numwatch: out of memory");
			return;
		}
		store(b, json);
		free(json);
	}
}

/*
 * Asks a runner for its hello: the host runner first, where the build made
 * one (it needs no GPU), then the CUDA runner where this host has GPU slots
 * (on the first one's device).
 */
static void ask_hello(struct builder *b)
{
	const struct config *cfg = &b->d->cfg;
	bool cuda = b->hello_cuda;
	const char *argv[] = {"/bin/sh",
			      "-c",
			      "printf '%s\\n%s\\n' \"$1\" \"$2\" | exec \"$0\"",
			      cuda ? b->cuda_runner : b->host_runner,
			      NULL,
			      NULL,
			      NULL};
	const char *extra[] = {"NUMWATCH_PROTOCOL=1", NULL, NULL};
	char gpu[32] = "CUDA_VISIBLE_DEVICES=";
	char *hello = proto_hello_request(), *bye = proto_bye_request();

	if (!hello || !bye) {
		free(hello);
		free(bye);
		fail(b, "no_runner", "numwatch: out of memory");
		return;
	}
	hello[strlen(hello) - 1] = '\0';
	bye[strlen(bye) - 1] = '\0';
	argv[4] = hello;
	argv[5] = bye;
	for (unsigned i = 0; cuda && i < cfg->nslots; i++) {
		if (cfg->slots[i].gpu >= 0) {
			snprintf(gpu, sizeof(gpu), "CUDA_VISIBLE_DEVICES=%d", cfg->slots[i].gpu);
			break;
		}
	}
	extra[1] = gpu;
	if (spawn(b, argv, b->build_dir, ENV_RUNNER, extra, (uint64_t)cfg->hello_timeout_s * 1000,
		  NW_PROTO_LINE_MAX, false, on_hello, NULL) < 0)
		fail(b, "no_runner", "numwatch: cannot start /bin/sh");
	free(hello);
	free(bye);
}

/*
 * The build's identity, as lines: the commit's tree; then "HEX  PATH" for each
 * runner file; for the listing of the commit's tracked files that the
 * [build] identity globs match (mode, blob id and path: what they hold, not
 * when they were checked out); and for the file the build may write.
 * $1: worktree, $2: identity file, $3: number of runners the slots use, $4:
 * number of others, hashed where the build made them (the commit's first
 * build names every runner: host_build_record()); then the runners and the
 * pathspecs. Exit 1: a runner the slots use is missing; exit 3: git failed.
 */
static const char identity_script[] =
    "wt=$1 idf=$2 nr=$3 no=$4; shift 4;"
    " git -C \"$wt\" rev-parse --verify -q 'HEAD^{tree}' || exit 3;"
    " while [ \"$nr\" -gt 0 ]; do sha256sum -- \"$1\" || exit 1; shift; nr=$((nr - 1)); done;"
    " while [ \"$no\" -gt 0 ]; do if [ -e \"$1\" ]; then sha256sum -- \"$1\" || exit 1; fi; shift;"
    "  no=$((no - 1)); done;"
    " if [ $# -gt 0 ]; then l=$(git -C \"$wt\" ls-files -s -- \"$@\") || exit 3;"
    "  printf '%s\\n' \"$l\" | sha256sum | sed 's/ -$/ [build] identity/'; fi;"
    " if [ -f \"$idf\" ]; then sha256sum <\"$idf\" | sed 's/ -$/ numwatch-identity/'; fi";

/* Each runner's identity (host_builds): its digest, then the declared identity's parts. */
static void runner_identity(char *out, size_t len, const char *digest, const char *parts)
{
	if (*digest)
		snprintf(out, len, "%.64s%s%s", digest, *parts ? "+" : "", parts);
	else
		out[0] = '\0';
}

static void on_hashed(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	bool want_host = has_slot(cfg, false), want_cuda = has_slot(cfg, true);
	char why[PATH_MAX + 64], parts[160] = "", declared[160] = "", host[65] = "", cuda[65] = "";
	const char *line = r->out, *nl = strchr(line, '\n');
	size_t n = 0, np = 0, nd = 0;
	bool is_host, is_cuda;

	if (r->timed_out || r->term_signal || r->exit_status == 3 || !nl ||
	    nl - line >= (long)sizeof(b->tree)) {
		snprintf(why, sizeof(why), "numwatch: cannot compute the build's identity: %.300s", r->err);
		fail(b, "failed", why);
		return;
	}
	if (failed(r)) {
		snprintf(why, sizeof(why), "numwatch: the build produced no runner at '%s'",
			 want_host ? b->host_runner : b->cuda_runner);
		fail(b, "no_runner", why);
		return;
	}
	snprintf(b->tree, sizeof(b->tree), "%.*s", (int)(nl - line), line);
	/*
	 * "HEX  NAME" per part; the hash is the hex digests joined, the runner
	 * files the slots use first: a runner they do not use is only named for
	 * the other hosts (host_hash, cuda_hash).
	 */
	b->hash[0] = '\0';
	for (line = nl + 1; *line && n + 66 < sizeof(b->hash);) {
		const char *sp = strchr(line, ' ');
		const char *name = sp ? sp + 2 : "";
		size_t nlen;

		nl = strchr(line, '\n');
		if (!sp || sp - line != 64 || sp[1] != ' ')
			break;
		nlen = (size_t)((nl ? nl : name + strlen(name)) - name);
		/* One file may be both runners (runner_cuda = runner_host: a runner for either slot). */
		is_host = nlen == strlen(b->host_runner) && !strncmp(name, b->host_runner, nlen);
		is_cuda = nlen == strlen(b->cuda_runner) && !strncmp(name, b->cuda_runner, nlen);
		if (is_host)
			snprintf(host, sizeof(host), "%.64s", line);
		if (is_cuda)
			snprintf(cuda, sizeof(cuda), "%.64s", line);
		if (!is_host && !is_cuda && nd + 66 < sizeof(declared))
			nd += (size_t)snprintf(declared + nd, sizeof(declared) - nd, "%s%.64s", nd ? "+" : "",
					       line);
		/* A runner the slots do not use is hashed for the other hosts only. */
		if ((is_host && want_host) || (is_cuda && want_cuda) || (!is_host && !is_cuda))
			n +=
			    (size_t)snprintf(b->hash + n, sizeof(b->hash) - n, "%s%.64s", n ? "+" : "", line);
		if (name[0] == '[' || !strncmp(name, "numwatch-identity", 17))
			np += (size_t)snprintf(parts + np, sizeof(parts) - np, "%s%.*s", np ? ", " : "",
					       (int)nlen, name);
		if (!nl)
			break;
		line = nl + 1;
	}
	runner_identity(b->host_hash, sizeof(b->host_hash), host, declared);
	runner_identity(b->cuda_hash, sizeof(b->cuda_hash), cuda, declared);
	snprintf(why, sizeof(why), "numwatch: build identity %.*s... (the runner files%s%s)", 16, b->hash,
		 np ? ", " : "", parts);
	log_append(b, why);
	if (b->local) {
		store(b, NULL);
		return;
	}
	b->checks = json_object();
	b->asked_host = b->asked_cuda = false;
	/* The host runner first, where the build made one: it answers without a GPU. */
	b->hello_cuda = !host[0];
	if (!b->checks) {
		fail(b, "no_runner", "numwatch: out of memory");
		return;
	}
	ask_hello(b);
}

static void on_built(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	char id_file[PATH_MAX + 32], nr[4], no[4];
	char *globs = NULL, *g;
	const char **argv = NULL;
	bool want_host = false, want_cuda = false;
	char why[128];
	size_t len;
	int n = 0;

	b->child = NULL;
	b->log = strndup(r->out, r->out_len);
	if (b->draining || b->lease_lost) {
		if (b->lease_lost)
			log_warn(
			    "build %.12s: its lease ran out and another daemon took it over; leaving it to"
			    " that one",
			    b->job.sha);
		else if (!b->local)
			jobs_release(b->d, b->job.id);
		cleanup(b);
		return;
	}
	if (failed(r)) {
		if (r->timed_out)
			snprintf(why, sizeof(why), "numwatch: build timed out after %u s",
				 cfg->build_timeout_s);
		else if (r->term_signal)
			snprintf(why, sizeof(why), "numwatch: build killed by signal %d", r->term_signal);
		else
			snprintf(why, sizeof(why), "numwatch: build failed with exit status %lld",
				 (long long)r->exit_status);
		fail(b, r->timed_out ? "timeout" : "failed", why);
		return;
	}
	snprintf(b->status, sizeof(b->status), "ok");
	for (unsigned i = 0; i < cfg->nslots; i++) {
		want_host |= cfg->slots[i].gpu < 0;
		want_cuda |= cfg->slots[i].gpu >= 0;
	}
	snprintf(id_file, sizeof(id_file), "%s/numwatch-identity", b->build_dir);
	snprintf(nr, sizeof(nr), "%d", (int)want_host + (int)want_cuda);
	snprintf(no, sizeof(no), "%d", 2 - (int)want_host - (int)want_cuda);
	/*
	 * sh -c SCRIPT sh WORKTREE ID_FILE NR NO, the two runners, the pathspecs, NULL: at most one
	 * pathspec per byte of the option, each ":(glob)" + its text + a NUL.
	 */
	len = strlen(cfg->build_identity);
	globs = malloc(9 * len + 1);
	argv = calloc(8 + 2 + len + 1, sizeof(*argv));
	if (!globs || !argv) {
		fail(b, "failed", "numwatch: out of memory");
		goto out;
	}
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = identity_script;
	argv[n++] = "sh";
	argv[n++] = b->worktree;
	argv[n++] = id_file;
	argv[n++] = nr;
	argv[n++] = no;
	/* The runners the slots use first, then the other ones. */
	if (want_host)
		argv[n++] = b->host_runner;
	if (want_cuda)
		argv[n++] = b->cuda_runner;
	if (!want_host)
		argv[n++] = b->host_runner;
	if (!want_cuda)
		argv[n++] = b->cuda_runner;
	g = globs;
	for (const char *c = cfg->build_identity; *(c += strspn(c, ", "));) {
		size_t k = strcspn(c, ", ");

		argv[n++] = g;
		g += sprintf(g, ":(glob)%.*s", (int)k, c) + 1;
		c += k;
	}
	if (spawn(b, argv, NULL, ENV_BASE, NULL, HOUSEKEEPING_TIMEOUT_MS, 4096, false, on_hashed, NULL) < 0)
		fail(b, "no_runner", "numwatch: cannot run sha256sum");
out:
	free(globs);
	free(argv);
}

static void on_worktree(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	char env_wt[PATH_MAX + 32], env_bd[PATH_MAX + 32], env_c[64], env_id[PATH_MAX + 64];
	const char *extra[] = {env_wt, env_bd, env_c, env_id, NULL};
	const char *argv[] = {"/bin/sh", "-c", cfg->build_command, NULL};
	if (failed(r)) {
		/*
		 * The commit was imported, maybe by another daemon whose mirror was
		 * fetched later than this host's: this host's problem, never the
		 * commit's. The job goes back (another host may build it) and this
		 * host fetches now.
		 */
		log_warn("build %.12s: git worktree add failed here (fetching again): %.300s", b->job.sha,
			 r->out);
		if (!b->local)
			jobs_release(b->d, b->job.id);
		if (b->d->poller)
			poller_poll_now(b->d->poller);
		b->retry_ms = CLAIM_BACKOFF_MS;
		cleanup(b);
		return;
	}
	snprintf(env_wt, sizeof(env_wt), "NUMWATCH_WORKTREE=%s", b->worktree);
	snprintf(env_bd, sizeof(env_bd), "NUMWATCH_BUILD_DIR=%s", b->build_dir);
	snprintf(env_c, sizeof(env_c), "NUMWATCH_COMMIT=%s", b->job.sha);
	snprintf(env_id, sizeof(env_id), "NUMWATCH_IDENTITY_FILE=%s/numwatch-identity", b->build_dir);
	log_info("build %.12s: started%s", b->job.sha,
		 b->local ? " (for this host: built elsewhere first)" : "");
	if (spawn(b, argv, b->worktree, ENV_BUILD, extra, (uint64_t)cfg->build_timeout_s * 1000,
		  cfg->build_log_max, true, on_built, &b->child) < 0)
		fail(b, "failed", "numwatch: cannot start /bin/sh");
}

static void on_prepared(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	char mirror[PATH_MAX];
	const char *argv[] = {"git",     "-C",      mirror,      "worktree", "add", "--detach",
			      "--force", "--quiet", b->worktree, b->job.sha, NULL};

	snprintf(mirror, sizeof(mirror), "%s/mirror.git", b->d->cfg.state_dir);
	if (spawn(b, argv, NULL, ENV_BASE, NULL, HOUSEKEEPING_TIMEOUT_MS, 8192, true, on_worktree, NULL) < 0)
		on_worktree(NULL, &(struct proc_result){.exit_status = 127, .out = "cannot run git"}, b);
}

static void on_renewed(long long job_id, bool held, void *data)
{
	struct builder *b = data;

	if (held || !b->busy || b->local || b->job.id != job_id || b->lease_lost)
		return;
	b->lease_lost = true;
	if (b->child)
		proc_kill(b->child); /* on_built leaves the job to its new owner */
}

static void on_lease(uv_timer_t *t)
{
	struct builder *b = t->data;

	if (b->busy && !b->local)
		jobs_renew(b->d, b->job.id, on_renewed, b);
}

/* Builds 'job' (a build job's commit, or with 'local' one built elsewhere first). */
static void build(struct builder *b, const struct job *job, bool local)
{
	const struct config *cfg = &b->d->cfg;
	char mirror[PATH_MAX];
	/* Leftovers of a build killed mid-way are wiped first. */
	const char *argv[] = {
	    "/bin/sh", "-c",        "rm -rf \"$1\" \"$2\" && mkdir -p \"$2\" && git -C \"$3\" worktree prune",
	    "sh",      b->worktree, b->build_dir,
	    mirror,    NULL};

	b->job = *job;
	b->local = local;
	b->lease_lost = false;
	b->hash[0] = b->host_hash[0] = b->cuda_hash[0] = '\0';
	b->tree[0] = '\0';
	b->repro[0] = '\0';
	b->started_ms = uv_now(b->d->loop);
	b->started_wall = (long long)time(NULL);
	snprintf(mirror, sizeof(mirror), "%s/mirror.git", cfg->state_dir);
	snprintf(b->worktree, sizeof(b->worktree), "%s/worktrees/%s", cfg->state_dir, job->sha);
	snprintf(b->build_dir, sizeof(b->build_dir), "%s/builds/%s", cfg->state_dir, job->sha);
	snprintf(b->host_runner, sizeof(b->host_runner), "%s/%s", b->build_dir, cfg->runner_host);
	snprintf(b->cuda_runner, sizeof(b->cuda_runner), "%s/%s", b->build_dir, cfg->runner_cuda);
	if (!local)
		uv_timer_start(&b->lease, on_lease, (uint64_t)cfg->lease_s * 1000 / 3,
			       (uint64_t)cfg->lease_s * 1000 / 3);
	if (spawn(b, argv, NULL, ENV_BASE, NULL, HOUSEKEEPING_TIMEOUT_MS, 8192, true, on_prepared, NULL) < 0)
		on_prepared(NULL, NULL, b);
}

static void wait_for_work(struct builder *b)
{
	uint64_t ms = b->retry_ms ? b->retry_ms : CLAIM_POLL_MS;

	b->retry_ms = 0;
	b->busy = false;
	if (b->draining)
		builder_drain(b);
	else
		uv_timer_start(&b->timer, on_wake, ms, 0);
}

static void on_local_next(PGresult *res, const char *error, void *data)
{
	struct builder *b = data;
	struct job job = {0};

	if (error)
		log_warn("build: cannot look for commits to build here: %s", error);
	if (error || PQntuples(res) != 1 || b->draining) {
		wait_for_work(b);
		return;
	}
	job.commit_id = db_get_ll(res, 0, 0, 0);
	snprintf(job.sha, sizeof(job.sha), "%s", PQgetvalue(res, 0, 1));
	job.round = -1;
	build(b, &job, true);
}

/* Whether a slot of this host waits for work: the work there is may be for commits it has not built. */
static bool slots_hungry(const struct nwd *d)
{
	for (unsigned i = 0; i < d->nslots; i++)
		if (slot_idle(d->slots[i]))
			return true;
	return false;
}

static void on_claimed(struct job *job, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	char repo[16];
	const char *params[5] = {repo, cfg->node_name, has_slot(cfg, true) ? "t" : "f",
				 has_slot(cfg, false) ? "t" : "f", slots_hungry(b->d) ? "t" : "f"};

	if (job && b->draining) {
		jobs_release(b->d, job->id);
		job = NULL;
	}
	if (job) {
		build(b, job, false);
		return;
	}
	if (b->draining || b->d->read_only) {
		wait_for_work(b);
		return;
	}
	/*
	 * No first build to make: a commit built elsewhere whose jobs this host
	 * could run is built here too, when its slots wait for work or the work
	 * is urgent (a probe; a dead daemon's job, taken over sooner).
	 */
	snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
	if (db_query(b->d->db, "SELECT * FROM host_build_next($1, $2, $3, $4, $5)", 5, params, on_local_next,
		     b) < 0)
		wait_for_work(b);
}

static void claim(struct builder *b)
{
	if (b->busy || b->draining)
		return;
	uv_timer_stop(&b->timer);
	/* Until its first fetch, this host's mirror may lack the commits other daemons imported. */
	if (b->d->poller && poller_polls(b->d->poller) == 0) {
		uv_timer_start(&b->timer, on_wake, CLAIM_POLL_MS, 0);
		return;
	}
	b->busy = true;
	jobs_claim(b->d, "build", 0, has_slot(&b->d->cfg, true), on_claimed, b);
}

void builder_kick(struct builder *b)
{
	claim(b);
}

void builder_drain(struct builder *b)
{
	b->draining = true;
	uv_timer_stop(&b->timer);
	if (b->child)
		proc_kill(b->child); /* on_built gives the job back */
	if (b->busy || b->stopped)
		return;
	b->stopped = true;
	nwd_service_stopped(b->d);
}

const char *builder_current(const struct builder *b)
{
	return b->busy ? b->job.sha : "";
}

static void on_forgotten(PGresult *res, const char *error, void *data)
{
	if (error)
		log_warn("build: cannot forget this host's build: %s", error);
}

void builder_forget(struct nwd *d, long long commit_id)
{
	char commit[24];
	const char *params[2] = {commit, d->cfg.node_name};

	if (d->read_only)
		return;
	snprintf(commit, sizeof(commit), "%lld", commit_id);
	if (db_query(d->db, "DELETE FROM host_builds WHERE commit_id = $1 AND host = $2", 2, params,
		     on_forgotten, NULL) < 0)
		on_forgotten(NULL, "cannot queue the query", NULL);
	if (d->builder)
		builder_kick(d->builder);
}

int builder_start(struct nwd *d, struct builder **out)
{
	struct builder *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->d = d;
	uv_timer_init(d->loop, &b->timer);
	uv_timer_init(d->loop, &b->lease);
	b->timer.data = b->lease.data = b;
	uv_timer_start(&b->timer, on_wake, 0, 0);
	*out = b;
	return 0;
}
