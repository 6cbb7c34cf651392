/*
 * numwatch-runner-{host,cuda}: protocol v1 over stdin/stdout, or one trial
 * from the command line for people reproducing a failure:
 *
 *   numwatch-runner-host --check softmax.fwd --dtype f32 --seed 42
 *
 * Protocol lines go to a private copy of stdout; file descriptor 1 itself is
 * pointed at stderr, so whatever the library prints cannot corrupt the
 * protocol stream.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nw_device.h"
#include "runner.h"

static FILE *proto_out;

static void usage(FILE *f, const char *argv0)
{
	fprintf(f,
		"usage: %s                       speak protocol v1 on stdin/stdout (NUMWATCH_PROTOCOL=1)\n"
		"       %s --check NAME --dtype DTYPE --seed N [--family NAME] [--repeats N] [--count N]\n"
		"       %s --list                print the hello answer (checks, dtypes, families, device)\n"
		"\n"
		"The command line runs seeds N..N+count-1 and prints one answer line each.\n"
		"Exit status: 0 all passed, 1 a trial failed, 2 an error answer or bad usage.\n",
		argv0, argv0, argv0);
}

/* Keeps a private stream for answers and sends fd 1 to stderr. */
static int take_stdout(void)
{
	int fd = dup(STDOUT_FILENO);

	if (fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
		fprintf(stderr, "numwatch-runner: cannot redirect stdout: %s\n", strerror(errno));
		return -errno;
	}
	proto_out = fdopen(fd, "w");
	if (!proto_out) {
		fprintf(stderr, "numwatch-runner: cannot open the protocol stream: %s\n", strerror(errno));
		return -errno;
	}
	return 0;
}

/* Writes one answer line; a failed write (the daemon went away) ends the runner. */
static int write_answer(json_t *answer)
{
	char *line;
	int rc = 0;

	if (!answer) {
		fprintf(stderr, "numwatch-runner: out of memory\n");
		return -ENOMEM;
	}
	line = nw_runner_dump(answer);
	json_decref(answer);
	if (!line) {
		fprintf(stderr, "numwatch-runner: out of memory\n");
		return -ENOMEM;
	}
	if (strlen(line) > NW_LINE_MAX) {
		/* Still one answer per request, within the cap (an unknown op of a megabyte, echoed). */
		fprintf(stderr, "numwatch-runner: answer longer than %d bytes, replaced\n", NW_LINE_MAX);
		free(line);
		line = strdup("{\"op\":null,\"error\":\"answer too long\"}");
		if (!line)
			return -ENOMEM;
	}
	if (fputs(line, proto_out) == EOF || fputc('\n', proto_out) == EOF || fflush(proto_out) == EOF) {
		fprintf(stderr, "numwatch-runner: cannot write answer: %s\n", strerror(errno));
		rc = -EIO;
	}
	free(line);
	return rc;
}

/*
 * Reads one line into buf (at most NW_LINE_MAX bytes). Returns its length,
 * -1 at end of input, or -E2BIG for an overlong line (consumed to its end).
 */
static long read_line(FILE *in, char *buf)
{
	long n = 0;
	bool too_long = false;
	int ch;

	while ((ch = getc(in)) != EOF && ch != '\n') {
		if (n < NW_LINE_MAX)
			buf[n++] = (char)ch;
		else
			too_long = true;
	}
	if (ch == EOF && n == 0 && !too_long)
		return -1;
	if (too_long)
		return -E2BIG;
	return n;
}

static int protocol_loop(void)
{
	char *buf = malloc(NW_LINE_MAX);
	bool quit = false;
	long n;
	int rc = 0;

	if (!buf) {
		fprintf(stderr, "numwatch-runner: out of memory\n");
		return 1;
	}
	nw_dev_init();
	while (!quit && (n = read_line(stdin, buf)) != -1) {
		json_t *answer;

		if (n == -E2BIG) {
			fprintf(stderr, "numwatch-runner: request longer than %d bytes\n", NW_LINE_MAX);
			answer = json_pack("{s:n, s:s}", "op", "error", "request line too long");
		} else if (n == 0) {
			continue; /* a blank line is no request */
		} else {
			answer = nw_runner_answer(buf, (size_t)n, &quit);
		}
		rc = write_answer(answer);
		if (rc)
			break;
	}
	free(buf);
	if (quit && rc == 0) {
		bool fatal;
		const char *msg = nw_dev_error(&fatal);

		if (fatal) {
			fprintf(stderr, "numwatch-runner: device context lost (%s), exiting\n", msg);
			return 1;
		}
	}
	return rc ? 1 : 0;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	if (!s || *s == '-' || *s == '\0')
		return -EINVAL;
	*v = strtoull(s, &end, 0);
	return errno || *end ? -EINVAL : 0;
}

