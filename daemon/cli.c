/*
 * numwatch: the command-line client. It talks to a running numwatchd over the
 * REST API (NUMWATCH_URL or --url, default http://127.0.0.1:8080).
 *
 *   numwatch health
 *   numwatch commits [--limit N] [--offset N]
 *   numwatch show SHA
 *   numwatch ci-wait SHA [--timeout S] [--strict]   exit 0 clean or still open, 1 regressed here, 2 timed out, 3 error
 *   numwatch bisect --good SHA --bad SHA --check C --dtype D   (needs NUMWATCH_TOKEN)
 *   numwatch token create NAME | list | revoke ID   --config FILE (talks to the database)
 *   numwatch repro --commit SHA --check C --dtype D --seed S --config FILE [--runs N]
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "caps.h"
#include "config.h"
#include "io.h"
#include "protocol.h"

#define RESPONSE_MAX      (16 * 1024 * 1024)
#define REQUEST_TIMEOUT_S 30L

enum { EXIT_CLEAN = 0, EXIT_REGRESSED = 1, EXIT_TIMEOUT = 2, EXIT_ERROR = 3 };

struct buf {
	char *data;
	size_t len;
	bool too_big;
};

static bool api_like_sha(const char *s)
{
	size_t n = strlen(s);

	return n == 40 && strspn(s, "0123456789abcdef") == n;
}

static const char *base_url = "http://127.0.0.1:8080";

static size_t on_data(char *p, size_t size, size_t n, void *userdata)
{
	struct buf *b = userdata;
	size_t add = size * n;
	char *grown;

	if (b->len + add > RESPONSE_MAX) {
		b->too_big = true;
		return 0;
	}
	grown = realloc(b->data, b->len + add + 1);
	if (!grown)
		return 0;
	memcpy(grown + b->len, p, add);
	b->data = grown;
	b->len += add;
	b->data[b->len] = '\0';
	return add;
}

/* GETs 'path'; returns the HTTP status (0 when unreachable) and the parsed JSON body in *out. */
static long get_json(const char *path, json_t **out, char *err, size_t errlen)
{
	CURL *c = curl_easy_init();
	struct buf b = {0};
	char url[2048];
	long status = 0;
	json_error_t jerr;
	CURLcode rc;

	*out = NULL;
	if (!c) {
		snprintf(err, errlen, "cannot initialise libcurl");
		return 0;
	}
	snprintf(url, sizeof(url), "%s%s", base_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, REQUEST_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "cannot reach '%s': %s", url,
			 b.too_big ? "response too large" : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	*out = json_loads(b.data ? b.data : "", 0, &jerr);
	if (!*out)
		snprintf(err, errlen, "'%s' answered %ld with a body that is not JSON", url, status);
	else if (status >= 400)
		snprintf(err, errlen, "%s",
			 json_string_value(json_object_get(*out, "error")) ?: "request failed");
out:
	free(b.data);
	curl_easy_cleanup(c);
	return status;
}

/* POSTs a JSON body with the bearer token; returns the status and the parsed answer. */
static long post_json(const char *path, const char *body, const char *token, json_t **out, char *err,
		      size_t errlen)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	struct buf b = {0};
	char url[2048], auth[512];
	long status = 0;
	CURLcode rc;

	*out = NULL;
	if (!c) {
		snprintf(err, errlen, "cannot initialise libcurl");
		return 0;
	}
	snprintf(url, sizeof(url), "%s%s", base_url, path);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token ? token : "");
	h = curl_slist_append(h, "Content-Type: application/json");
	if (token)
		h = curl_slist_append(h, auth);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, REQUEST_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "cannot reach '%s': %s", url, curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	*out = json_loads(b.data ? b.data : "", 0, NULL);
	if (status >= 400)
		snprintf(err, errlen, "%s",
			 *out && json_string_value(json_object_get(*out, "error"))
			     ? json_string_value(json_object_get(*out, "error"))
			     : "request failed");
out:
	curl_slist_free_all(h);
	free(b.data);
	curl_easy_cleanup(c);
	return status;
}

static const char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "-";
}

