/* poller: git mirror, fetch, first-parent history. */
#include "poller.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caps.h"
#include "db.h"
#include "log.h"
#include "nwd.h"
#include "proc.h"
#include "queries.h"

#define GIT_TIMEOUT_MS (300 * 1000)
#define BACKOFF_MAX_S  600

struct poller {
	struct nwd *d;
	uv_timer_t timer;
	bool busy, stopped;
	unsigned failures;
	unsigned polls; /* polls that worked since start */
	char mirror[PATH_MAX];
	char *log_out; /* the history read by git log, kept until its depth is known */
};

static void poll_done(struct poller *p, const char *error);

static int git(struct poller *p, const char *const *args, proc_done_cb cb)
{
	const char *argv[16] = {"git"};
	const char *extra[] = {"GIT_TERMINAL_PROMPT=0", "LC_ALL=C", NULL};
	struct proc_opts o = {0};
	struct proc *child;
	char **env = nwd_env(p->d, extra);
	int n = 1, rc;

	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	if (!env)
		return -ENOMEM;
	o.argv = argv;
	o.env = (const char *const *)env;
	o.timeout_ms = GIT_TIMEOUT_MS;
	o.out_max = NW_GIT_OUTPUT_MAX;
	o.err_max = 4096;
	o.on_done = cb;
	o.data = p;
	rc = proc_spawn(p->d->loop, &o, &child);
	nwd_env_free(env);
	return rc;
}

/* A git command failed: a one-line reason from its stderr. */
static void git_error(char *buf, size_t len, const char *what, const struct proc_result *r)
{
	const char *nl;
	int n;

	if (r->timed_out) {
		snprintf(buf, len, "%s: timed out", what);
		return;
	}
	nl = strchr(r->err, '\n');
	n = nl ? (int)(nl - r->err) : (int)strlen(r->err);
	snprintf(buf, len, "%s: exit %lld: %.*s", what, (long long)r->exit_status, n, r->err);
}

static bool failed(const struct proc_result *r)
{
	return r->timed_out || r->term_signal || r->exit_status != 0;
}

static void on_stored(PGresult *res, const char *error, void *data)
{
	struct poller *p = data;

	if (error) {
		poll_done(p, error);
		return;
	}
	if (atoll(PQgetvalue(res, 0, 0)) > 0 || atoll(PQgetvalue(res, 0, 1)) > 0)
		log_info("repo %s: %s new commits, %s no longer on '%s'", p->d->cfg.repo_name,
			 PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), p->d->cfg.repo_branch);
	poll_done(p, NULL);
	nwd_kick(p->d);
}

#define store_sql nwq_poller_store /* sql/queries/poller_store.sql */

/* Parses `git log` records (fields split by 0x1f, records by 0x1e) into the JSON the query reads. */
static char *history_json(const char *out, long base)
{
	json_t *arr = json_array();
	const char *rec = out;
	long count = 0;
	char *s = NULL;

	/* Count records first: positions run from the oldest (base) up. */
	for (const char *c = out; *c; c++)
		count += *c == 0x1e;
	for (long i = 0; *rec && i < count; i++) {
		const char *end = strchr(rec, 0x1e);
		char *copy, *f[6] = {0}, *save = NULL, *tok;
		int nf = 0;
		json_t *o;

		while (*rec == '\n')
			rec++;
		end = strchr(rec, 0x1e);
		if (!end)
			break;
		copy = strndup(rec, (size_t)(end - rec));
		if (!copy)
			goto out;
		for (tok = copy; nf < 6; nf++) {
			char *sep = strchr(tok, 0x1f);

			f[nf] = tok;
			if (!sep) {
				nf++;
				break;
			}
			*sep = '\0';
			tok = sep + 1;
		}
		(void)save;
		if (nf == 6 && strlen(f[0]) == 40) {
			char *space = strchr(f[1], ' ');

			if (space)
				*space = '\0'; /* first parent only */
			o = json_pack("{s:s, s:s?, s:i, s:s, s:s, s:s, s:I}", "sha", f[0], "parent",
				      *f[1] ? f[1] : NULL, "position", (json_int_t)(base + count - 1 - i),
				      "author", f[2], "email", f[3], "title", f[5], "at",
				      (json_int_t)strtoll(f[4], NULL, 10));
			if (o)
				json_array_append_new(arr, o);
		}
		free(copy);
		rec = end + 1;
	}
	s = json_dumps(arr, JSON_COMPACT);
out:
	json_decref(arr);
	return s;
}

static void on_count(struct proc *child, const struct proc_result *r, void *data)
{
	struct poller *p = data;
	char repo[16], err[512];
	const char *params[2] = {repo, NULL};
	long depth;
	char *json;

	if (failed(r)) {
		git_error(err, sizeof(err), "git rev-list --count", r);
		poll_done(p, err);
		return;
	}
	/* The oldest commit we read has 'depth' first-parent commits up to the root, itself included. */
	depth = strtol(r->out, NULL, 10);
	json = history_json(p->log_out, depth - 1);
	free(p->log_out);
	p->log_out = NULL;
	if (!json) {
		poll_done(p, "out of memory");
		return;
	}
	snprintf(repo, sizeof(repo), "%d", p->d->repo_id);
	params[1] = json;
	if (db_query(p->d->db, store_sql, 2, params, on_stored, p) < 0)
		poll_done(p, "cannot queue query");
	free(json);
}

