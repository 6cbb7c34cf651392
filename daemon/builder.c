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
#include "proc.h"
#include "protocol.h"

#define CLAIM_POLL_MS           1000
#define HOUSEKEEPING_TIMEOUT_MS (120 * 1000)

struct builder {
	struct nwd *d;
	uv_timer_t timer;
	bool busy, draining, stopped;
	struct job job;
	struct proc *child; /* the build command, while it runs */
	char worktree[PATH_MAX];
	char build_dir[PATH_MAX];
	char runner[PATH_MAX];
	char *log;       /* the build's output */
	char status[16]; /* builds.status */
	char hash[320];  /* the runner files' hashes, then the declared identity's, joined by '+' */
	char tree[80];   /* the commit's tree */
	char repro[NW_PROTO_TEXT_MAX]; /* the runner's repro template from its hello, "" if none */
	bool identity_warned;          /* the identity warning was logged (once while it holds) */
	uint64_t started_ms;
	long long started_wall;
	char *hello_line;
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
	free(b->log);
	b->log = NULL;
	free(b->hello_line);
	b->hello_line = NULL;
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

	/* COMMIT of a transaction that failed earlier answers ROLLBACK. */
	if (!error && strcmp(PQcmdStatus(res), "COMMIT") != 0)
		error = "transaction rolled back";
	if (error) {
		log_error("build %.12s: storing the result failed: %s", b->job.sha, error);
		jobs_release(b->d, b->job.id);
	} else {
		nwd_kick(b->d);
		if (strcmp(b->status, "ok") == 0) {
			snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
			db_query(b->d->db, "SELECT identity_warning($1)", 1, params, on_identity_checked, b);
		}
	}
	cleanup(b);
}

static void on_query_error(PGresult *res, const char *error, void *data)
{
	if (error)
		log_warn("build: %s", error);
}

static const char build_sql[] =
    "INSERT INTO builds (commit_id, status, log, runner_hash, started_at, duration_ms, host, tree, repro,"
    "  runner_host, runner_cuda)"
    " VALUES ($1, $2, $3, $4, to_timestamp($5), $6, $7, $8, $9, $10, $11)"
    " ON CONFLICT (commit_id) DO UPDATE SET status = EXCLUDED.status, log = EXCLUDED.log,"
    " runner_hash = EXCLUDED.runner_hash, started_at = EXCLUDED.started_at,"
    " duration_ms = EXCLUDED.duration_ms, host = EXCLUDED.host, tree = EXCLUDED.tree,"
    " repro = EXCLUDED.repro, runner_host = EXCLUDED.runner_host, runner_cuda = EXCLUDED.runner_cuda";

static const char checks_sql[] =
    "WITH input AS (SELECT * FROM json_to_recordset($2::json) AS t(name text, op text, pass text,"
    "  dtypes text[], families text[], deterministic boolean)),"
    " up AS (INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic)"
    "  SELECT $1, name, op, pass, dtypes, coalesce(families, '{}'), deterministic FROM input"
    "  ON CONFLICT (repo_id, name) DO UPDATE SET op = EXCLUDED.op, pass = EXCLUDED.pass,"
    "   dtypes = EXCLUDED.dtypes, families = EXCLUDED.families, deterministic = EXCLUDED.deterministic"
    "  RETURNING id, name, dtypes),"
    /* What this commit declares: a check no earlier commit declared is introduced here. */
    " declared AS (UPDATE builds SET checks = (SELECT array_agg(name ORDER BY name) FROM input)"
    "  WHERE commit_id = $3)"
    " INSERT INTO jobs (kind, commit_id, check_id, dtype)"
    " SELECT 'trials', $3, up.id, d FROM up, unnest(up.dtypes) AS d"
    " WHERE $4 = '' OR up.name LIKE ANY (SELECT replace(p, '*', '%') FROM regexp_split_to_table($4, '[ ,]+') "
    "AS p"
    "  WHERE p <> '')"
    " ON CONFLICT DO NOTHING";

/* Every 'every'th seed of the plan again under each sanitizer tool, on GPU slots, behind the plan. */
static const char sanitize_sql[] =
    "INSERT INTO jobs (kind, commit_id, check_id, dtype, tool, seeds, priority)"
    " SELECT 'sanitize', $1, k.id, d, t, ARRAY(SELECT generate_series(0, $3::int - 1, $4::int)::bigint), 150"
    " FROM checks k, unnest(k.dtypes) AS d,"
    "  (SELECT t FROM regexp_split_to_table($2, '[ ,]+') AS t WHERE t <> '') AS tools"
    " WHERE k.repo_id = $5 AND EXISTS (SELECT 1 FROM jobs j WHERE j.kind = 'trials' AND j.commit_id = $1"
    "  AND j.check_id = k.id AND j.dtype = d)"
    "  AND (SELECT position FROM commits WHERE id = $1) % $6::int = 0"
    " ON CONFLICT DO NOTHING";