static int cmd_health(void)
{
	json_t *h;
	char err[512];
	long st = get_json("/api/v1/health", &h, err, sizeof(err));
	size_t i;
	json_t *slot;

	if (!h) {
		fprintf(stderr, "numwatch: %s\n", err);
		return EXIT_ERROR;
	}
	printf("status %s, database %s, version %s, node %s, up %llds\n", str(h, "status"),
	       str(h, "database"), str(h, "version"), str(h, "node"),
	       (long long)json_integer_value(json_object_get(h, "uptime_s")));
	json_array_foreach(json_object_get(h, "slots"), i, slot)
	{
		printf("  slot %-8s %-10s %.12s %s %s (%lld trials, %lld restarts)\n", str(slot, "name"),
		       str(slot, "state"), str(slot, "commit"), str(slot, "check"), str(slot, "dtype"),
		       (long long)json_integer_value(json_object_get(slot, "trials")),
		       (long long)json_integer_value(json_object_get(slot, "restarts")));
	}
	json_decref(h);
	return st == 200 ? 0 : EXIT_ERROR;
}

static int cmd_commits(int limit, int offset)
{
	char path[128], err[512];
	json_t *page, *c;
	size_t i;

	snprintf(path, sizeof(path), "/api/v1/commits?limit=%d&offset=%d", limit, offset);
	if (get_json(path, &page, err, sizeof(err)) != 200) {
		fprintf(stderr, "numwatch: %s\n", err);
		json_decref(page);
		return EXIT_ERROR;
	}
	json_array_foreach(json_object_get(page, "commits"), i, c)
	{
		printf("%.12s  %-12s  %-20.20s  %s\n", str(c, "sha"), str(c, "verdict"), str(c, "author"),
		       str(c, "title"));
	}
	json_decref(page);
	return 0;
}

/* Prints the failing checks of a commit. */
static void print_failures(json_t *commit)
{
	json_t *check, *seed, *reg;
	size_t i, k;

	json_array_foreach(json_object_get(commit, "checks"), i, check)
	{
		const char *v = str(check, "verdict");

		if (!strcmp(v, "clean") || !strcmp(v, "pending"))
			continue;
		printf("  %-16s %-5s %-12s %lld/%lld failing, worst ratio %g\n", str(check, "check"),
		       str(check, "dtype"), v,
		       (long long)json_integer_value(json_object_get(check, "failures")),
		       (long long)json_integer_value(json_object_get(check, "trials")),
		       json_number_value(json_object_get(check, "worst_ratio")));
		reg = json_object_get(check, "regression");
		if (json_is_object(reg)) {
			long long id = (long long)json_integer_value(json_object_get(reg, "id"));

			if (json_is_true(json_object_get(reg, "new")))
				printf("      new at this commit, regression #%lld", id);
			else
				printf("      open since %.12s, regression #%lld", str(reg, "new_at"), id);
			printf(" (%s): %s/?view=regression&id=%lld\n", str(reg, "state"), base_url, id);
		}
		json_array_foreach(json_object_get(check, "failing_seeds"), k, seed)
		{
			if (k >= 3)
				break;
			printf("      seed %lld (%s, %s): %s\n",
			       (long long)json_integer_value(json_object_get(seed, "seed")),
			       str(seed, "family"), str(seed, "outcome"), str(seed, "repro"));
		}
	}
}

static int cmd_show(const char *sha)
{
	char path[128], err[512];
	json_t *c;
	long st;

	snprintf(path, sizeof(path), "/api/v1/commits/%s", sha);
	st = get_json(path, &c, err, sizeof(err));
	if (st != 200) {
		fprintf(stderr, "numwatch: %s\n", err);
		json_decref(c);
		return EXIT_ERROR;
	}
	printf("%s %s\n  %s <%s>\n  verdict: %s\n", str(c, "sha"), str(c, "title"), str(c, "author"),
	       str(c, "email"), str(c, "verdict"));
	print_failures(c);
	json_decref(c);
	return 0;
}

/*
 * A commit's verdict as CI takes it: a regression new at the commit (or a
 * failed build) fails the job; one an earlier commit brought in and this one
 * still shows passes with a notice (it was reported at that commit, which is
 * being bisected and its author mailed), unless 'strict'.
 */
