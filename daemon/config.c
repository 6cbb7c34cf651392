/*
 * config: loads numwatch.conf with inih and validates every option.
 *
 * inih does the INI syntax; this file feeds it lines through its own reader so
 * that it knows the line number of every callback (the library is built
 * without INI_HANDLER_LINENO), can refuse over-long lines and NUL bytes
 * instead of letting fgets() split or truncate them, and can judge section
 * headers where they are written (inih reports no section without keys).
 */
#include "config.h"
#include "sanitizer.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mail.h"

#ifndef NW_WEB_ROOT
#define NW_WEB_ROOT "/usr/share/numwatch/web"
#endif

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A GPU slot is named "gpuN" or "gpuN.K" in a char[16]; real hosts have a few dozen GPUs at most. */
#define SLOT_GPU_MAX 1023
/* The longest names, "gpu1023.63" and "host63", must fit (so must a NUL). */
_Static_assert(SLOT_GPU_MAX <= 9999 && NW_CONFIG_SLOTS_MAX <= 1000 &&
		   sizeof(((struct config_slot *)0)->name) >= sizeof("gpu9999.999"),
	       "slot names must fit struct config_slot's name");

enum opt_type {
	OPT_STRING,   /* any non-empty text */
	OPT_PATH,     /* an absolute path */
	OPT_RELPATH,  /* a path inside the build directory */
	OPT_ARG,      /* text handed to git: must not look like an option */
	OPT_ADDRESS,  /* an IPv4 literal (http.c binds AF_INET only) */
	OPT_URL,      /* http:// or https:// */
	OPT_UINT,     /* decimal integer in [min, max] */
	OPT_DURATION, /* seconds, optionally with a unit suffix s, m or h, in [min, max] */
	OPT_SLOTS,    /* the [slots] list */
	OPT_GPUS,     /* 'auto' (-1) or a GPU count from 0 to SLOT_GPU_MAX + 1; stored in an int */
	OPT_AUTO_UINT, /* 'auto' (0: computed in finish()) or an integer in [min, max]; stored in an unsigned */
	/* [mail] */
	OPT_SMTP_URL,     /* smtp:// or smtps:// */
	OPT_MAILBOX,      /* "addr" or "Name <addr>" */
	OPT_ADDRESS_LIST, /* comma-separated addresses */
	OPT_TLS,          /* no, try or yes */
	OPT_TOOLS,        /* comma-separated compute-sanitizer tools */
	OPT_BOOL,         /* true/false, yes/no, on/off, 1/0; stored in a bool */
	OPT_REAL,         /* a decimal number in [rmin, rmax]; stored in a double */
	OPT_GLOBS,        /* git pathspec globs of the worktree, comma- or space-separated */
	OPT_ENV,          /* NAME=VALUE and NAME entries; stored in a struct config_env */
};

#define OPT_REQUIRED 0x1
#define OPT_EMPTY_OK 0x2

struct option {
	const char *section;
	const char *key;
	enum opt_type type;
	size_t offset; /* of the char * or unsigned in struct config */
	unsigned flags;
	unsigned min, max;
	const char *def; /* default for strings; NULL when computed or required */
	unsigned def_num;
	double rmin, rmax, rdef; /* OPT_REAL */
};

#define STR(sec, k, t, field, fl, d)                                                                         \
	{                                                                                                    \
		.section = sec, .key = k, .type = t, .offset = offsetof(struct config, field), .flags = fl,  \
		.def = d                                                                                     \
	}
#define NUM(sec, k, t, field, lo, hi, d)                                                                     \
	{                                                                                                    \
		.section = sec, .key = k, .type = t, .offset = offsetof(struct config, field), .min = lo,    \
		.max = hi, .def_num = d                                                                      \
	}

/* 'auto' (stored as 0, computed in finish()) or an integer from lo to hi. */
#define UINT_AUTO(sec, k, field, lo, hi)                                                                     \
	{                                                                                                    \
		.section = sec, .key = k, .type = OPT_AUTO_UINT, .offset = offsetof(struct config, field),   \
		.min = lo, .max = hi, .def = "auto"                                                          \
	}

#define ENV(sec, field)                                                                                      \
	{                                                                                                    \
		.section = sec, .key = "env", .type = OPT_ENV, .offset = offsetof(struct config, field),     \
		.flags = OPT_EMPTY_OK                                                                        \
	}

#define BOOL(sec, k, field, d)                                                                               \
	{                                                                                                    \
		.section = sec, .key = k, .type = OPT_BOOL, .offset = offsetof(struct config, field),        \
		.def_num = d                                                                                 \
	}

#define REAL(sec, k, field, lo, hi, d)                                                                       \
	{                                                                                                    \
		.section = sec, .key = k, .type = OPT_REAL, .offset = offsetof(struct config, field),        \
		.rmin = lo, .rmax = hi, .rdef = d                                                            \
	}

/*
 * Every option of the file, in the order docs/configuration.md lists them.
 * The upper bounds keep arithmetic on the values (deadlines in ms, counts
 * times sizes) far from overflow; history_max also keeps the first poll's
 * `git log` within NW_GIT_OUTPUT_MAX.
 */