static void on_log(struct proc *child, const struct proc_result *r, void *data)
{
	struct poller *p = data;
	char err[512], oldest[41], max[16];
	const char *last;
	const char *args[] = {"-C", p->mirror, "rev-list", "--first-parent", "--count", oldest, NULL};

	if (failed(r)) {
		git_error(err, sizeof(err), "git log", r);
		poll_done(p, err);
		return;
	}
	if (r->out_truncated) {
		poll_done(p, "git log: history larger than the capture limit; lower history_max");
		return;
	}
	(void)max;
	/* The last record is the oldest commit read. */
	last = r->out + r->out_len;
	while (last > r->out && (last[-1] == '\n' || last[-1] == 0x1e))
		last--;
	while (last > r->out && last[-1] != 0x1e)
		last--;
	while (*last == '\n')
		last++;
	if (r->out_len == 0 || strlen(last) < 40) {
		poll_done(p, "branch has no commits");
		return;
	}
	memcpy(oldest, last, 40);
	oldest[40] = '\0';
	p->log_out = strdup(r->out);
	if (!p->log_out || git(p, args, on_count) < 0)
		poll_done(p, "cannot run git");
}

static void read_history(struct poller *p)
{
	char max[32], ref[300];
	const char *args[] = {
	    "-C", p->mirror, "log", "--first-parent", max, "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%ct%x1f%s%x1e",
	    ref,  "--",      NULL};

	snprintf(max, sizeof(max), "--max-count=%u", p->d->cfg.history_max);
	snprintf(ref, sizeof(ref), "refs/heads/%s", p->d->cfg.repo_branch);
	if (git(p, args, on_log) < 0)
		poll_done(p, "cannot run git");
}

static void on_fetched(struct proc *child, const struct proc_result *r, void *data)
{
	struct poller *p = data;
	char err[512];

	if (failed(r)) {
		git_error(err, sizeof(err), "git fetch", r);
		poll_done(p, err);
		return;
	}
	read_history(p);
}

static void poll_start(struct poller *p)
{
	const char *fetch[] = {"-C", p->mirror, "fetch", "--prune", "--force", "--quiet", "origin", NULL};
	const char *clone[] = {"clone", "--mirror", "--quiet", p->d->cfg.repo_url, p->mirror, NULL};
	char head[PATH_MAX + 8];

	if (p->busy || p->stopped)
		return;
	p->busy = true;
	uv_timer_stop(&p->timer);
	snprintf(head, sizeof(head), "%s/HEAD", p->mirror);
	/* A partial clone left by a crash has no HEAD and is cloned again (git refuses a non-empty dir). */
	if (access(head, F_OK) == 0) {
		if (git(p, fetch, on_fetched) < 0)
			poll_done(p, "cannot run git");
	} else {
		if (git(p, clone, on_fetched) < 0)
			poll_done(p, "cannot run git");
	}
}

static void on_timer(uv_timer_t *t)
{
	poll_start(t->data);
}

/* The health page's polled_at and poll_error: the next poll writes them again. */
static void on_error_stored(PGresult *res, const char *error, void *data)
{
	if (error)
		log_warn("repo: cannot record the poll: %s", error);
}

static void poll_done(struct poller *p, const char *error)
{
	unsigned interval = p->d->cfg.poll_interval_s;
	char repo[16];
	const char *params[2] = {repo, error};

	p->busy = false;
	free(p->log_out);
	p->log_out = NULL;
	if (error) {
		p->failures++;
		/* Exponential backoff while the remote is unreachable. */
		for (unsigned i = 1; i < p->failures && interval < BACKOFF_MAX_S; i++)
			interval *= 2;
		if (interval > BACKOFF_MAX_S)
			interval = BACKOFF_MAX_S;
		log_warn("repo %s: poll failed (retry in %u s): %s", p->d->cfg.repo_name, interval, error);
	} else {
		p->failures = 0;
		p->polls++;
	}
	snprintf(repo, sizeof(repo), "%d", p->d->repo_id);
	if (db_query(p->d->db, "UPDATE repositories SET polled_at = now(), poll_error = $2 WHERE id = $1", 2,
		     params, on_error_stored, NULL) < 0)
		on_error_stored(NULL, "cannot queue the query", NULL);
	if (!p->stopped)
		uv_timer_start(&p->timer, on_timer, (uint64_t)interval * 1000, 0);
}

int poller_start(struct nwd *d, struct poller **out)
{
	struct poller *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->d = d;
	snprintf(p->mirror, sizeof(p->mirror), "%s/mirror.git", d->cfg.state_dir);
	uv_timer_init(d->loop, &p->timer);
	p->timer.data = p;
	uv_timer_start(&p->timer, on_timer, 0, 0);
	*out = p;
	return 0;
}

void poller_poll_now(struct poller *p)
{
	poll_start(p);
}

unsigned poller_polls(const struct poller *p)
{
	return p->polls;
}

unsigned poller_failures(const struct poller *p)
{
	return p->failures;
}

void poller_stop(struct poller *p)
{
	p->stopped = true;
	uv_timer_stop(&p->timer);
	/* A poll in flight finishes on its own; the handle closes with the loop's walk at exit. */
}