static int ci_exit(const char *verdict, bool strict)
{
	if (!strcmp(verdict, "regressed") || !strcmp(verdict, "build_failed"))
		return EXIT_REGRESSED;
	if (!strcmp(verdict, "open_regression")) {
		printf("notice: this commit still shows a regression an earlier commit brought in;%s\n",
		       strict ? " --strict fails on it" : " not new here, so it passes (--strict fails it)");
		return strict ? EXIT_REGRESSED : EXIT_CLEAN;
	}
	return !strcmp(verdict, "infra_error") ? EXIT_ERROR : EXIT_CLEAN;
}

/* A commit's position in the watched history (GET /api/v1/commits/SHA), or -1. */
static long long commit_position(const char *sha)
{
	char path[160], err[512];
	json_t *c = NULL;
	long long pos = -1;

	snprintf(path, sizeof(path), "/api/v1/commits/%.64s", sha);
	if (get_json(path, &c, err, sizeof(err)) == 200 && json_is_integer(json_object_get(c, "position")))
		pos = (long long)json_integer_value(json_object_get(c, "position"));
	json_decref(c);
	return pos;
}

/*
 * --base B (a pull request's merge base): an open regression this commit
 * shows that is new at a commit after B came in with the pull request, so it
 * fails the job as one new here would. Returns how many there are, or -1
 * when a position cannot be read.
 */
static int regressions_since(json_t *commit, const char *base)
{
	long long from = commit_position(base);
	json_t *check;
	size_t i;
	int n = 0;

	if (from < 0)
		return -1;
	json_array_foreach(json_object_get(commit, "checks"), i, check)
	{
		json_t *reg = json_object_get(check, "regression");
		long long at;

		if (!json_is_object(reg) || json_is_true(json_object_get(reg, "new")) ||
		    !json_is_string(json_object_get(reg, "new_at")))
			continue;
		at = commit_position(str(reg, "new_at"));
		if (at < 0)
			return -1;
		if (at > from) {
			printf("regression #%lld (%s %s) is new at %.12s, after the base %.12s\n",
			       (long long)json_integer_value(json_object_get(reg, "id")), str(check, "check"),
			       str(check, "dtype"), str(reg, "new_at"), base);
			n++;
		}
	}
	return n;
}

static int cmd_ci_wait(const char *sha, const char *base, int timeout_s, bool strict)
{
	time_t end = time(NULL) + timeout_s;
	char path[128], err[512];

	snprintf(path, sizeof(path), "/api/v1/commits/%s", sha);
	for (;;) {
		json_t *c;
		long st = get_json(path, &c, err, sizeof(err));
		const char *v = c ? str(c, "verdict") : "";

		/* An unknown commit may simply not be polled yet: keep waiting for it. */
		if (st == 200 && strcmp(v, "pending") != 0) {
			int rc;

			printf("%.12s %s: %s\n", str(c, "sha"), str(c, "title"), v);
			print_failures(c);
			rc = ci_exit(v, strict);
			if (rc == EXIT_CLEAN && base && !strcmp(v, "open_regression")) {
				int since = regressions_since(c, base);

				rc = since < 0 ? EXIT_ERROR : since > 0 ? EXIT_REGRESSED : EXIT_CLEAN;
				if (since < 0)
					fprintf(stderr,
						"numwatch: cannot place the base '%s' in the history\n",
						base);
			}
			printf("%s/?view=commit&sha=%s\n", base_url, str(c, "sha"));
			json_decref(c);
			return rc;
		}
		json_decref(c);
		if (st == 400 || (st == 0 && time(NULL) >= end)) {
			fprintf(stderr, "numwatch: %s\n", err);
			return EXIT_ERROR;
		}
		if (time(NULL) >= end) {
			fprintf(stderr, "numwatch: no verdict for '%s' within %d s\n", sha, timeout_s);
			return EXIT_TIMEOUT;
		}
		sleep(2);
	}
}