static const struct option options[] = {
    STR("daemon", "state_dir", OPT_PATH, state_dir, 0, "/var/lib/numwatch"),
    STR("daemon", "database", OPT_STRING, database, OPT_EMPTY_OK, "dbname=numwatch"),
    STR("daemon", "node_name", OPT_STRING, node_name, 0, NULL),
    NUM("daemon", "lease", OPT_DURATION, lease_s, 10, 7 * 24 * 3600, 300),
    NUM("daemon", "query_timeout", OPT_DURATION, query_timeout_s, 1, 24 * 3600, 300),

    STR("repository", "name", OPT_STRING, repo_name, 0, NULL),
    STR("repository", "url", OPT_ARG, repo_url, OPT_REQUIRED, NULL),
    STR("repository", "branch", OPT_ARG, repo_branch, 0, "main"),
    NUM("repository", "poll_interval", OPT_DURATION, poll_interval_s, 1, 24 * 3600, 30),
    NUM("repository", "history_max", OPT_UINT, history_max, 1, 100000, 500),

    STR("build", "command", OPT_STRING, build_command, OPT_REQUIRED, NULL),
    NUM("build", "timeout", OPT_DURATION, build_timeout_s, 1, 7 * 24 * 3600, 1800),
    STR("build", "runner_host", OPT_RELPATH, runner_host, 0, "numwatch-runner-host"),
    STR("build", "runner_cuda", OPT_RELPATH, runner_cuda, 0, "numwatch-runner-cuda"),
    NUM("build", "log_max", OPT_UINT, build_log_max, 1, NW_CAPTURE_MAX, 262144),
    STR("build", "identity", OPT_GLOBS, build_identity, OPT_EMPTY_OK, ""),
    ENV("build", build_env),

    NUM("trials", "per_commit", OPT_UINT, trials_per_commit, 1, NW_TRIALS_MAX, 64),
    NUM("trials", "max", OPT_UINT, trials_max, 1, NW_TRIALS_MAX, 1024),
    STR("trials", "checks", OPT_STRING, trials_checks, OPT_EMPTY_OK, ""),

    /* [sanitizer]: every Nth seed of a commit's plan also runs under each tool, on GPU slots. */
    STR("sanitizer", "tools", OPT_TOOLS, sanitizer_tools, OPT_EMPTY_OK, ""),
    NUM("sanitizer", "every", OPT_UINT, sanitizer_every, 1, NW_TRIALS_MAX, 16),
    NUM("sanitizer", "commits", OPT_UINT, sanitizer_commits, 1, 1000000, 1),
    STR("sanitizer", "path", OPT_STRING, sanitizer_path, 0, "compute-sanitizer"),
    NUM("sanitizer", "timeout_factor", OPT_UINT, sanitizer_timeout_factor, 1, 1000, 20),
    NUM("trials", "timeout", OPT_DURATION, trial_timeout_s, 1, 24 * 3600, 60),
    NUM("trials", "repeats", OPT_UINT, repeats, 1, 100, 2),
    NUM("trials", "hello_timeout", OPT_DURATION, hello_timeout_s, 1, 3600, 30),

    STR("slots", "slots", OPT_SLOTS, nslots, 0, "host"),
    STR("slots", "gpus", OPT_GPUS, slots_gpus, 0, "auto"),
    ENV("slots", slots_env),

    /* [store]: 'auto' is one connection per NW_STORE_SLOTS_PER_CONNECTION slots (config_store_connections). */
    UINT_AUTO("store", "connections", store_connections, 1, NW_STORE_CONNECTIONS_MAX),

    STR("http", "address", OPT_ADDRESS, http_address, 0, "127.0.0.1"),
    NUM("http", "port", OPT_UINT, http_port, 1, 65535, 8080),
    NUM("http", "threads", OPT_UINT, http_threads, 1, NW_HTTP_THREADS_MAX, 2),
    NUM("http", "query_timeout", OPT_DURATION, http_query_timeout_s, 1, 3600, 15),
    STR("http", "web_root", OPT_PATH, web_root, 0, NW_WEB_ROOT),
    STR("http", "public_url", OPT_URL, public_url, 0, NULL),

    /* [mail]: mail_from and mail_mbox get computed defaults in finish(). */
    STR("mail", "smtp_url", OPT_SMTP_URL, mail_smtp_url, OPT_EMPTY_OK, ""),
    STR("mail", "from", OPT_MAILBOX, mail_from, 0, NULL),
    STR("mail", "to", OPT_ADDRESS_LIST, mail_to, OPT_EMPTY_OK, ""),
    STR("mail", "starttls", OPT_TLS, mail_starttls, 0, "try"),
    STR("mail", "username", OPT_STRING, mail_username, OPT_EMPTY_OK, ""),
    STR("mail", "password", OPT_STRING, mail_password, OPT_EMPTY_OK, ""),
    STR("mail", "password_file", OPT_PATH, mail_password_file, 0, NULL),
    STR("mail", "mbox", OPT_PATH, mail_mbox, 0, NULL),
    NUM("mail", "rate_limit", OPT_UINT, mail_rate_limit, 1, 10000, 20),
    BOOL("mail", "send_to_author", mail_send_to_author, 1),
    NUM("mail", "timeout", OPT_DURATION, mail_timeout_s, 1, 600, 60),
    NUM("mail", "retry", OPT_DURATION, mail_retry_s, 1, 3600, 60),

    /* [verdict]: the statistics of stats_verdict() (stats.h), defaults as stats_verdict_params_default(). */
    REAL("verdict", "p0_floor", verdict_p0_floor, 1e-6, 0.49, 0.002),
    REAL("verdict", "p1", verdict_p1, 1e-6, 0.99, 0.02),
    REAL("verdict", "p1_factor", verdict_p1_factor, 1.0, 100.0, 3.0),
    REAL("verdict", "alpha", verdict_alpha, 1e-9, 0.49, 0.01),
    REAL("verdict", "beta", verdict_beta, 1e-9, 0.49, 0.05),
    NUM("verdict", "min_trials", OPT_UINT, verdict_min_trials, 1, NW_TRIALS_MAX, 20),
    REAL("verdict", "mcnemar_alpha", verdict_mcnemar_alpha, 1e-9, 0.49, 0.01),
    REAL("verdict", "drift_factor", verdict_drift_factor, 1.01, 1000.0, 2.0),
    REAL("verdict", "drift_alpha", verdict_drift_alpha, 1e-9, 0.49, 0.001),

    /* [bisect]: the search of bisect.c (bisect.h), defaults as bisect_params_default(). */
    REAL("bisect", "confidence", bisect_confidence, 0.51, 0.999999, 0.99),
    REAL("bisect", "prior_none", bisect_prior_none, 0.0, 0.9, 0.1),
    NUM("bisect", "max_trials", OPT_UINT, bisect_max_trials, 1, 10000000, 50000),
    BOOL("bisect", "automatic", bisect_automatic, 1),
};

static const char *const sections[] = {"daemon", "repository", "build", "trials",  "sanitizer", "slots",
				       "store",  "http",       "mail",  "verdict", "bisect"};

struct parser {
	struct config cfg; /* filled here, moved to the caller's only on success */
	const char *path;
	FILE *file;
	int lineno;                    /* of the line inih is working on */
	int seen[ARRAY_SIZE(options)]; /* line where each option was set, 0 if not */
	/* The line handed to inih, kept to explain the syntax errors inih reports by number only. */
	char line[NW_CONFIG_LINE_MAX + 3];
	int rc; /* first error, 0 if none */
	char *err;
	size_t errlen;
};

static void fail(struct parser *p, int rc, int lineno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records the first error only: later ones are usually its consequences. */
static void fail(struct parser *p, int rc, int lineno, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->rc)
		return;
	p->rc = rc;
	if (!p->errlen)
		return;
	n = snprintf(p->err, p->errlen, "%s:%d: ", p->path, lineno);
	if (n < 0 || (size_t)n >= p->errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(p->err + n, p->errlen - n, fmt, ap);
	va_end(ap);
}

static bool section_known(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sections); i++)
		if (strlen(sections[i]) == len && memcmp(sections[i], name, len) == 0)
			return true;
	return false;
}