static int command_line(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"check", required_argument, NULL, 'c'},
	    {"dtype", required_argument, NULL, 'd'},
	    {"seed", required_argument, NULL, 's'},
	    {"family", required_argument, NULL, 'f'},
	    {"repeats", required_argument, NULL, 'r'},
	    {"count", required_argument, NULL, 'n'},
	    {"list", no_argument, NULL, 'l'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *check = NULL, *dtype = NULL, *family = NULL;
	uint64_t seed = 0, repeats = 1, count = 1, i;
	bool have_seed = false, any_fail = false, any_error = false;
	const struct nw_check *c;
	int opt, d, fam = -1;

	while ((opt = getopt_long(argc, argv, "c:d:s:f:r:n:lh", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			check = optarg;
			break;
		case 'd':
			dtype = optarg;
			break;
		case 's':
			if (parse_u64(optarg, &seed)) {
				fprintf(stderr, "%s: bad seed '%s'\n", argv[0], optarg);
				return 2;
			}
			have_seed = true;
			break;
		case 'f':
			family = optarg;
			break;
		case 'r':
			if (parse_u64(optarg, &repeats) || repeats < 1 || repeats > NW_REPEATS_MAX) {
				fprintf(stderr, "%s: --repeats must be 1..%d\n", argv[0], NW_REPEATS_MAX);
				return 2;
			}
			break;
		case 'n':
			if (parse_u64(optarg, &count) || count < 1) {
				fprintf(stderr, "%s: bad --count '%s'\n", argv[0], optarg);
				return 2;
			}
			break;
		case 'l':
			return write_answer(nw_runner_hello()) ? 2 : 0;
		case 'h':
			usage(proto_out, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (optind < argc || !check || !dtype || !have_seed) {
		usage(stderr, argv[0]);
		return 2;
	}
	c = nw_check_find(check);
	if (!c) {
		fprintf(stderr, "%s: unknown check '%s' (see --list)\n", argv[0], check);
		return 2;
	}
	d = nw_dtype_parse(dtype);
	if (d < 0 || !(c->dtypes & NW_DTYPE_BIT(d))) {
		fprintf(stderr, "%s: check '%s' does not run at dtype '%s'\n", argv[0], check, dtype);
		return 2;
	}
	if (family && (fam = nw_check_family(c, family)) < 0) {
		fprintf(stderr, "%s: check '%s' has no family '%s'\n", argv[0], check, family);
		return 2;
	}

	for (i = 0; i < count; i++) {
		struct nw_trial t = {
		    .dtype = (enum nw_dtype)d, .seed = seed + i, .family = fam, .repeats = (unsigned)repeats};
		json_t *answer;

		nw_trial_run(c, &t);
		answer = nw_runner_trial_json(c, &t, NULL);
		/* For people: say which trial this is (the protocol answer has only the id). */
		if (answer) {
			json_object_set_new(answer, "check", json_string(c->name));
			json_object_set_new(answer, "dtype", json_string(nw_dtype_name(t.dtype)));
			json_object_set_new(answer, "seed", json_integer((json_int_t)t.seed));
		}
		if (write_answer(answer))
			return 2;
		any_error |= t.error;
		any_fail |= !t.error && nw_trial_failed(&t);
		if (t.error && t.fatal)
			break;
	}
	return any_error ? 2 : any_fail ? 1 : 0;
}

/*
 * Every trial allocates and frees its buffers (hundreds of KiB). glibc would
 * hand large ones back to the kernel (mmap, heap trimming) and the next
 * trial would fault in and zero fresh pages again, a page at a time: keep
 * freed memory in the heap for the next trial instead.
 */
static void keep_freed_memory(void)
{
#ifdef __GLIBC__
	(void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
	(void)mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

int main(int argc, char **argv)
{
	const char *proto = getenv("NUMWATCH_PROTOCOL");

	signal(SIGPIPE, SIG_IGN);
	keep_freed_memory();
	if (take_stdout())
		return 2;
	if (argc > 1)
		return command_line(argc, argv);
	if (proto && strcmp(proto, "1") != 0) {
		fprintf(stderr,
			"numwatch-runner: NUMWATCH_PROTOCOL=%s, but this runner speaks protocol 1 only\n",
			proto);
		return 2;
	}
	return protocol_loop();
}