static int cmd_bisect(const char *good, const char *bad, const char *check, const char *dtype,
		      const char *token)
{
	json_t *req, *ans;
	char *body, err[512];
	long st;

	if (!good || !bad || !check || !dtype) {
		fprintf(stderr, "numwatch: bisect needs --good, --bad, --check and --dtype\n");
		return EXIT_ERROR;
	}
	req = json_pack("{s:s, s:s, s:s, s:s}", "good", good, "bad", bad, "check", check, "dtype", dtype);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	st = post_json("/api/v1/bisections", body, token, &ans, err, sizeof(err));
	free(body);
	if (st != 201) {
		fprintf(stderr, "numwatch: %s\n", err);
		json_decref(ans);
		return EXIT_ERROR;
	}
	printf("bisection %lld queued: %s/?view=bisection&id=%lld\n",
	       (long long)json_integer_value(json_object_get(ans, "id")), base_url,
	       (long long)json_integer_value(json_object_get(ans, "id")));
	json_decref(ans);
	return 0;
}

static PGconn *connect_db(const char *config_path)
{
	struct config cfg = {0};
	char err[1024];
	PGconn *c;

	if (!config_path) {
		fprintf(stderr, "numwatch: this command needs --config FILE (the daemon's configuration)\n");
		return NULL;
	}
	if (config_load(&cfg, config_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "numwatch: %s\n", err);
		return NULL;
	}
	c = PQconnectdb(cfg.database);
	config_release(&cfg);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "numwatch: cannot connect to the database: %s", PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	return c;
}

static int cmd_token(int argc, char **argv, const char *config_path)
{
	const char *sub = argc > 0 ? argv[0] : "";
	PGconn *c = connect_db(config_path);
	PGresult *r = NULL;
	int rc = EXIT_ERROR;

	if (!c)
		return EXIT_ERROR;
	if (!strcmp(sub, "create") && argc == 2) {
		unsigned char raw[32];
		char token[3 + 2 * sizeof(raw) + 1] = "nw_";
		const char *params[2] = {argv[1], token};

		if (getrandom(raw, sizeof(raw), 0) != sizeof(raw)) {
			fprintf(stderr, "numwatch: cannot read random bytes: %s\n", strerror(errno));
			goto out;
		}
		for (size_t i = 0; i < sizeof(raw); i++)
			sprintf(token + 3 + 2 * i, "%02x", raw[i]);
		/* Only the hash is stored; the secret is shown once, here. */
		r = PQexecParams(c,
				 "INSERT INTO tokens (name, hash) VALUES ($1, sha256(convert_to($2, 'UTF8')))"
				 " RETURNING id",
				 2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			fprintf(stderr, "numwatch: %s", PQresultErrorMessage(r));
			goto out;
		}
		fprintf(stderr, "token %s '%s' created; it is shown only now:\n", PQgetvalue(r, 0, 0),
			argv[1]);
		printf("%s\n", token);
		rc = 0;
	} else if (!strcmp(sub, "list") && argc == 1) {
		r = PQexec(
		    c,
		    "SELECT id, name, created_at::timestamp(0), coalesce(last_used::timestamp(0)::text, '-'),"
		    " CASE WHEN revoked_at IS NULL THEN 'active' ELSE 'revoked' END FROM tokens ORDER BY id");
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			fprintf(stderr, "numwatch: %s", PQresultErrorMessage(r));
			goto out;
		}
		for (int i = 0; i < PQntuples(r); i++)
			printf("%-4s %-20s created %s  last used %s  %s\n", PQgetvalue(r, i, 0),
			       PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
			       PQgetvalue(r, i, 4));
		rc = 0;
	} else if (!strcmp(sub, "revoke") && argc == 2) {
		const char *params[1] = {argv[1]};

		r = PQexecParams(c,
				 "UPDATE tokens SET revoked_at = now() WHERE (id::text = $1 OR name = $1)"
				 " AND revoked_at IS NULL",
				 1, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_COMMAND_OK || atoi(PQcmdTuples(r)) == 0) {
			fprintf(stderr, "numwatch: no active token '%s'\n", argv[1]);
			goto out;
		}
		printf("revoked %s token(s) '%s'\n", PQcmdTuples(r), argv[1]);
		rc = 0;
	} else {
		fprintf(stderr, "usage: numwatch token create NAME | list | revoke ID|NAME --config FILE\n");
	}