static const char *skip_space(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return s;
}

/*
 * Judges a "[section]" line before inih sees it, so that an unknown or empty
 * section is reported on its own line. A line with no ']' is left to inih,
 * which reports it as a syntax error.
 */
static void check_section_line(struct parser *p, const char *s)
{
	const char *end = strchr(s, ']');
	const char *rest;

	if (!end)
		return;
	if (!section_known(s + 1, end - (s + 1))) {
		fail(p, -EINVAL, p->lineno, "unknown section [%.*s]", (int)(end - (s + 1)), s + 1);
		return;
	}
	rest = skip_space(end + 1);
	if (*rest)
		fail(p, -EINVAL, p->lineno, "unexpected text '%s' after section header [%.*s]", rest,
		     (int)(end - (s + 1)), s + 1);
}

/*
 * Opens a file the configuration is read from for reading, regular files
 * only. The open does not wait (O_NONBLOCK: a FIFO without a writer would
 * block it for ever) and a device or FIFO is refused before anything is read
 * from it. Returns the descriptor, or a negative errno with *why set.
 */
static int open_regular(const char *path, struct stat *st, const char **why)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), rc;

	if (fd < 0) {
		rc = -errno;
		*why = strerror(errno);
		return rc;
	}
	if (fstat(fd, st) < 0) {
		rc = -errno;
		*why = strerror(errno);
		close(fd);
		return rc;
	}
	if (!S_ISREG(st->st_mode)) {
		rc = S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
		*why = S_ISDIR(st->st_mode)                           ? strerror(EISDIR)
		       : S_ISFIFO(st->st_mode)                        ? "a FIFO, not a regular file"
		       : S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? "a device, not a regular file"
								      : "not a regular file";
		close(fd);
		return rc;
	}
	return fd;
}

/*
 * inih's ini_reader: returns one whole line per call, like fgets(), so that
 * the number of calls is the line number. Returning NULL ends the parse; that
 * is how an error found here stops inih.
 */
static char *read_line(char *str, int num, void *stream)
{
	struct parser *p = stream;
	size_t len = 0, total = 0;
	bool nul = false;
	const char *s;
	int c = EOF;

	if (p->rc)
		return NULL;
	/*
	 * Read up to the newline, storing at most one byte more than the
	 * limit (so that a CR before the LF can be told from a long line) and
	 * counting the rest, so that memory stays bounded whatever the file.
	 */
	errno = 0;
	while ((c = getc(p->file)) != EOF && c != '\n') {
		if (c == '\0')
			nul = true;
		if (len < NW_CONFIG_LINE_MAX + 1)
			p->line[len++] = (char)c;
		total++;
	}
	if (c == EOF && ferror(p->file)) {
		int e = errno ? errno : EIO;

		p->rc = -e;
		snprintf(p->err, p->errlen, "cannot read '%s': %s", p->path, strerror(e));
		return NULL;
	}
	if (c == EOF && total == 0)
		return NULL;
	p->lineno++;
	if (total > 0 && total == len && p->line[len - 1] == '\r')
		total--, len--;
	p->line[len] = '\0';
	if (total > NW_CONFIG_LINE_MAX) {
		fail(p, -EINVAL, p->lineno, "line too long (more than %d bytes)", NW_CONFIG_LINE_MAX);
		return NULL;
	}
	if (nul) {
		fail(p, -EINVAL, p->lineno, "line contains a NUL byte");
		return NULL;
	}
	if (len + 2 > (size_t)num) {
		/* Cannot happen while ini_max_line is set as in config_load(). */
		fail(p, -EINVAL, p->lineno, "line too long for the ini parser");
		return NULL;
	}
	s = p->line;
	if (p->lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3; /* a UTF-8 byte order mark, which inih skips too */
	s = skip_space(s);
	if (*s == '[') {
		check_section_line(p, s);
		if (p->rc)
			return NULL;
	}
	memcpy(str, p->line, len);
	str[len] = '\n';
	str[len + 1] = '\0';
	return str;
}

static const struct option *find_option(const char *section, const char *key, size_t *index)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(options); i++) {
		if (strcmp(options[i].section, section) == 0 && strcmp(options[i].key, key) == 0) {
			*index = i;
			return &options[i];
		}
	}
	return NULL;
}

/*
 * Parses a decimal number with an optional unit suffix (s, m, h; only when
 * 'units'). Returns 0, -EINVAL when it is not one, or -ERANGE when it does
 * not fit in an unsigned long long.
 */