static const char failed_stats_sql[] =
    "INSERT INTO stats (commit_id, check_id, dtype, trials, failures, infra_errors, verdict)"
    " SELECT $1, k.id, d, 0, 0, 0, 'build_failed' FROM checks k, unnest(k.dtypes) AS d WHERE k.repo_id = $2"
    " ON CONFLICT (commit_id, check_id, dtype) DO UPDATE SET verdict = 'build_failed', updated_at = now()";

static bool has_gpu_slot(const struct config *cfg)
{
	for (unsigned i = 0; i < cfg->nslots; i++)
		if (cfg->slots[i].gpu >= 0)
			return true;
	return false;
}

/* Stores the build, its checks and trials jobs (or build_failed verdicts) in one transaction. */
static void store(struct builder *b, const char *checks_json)
{
	char commit[24], started[24], duration[24], repo[16];
	const char *bparams[11] = {commit,
				   b->status,
				   b->log ? b->log : "",
				   b->hash[0] ? b->hash : NULL,
				   started,
				   duration,
				   b->d->cfg.node_name,
				   b->tree[0] ? b->tree : NULL,
				   b->repro[0] ? b->repro : NULL,
				   b->d->cfg.runner_host,
				   b->d->cfg.runner_cuda};
	const char *cparams[4] = {repo, checks_json, commit,
				  b->d->cfg.trials_checks ? b->d->cfg.trials_checks : ""};
	const char *fparams[2] = {commit, repo};
	bool ok = strcmp(b->status, "ok") == 0;
	uint64_t ms = uv_now(b->d->loop) - b->started_ms;

	snprintf(commit, sizeof(commit), "%lld", b->job.commit_id);
	snprintf(started, sizeof(started), "%lld", b->started_wall);
	snprintf(duration, sizeof(duration), "%llu", (unsigned long long)ms);
	snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
	nwd_count_build(b->d, b->status, (double)ms / 1000.0);
	log_info("build %.12s: %s in %.1f s%s%s", b->job.sha, b->status, (double)ms / 1000.0,
		 ok ? ", runner " : "", ok ? b->hash : "");
	db_query(b->d->db, "BEGIN", 0, NULL, on_query_error, NULL);
	db_query(b->d->db, build_sql, 11, bparams, on_query_error, NULL);
	if (ok)
		db_query(b->d->db, checks_sql, 4, cparams, on_query_error, NULL);
	if (ok && b->d->cfg.sanitizer_tools && *b->d->cfg.sanitizer_tools && has_gpu_slot(&b->d->cfg)) {
		char per[16], every[16], commits[16];
		const char *sparams[6] = {commit, b->d->cfg.sanitizer_tools, per, every, repo, commits};

		snprintf(per, sizeof(per), "%u", b->d->cfg.trials_per_commit);
		snprintf(every, sizeof(every), "%u", b->d->cfg.sanitizer_every);
		snprintf(commits, sizeof(commits), "%u", b->d->cfg.sanitizer_commits);
		db_query(b->d->db, sanitize_sql, 6, sparams, on_query_error, NULL);
	}
	if (!ok)
		db_query(b->d->db, failed_stats_sql, 2, fparams, on_query_error, NULL);
	jobs_finish(b->d, b->job.id, false, NULL);
	db_query(b->d->db, "COMMIT", 0, NULL, on_stored, b);
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

/* The runner's hello: which checks this build offers. */
static void on_hello(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	struct proto_hello hello = {0};
	char err[512], why[700];
	const char *nl = strchr(r->out, '\n');
	json_t *arr;
	char *json;

	if (!nl) {
		snprintf(why, sizeof(why), "numwatch: runner '%s' gave no hello (exit %lld%s): %.300s",
			 b->runner, (long long)r->exit_status, r->timed_out ? ", timed out" : "", r->err);
		fail(b, "no_runner", why);
		return;
	}
	if (proto_parse_hello(r->out, (size_t)(nl - r->out), &hello, err, sizeof(err)) < 0) {
		snprintf(why, sizeof(why), "numwatch: runner '%s' answered hello badly: %s", b->runner, err);
		fail(b, "no_runner", why);
		return;
	}
	snprintf(b->repro, sizeof(b->repro), "%s", hello.repro);
	arr = json_array();
	for (unsigned i = 0; arr && i < hello.nchecks; i++) {
		const struct proto_check *c = &hello.checks[i];
		json_t *dt = json_array(), *fam = json_array();

		for (unsigned k = 0; k < c->ndtypes; k++)
			json_array_append_new(dt, json_string(c->dtypes[k]));
		for (unsigned k = 0; k < c->nfamilies; k++)
			json_array_append_new(fam, json_string(c->families[k]));
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:o, s:o, s:b}", "name", c->check, "op",
						     c->op, "pass", c->pass, "dtypes", dt, "families", fam,
						     "deterministic", c->deterministic));
	}
	json = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
	json_decref(arr);
	proto_hello_release(&hello);
	if (!json) {
		fail(b, "no_runner", "numwatch: out of memory");
		return;
	}
	store(b, json);
	free(json);
}