out:
	PQclear(r);
	PQfinish(c);
	return rc;
}

/*
 * In a child: the configured variables of [build] env or [slots] env over the
 * environment numwatch runs in (variables passed through are already there).
 */
static void apply_env(const struct config_env *e)
{
	for (unsigned i = 0; e && i < e->n; i++)
		if (e->vars[i].value)
			setenv(e->vars[i].name, e->vars[i].value, 1);
}

/*
 * Runs a child in its own process group with a deadline: SIGTERM to the group
 * at the deadline, SIGKILL two seconds later. Returns its exit status, or -1.
 */
static int run_child(const char *const *argv, const char *cwd, const struct config_env *conf_env,
		     const char *const *env_extra, int timeout_s, bool quiet)
{
	pid_t pid = fork();
	int status = 0;
	time_t end = time(NULL) + timeout_s;
	bool termed = false;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		setpgid(0, 0);
		if (cwd && chdir(cwd) < 0)
			_exit(126);
		apply_env(conf_env);
		for (size_t i = 0; env_extra && env_extra[i]; i++)
			putenv((char *)env_extra[i]);
		if (quiet) {
			int fd = open("/dev/null", O_WRONLY);

			dup2(fd, 1);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		struct timespec ts = {0, 50 * 1000 * 1000};

		if (w == pid)
			break;
		if (w < 0)
			return -1;
		if (!termed && time(NULL) >= end) {
			fprintf(stderr, "numwatch: '%s' ran past %d s; stopping it\n", argv[0], timeout_s);
			kill(-pid, SIGTERM);
			termed = true;
			end = time(NULL) + 2;
		} else if (termed && time(NULL) >= end) {
			kill(-pid, SIGKILL);
		}
		nanosleep(&ts, NULL);
	}
	return WIFEXITED(status) && !termed ? WEXITSTATUS(status) : -1;
}

/* Reads one '\n'-terminated line from fd into buf before 'end'; returns its length or -1. */
static ssize_t read_line(int fd, char *buf, size_t cap, time_t end)
{
	size_t n = 0;

	while (n + 1 < cap) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(end - time(NULL));
		ssize_t r;

		if (left <= 0 || poll(&p, 1, left * 1000) <= 0)
			return -1;
		r = read(fd, buf + n, 1);
		if (r <= 0)
			return -1;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return (ssize_t)n;
		}
		n++;
	}
	return -1;
}

/*
 * read_line() for the next protocol message: lines that cannot be one (a
 * library's banner, a debug print; docs/protocol.md) go to stderr, where the
 * person running the repro sees them, as the daemon leaves them out.
 */
static ssize_t read_message(int fd, char *buf, size_t cap, time_t end)
{
	ssize_t n;

	while ((n = read_line(fd, buf, cap, end)) >= 0 && !proto_line_is_message(buf, (size_t)n))
		fprintf(stderr, "%s\n", buf);
	return n;
}

/*
 * Runs one seed 'runs' times through protocol v1 (hello, a trial per run,
 * bye) in one runner, so that any runner works, ours or a third party's. A
 * failure that shows on a few runs only (a race) needs many. Prints each
 * answer of a single run, the first failing answers of many and a count.
 * The runner has hello_s to answer hello and trial_s for each trial; one
 * that dies, hangs or answers badly ends the runs there, counted so far.
 * Returns 0 when every run passed, EXIT_REGRESSED when one failed,
 * EXIT_ERROR when none failed but one could not run (crash, timeout, error,
 * a runner that stopped).
 */