static int parse_number(const char *s, bool units, unsigned long long *out)
{
	unsigned long long v = 0, mult = 1;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (ULLONG_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (*p && units) {
		if (*p == 's')
			mult = 1;
		else if (*p == 'm')
			mult = 60;
		else if (*p == 'h')
			mult = 3600;
		else
			return -EINVAL;
		p++;
	}
	if (*p)
		return -EINVAL;
	if (v > ULLONG_MAX / mult)
		return -ERANGE;
	*out = v * mult;
	return 0;
}

/* Removes leading and trailing blanks in place. */
static char *trim(char *s)
{
	size_t len;

	s = (char *)skip_space(s);
	len = strlen(s);
	while (len && isspace((unsigned char)s[len - 1]))
		s[--len] = '\0';
	return s;
}

/*
 * The [slots] list: comma-separated entries, "N" (a GPU index) or "host", each
 * optionally followed by "*K" for K slots of that kind. The first slot of GPU N is
 * "gpuN", the others "gpuN.1", "gpuN.2", ...; host slots are "host", "host1",
 * ... whatever entries they come from. A GPU index may appear in one entry
 * only: "0, 1, 0" is more likely a typo than a wish for two slots on GPU 0.
 */
static int parse_slots(struct parser *p, const char *value)
{
	struct config *cfg = &p->cfg;
	const char *s = value;
	unsigned nhost = 0;

	cfg->nslots = 0;
	for (;;) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		unsigned long long gpu = 0, count = 1;
		char tok[64], entry[64], *dev, *star;
		bool host;
		unsigned peers = 0, i;
		int r;

		/* Trim the entry. */
		while (len && isspace((unsigned char)*s))
			s++, len--;
		while (len && isspace((unsigned char)s[len - 1]))
			len--;
		if (!len) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for 'slots': expected a comma-separated list of GPU indices "
			     "and 'host', each optionally followed by '*K'",
			     value);
			return -EINVAL;
		}
		if (len >= sizeof(tok)) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for 'slots': '%.*s' is neither a GPU index nor 'host'",
			     value, (int)len, s);
			return -EINVAL;
		}
		memcpy(tok, s, len);
		tok[len] = '\0';
		memcpy(entry, tok, len + 1);
		dev = tok;
		star = strchr(tok, '*');
		if (star) {
			char *k = trim(star + 1);

			*star = '\0';
			dev = trim(tok);
			if (!*dev) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': '%s' has no GPU index or 'host' before "
				     "'*'",
				     value, entry);
				return -EINVAL;
			}
			if (!*k) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': '%s' has no slot count after '*'",
				     value, entry);
				return -EINVAL;
			}
			r = parse_number(k, false, &count);
			if (r == -EINVAL) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': the slot count in '%s' is not a "
				     "positive "
				     "integer",
				     value, entry);
				return -EINVAL;
			}
			if (r == -ERANGE || count > NW_CONFIG_SLOTS_MAX) {
				fail(
				    p, -EINVAL, p->lineno,
				    "invalid value '%s' for 'slots': the slot count in '%s' is too large (at "
				    "most %d slots in all)",
				    value, entry, NW_CONFIG_SLOTS_MAX);
				return -EINVAL;
			}
			if (count == 0) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': the slot count in '%s' must be at "
				     "least 1",
				     value, entry);
				return -EINVAL;
			}
		}
		host = strcmp(dev, "host") == 0;
		if (!host) {
			if (parse_number(dev, false, &gpu) < 0) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': '%s' is neither a GPU index nor 'host'",
				     value, dev);
				return -EINVAL;
			}
			if (gpu > SLOT_GPU_MAX) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': GPU index %s is out of range (at most "
				     "%d)",
				     value, dev, SLOT_GPU_MAX);
				return -EINVAL;
			}
			for (i = 0; i < cfg->nslots; i++)
				peers += cfg->slots[i].gpu == (int)gpu;
			if (peers) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for 'slots': GPU %d is listed twice (for several "
				     "slots "
				     "on one GPU write '%d*K', e.g. '%d*%llu')",
				     value, (int)gpu, (int)gpu, (int)gpu, peers + count);
				return -EINVAL;
			}
		}
		if (cfg->nslots + count > NW_CONFIG_SLOTS_MAX) {
			fail(p, -EINVAL, p->lineno, "invalid value '%s' for 'slots': more than %d slots",
			     value, NW_CONFIG_SLOTS_MAX);
			return -EINVAL;
		}
		for (i = 0; i < count; i++) {
			struct config_slot *slot = &cfg->slots[cfg->nslots++];

			if (host) {
				slot->gpu = -1;
				slot->peer = 0;
				if (nhost == 0)
					snprintf(slot->name, sizeof(slot->name), "host");
				else
					snprintf(slot->name, sizeof(slot->name), "host%u", nhost);
				nhost++;
			} else {
				slot->gpu = (int)gpu;
				slot->peer = i;
				if (i == 0)
					snprintf(slot->name, sizeof(slot->name), "gpu%d", (int)gpu);
				else
					snprintf(slot->name, sizeof(slot->name), "gpu%d.%u", (int)gpu, i);
			}
		}
		if (!end)
			break;
		s = end + 1;
	}
	return 0;
}

static bool env_name_char(char c, bool first)
{
	return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (!first && c >= '0' && c <= '9');
}

/* Appends 'n' bytes of 's' to the growing value '*v' (length '*len'); false when out of memory. */
static bool env_append(char **v, size_t *len, const char *s, size_t n)
{
	char *grown = realloc(*v, *len + n + 1);

	if (!grown)
		return false;
	memcpy(grown + *len, s, n);
	*len += n;
	grown[*len] = '\0';
	*v = grown;
	return true;
}

/*
 * One value of an env list, from 's' (just after the '='), up to the next
 * blank or, when it starts with '"', up to the closing '"'. "${NAME}" is
 * replaced by the variable of the process loading the file (empty when it has
 * none), so that "PATH=/opt/venv/bin:${PATH}" prepends. Returns the text
 * after the value, or NULL with the error recorded.
 */
static const char *env_value(struct parser *p, const struct option *o, const char *value, const char *s,
			     char **out)
{
	bool quoted = *s == '"';
	size_t len = 0;
	char *v = strdup("");

	if (!v)
		goto oom;
	s += quoted;
	while (*s && (quoted ? *s != '"' : !isspace((unsigned char)*s))) {
		if (s[0] == '$' && s[1] == '{') {
			const char *end = strchr(s + 2, '}');
			char name[NW_CONFIG_ENV_NAME_MAX];
			const char *ev;
			size_t n;

			if (!end || end == s + 2 || (size_t)(end - (s + 2)) >= sizeof(name)) {
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for '%s': '${' must be followed by a variable name "
				     "and '}'",
				     value, o->key);
				goto err;
			}
			n = (size_t)(end - (s + 2));
			memcpy(name, s + 2, n);
			name[n] = '\0';
			ev = getenv(name);
			if (ev && !env_append(&v, &len, ev, strlen(ev)))
				goto oom;
			s = end + 1;
			continue;
		}
		if (!env_append(&v, &len, s, 1))
			goto oom;
		s++;
	}
	if (quoted) {
		if (*s != '"') {
			fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': a '\"' is not closed",
			     value, o->key);
			goto err;
		}
		s++;
		if (*s && !isspace((unsigned char)*s)) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for '%s': expected a blank after the closing '\"'", value,
			     o->key);
			goto err;
		}
	}
	*out = v;
	return s;
oom:
	fail(p, -ENOMEM, p->lineno, "out of memory");
err:
	free(v);
	return NULL;
}

/*
 * [build] env and [slots] env: blank-separated entries, each "NAME=VALUE"
 * (set; VALUE may be "quoted" to hold blanks) or "NAME" (passed through from
 * the daemon's environment). NUMWATCH_* and, for runners, CUDA_VISIBLE_DEVICES
 * are the daemon's to set.
 */
