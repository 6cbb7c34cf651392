/*
 * numwatch: the command-line client. It talks to a running numwatchd over the
 * REST API (NUMWATCH_URL or --url, default http://127.0.0.1:8080).
 *
 *   numwatch health
 *   numwatch commits [--limit N] [--offset N]
 *   numwatch show SHA
 *   numwatch ci-wait SHA [--timeout S]   exit 0 clean, 1 regressed, 2 timed out, 3 error
 */
#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RESPONSE_MAX      (16 * 1024 * 1024)
#define REQUEST_TIMEOUT_S 30L

enum { EXIT_CLEAN = 0, EXIT_REGRESSED = 1, EXIT_TIMEOUT = 2, EXIT_ERROR = 3 };

struct buf {
	char *data;
	size_t len;
	bool too_big;
};

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
	json_t *check, *seed;
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

static int cmd_ci_wait(const char *sha, int timeout_s)
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
			int rc = !strcmp(v, "regressed") || !strcmp(v, "build_failed") ? EXIT_REGRESSED
				 : !strcmp(v, "infra_error")                           ? EXIT_ERROR
										       : EXIT_CLEAN;

			printf("%.12s %s: %s\n", str(c, "sha"), str(c, "title"), v);
			print_failures(c);
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

static void usage(FILE *f)
{
	fprintf(f, "usage: numwatch [--url URL] COMMAND\n"
		   "  health                       the daemon's state\n"
		   "  commits [--limit N] [--offset N]\n"
		   "  show SHA                     a commit's verdict and failing checks\n"
		   "  ci-wait SHA [--timeout S]    wait for a verdict: exit 0 clean, 1 regressed,\n"
		   "                               2 timed out, 3 error\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"url", required_argument, NULL, 'u'},    {"limit", required_argument, NULL, 'l'},
	    {"offset", required_argument, NULL, 'o'}, {"timeout", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
	};
	int limit = 50, offset = 0, timeout_s = 3600, c, rc;
	const char *cmd;

	if (getenv("NUMWATCH_URL"))
		base_url = getenv("NUMWATCH_URL");
	while ((c = getopt_long(argc, argv, "+u:l:o:t:h", opts, NULL)) != -1) {
		switch (c) {
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
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_ERROR;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_ERROR;
	}
	cmd = argv[optind++];
	/* Options may also follow the command. */
	while ((c = getopt_long(argc, argv, "u:l:o:t:h", opts, NULL)) != -1) {
		if (c == 'l')
			limit = atoi(optarg);
		else if (c == 'o')
			offset = atoi(optarg);
		else if (c == 't')
			timeout_s = atoi(optarg);
		else if (c == 'u')
			base_url = optarg;
		else {
			usage(stderr);
			return EXIT_ERROR;
		}
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (!strcmp(cmd, "health")) {
		rc = cmd_health();
	} else if (!strcmp(cmd, "commits")) {
		rc = cmd_commits(limit, offset);
	} else if (!strcmp(cmd, "show") && optind < argc) {
		rc = cmd_show(argv[optind]);
	} else if (!strcmp(cmd, "ci-wait") && optind < argc) {
		rc = cmd_ci_wait(argv[optind], timeout_s);
	} else {
		usage(stderr);
		rc = EXIT_ERROR;
	}
	curl_global_cleanup();
	return rc;
}