static void ask_hello(struct builder *b)
{
	const struct config *cfg = &b->d->cfg;
	const char *argv[] = {
	    "/bin/sh", "-c", "printf '%s\\n%s\\n' \"$1\" \"$2\" | exec \"$0\"", b->runner, NULL, NULL, NULL};
	const char *extra[] = {"NUMWATCH_PROTOCOL=1", NULL, NULL};
	char gpu[32];
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
	/* The hello comes from the runner the first slot uses, on that slot's device. */
	if (cfg->nslots > 0 && cfg->slots[0].gpu >= 0)
		snprintf(gpu, sizeof(gpu), "CUDA_VISIBLE_DEVICES=%d", cfg->slots[0].gpu);
	else
		snprintf(gpu, sizeof(gpu), "CUDA_VISIBLE_DEVICES=");
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
 * $1: worktree, $2: identity file, $3: number of runners; then the runners and
 * the pathspecs. Exit 1: a runner is missing; exit 3: git failed.
 */
static const char identity_script[] =
    "wt=$1 idf=$2 nr=$3; shift 3;"
    " git -C \"$wt\" rev-parse --verify -q 'HEAD^{tree}' || exit 3;"
    " while [ \"$nr\" -gt 0 ]; do sha256sum -- \"$1\" || exit 1; shift; nr=$((nr - 1)); done;"
    " if [ $# -gt 0 ]; then l=$(git -C \"$wt\" ls-files -s -- \"$@\") || exit 3;"
    "  printf '%s\\n' \"$l\" | sha256sum | sed 's/ -$/ [build] identity/'; fi;"
    " if [ -f \"$idf\" ]; then sha256sum <\"$idf\" | sed 's/ -$/ numwatch-identity/'; fi";

static void on_hashed(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	char why[PATH_MAX + 64], parts[160] = "";
	const char *line = r->out, *nl = strchr(line, '\n');
	size_t n = 0, np = 0;

	if (r->timed_out || r->term_signal || r->exit_status == 3 || !nl ||
	    nl - line >= (long)sizeof(b->tree)) {
		snprintf(why, sizeof(why), "numwatch: cannot compute the build's identity: %.300s", r->err);
		fail(b, "failed", why);
		return;
	}
	if (failed(r)) {
		snprintf(why, sizeof(why), "numwatch: the build produced no runner at '%s'", b->runner);
		fail(b, "no_runner", why);
		return;
	}
	snprintf(b->tree, sizeof(b->tree), "%.*s", (int)(nl - line), line);
	/* "HEX  NAME" per part; the hash is the hex digests joined, runner files first. */
	b->hash[0] = '\0';
	for (line = nl + 1; *line && n + 66 < sizeof(b->hash);) {
		const char *sp = strchr(line, ' ');

		nl = strchr(line, '\n');
		if (!sp || sp - line != 64)
			break;
		n += (size_t)snprintf(b->hash + n, sizeof(b->hash) - n, "%s%.64s", n ? "+" : "", line);
		if (sp[1] == ' ' && (sp[2] == '[' || !strncmp(sp + 2, "numwatch-identity", 17)))
			np += (size_t)snprintf(parts + np, sizeof(parts) - np, "%s%.*s", np ? ", " : "",
					       (int)((nl ? nl : sp + strlen(sp)) - (sp + 2)), sp + 2);
		if (!nl)
			break;
		line = nl + 1;
	}
	snprintf(why, sizeof(why), "numwatch: build identity %.*s... (the runner files%s%s)", 16, b->hash,
		 np ? ", " : "", parts);
	log_append(b, why);
	ask_hello(b);
}

static void on_built(struct proc *p, const struct proc_result *r, void *data)
{
	struct builder *b = data;
	const struct config *cfg = &b->d->cfg;
	char host_runner[PATH_MAX], cuda_runner[PATH_MAX], id_file[PATH_MAX + 32], nr[4];
	char *globs = NULL, *g;
	const char **argv = NULL;
	bool want_host = false, want_cuda = false;
	char why[128];
	size_t len;
	int n = 0;

	b->child = NULL;
	b->log = strndup(r->out, r->out_len);
	if (b->draining) {
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
	snprintf(host_runner, sizeof(host_runner), "%s/%s", b->build_dir, cfg->runner_host);
	snprintf(cuda_runner, sizeof(cuda_runner), "%s/%s", b->build_dir, cfg->runner_cuda);
	snprintf(id_file, sizeof(id_file), "%s/numwatch-identity", b->build_dir);
	snprintf(b->runner, sizeof(b->runner), "%s",
		 cfg->nslots > 0 && cfg->slots[0].gpu >= 0 ? cuda_runner : host_runner);
	snprintf(nr, sizeof(nr), "%d", (int)want_host + (int)want_cuda);
	/*
	 * sh -c SCRIPT sh WORKTREE ID_FILE NR, up to two runners, the pathspecs, NULL: at most one
	 * pathspec per byte of the option, each ":(glob)" + its text + a NUL.
	 */
	len = strlen(cfg->build_identity);
	globs = malloc(9 * len + 1);
	argv = calloc(7 + 2 + len + 1, sizeof(*argv));
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
	if (want_host)
		argv[n++] = host_runner;
	if (want_cuda)
		argv[n++] = cuda_runner;
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
	char why[600];

	if (failed(r)) {
		/* The commit exists in the mirror, so this is the host's problem, not the commit's. */
		snprintf(why, sizeof(why), "git worktree add failed: %.500s", r->out);
		log_warn("build %.12s: %s", b->job.sha, why);
		jobs_finish(b->d, b->job.id, true, why);
		cleanup(b);
		return;
	}
	snprintf(env_wt, sizeof(env_wt), "NUMWATCH_WORKTREE=%s", b->worktree);
	snprintf(env_bd, sizeof(env_bd), "NUMWATCH_BUILD_DIR=%s", b->build_dir);
	snprintf(env_c, sizeof(env_c), "NUMWATCH_COMMIT=%s", b->job.sha);
	snprintf(env_id, sizeof(env_id), "NUMWATCH_IDENTITY_FILE=%s/numwatch-identity", b->build_dir);
	log_info("build %.12s: started", b->job.sha);
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

static void on_claimed(struct job *job, void *data)
{
	struct builder *b = data;
	char mirror[PATH_MAX];
	/* Leftovers of a build killed mid-way are wiped first. */
	const char *argv[] = {
	    "/bin/sh", "-c",        "rm -rf \"$1\" \"$2\" && mkdir -p \"$2\" && git -C \"$3\" worktree prune",
	    "sh",      b->worktree, b->build_dir,
	    mirror,    NULL};

	if (!job) {
		b->busy = false;
		if (b->draining)
			builder_drain(b);
		else
			uv_timer_start(&b->timer, on_wake, CLAIM_POLL_MS, 0);
		return;
	}
	if (b->draining) {
		jobs_release(b->d, job->id);
		b->busy = false;
		builder_drain(b);
		return;
	}
	b->job = *job;
	b->hash[0] = '\0';
	b->tree[0] = '\0';
	b->repro[0] = '\0';
	b->started_ms = uv_now(b->d->loop);
	b->started_wall = (long long)time(NULL);
	snprintf(mirror, sizeof(mirror), "%s/mirror.git", b->d->cfg.state_dir);
	snprintf(b->worktree, sizeof(b->worktree), "%s/worktrees/%s", b->d->cfg.state_dir, job->sha);
	snprintf(b->build_dir, sizeof(b->build_dir), "%s/builds/%s", b->d->cfg.state_dir, job->sha);
	if (spawn(b, argv, NULL, ENV_BASE, NULL, HOUSEKEEPING_TIMEOUT_MS, 8192, true, on_prepared, NULL) < 0)
		on_prepared(NULL, NULL, b);
}

static void claim(struct builder *b)
{
	if (b->busy || b->draining)
		return;
	uv_timer_stop(&b->timer);
	b->busy = true;
	jobs_claim(b->d, "build", 0, on_claimed, b);
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

int builder_start(struct nwd *d, struct builder **out)
{
	struct builder *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->d = d;
	uv_timer_init(d->loop, &b->timer);
	b->timer.data = b;
	uv_timer_start(&b->timer, on_wake, 0, 0);
	*out = b;
	return 0;
}