static int parse_env(struct parser *p, const struct option *o, const char *value)
{
	struct config_env *e = (struct config_env *)((char *)&p->cfg + o->offset);
	bool slots = strcmp(o->section, "slots") == 0;
	const char *s = value;

	while (*(s = skip_space(s))) {
		struct config_env_var var = {{0}, NULL};
		size_t n = 0;

		while (env_name_char(s[n], n == 0))
			n++;
		if (n == 0 || (s[n] && s[n] != '=' && !isspace((unsigned char)s[n]))) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for '%s': expected NAME=VALUE or NAME entries (NAME: "
			     "letters, "
			     "digits and '_', not starting with a digit)",
			     value, o->key);
			return -EINVAL;
		}
		if (n >= sizeof(var.name)) {
			fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': '%.*s' is too long a name",
			     value, o->key, (int)n, s);
			return -EINVAL;
		}
		memcpy(var.name, s, n);
		if (strncmp(var.name, "NUMWATCH_", 9) == 0 ||
		    (slots && !strcmp(var.name, "CUDA_VISIBLE_DEVICES"))) {
			fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': numwatchd sets %s itself",
			     value, o->key, var.name);
			return -EINVAL;
		}
		for (unsigned i = 0; i < e->n; i++) {
			if (!strcmp(e->vars[i].name, var.name)) {
				fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': %s is listed twice",
				     value, o->key, var.name);
				return -EINVAL;
			}
		}
		if (e->n >= NW_CONFIG_ENV_MAX) {
			fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': more than %d variables",
			     value, o->key, NW_CONFIG_ENV_MAX);
			return -EINVAL;
		}
		s += n;
		if (*s == '=' && !(s = env_value(p, o, value, s + 1, &var.value)))
			return p->rc;
		if (!e->vars) {
			e->vars = calloc(NW_CONFIG_ENV_MAX, sizeof(*e->vars));
			if (!e->vars) {
				free(var.value);
				fail(p, -ENOMEM, p->lineno, "out of memory");
				return -ENOMEM;
			}
		}
		e->vars[e->n++] = var;
	}
	return 0;
}

/* Checks a string option's value; returns a reason for the error message, or NULL when it is fine. */
static const char *string_problem(const struct option *o, const char *value)
{
	struct in_addr addr;

	if (!*value)
		return (o->flags & OPT_EMPTY_OK) ? NULL : "expected a non-empty value";
	switch (o->type) {
	case OPT_PATH:
		return value[0] == '/' ? NULL : "expected an absolute path";
	case OPT_RELPATH:
		/* The daemon runs build_dir + "/" + value. */
		return value[0] != '/' ? NULL : "expected a path relative to the build directory";
	case OPT_ARG:
		/* git would take it for an option (the "--upload-pack=" trick). */
		return value[0] == '-' ? "must not start with '-'" : NULL;
	case OPT_ADDRESS:
		return inet_pton(AF_INET, value, &addr) == 1 ? NULL : "expected an IPv4 address";
	case OPT_URL:
		if (strncmp(value, "http://", 7) == 0 || strncmp(value, "https://", 8) == 0)
			return NULL;
		return "expected a url starting with http:// or https://";
	case OPT_SMTP_URL:
		if ((strncmp(value, "smtp://", 7) == 0 && value[7] && value[7] != '/') ||
		    (strncmp(value, "smtps://", 8) == 0 && value[8] && value[8] != '/'))
			return NULL;
		return "expected a url starting with smtp:// or smtps:// and a host, or nothing";
	case OPT_MAILBOX: {
		char mailbox[MAIL_ADDRESS_MAX + 1];

		if (mail_parse_from(value, mailbox, sizeof(mailbox), NULL, 0) == 0)
			return NULL;
		return "expected an address, optionally with a name: 'numwatch <numwatch@example.org>'";
	}
	case OPT_ADDRESS_LIST: {
		struct mail_rcpts *r = calloc(1, sizeof(*r));
		int rc;

		if (!r)
			return "out of memory";
		rc = mail_rcpts_add_list(r, value, NULL, 0);
		free(r);
		if (rc == -ENOSPC)
			return "more than 63 addresses";
		return rc < 0 ? "expected a comma-separated list of addresses (user@example.org)" : NULL;
	}
	case OPT_TLS:
		if (strcmp(value, "no") == 0 || strcmp(value, "try") == 0 || strcmp(value, "yes") == 0)
			return NULL;
		return "expected 'no', 'try' or 'yes'";
	case OPT_GLOBS:
		/* Each entry becomes ":(glob)ENTRY" for git: no magic of its own, nothing outside the tree. */
		for (const char *c = value; *c;) {
			size_t n = strcspn(c, ", ");

			if (n > 0 && (*c == '/' || *c == ':'))
				return "expected globs relative to the repository root (src/**, setup.py)";
			c += n;
			c += strspn(c, ", ");
		}
		return NULL;
	case OPT_TOOLS: {
		char tool[32];

		for (const char *c = value; *c;) {
			size_t n = strcspn(c, ", ");

			if (n > 0) {
				snprintf(tool, sizeof(tool), "%.*s", (int)n, c);
				if (n >= sizeof(tool) || !sanitizer_tool_valid(tool))
					return "expected a list of memcheck, racecheck, initcheck, synccheck";
			}
			c += n;
			c += strspn(c, ", ");
		}
		return NULL;
	}
	default:
		return NULL;
	}
}