static int repro_trial(const char *runner, const char *cwd, const struct config_env *env, const char *check,
		       const char *dtype, unsigned long long seed, unsigned runs, int hello_s, int trial_s)
{
	int in[2], out[2], status, rc = EXIT_ERROR;
	char *hello = proto_hello_request(), *bye = proto_bye_request(),
	     *line = malloc(NW_PROTO_LINE_MAX + 1);
	char err[256];
	unsigned ran = 0, failed = 0, broken = 0;
	bool stopped = false;
	ssize_t n;
	pid_t pid;

	if (!hello || !bye || !line || pipe(in) < 0 || pipe(out) < 0)
		goto out;
	pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		if (chdir(cwd) < 0)
			_exit(126);
		apply_env(env);
		setenv("NUMWATCH_PROTOCOL", "1", 1);
		execl(runner, runner, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	if (pid < 0)
		goto out;
	signal(SIGPIPE, SIG_IGN);
	if (io_write_full(in[1], hello, strlen(hello)) < 0 ||
	    (n = read_message(out[0], line, NW_PROTO_LINE_MAX, time(NULL) + hello_s)) < 0) {
		fprintf(stderr, "numwatch: runner '%s' did not answer hello within %d s\n", runner, hello_s);
		goto stop;
	}
	for (unsigned i = 0; i < runs && !stopped; i++) {
		char *trial = proto_trial_request(i + 1, check, dtype, seed, 1, NULL);
		struct proto_trial t = {0};
		time_t end = time(NULL) + trial_s;

		if (!trial || io_write_full(in[1], trial, strlen(trial)) < 0 ||
		    (n = read_message(out[0], line, NW_PROTO_LINE_MAX, end)) < 0) {
			fprintf(stderr, "numwatch: runner '%s' %s at run %u\n", runner,
				time(NULL) >= end ? "gave no answer in time" : "stopped answering", i + 1);
			stopped = true;
		} else if (proto_parse_trial(line, (size_t)n, i + 1, &t, err, sizeof(err)) < 0) {
			fprintf(stderr, "numwatch: runner '%s' answered run %u badly: %s\n", runner, i + 1,
				err);
			stopped = true;
		} else {
			ran++;
			failed += t.verdict == OUTCOME_FAIL;
			broken += t.verdict != OUTCOME_FAIL && t.verdict != OUTCOME_PASS;
			if (runs == 1 || (t.verdict != OUTCOME_PASS && failed + broken <= NW_REPRO_PRINT_MAX))
				printf("%s\n", line);
		}
		free(trial);
		proto_trial_release(&t);
	}
	if (runs > 1)
		printf("numwatch: seed %llu failed %u of %u runs%s\n", seed, failed, ran,
		       stopped  ? " (the runner stopped: see above)"
		       : broken ? " (some could not run: see above)"
				: "");
	rc = failed ? EXIT_REGRESSED : EXIT_ERROR;
	if (!failed && !broken && !stopped)
		rc = 0;
	/*
	 * A runner that is gone already cannot read its bye: nothing is lost.
	 * Its answer is read before the pipe closes: the protocol has the runner
	 * answer bye, and an answer written into a closed pipe kills it (SIGPIPE)
	 * or ends it with an error.
	 */
	if (!stopped && io_write_full(in[1], bye, strlen(bye)) == 0) {
		n = read_message(out[0], line, NW_PROTO_LINE_MAX, time(NULL) + hello_s);
		if (n < 0)
			fprintf(stderr, "numwatch: runner '%s' did not answer bye within %d s\n", runner,
				hello_s);
		else if (proto_parse_bye(line, (size_t)n, err, sizeof(err)) < 0)
			fprintf(stderr, "numwatch: runner '%s' answered bye badly: %s\n", runner, err);
	}
stop:
	close(in[1]);
	close(out[0]);
	/* The runner leaves after bye; one that does not gets its group killed. */
	for (int i = 0; i < 40 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(50 * 1000);
	if (waitpid(pid, &status, WNOHANG) == 0) {
		kill(-pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
out:
	free(hello);
	free(bye);
	free(line);
	return rc;
}

/* Builds the commit (or reuses the daemon's build of it) and runs the seed locally, 'runs' times. */
static int cmd_repro(const char *sha, const char *check, const char *dtype, const char *seed,
		     const char *runs, const char *config_path, bool cuda)
{
	struct config cfg = {0};
	char err[1024], build[4096], runner[4200], mirror[4096], tmp[] = "/tmp/numwatch-repro.XXXXXX";
	char wt[4200], env_wt[4300], env_bd[4300], env_c[128], env_id[4400];
	const char *env[] = {env_wt, env_bd, env_c, env_id, NULL};
	struct stat st;
	int rc = EXIT_ERROR;
	unsigned long nruns = 1;
	char *end = NULL;

	if (!sha || !check || !dtype || !seed || !api_like_sha(sha)) {
		fprintf(stderr,
			"numwatch: repro needs --commit SHA (40 hex digits), --check, --dtype and --seed\n");
		return EXIT_ERROR;
	}
	if (runs) {
		errno = 0;
		nruns = strtoul(runs, &end, 10);
		if (errno || end == runs || *end || *runs == '-' || nruns < 1 || nruns > NW_TRIALS_MAX) {
			fprintf(stderr, "numwatch: --runs must be a whole number from 1 to %d, not '%s'\n",
				NW_TRIALS_MAX, runs);
			return EXIT_ERROR;
		}
	}
	if (!config_path || config_load(&cfg, config_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "numwatch: %s\n", config_path ? err : "repro needs --config FILE");
		return EXIT_ERROR;
	}
	snprintf(build, sizeof(build), "%s/builds/%s", cfg.state_dir, sha);
	snprintf(runner, sizeof(runner), "%s/%s", build, cuda ? cfg.runner_cuda : cfg.runner_host);
	if (stat(runner, &st) < 0) {
		/* Not built here yet: build it from the daemon's mirror in a scratch directory. */
		if (!mkdtemp(tmp)) {
			fprintf(stderr, "numwatch: cannot create a scratch directory: %s\n", strerror(errno));
			goto out;
		}
		snprintf(mirror, sizeof(mirror), "%s/mirror.git", cfg.state_dir);
		snprintf(wt, sizeof(wt), "%s/src", tmp);
		snprintf(build, sizeof(build), "%s/build", tmp);
		{
			const char *clone[] = {"git", "clone", "--quiet", "--no-checkout", mirror, wt, NULL};
			const char *co[] = {"git", "-C", wt, "checkout", "--quiet", "--detach", sha, NULL};
			const char *sh[] = {"/bin/sh", "-c", cfg.build_command, NULL};

			snprintf(env_wt, sizeof(env_wt), "NUMWATCH_WORKTREE=%s", wt);
			snprintf(env_bd, sizeof(env_bd), "NUMWATCH_BUILD_DIR=%s", build);
			snprintf(env_c, sizeof(env_c), "NUMWATCH_COMMIT=%s", sha);
			snprintf(env_id, sizeof(env_id), "NUMWATCH_IDENTITY_FILE=%s/numwatch-identity",
				 build);
			fprintf(stderr, "numwatch: building %.12s in %s\n", sha, tmp);
			if (run_child(clone, NULL, NULL, NULL, 600, false) != 0 ||
			    run_child(co, NULL, NULL, NULL, 600, false) != 0 || mkdir(build, 0755) < 0 ||
			    run_child(sh, wt, &cfg.build_env, env, (int)cfg.build_timeout_s, true) != 0) {
				fprintf(stderr, "numwatch: cannot build %.12s (see above)\n", sha);
				goto out;
			}
		}
		snprintf(runner, sizeof(runner), "%s/%s", build, cuda ? cfg.runner_cuda : cfg.runner_host);
	}
	{
		rc = repro_trial(runner, build, &cfg.slots_env, check, dtype, strtoull(seed, NULL, 10),
				 (unsigned)nruns, (int)cfg.hello_timeout_s, (int)cfg.trial_timeout_s);
	}
out:
	config_release(&cfg);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: numwatch [--url URL] COMMAND\n"
		   "  health                       the daemon's state\n"
		   "  commits [--limit N] [--offset N]\n"
		   "  show SHA                     a commit's verdict and failing checks\n"
		   "  ci-wait SHA [--timeout S] [--strict] [--base MERGE_BASE]\n"
		   "                               wait for a verdict: exit 0 clean (or a regression\n"
		   "                               still open from an earlier commit, with a notice),\n"
		   "                               1 regressed here (--strict: or still open;\n"
		   "                               --base: or new after the merge base),\n"
		   "                               2 timed out, 3 error\n"
		   "  bisect --good SHA --bad SHA --check C --dtype D   start a bisection\n"
		   "                               (token from --token or NUMWATCH_TOKEN)\n"
		   "  token create NAME | list | revoke ID|NAME   --config FILE\n"
		   "  repro --commit SHA --check C --dtype D --seed S --config FILE [--cuda] [--runs N]\n"
		   "                               build (or reuse) the commit's runner, run the seed\n"
		   "                               (N times: a failure that shows on a few runs only)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"url", required_argument, NULL, 'u'},    {"limit", required_argument, NULL, 'l'},
	    {"offset", required_argument, NULL, 'o'}, {"timeout", required_argument, NULL, 't'},
	    {"good", required_argument, NULL, 'g'},   {"bad", required_argument, NULL, 'b'},
	    {"check", required_argument, NULL, 'k'},  {"dtype", required_argument, NULL, 'd'},
	    {"seed", required_argument, NULL, 's'},   {"commit", required_argument, NULL, 'C'},
	    {"config", required_argument, NULL, 'c'}, {"token", required_argument, NULL, 'T'},
	    {"cuda", no_argument, NULL, 'G'},         {"runs", required_argument, NULL, 'R'},
	    {"help", no_argument, NULL, 'h'},         {"strict", no_argument, NULL, 'S'},
	    {"base", required_argument, NULL, 'B'},   {NULL, 0, NULL, 0},
	};
	int limit = 50, offset = 0, timeout_s = 3600, c, rc;
	const char *good = NULL, *bad = NULL, *check = NULL, *dtype = NULL, *seed = NULL, *commit = NULL,
		   *runs = NULL, *base = NULL;
	const char *config_path = getenv("NUMWATCH_CONFIG"), *token = getenv("NUMWATCH_TOKEN");
	bool cuda = false, strict = false;
	char *args[64];
	int nargs = 0;
	const char *cmd;

	if (getenv("NUMWATCH_URL"))
		base_url = getenv("NUMWATCH_URL");
	/* Options may come before or after the command; the rest are positional. */
	while ((c = getopt_long(argc, argv, "-u:l:o:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 1: /* "-" in the option string: positional arguments come in order */
			if (nargs < 64)
				args[nargs++] = optarg;
			break;
		case 'u':
			base_url = optarg;
			break;
		case 'l':
			limit = atoi(optarg);
			break;
		case 'o':
			offset = atoi(optarg);
			break;
		case 't':
			timeout_s = atoi(optarg);
			break;
		case 'g':
			good = optarg;
			break;
		case 'b':
			bad = optarg;
			break;
		case 'k':
			check = optarg;
			break;
		case 'd':
			dtype = optarg;
			break;
		case 's':
			seed = optarg;
			break;
		case 'C':
			commit = optarg;
			break;
		case 'c':
			config_path = optarg;
			break;
		case 'T':
			token = optarg;
			break;
		case 'G':
			cuda = true;
			break;
		case 'S':
			strict = true;
			break;
		case 'B':
			base = optarg;
			break;
		case 'R':
			runs = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_ERROR;
		}
	}
	if (nargs == 0) {
		usage(stderr);
		return EXIT_ERROR;
	}
	cmd = args[0];
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (!strcmp(cmd, "health") && nargs == 1) {
		rc = cmd_health();
	} else if (!strcmp(cmd, "commits") && nargs == 1) {
		rc = cmd_commits(limit, offset);
	} else if (!strcmp(cmd, "show") && nargs == 2) {
		rc = cmd_show(args[1]);
	} else if (!strcmp(cmd, "ci-wait") && nargs == 2) {
		rc = cmd_ci_wait(args[1], base, timeout_s, strict);
	} else if (!strcmp(cmd, "bisect") && nargs == 1) {
		rc = cmd_bisect(good, bad, check, dtype, token);
	} else if (!strcmp(cmd, "token")) {
		rc = cmd_token(nargs - 1, args + 1, config_path);
	} else if (!strcmp(cmd, "repro") && nargs == 1) {
		rc = cmd_repro(commit, check, dtype, seed, runs, config_path, cuda);
	} else {
		usage(stderr);
		rc = EXIT_ERROR;
	}
	curl_global_cleanup();
	return rc;
}
