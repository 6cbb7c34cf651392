/*
 * bench/instant-runner: a protocol-v1 runner (docs/protocol.md) that answers
 * every trial at once with a fixed, valid answer (a case with its digest, one
 * tensor, a digest), so that what bench/daemon-ceiling measures is the
 * daemon's own cost per trial and not a kernel's. It declares
 * NW_INSTANT_CHECKS checks (default 64, at most 256: the protocol's cap),
 * bench.c00, bench.c01, ..., each deterministic at f32, so that every slot
 * of a daemon with up to 64 slots finds a job of its own.
 *
 * NW_INSTANT_US=N paces it as a GPU runner goes (issue 18): each trial is
 * answered N microseconds after the runner's previous answer (at once when
 * its request came later than that), one line a write, the wait spent
 * asleep (clock_nanosleep to an absolute time: no CPU). A slot then sends
 * at most 1e6 / N trials a second, each answer arriving on its own, as a
 * CUDA runner's do (100 to 250 us apart a slot on an H100), instead of the
 * batches an unpaced runner's answers form in the daemon's reads. The
 * daemon's turnaround hides inside the N microseconds while it is shorter:
 * below its ceiling, trials per second are slots x 1e6 / N whatever the
 * daemon costs, and its CPU per answer is compared at the same rate.
 *
 * NW_INSTANT_FROM=request counts the N microseconds from when the trial's
 * request is read (a GPU runner's trial starts when its request comes, not
 * when it sent the previous answer): every microsecond of the daemon's
 * turnaround then shows as the runner waiting, unless the request was
 * already in its pipe (a pipeline).
 *
 * NW_INSTANT_PIPELINE=N (default 2) is its hello's "pipeline": it reads
 * requests from stdin's buffered stream and answers in order, so the daemon
 * may send the next trial while one is paced (issue 18); 1 declares none
 * (one request at a time, as a version-1 runner), for comparison.
 *
 * It reads the request's id and seed by looking for their keys rather than
 * with a JSON parser: it only ever talks to numwatchd, whose requests are
 * written by proto_trial_request() (daemon/protocol.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES (1024 * 1024)
#define CHECKS_MAX     256
/* The longest pace NW_INSTANT_US takes: one second a trial. */
#define PACE_MAX_US 1000000L

/* NW_INSTANT_US: microseconds from one answer to the next; 0 answers at once. */
static long pace_us;
/* When the previous answer was written (CLOCK_MONOTONIC). */
static struct timespec last_answer;

/* Writes all of 'buf' (a pipe may take it in pieces). */
static int write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The integer after "key": in 'line', or 'fallback' when the key is absent. */
static long long field(const char *line, const char *key, long long fallback)
{
	const char *p = strstr(line, key);

	return p ? strtoll(p + strlen(key), NULL, 10) : fallback;
}

/* NW_INSTANT_FROM=request: the pace counts from the request's read, not the previous answer. */
static int from_request;
/* NW_INSTANT_PIPELINE: the trial requests it takes outstanding. */
static long pipeline = 2;

static int hello(unsigned checks)
{
	char *buf = malloc(256 + (size_t)checks * 160);
	size_t len = 0;
	int rc;

	if (!buf)
		return -1;
	len += (size_t)sprintf(buf + len, "{\"op\":\"hello\",\"protocol\":1,\"runner\":\"instant-runner 1\","
					  "\"device\":{\"backend\":\"host\",\"name\":\"none\"},");
	if (pipeline > 1)
		len += (size_t)sprintf(buf + len, "\"pipeline\":%ld,", pipeline);
	len += (size_t)sprintf(buf + len, "\"checks\":[");
	for (unsigned i = 0; i < checks; i++)
		len +=
		    (size_t)sprintf(buf + len,
				    "%s{\"check\":\"bench.c%02u\",\"op\":\"bench\",\"pass\":\"c%02u\","
				    "\"dtypes\":[\"f32\"],\"deterministic\":true,\"families\":[\"aligned\"]}",
				    i ? "," : "", i, i);
	len += (size_t)sprintf(buf + len, "]}\n");
	rc = write_all(buf, len);
	free(buf);
	return rc;
}

/* Sleeps until pace_us after the previous answer, unless that time has passed. */
static void pace(void)
{
	struct timespec due = last_answer;

	if (pace_us <= 0)
		return;
	if (from_request)
		clock_gettime(CLOCK_MONOTONIC, &due); /* the request was just read: its trial starts now */
	if (due.tv_sec != 0 || due.tv_nsec != 0) {
		due.tv_nsec += pace_us * 1000L;
		due.tv_sec += due.tv_nsec / 1000000000L;
		due.tv_nsec %= 1000000000L;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
			;
	}
	clock_gettime(CLOCK_MONOTONIC, &last_answer);
}

static int trial(const char *line)
{
	char out[1024];
	long long id = field(line, "\"id\":", 0);
	unsigned long long seed = (unsigned long long)field(line, "\"seed\":", 0);
	int n =
	    snprintf(out, sizeof(out),
		     "{\"op\":\"trial\",\"id\":%lld,\"verdict\":\"pass\","
		     "\"case\":{\"family\":\"aligned\",\"shape\":[3,1025],\"gen\":1,\"digest\":\"%016llx\"},"
		     "\"ratio\":0.42,\"tensors\":[{\"name\":\"y\",\"ratio\":0.42,\"max_abs\":0.000131,"
		     "\"max_rel\":0.0035,\"max_ulp\":null,\"nonfinite\":0,\"ref_nonfinite\":0,"
		     "\"unwritten\":0,\"canary\":0,\"excluded\":0,\"worst\":[2,1024],\"tail\":true}],"
		     "\"digest\":\"9f2c41d07be3a8e1\",\"digests_differ\":0,\"kernel_us\":18.4}\n",
		     id, seed * 0x9e3779b97f4a7c15ull);

	pace();
	return write_all(out, (size_t)n);
}

int main(void)
{
	const char *env = getenv("NW_INSTANT_CHECKS");
	const char *us = getenv("NW_INSTANT_US");
	const char *pipe_env = getenv("NW_INSTANT_PIPELINE");
	unsigned checks = env ? (unsigned)atoi(env) : 64;
	char *line = malloc(LINE_MAX_BYTES + 2);
	static const char bye[] = "{\"op\":\"bye\"}\n";
	/* The daemon sends only hello, trial and bye; anything else is answered as the protocol says. */
	static const char unknown[] = "{\"op\":\"unknown\",\"error\":\"unknown op\"}\n";

	if (!line)
		return 1;
	if (checks < 1 || checks > CHECKS_MAX)
		checks = 64;
	pace_us = us ? atol(us) : 0;
	pipeline = pipe_env && *pipe_env ? atol(pipe_env) : 2;
	from_request = getenv("NW_INSTANT_FROM") && strcmp(getenv("NW_INSTANT_FROM"), "request") == 0;
	if (pipeline < 1 || pipeline > 1024)
		pipeline = 1;
	if (pace_us < 0 || pace_us > PACE_MAX_US)
		pace_us = 0;
	while (fgets(line, LINE_MAX_BYTES + 2, stdin)) {
		int rc;

		if (strstr(line, "\"op\":\"trial\""))
			rc = trial(line);
		else if (strstr(line, "\"op\":\"hello\""))
			rc = hello(checks);
		else if (strstr(line, "\"op\":\"bye\"")) {
			write_all(bye, strlen(bye));
			break;
		} else
			rc = write_all(unknown, strlen(unknown));
		if (rc < 0)
			return 1;
	}
	free(line);
	return 0;
}