static int set_option(struct parser *p, const struct option *o, const char *value)
{
	unsigned long long v;
	const char *why;
	char **str;
	int r;

	switch (o->type) {
	case OPT_UINT:
	case OPT_DURATION:
		r = parse_number(value, o->type == OPT_DURATION, &v);
		if (r == -EINVAL || (r == 0 && v == 0 && o->min > 0)) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for '%s': expected a positive integer", value, o->key);
			return -EINVAL;
		}
		if (r < 0 || v < o->min || v > o->max) {
			if (o->type == OPT_DURATION)
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for '%s': expected from %u to %u seconds", value,
				     o->key, o->min, o->max);
			else
				fail(p, -EINVAL, p->lineno,
				     "invalid value '%s' for '%s': expected an integer from %u to %u", value,
				     o->key, o->min, o->max);
			return -EINVAL;
		}
		*(unsigned *)((char *)&p->cfg + o->offset) = (unsigned)v;
		return 0;
	case OPT_SLOTS:
		return parse_slots(p, value);
	case OPT_GPUS:
		if (!strcmp(value, "auto")) {
			*(int *)((char *)&p->cfg + o->offset) = -1;
			return 0;
		}
		if (parse_number(value, false, &v) < 0 || v > SLOT_GPU_MAX + 1) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for '%s': expected 'auto' or a GPU count from 0 to %d",
			     value, o->key, SLOT_GPU_MAX + 1);
			return -EINVAL;
		}
		*(int *)((char *)&p->cfg + o->offset) = (int)v;
		return 0;
	case OPT_AUTO_UINT:
		if (!strcmp(value, "auto")) {
			*(unsigned *)((char *)&p->cfg + o->offset) = 0;
			return 0;
		}
		if (parse_number(value, false, &v) < 0 || v < o->min || v > o->max) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for '%s': expected 'auto' or an integer from %u to %u",
			     value, o->key, o->min, o->max);
			return -EINVAL;
		}
		*(unsigned *)((char *)&p->cfg + o->offset) = (unsigned)v;
		return 0;
	case OPT_ENV:
		return parse_env(p, o, value);
	case OPT_REAL: {
		char *end;
		double x;

		errno = 0;
		x = strtod(value, &end);
		if (end == value || *end || errno || !(x >= o->rmin && x <= o->rmax)) {
			fail(p, -EINVAL, p->lineno,
			     "invalid value '%s' for '%s': expected a number from %g to %g", value, o->key,
			     o->rmin, o->rmax);
			return -EINVAL;
		}
		*(double *)((char *)&p->cfg + o->offset) = x;
		return 0;
	}
	case OPT_BOOL:
		if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "on") ||
		    !strcmp(value, "1")) {
			*(bool *)((char *)&p->cfg + o->offset) = true;
			return 0;
		}
		if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "off") ||
		    !strcmp(value, "0")) {
			*(bool *)((char *)&p->cfg + o->offset) = false;
			return 0;
		}
		fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': expected true or false", value,
		     o->key);
		return -EINVAL;
	default:
		why = string_problem(o, value);
		if (why) {
			fail(p, -EINVAL, p->lineno, "invalid value '%s' for '%s': %s", value, o->key, why);
			return -EINVAL;
		}
		str = (char **)((char *)&p->cfg + o->offset);
		free(*str);
		*str = strdup(value);
		if (!*str) {
			fail(p, -ENOMEM, p->lineno, "out of memory");
			return -ENOMEM;
		}
		return 0;
	}
}

/* inih's handler: one call per "key = value" line. Returns 0 to stop inih. */
static int on_option(void *user, const char *section, const char *key, const char *value)
{
	struct parser *p = user;
	const struct option *o;
	size_t i;

	if (p->rc)
		return 0;
	if (!*section) {
		fail(p, -EINVAL, p->lineno, "key '%s' outside of any section", key);
		return 0;
	}
	o = find_option(section, key, &i);
	if (!o) {
		fail(p, -EINVAL, p->lineno, "unknown key '%s' in section [%s]", key, section);
		return 0;
	}
	if (p->seen[i]) {
		fail(p, -EINVAL, p->lineno, "duplicate key '%s' in section [%s] (first set on line %d)", key,
		     section, p->seen[i]);
		return 0;
	}
	p->seen[i] = p->lineno;
	return set_option(p, o, value) == 0;
}

/* The repository's short name: the last component of its url, without ".git". */
static char *url_basename(const char *url)
{
	size_t len = strlen(url);
	size_t start;

	while (len > 1 && url[len - 1] == '/')
		len--;
	if (len >= 4 && memcmp(url + len - 4, ".git", 4) == 0 && len > 4)
		len -= 4;
	start = len;
	while (start > 0 && url[start - 1] != '/' && url[start - 1] != ':')
		start--;
	if (start == len) /* "/" or "host:": nothing better than the url itself */
		return strdup(url);
	return strndup(url + start, len - start);
}

static char *default_node_name(void)
{
	char host[HOST_NAME_MAX + 1];

	if (gethostname(host, sizeof(host)) < 0 || !host[0])
		return strdup("localhost");
	host[sizeof(host) - 1] = '\0';
	return strdup(host);
}

/*
 * The base of printed links. A wildcard address is where the daemon listens,
 * not where anyone can reach it, so links use the host's name instead.
 */
static char *default_public_url(const struct config *cfg)
{
	const char *host = cfg->http_address;
	char *url;

	if (strcmp(host, "0.0.0.0") == 0)
		host = cfg->node_name;
	if (asprintf(&url, "http://%s:%u", host, cfg->http_port) < 0)
		return NULL;
	return url;
}

/*
 * Reads the SMTP password from the first line of password_file (a systemd
 * credential, say): a regular file (open_regular) of at most
 * MAIL_PASSWORD_FILE_MAX bytes, so that a wrong path (/dev/zero, a FIFO, a
 * log) is a clear error at once instead of memory or time without end.
 */
static int read_password_file(struct parser *p, int lineno)
{
	struct config *cfg = &p->cfg;
	char buf[MAIL_PASSWORD_FILE_MAX + 1];
	const char *why;
	struct stat st;
	size_t n = 0, len;
	ssize_t r = 0;
	int fd;

	fd = open_regular(cfg->mail_password_file, &st, &why);
	if (fd < 0) {
		fail(p, fd, lineno, "cannot read password_file '%s': %s", cfg->mail_password_file, why);
		return p->rc;
	}
	/* One byte more than the cap: a file that grew after fstat is caught too. */
	while (st.st_size <= MAIL_PASSWORD_FILE_MAX && n < sizeof(buf)) {
		r = read(fd, buf + n, sizeof(buf) - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	if (r < 0) {
		fail(p, -errno, lineno, "cannot read password_file '%s': %s", cfg->mail_password_file,
		     strerror(errno));
	} else if (st.st_size > MAIL_PASSWORD_FILE_MAX || n > MAIL_PASSWORD_FILE_MAX) {
		fail(p, -EFBIG, lineno, "password_file '%s' is larger than %d bytes: not a password file",
		     cfg->mail_password_file, MAIL_PASSWORD_FILE_MAX);
	} else {
		const char *nl = memchr(buf, '\n', n);

		len = nl ? (size_t)(nl - buf) : n;
		while (len > 0 && buf[len - 1] == '\r')
			len--;
		if (memchr(buf, '\0', len))
			fail(p, -EINVAL, lineno, "password_file '%s': the password holds a NUL byte",
			     cfg->mail_password_file);
		free(cfg->mail_password);
		cfg->mail_password = p->rc ? NULL : strndup(buf, len);
		if (!p->rc && !cfg->mail_password)
			fail(p, -ENOMEM, lineno, "out of memory");
	}
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return p->rc;
}

/* [mail] defaults computed from other options, and options that exclude each other. */
static int finish_mail(struct parser *p)
{
	struct config *cfg = &p->cfg;
	size_t ipass = 0, ifile = 0;
	char *host;

	find_option("mail", "password", &ipass);
	find_option("mail", "password_file", &ifile);
	if (p->seen[ipass] && p->seen[ifile]) {
		fail(p, -EINVAL, p->seen[ipass] > p->seen[ifile] ? p->seen[ipass] : p->seen[ifile],
		     "'password' and 'password_file' are both set in [mail]: keep one");
		return p->rc;
	}
	if (cfg->mail_password_file && read_password_file(p, p->seen[ifile]) < 0)
		return p->rc;
	if (!cfg->mail_mbox && asprintf(&cfg->mail_mbox, "%s/mail.mbox", cfg->state_dir) < 0) {
		cfg->mail_mbox = NULL;
		goto oom;
	}
	if (!cfg->mail_from) {
		/* A host name that is no valid domain must not make the default From unusable. */
		host = default_node_name();
		if (!host)
			goto oom;
		if (asprintf(&cfg->mail_from, "numwatch@%s", host) < 0)
			cfg->mail_from = NULL;
		free(host);
		if (cfg->mail_from && !mail_address_ok(cfg->mail_from)) {
			free(cfg->mail_from);
			cfg->mail_from = strdup("numwatch@localhost");
		}
		if (!cfg->mail_from)
			goto oom;
	}
	return 0;
oom:
	fail(p, -ENOMEM, 0, "out of memory");
	return p->rc;
}

/* One connection per 'per' slots (rounded up), from 'min' to 'max'. */
static unsigned connections_for(unsigned nslots, unsigned per, unsigned min, unsigned max)
{
	unsigned n = (nslots + per - 1) / per;

	return n < min ? min : n > max ? max : n;
}

unsigned config_store_connections(unsigned nslots)
{
	return connections_for(nslots, NW_STORE_SLOTS_PER_CONNECTION, NW_STORE_CONNECTIONS_MIN_DEFAULT,
			       NW_STORE_CONNECTIONS_MAX_DEFAULT);
}

unsigned config_judge_connections(unsigned nslots)
{
	return connections_for(nslots, NW_JUDGE_DB_SLOTS, NW_JUDGE_DB_POOL, NW_JUDGE_DB_POOL_MAX);
}

/* Fills in what the file left out, and checks what it must not leave out. */
static int finish(struct parser *p)
{
	struct config *cfg = &p->cfg;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(options); i++) {
		const struct option *o = &options[i];

		if (p->seen[i])
			continue;
		if (o->flags & OPT_REQUIRED) {
			fail(p, -EINVAL, 0, "missing required option '%s' in [%s]", o->key, o->section);
			return p->rc;
		}
		if (o->type == OPT_UINT || o->type == OPT_DURATION)
			*(unsigned *)((char *)cfg + o->offset) = o->def_num;
		else if (o->type == OPT_BOOL)
			*(bool *)((char *)cfg + o->offset) = o->def_num != 0;
		else if (o->type == OPT_REAL)
			*(double *)((char *)cfg + o->offset) = o->rdef;
		else if (o->def && set_option(p, o, o->def) < 0)
			return p->rc;
	}
	/* Defaults computed from other options, once those are known. */
	if (!cfg->node_name && !(cfg->node_name = default_node_name()))
		goto oom;
	if (!cfg->repo_name && !(cfg->repo_name = url_basename(cfg->repo_url)))
		goto oom;
	if (!cfg->public_url && !(cfg->public_url = default_public_url(cfg)))
		goto oom;
	if (cfg->store_connections == 0)
		cfg->store_connections = config_store_connections(cfg->nslots);
	if (!(cfg->verdict_p1 > cfg->verdict_p0_floor)) {
		find_option("verdict", "p1", &i);
		fail(p, -EINVAL, p->seen[i], "[verdict] p1 (%g) must be above p0_floor (%g)", cfg->verdict_p1,
		     cfg->verdict_p0_floor);
		return p->rc;
	}
	/* Links are built as public_url + "/path": one slash, whatever the file says. */
	for (i = strlen(cfg->public_url); i > 0 && cfg->public_url[i - 1] == '/'; i--)
		cfg->public_url[i - 1] = '\0';
	return finish_mail(p);
oom:
	fail(p, -ENOMEM, 0, "out of memory");
	return p->rc;
}

/* inih's behaviour is set through globals; config_load() sets them and puts them back. */
struct ini_options {
	bool multiline, inline_comments, use_stack, stop_on_first_error, no_value, bom;
	int max_line;
	char *start_comment_prefixes;
};

static void ini_options_set(struct ini_options *saved)
{
	saved->multiline = ini_allow_multiline;
	saved->inline_comments = ini_allow_inline_comments;
	saved->use_stack = ini_use_stack;
	saved->stop_on_first_error = ini_stop_on_first_error;
	saved->no_value = ini_allow_no_value;
	saved->bom = ini_allow_bom;
	saved->max_line = ini_max_line;
	saved->start_comment_prefixes = ini_start_comment_prefixes;

	/*
	 * No continuation lines: an indented "key = value" must stay a key,
	 * not silently extend the previous value. No end-of-line comments:
	 * build commands and conninfo strings may contain ';' and '#'.
	 */
	ini_allow_multiline = false;
	ini_allow_inline_comments = false;
	ini_use_stack = true;
	ini_stop_on_first_error = true;
	ini_allow_no_value = false;
	ini_allow_bom = true;
	/* Room for the longest line, its '\n' and the NUL (read_line() already refused longer ones). */
	ini_max_line = NW_CONFIG_LINE_MAX + 3;
	ini_start_comment_prefixes = (char *)";#";
}

static void ini_options_restore(const struct ini_options *saved)
{
	ini_allow_multiline = saved->multiline;
	ini_allow_inline_comments = saved->inline_comments;
	ini_use_stack = saved->use_stack;
	ini_stop_on_first_error = saved->stop_on_first_error;
	ini_allow_no_value = saved->no_value;
	ini_allow_bom = saved->bom;
	ini_max_line = saved->max_line;
	ini_start_comment_prefixes = saved->start_comment_prefixes;
}

/* Explains a line inih refused (it reports only the number). */
static void syntax_error(struct parser *p, int lineno)
{
	const char *s = p->line;

	if (lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;
	s = skip_space(s);
	if (lineno == p->lineno && *s == '[')
		fail(p, -EINVAL, lineno, "syntax error: missing ']' in section header");
	else
		fail(p, -EINVAL, lineno, "syntax error: expected 'key = value', '[section]' or a comment");
}

int config_load(struct config *cfg, const char *path, char *err, size_t errlen)
{
	struct ini_options saved;
	struct parser *p;
	const char *why;
	struct stat st;
	int r;

	if (errlen)
		err[0] = '\0';
	memset(cfg, 0, sizeof(*cfg));
	/* On the heap: the line buffer makes the parser too big for a daemon's stack frame. */
	p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	p->path = path;
	p->err = err;
	p->errlen = errlen;
	r = open_regular(path, &st, &why);
	if (r < 0 || !(p->file = fdopen(r, "r"))) {
		if (r >= 0) {
			why = strerror(errno);
			close(r);
			r = -ENOMEM;
		}
		snprintf(err, errlen, "cannot open '%s': %s", path, why);
		goto out;
	}

	/*
	 * Not thread-safe (inih's options are globals): one load at a time (at
	 * start-up, then each reload on the thread pool, one after the other).
	 */
	ini_options_set(&saved);
	r = ini_parse_stream(read_line, p, on_option, p);
	ini_options_restore(&saved);

	if (r == -2)
		fail(p, -ENOMEM, 0, "out of memory");
	else if (r > 0 && !p->rc)
		syntax_error(p, r);
	if (!p->rc)
		finish(p);
	r = p->rc;
	if (r == 0)
		*cfg = p->cfg;
out:
	if (r < 0)
		config_release(&p->cfg);
	if (p->file)
		fclose(p->file);
	free(p);
	return r;
}

static void config_env_release(struct config_env *e)
{
	for (unsigned i = 0; i < e->n; i++)
		free(e->vars[i].value);
	free(e->vars);
	e->vars = NULL;
	e->n = 0;
}

void config_release(struct config *cfg)
{
	free(cfg->state_dir);
	free(cfg->database);
	free(cfg->node_name);
	free(cfg->repo_name);
	free(cfg->repo_url);
	free(cfg->repo_branch);
	free(cfg->build_command);
	free(cfg->runner_host);
	free(cfg->runner_cuda);
	free(cfg->http_address);
	free(cfg->web_root);
	free(cfg->public_url);
	free(cfg->mail_smtp_url);
	free(cfg->mail_from);
	free(cfg->mail_to);
	free(cfg->mail_starttls);
	free(cfg->mail_username);
	if (cfg->mail_password)
		explicit_bzero(cfg->mail_password, strlen(cfg->mail_password));
	free(cfg->mail_password);
	free(cfg->mail_password_file);
	free(cfg->mail_mbox);
	free(cfg->sanitizer_tools);
	free(cfg->trials_checks);
	free(cfg->sanitizer_path);
	free(cfg->build_identity);
	config_env_release(&cfg->build_env);
	config_env_release(&cfg->slots_env);
	memset(cfg, 0, sizeof(*cfg));
}

/*
 * The settings that decide what a verdict or a bisection says. Two daemons
 * that differ in one of these judge the same commit differently, so they
 * must agree across the daemons sharing a database. Paths, slots, ports,
 * the build command (host-specific: -j, toolchain paths) and mail are each
 * host's own.
 */
static bool shared_option(const struct option *o)
{
	static const char *const keys[] = {
	    "repository.name",   "repository.branch", "build.runner_host", "build.runner_cuda",
	    "trials.per_commit", "trials.max",        "trials.checks",     "trials.timeout",
	    "trials.repeats",    "sanitizer.tools",   "sanitizer.every",   "sanitizer.commits",
	};
	char name[64];

	if (strcmp(o->section, "verdict") == 0 || strcmp(o->section, "bisect") == 0)
		return true;
	snprintf(name, sizeof(name), "%s.%s", o->section, o->key);
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (strcmp(name, keys[i]) == 0)
			return true;
	return false;
}

int config_shared(const struct config *cfg, char *out, size_t len)
{
	size_t n = 0;

	if (len == 0)
		return -ENOSPC;
	out[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
		const struct option *o = &options[i];
		const char *base = (const char *)cfg + o->offset;
		int w;

		if (!shared_option(o))
			continue;
		switch (o->type) {
		case OPT_UINT:
		case OPT_DURATION:
			w = snprintf(out + n, len - n, "%s.%s=%u\n", o->section, o->key,
				     *(const unsigned *)base);
			break;
		case OPT_BOOL:
			w = snprintf(out + n, len - n, "%s.%s=%s\n", o->section, o->key,
				     *(const bool *)base ? "true" : "false");
			break;
		case OPT_REAL:
			w = snprintf(out + n, len - n, "%s.%s=%.17g\n", o->section, o->key,
				     *(const double *)base);
			break;
		default: {
			const char *v = *(char *const *)base;

			w = snprintf(out + n, len - n, "%s.%s=%s\n", o->section, o->key, v ? v : "");
			break;
		}
		}
		if (w < 0 || (size_t)w >= len - n) {
			out[n] = '\0';
			return -ENOSPC;
		}
		n += (size_t)w;
	}
	return 0;
}

void config_digest(const char *text, char out[17])
{
	uint64_t h = 14695981039346656037ULL; /* FNV-1a, 64 bits */

	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		h ^= *c;
		h *= 1099511628211ULL;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* The value of 'key' ("section.key") in a config_shared() text, and its length; NULL when absent. */
static const char *shared_value(const char *text, const char *key, size_t klen, size_t *vlen)
{
	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t l = nl ? (size_t)(nl - line) : strlen(line);

		if (l > klen && memcmp(line, key, klen) == 0 && line[klen] == '=') {
			*vlen = l - klen - 1;
			return line + klen + 1;
		}
		line = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/*
 * Appends to out (", "-separated) the keys of 'a' that 'b' lacks, and with
 * 'values' those whose values differ too.
 */
static void diff_into(const char *a, const char *b, bool values, char *out, size_t len, size_t *n)
{
	for (const char *line = a; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t l = nl ? (size_t)(nl - line) : strlen(line);
		const char *eq = memchr(line, '=', l), *bv;
		size_t klen, blen = 0;

		if (eq) {
			klen = (size_t)(eq - line);
			bv = shared_value(b, line, klen, &blen);
			if (!bv || (values && (blen != l - klen - 1 || memcmp(bv, eq + 1, blen) != 0))) {
				int w =
				    snprintf(out + *n, len - *n, "%s%.*s", *n ? ", " : "", (int)klen, line);

				if (w > 0 && (size_t)w < len - *n)
					*n += (size_t)w;
				else
					out[*n] = '\0';
			}
		}
		line = nl ? nl + 1 : NULL;
	}
}

void config_shared_diff(const char *a, const char *b, char *out, size_t len)
{
	size_t n = 0;

	if (len == 0)
		return;
	out[0] = '\0';
	diff_into(a, b, true, out, len, &n);
	diff_into(b, a, false, out, len, &n);
}
