/* mail: composition of the culprit mail and its follow-ups, RFC 5322 and mbox writing. */
#include "mail.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* RFC 5322: lines SHOULD stay within 78 characters and MUST stay within 998. */
#define LINE_SOFT 78
#define LINE_HARD 998
/* UTF-8 bytes per RFC 2047 encoded word: 14 base64 groups, so "Subject: " + one word fits in 78 columns. */
#define ENCODED_WORD_BYTES 42
/* Short SHAs: 8 hex digits in subjects (as in the README's example), 12 in bodies. */
#define SHA_SUBJECT 8
#define SHA_BODY    12
/* A display name made of these (RFC 5322 atext and spaces) needs no quotes. */
#define PHRASE_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%&'*+-/=?^_`{|}~"

static const char *const kind_names[] = {"culprit", "withdrawn", "fixed"};
static const char *const wday_names[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

const char *mail_kind_name(enum mail_kind kind)
{
	return (unsigned)kind < 3 ? kind_names[kind] : "unknown";
}

int mail_kind_parse(const char *name, enum mail_kind *out)
{
	for (unsigned i = 0; i < 3; i++) {
		if (name && strcmp(name, kind_names[i]) == 0) {
			*out = (enum mail_kind)i;
			return 0;
		}
	}
	return -EINVAL;
}

/*
 * A growing buffer with a maximum size given at init. Errors are sticky, so
 * that a composition can append freely and check once at the end.
 */
struct buf {
	char *p;
	size_t len, cap, max;
	int err;
};

static void buf_init(struct buf *b, size_t max)
{
	memset(b, 0, sizeof(*b));
	b->max = max;
}

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (n > b->max - b->len) {
		b->err = -E2BIG;
		return;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		char *p;

		if (cap < b->len + n + 1)
			cap = b->len + n + 1;
		if (cap > b->max + 1)
			cap = b->max + 1;
		p = realloc(b->p, cap);
		if (!p) {
			b->err = -ENOMEM;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

static void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void buf_addf(struct buf *b, const char *fmt, ...)
{
	char small[256], *big;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = b->err ? b->err : -EINVAL;
		return;
	}
	if ((size_t)n < sizeof(small)) {
		buf_add(b, small, (size_t)n);
		return;
	}
	big = malloc((size_t)n + 1);
	if (!big) {
		b->err = b->err ? b->err : -ENOMEM;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	buf_add(b, big, (size_t)n);
	free(big);
}

/* Hands the buffer over (an empty string when nothing was added), or frees it and returns the error. */
static int buf_take(struct buf *b, char **out, size_t *outlen)
{
	if (!b->err && !b->p)
		buf_add(b, "", 0);
	if (b->err) {
		free(b->p);
		b->p = NULL;
		return b->err;
	}
	*out = b->p;
	if (outlen)
		*outlen = b->len;
	b->p = NULL;
	return 0;
}

/*
 * Length of the well-formed UTF-8 sequence at 's' (1 to 4), or 0 when it is
 * not one (a stray continuation byte, an overlong form, a surrogate, past
 * U+10FFFF, or cut short).
 */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2, cp = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3, cp = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
	    (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/*
 * Appends outside text, cleaned: invalid UTF-8 becomes U+FFFD, control
 * characters (C0, DEL, C1) become a space, so that no field can end a line
 * or a header. At most 'max' bytes are kept, cut on a character boundary,
 * with "..." added when something was cut.
 */
static void add_clean(struct buf *b, const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n, i = 0, used = 0;

	if (!s)
		return;
	n = strlen(s);
	while (i < n) {
		size_t k = utf8_len(p + i, n - i);
		const char *out = s + i;
		size_t outlen = k;

		if (k == 0) {
			out = "\xEF\xBF\xBD";
			outlen = 3;
			k = 1;
		} else if ((k == 1 && (p[i] < 0x20 || p[i] == 0x7F)) ||
			   (k == 2 && p[i] == 0xC2 && p[i + 1] < 0xA0)) {
			out = " ";
			outlen = 1;
		}
		if (used + outlen > max) {
			buf_adds(b, "...");
			return;
		}
		buf_add(b, out, outlen);
		used += outlen;
		i += k;
	}
}

/* Appends at most 'n' characters of a SHA (all of it when shorter). */
static void add_sha(struct buf *b, const char *sha, size_t n)
{
	size_t len = strlen(sha);

	for (size_t i = 0; i < len; i++) {
		if (!isxdigit((unsigned char)sha[i])) {
			add_clean(b, sha, 64);
			return;
		}
	}
	buf_add(b, sha, len < n ? len : n);
}

/* Appends a word for a shell command line, single-quoted unless it is plainly safe. */
static void add_shell_word(struct buf *b, const char *s)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._,+:=@/-";
	struct buf clean;

	buf_init(&clean, 4 * MAIL_FIELD_MAX);
	add_clean(&clean, s, MAIL_FIELD_MAX);
	if (clean.err) {
		b->err = b->err ? b->err : clean.err;
		free(clean.p);
		return;
	}
	if (clean.len && strspn(clean.p, safe) == clean.len) {
		buf_add(b, clean.p, clean.len);
	} else {
		buf_adds(b, "'");
		for (size_t i = 0; i < clean.len; i++) {
			if (clean.p[i] == '\'')
				buf_adds(b, "'\\''");
			else
				buf_add(b, clean.p + i, 1);
		}
		buf_adds(b, "'");
	}
	free(clean.p);
}

/* Appends text percent-encoded for a URL (RFC 3986 unreserved characters kept). */
static void add_url_part(struct buf *b, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~')
			buf_add(b, (const char *)p, 1);
		else
			buf_addf(b, "%%%02X", *p);
	}
}

static void add_commit_link(struct buf *b, const char *base, const char *sha, const char *check,
			    const char *dtype)
{
	buf_adds(b, base);
	buf_adds(b, "/?view=commit&sha=");
	add_url_part(b, sha);
	if (check && dtype) {
		/* The commit page scrolls to this check x dtype's row (web/app.js). */
		buf_adds(b, "#");
		add_url_part(b, check);
		buf_adds(b, "/");
		add_url_part(b, dtype);
	}
}

static void add_bisection_link(struct buf *b, const char *base, long long id)
{
	buf_addf(b, "%s/?view=bisection&id=%lld", base, id);
}

/* "3f2a1c9d0e1f  title\n<indent>by Name <email>\n" */
static void add_commit_lines(struct buf *b, const struct mail_commit *c, const char *indent)
{
	add_sha(b, c->sha, SHA_BODY);
	if (c->title) {
		buf_adds(b, "  ");
		add_clean(b, c->title, MAIL_TITLE_MAX);
	}
	buf_adds(b, "\n");
	if (c->author || c->email) {
		buf_adds(b, indent);
		buf_adds(b, "by ");
		if (c->author) {
			add_clean(b, c->author, MAIL_FIELD_MAX);
			if (c->email)
				buf_adds(b, " ");
		}
		if (c->email) {
			buf_adds(b, "<");
			add_clean(b, c->email, MAIL_FIELD_MAX);
			buf_adds(b, ">");
		}
		buf_adds(b, "\n");
	}
}

/* A ratio or error figure: three significant digits, as the dashboard shows them. */
static void add_number(struct buf *b, double v)
{
	buf_addf(b, "%.3g", v);
}

/*
 * How bad the worst trial is, after "  error:   ": the ratio (or the
 * non-finite count), then the tensor and its figures, then the trial's error
 * text, each on its own line so that lines stay short.
 */
static void add_error_lines(struct buf *b, const struct mail_culprit *c)
{
	static const char indent[] = "\n           ";
	bool line = false;

	if (c->nonfinite > 0) {
		buf_addf(b, "%lld non-finite value%s where the reference is finite", c->nonfinite,
			 c->nonfinite == 1 ? "" : "s");
		line = true;
	} else if (!isnan(c->ratio)) {
		buf_adds(b, "ratio ");
		add_number(b, c->ratio);
		buf_adds(b, " to the tolerance budget (a trial fails above 1)");
		line = true;
	}
	if (c->tensor || !isnan(c->max_abs) || !isnan(c->max_rel)) {
		if (line)
			buf_adds(b, indent);
		buf_adds(b, "in tensor ");
		add_clean(b, c->tensor ? c->tensor : "?", MAIL_FIELD_MAX);
		if (!isnan(c->max_abs)) {
			buf_adds(b, ": max_abs ");
			add_number(b, c->max_abs);
		}
		if (!isnan(c->max_rel)) {
			buf_adds(b, isnan(c->max_abs) ? ": max_rel " : ", max_rel ");
			add_number(b, c->max_rel);
		}
		line = true;
	}
	if (c->error) {
		if (line)
			buf_adds(b, indent);
		add_clean(b, c->error, MAIL_FIELD_MAX);
		line = true;
	}
	if (!line)
		buf_adds(b, "not recorded");
}

static bool commit_ok(const struct mail_commit *c)
{
	return c->sha && *c->sha;
}

unsigned mail_repro_runs(double rate)
{
	double n;

	if (!(rate > 0.0) || rate >= 0.99)
		return 1;
	n = ceil(log(0.01) / log1p(-rate));
	return n < NW_REPRO_RUNS_MAIL_MAX ? (unsigned)n : NW_REPRO_RUNS_MAIL_MAX;
}

char *mail_repro_command(const char *template, const char *runner, const char *check, const char *dtype,
			 unsigned long long seed, unsigned runs)
{
	char seed_s[24], runs_s[16];
	const char *const keys[] = {"{check}", "{dtype}", "{seed}", "{runs}"};
	const char *const values[] = {check, dtype, seed_s, runs_s};
	struct buf b;
	char *out = NULL;

	snprintf(seed_s, sizeof(seed_s), "%llu", seed);
	snprintf(runs_s, sizeof(runs_s), "%u", runs ? runs : 1);
	buf_init(&b, 4 * NW_PROTO_TEXT_MAX + 4 * MAIL_FIELD_MAX);
	if (!template || !*template) {
		buf_addf(&b, "./%s --check %s --dtype %s --seed %s", runner, check, dtype, seed_s);
	} else {
		for (const char *t = template; *t;) {
			size_t k;

			for (k = 0; k < 4; k++)
				if (!strncmp(t, keys[k], strlen(keys[k])))
					break;
			if (k < 4) {
				buf_adds(&b, values[k]);
				t += strlen(keys[k]);
			} else {
				buf_add(&b, t++, 1);
			}
		}
	}
	if (buf_take(&b, &out, NULL) < 0)
		return NULL;
	return out;
}

/* One "  - item" line for each line of 'items' (at most MAIL_ALSO_MAX). */
static void add_list(struct buf *b, const char *items)
{
	const char *q = items;

	for (unsigned n = 0; *q && n < MAIL_ALSO_MAX; n++) {
		const char *nl = strchr(q, '\n');
		size_t len = nl ? (size_t)(nl - q) : strlen(q);
		char line[MAIL_FIELD_MAX + 1];

		snprintf(line, sizeof(line), "%.*s", (int)(len < MAIL_FIELD_MAX ? len : MAIL_FIELD_MAX), q);
		buf_adds(b, "  - ");
		add_clean(b, line, MAIL_FIELD_MAX);
		buf_adds(b, "\n");
		q = nl ? nl + 1 : q + len;
	}
}

int mail_compose_culprit(const struct mail_culprit *c, struct mail_text *out)
{
	/* A seed-bound failure shows on every run of its seed: one run reproduces it. */
	bool bound = c->seeds && !strcmp(c->seeds, "seed_bound");
	unsigned runs = bound ? 1 : mail_repro_runs(c->rate);
	struct buf s, b;
	int r;

	memset(out, 0, sizeof(*out));
	if (!c->check || !c->dtype || !c->public_url || !commit_ok(&c->culprit))
		return -EINVAL;

	buf_init(&s, LINE_HARD);
	buf_adds(&s, "[numwatch] ");
	add_clean(&s, c->check, MAIL_FIELD_MAX);
	buf_adds(&s, " ");
	add_clean(&s, c->dtype, MAIL_FIELD_MAX);
	if (c->also && *c->also) {
		unsigned more = 1;

		for (const char *q = c->also; *q; q++)
			more += *q == '\n';
		buf_addf(&s, " and %u more", more);
	}
	buf_adds(&s, " regressed by ");
	add_sha(&s, c->culprit.sha, SHA_SUBJECT);
	if (c->culprit.title) {
		buf_adds(&s, ": ");
		add_clean(&s, c->culprit.title, MAIL_TITLE_MAX);
	}

	buf_init(&b, MAIL_BODY_MAX);
	buf_adds(&b, "numwatch found the commit that made ");
	add_clean(&b, c->check, MAIL_FIELD_MAX);
	buf_adds(&b, " (");
	add_clean(&b, c->dtype, MAIL_FIELD_MAX);
	buf_adds(&b, ") fail");
	if (c->repo) {
		buf_adds(&b, " in ");
		add_clean(&b, c->repo, MAIL_FIELD_MAX);
	}
	buf_adds(&b, ".\n\n");
	buf_adds(&b, "  Culprit:     ");
	add_commit_lines(&b, &c->culprit, "               ");
	if (commit_ok(&c->good)) {
		buf_adds(&b, "  Last clean:  ");
		add_commit_lines(&b, &c->good, "               ");
	}
	if (!isnan(c->confidence)) {
		/* Rounded down: 99.96% must not read as a certain 100.0%. */
		double pct = floor(c->confidence * 1000.0) / 10.0;

		buf_addf(&b, "  Confidence:  %.1f%% (bisection %lld)\n", pct, c->bisection_id);
	}

	buf_adds(&b, c->has_trial ? "\nThe worst failing trial at the culprit:\n" : "\nThe failure:\n");
	buf_adds(&b, "  check:   ");
	add_clean(&b, c->check, MAIL_FIELD_MAX);
	buf_adds(&b, "\n  dtype:   ");
	add_clean(&b, c->dtype, MAIL_FIELD_MAX);
	buf_adds(&b, "\n");
	if (c->has_seed)
		buf_addf(&b, "  seed:    %llu\n", c->seed);
	if (c->has_trial) {
		if (c->shape || c->family) {
			buf_adds(&b, "  shape:   ");
			if (c->shape)
				add_clean(&b, c->shape, MAIL_FIELD_MAX);
			if (c->family) {
				buf_adds(&b, c->shape ? " (family " : "(family ");
				add_clean(&b, c->family, MAIL_FIELD_MAX);
				buf_adds(&b, ")");
			}
			buf_adds(&b, "\n");
		}
		if (c->outcome) {
			buf_adds(&b, "  outcome: ");
			add_clean(&b, c->outcome, MAIL_FIELD_MAX);
			buf_adds(&b, "\n");
		}
		buf_adds(&b, "  error:   ");
		add_error_lines(&b, c);
		buf_adds(&b, "\n");
	}
	if (c->failing_seeds && *c->failing_seeds) {
		buf_adds(&b, "  failing seeds: ");
		add_clean(&b, c->failing_seeds, MAIL_FIELD_MAX);
		buf_adds(&b, "\n");
	}
	if (c->rate > 0.0 && c->rate <= 1.0) {
		buf_addf(&b, "  rate:    %.1f%% of fresh seeds fail at the culprit", 100.0 * c->rate);
		if (bound)
			buf_adds(&b, ";\n           a failing seed fails again every time");
		else if (c->seeds && !strcmp(c->seeds, "race"))
			buf_adds(&b, ";\n           a race: a failing seed fails again only as often");
		buf_adds(&b, "\n");
	}

	if (c->also && *c->also) {
		buf_adds(&b, "\nThe same commit also broke (one mail for all of them):\n");
		add_list(&b, c->also);
	}

	if (c->has_seed) {
		buf_adds(&b, "\nTo reproduce it on your own GPU:\n\n  numwatch repro --commit ");
		add_shell_word(&b, c->culprit.sha);
		buf_adds(&b, " --check ");
		add_shell_word(&b, c->check);
		buf_adds(&b, " --dtype ");
		add_shell_word(&b, c->dtype);
		buf_addf(&b, " --seed %llu", c->seed);
		if (runs > 1)
			buf_addf(&b, " --runs %u", runs);
		buf_adds(&b, "\n");
		if (runs > 1)
			buf_addf(
			    &b,
			    "\nThe failure does not show on every run: the command runs the seed %u times,\n"
			    "enough to see it fail with 99%% probability at that rate.\n",
			    runs);
		if (c->runner || (c->repro_template && *c->repro_template)) {
			char *cmd = mail_repro_command(c->repro_template, c->runner ? c->runner : "runner",
						       c->check, c->dtype, c->seed, runs);

			if (!cmd) {
				b.err = b.err ? b.err : -ENOMEM;
			} else {
				buf_adds(&b, c->repro_template && *c->repro_template
						 ? "\nOr with the runner's own command line:\n\n  "
						 : "\nOr with the runner alone, in a build directory of the "
						   "culprit:\n\n  ");
				add_clean(&b, cmd, 4 * NW_PROTO_TEXT_MAX);
				buf_adds(&b, "\n");
				free(cmd);
			}
		}
	}

	buf_adds(&b, "\nOn the dashboard:\n  commit:    ");
	add_commit_link(&b, c->public_url, c->culprit.sha, c->check, c->dtype);
	buf_adds(&b, "\n  bisection: ");
	add_bisection_link(&b, c->public_url, c->bisection_id);
	buf_adds(&b,
		 "\n\n-- \nnumwatch sends one mail per culprit. If the culprit is withdrawn or the check\n"
		 "becomes clean again, it says so in this thread.\n");

	if ((r = buf_take(&s, &out->subject, NULL)) < 0) {
		free(b.p);
		return r;
	}
	if ((r = buf_take(&b, &out->body, NULL)) < 0) {
		mail_text_release(out);
		return r;
	}
	return 0;
}

int mail_compose_followup(const struct mail_followup *f, struct mail_text *out)
{
	struct buf s, b;
	int r;

	memset(out, 0, sizeof(*out));
	if (!f->check || !f->dtype || !f->public_url || !f->root_subject ||
	    (f->kind != MAIL_WITHDRAWN && f->kind != MAIL_FIXED) ||
	    (f->kind == MAIL_FIXED && !commit_ok(&f->fixed)))
		return -EINVAL;

	buf_init(&s, LINE_HARD);
	/* Replies keep one "Re: ", as mail clients do. */
	if (strncasecmp(f->root_subject, "Re: ", 4) != 0)
		buf_adds(&s, "Re: ");
	add_clean(&s, f->root_subject, LINE_HARD - 8);

	buf_init(&b, MAIL_BODY_MAX);
	if (f->kind == MAIL_WITHDRAWN) {
		buf_adds(&b, "The culprit named in this thread has been withdrawn: testing it again did not\n"
			     "confirm that it made ");
		add_clean(&b, f->check, MAIL_FIELD_MAX);
		buf_adds(&b, " (");
		add_clean(&b, f->dtype, MAIL_FIELD_MAX);
		buf_adds(&b, ") fail.\n\n");
		if (commit_ok(&f->culprit)) {
			buf_adds(&b, "  Withdrawn:   ");
			add_commit_lines(&b, &f->culprit, "               ");
			buf_adds(&b, "\n");
		}
		buf_adds(&b, "Nothing needs to be done about that commit.\n");
	} else {
		add_clean(&b, f->check, MAIL_FIELD_MAX);
		buf_adds(&b, " (");
		add_clean(&b, f->dtype, MAIL_FIELD_MAX);
		buf_adds(&b, ") is clean again");
		if (f->repo) {
			buf_adds(&b, " in ");
			add_clean(&b, f->repo, MAIL_FIELD_MAX);
		}
		buf_adds(&b, ".\n\n  Clean again: ");
		add_commit_lines(&b, &f->fixed, "               ");
		if (commit_ok(&f->culprit)) {
			buf_adds(&b, "  Culprit:     ");
			add_commit_lines(&b, &f->culprit, "               ");
		}
		if (f->also_fixed && *f->also_fixed) {
			buf_adds(&b, "\nThe same commit also fixed (one mail for all of them):\n");
			add_list(&b, f->also_fixed);
		}
	}
	buf_adds(&b, "\nOn the dashboard:\n");
	if (f->kind == MAIL_FIXED) {
		buf_adds(&b, "  commit:    ");
		add_commit_link(&b, f->public_url, f->fixed.sha, f->check, f->dtype);
		buf_adds(&b, "\n");
	}
	buf_adds(&b, "  bisection: ");
	add_bisection_link(&b, f->public_url, f->bisection_id);
	buf_adds(&b, "\n\n-- \nnumwatch\n");

	if ((r = buf_take(&s, &out->subject, NULL)) < 0) {
		free(b.p);
		return r;
	}
	if ((r = buf_take(&b, &out->body, NULL)) < 0) {
		mail_text_release(out);
		return r;
	}
	return 0;
}

void mail_text_release(struct mail_text *t)
{
	free(t->subject);
	free(t->body);
	t->subject = t->body = NULL;
}

int mail_message_id(char *buf, size_t len, long long bisection_id, enum mail_kind kind, const char *domain)
{
	int n;

	if (!domain || !*domain)
		domain = "localhost";
	n = snprintf(buf, len, "<numwatch.bisect-%lld.%s@%s>", bisection_id, mail_kind_name(kind), domain);
	return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}

static bool domain_ok(const char *d)
{
	size_t label = 0;

	if (!*d)
		return false;
	for (const char *p = d; *p; p++) {
		if (*p == '.') {
			if (label == 0 || p[-1] == '-')
				return false;
			label = 0;
		} else if (isalnum((unsigned char)*p) || (*p == '-' && label > 0)) {
			label++;
		} else {
			return false;
		}
	}
	return label > 0;
}

bool mail_address_ok(const char *addr)
{
	const char *at;
	size_t n;

	if (!addr)
		return false;
	n = strlen(addr);
	at = strchr(addr, '@');
	if (n == 0 || n > MAIL_ADDRESS_MAX || !at || at == addr || strchr(at + 1, '@'))
		return false;
	/* The local part: RFC 5322's dot-atom (atext and single inner dots). */
	if (addr[0] == '.' || at[-1] == '.')
		return false;
	for (const char *p = addr; p < at; p++) {
		unsigned char c = (unsigned char)*p;

		if (c <= 0x20 || c >= 0x7F || strchr("\"(),:;<>[\\]", c) || (c == '.' && p[1] == '.'))
			return false;
	}
	return domain_ok(at + 1);
}

const char *mail_address_domain(const char *addr)
{
	const char *at = addr ? strrchr(addr, '@') : NULL;

	return at ? at + 1 : NULL;
}

static bool name_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\' || c == '<' || c == '>')
			return false;
	}
	return true;
}

int mail_parse_from(const char *from, char *addr, size_t addrlen, char *name, size_t namelen)
{
	const char *s = from, *e, *lt, *gt;
	size_t n;

	if (!from)
		return -EINVAL;
	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	lt = memchr(s, '<', (size_t)(e - s));
	if (!lt) {
		n = (size_t)(e - s);
		if (n >= addrlen)
			return -EINVAL;
		memcpy(addr, s, n);
		addr[n] = '\0';
		if (name && namelen)
			name[0] = '\0';
		return mail_address_ok(addr) ? 0 : -EINVAL;
	}
	gt = e - 1;
	if (gt <= lt || *gt != '>')
		return -EINVAL;
	n = (size_t)(gt - lt - 1);
	if (n >= addrlen)
		return -EINVAL;
	memcpy(addr, lt + 1, n);
	addr[n] = '\0';
	if (!mail_address_ok(addr))
		return -EINVAL;
	/* The display name, without the quotes it may be written with. */
	e = lt;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if (e - s >= 2 && *s == '"' && e[-1] == '"')
		s++, e--;
	n = (size_t)(e - s);
	if (!name_ok(s, n))
		return -EINVAL;
	if (name && namelen) {
		if (n >= namelen)
			return -EINVAL;
		memcpy(name, s, n);
		name[n] = '\0';
	}
	return 0;
}

int mail_rcpts_add(struct mail_rcpts *r, const char *addr)
{
	if (!mail_address_ok(addr))
		return -EINVAL;
	for (size_t i = 0; i < r->n; i++)
		if (strcasecmp(r->addr[i], addr) == 0)
			return 0;
	if (r->n == MAIL_RECIPIENTS_MAX)
		return -ENOSPC;
	snprintf(r->addr[r->n++], sizeof(r->addr[0]), "%s", addr);
	return 1;
}

int mail_rcpts_add_list(struct mail_rcpts *r, const char *list, char *bad, size_t badlen)
{
	const char *s = list;

	if (!list || strspn(list, " \t") == strlen(list))
		return 0;
	for (;;) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		char one[MAIL_ADDRESS_MAX + 1];
		int rc;

		while (len && (*s == ' ' || *s == '\t'))
			s++, len--;
		while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
			len--;
		if (len == 0 || len > MAIL_ADDRESS_MAX) {
			rc = -EINVAL;
		} else {
			memcpy(one, s, len);
			one[len] = '\0';
			rc = mail_rcpts_add(r, one);
		}
		if (rc < 0) {
			if (bad && badlen)
				snprintf(bad, badlen, "%.*s", (int)len, s);
			return rc;
		}
		if (!end)
			return 0;
		s = end + 1;
	}
}

/* Whether a header value must be RFC 2047-encoded: anything but printable ASCII, or text that looks encoded. */
static bool needs_encoding(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p >= 0x7F)
			return true;
	return strstr(s, "=?") != NULL;
}

static void add_base64(struct buf *b, const unsigned char *s, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char out[4];

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		out[0] = tab[(v >> 18) & 63];
		out[1] = tab[(v >> 12) & 63];
		out[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		out[3] = i + 2 < n ? tab[v & 63] : '=';
		buf_add(b, out, 4);
	}
}

/*
 * "Name: value" for printable ASCII, folded before a space wherever the line
 * would pass 78 columns (unfolding, which removes the CRLF only, gives the
 * value back exactly).
 */
static void add_header_folded(struct buf *b, const char *name, const char *value)
{
	size_t col = strlen(name) + 2;
	const char *s = value;
	bool first = true;

	buf_adds(b, name);
	buf_adds(b, ": ");
	while (*s) {
		const char *w = s, *e;

		while (*w == ' ')
			w++;
		e = w;
		while (*e && *e != ' ')
			e++;
		if (!first && s < w && col + (size_t)(e - s) > LINE_SOFT) {
			buf_adds(b, "\r\n");
			col = 0;
		}
		buf_add(b, s, (size_t)(e - s));
		col += (size_t)(e - s);
		first = false;
		s = e;
	}
	buf_adds(b, "\r\n");
}

/*
 * "Name: =?UTF-8?B?...?=", one encoded word per line, each cut on a
 * character boundary (RFC 2047 section 5: a word must hold whole characters).
 */
static void add_header_encoded(struct buf *b, const char *name, const char *value)
{
	const unsigned char *p = (const unsigned char *)value;
	size_t n = strlen(value), i = 0;

	buf_adds(b, name);
	buf_adds(b, ":");
	while (i < n) {
		size_t take = 0;

		while (i + take < n) {
			size_t k = utf8_len(p + i + take, n - i - take);

			if (k == 0)
				k = 1; /* cleaned text has none; never loop */
			if (take + k > ENCODED_WORD_BYTES)
				break;
			take += k;
		}
		buf_adds(b, i == 0 ? " =?UTF-8?B?" : "\r\n =?UTF-8?B?");
		add_base64(b, p + i, take);
		buf_adds(b, "?=");
		i += take;
	}
	buf_adds(b, "\r\n");
}

/* A message identifier as written in headers: "<...>", printable ASCII without spaces. */
static bool msg_id_ok(const char *id)
{
	size_t n = id ? strlen(id) : 0;

	if (n < 3 || n > MAIL_MESSAGE_ID_MAX || id[0] != '<' || id[n - 1] != '>')
		return false;
	for (size_t i = 1; i + 1 < n; i++)
		if (id[i] <= 0x20 || id[i] >= 0x7F || id[i] == '<' || id[i] == '>')
			return false;
	return true;
}

/* The body with CRLF line ends, no line longer than 998 bytes (longer ones are broken, on a character boundary). */
static void add_body(struct buf *b, const char *body)
{
	const unsigned char *p = (const unsigned char *)body;
	size_t n = strlen(body), i = 0, col = 0;

	while (i < n) {
		size_t k;

		if (p[i] == '\n') {
			buf_adds(b, "\r\n");
			col = 0;
			i++;
			continue;
		}
		if (p[i] == '\r') {
			i++; /* the CRLF is written with the '\n' */
			continue;
		}
		k = utf8_len(p + i, n - i);
		if (k == 0)
			k = 1;
		if (col + k > LINE_HARD) {
			buf_adds(b, "\r\n");
			col = 0;
		}
		buf_add(b, body + i, k);
		col += k;
		i += k;
	}
	if (col)
		buf_adds(b, "\r\n");
}

void mail_date(long long t, char buf[MAIL_DATE_MAX])
{
	time_t tt = (time_t)t;
	struct tm tm;

	/* Day and month names are RFC 5322's, not the locale's. */
	if (!gmtime_r(&tt, &tm)) {
		snprintf(buf, MAIL_DATE_MAX, "Thu, 01 Jan 1970 00:00:00 +0000");
		return;
	}
	snprintf(buf, MAIL_DATE_MAX, "%s, %02d %s %04d %02d:%02d:%02d +0000", wday_names[tm.tm_wday],
		 tm.tm_mday, month_names[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

int mail_format(const struct mail_message *m, char **out, size_t *outlen)
{
	char addr[MAIL_ADDRESS_MAX + 1], name[MAIL_NAME_MAX + 1], date[MAIL_DATE_MAX];
	struct buf b, v;
	int r;

	if (mail_parse_from(m->from, addr, sizeof(addr), name, sizeof(name)) < 0 ||
	    !msg_id_ok(m->message_id) || (m->in_reply_to && !msg_id_ok(m->in_reply_to)))
		return -EINVAL;
	buf_init(&b, MAIL_MESSAGE_MAX);
	buf_init(&v, MAIL_MESSAGE_MAX);

	if (name[0] && strspn(name, PHRASE_CHARS) == strlen(name))
		buf_addf(&v, "%s <%s>", name, addr);
	else if (name[0])
		buf_addf(&v, "\"%s\" <%s>", name, addr);
	else
		buf_adds(&v, addr);
	if (!v.err)
		add_header_folded(&b, "From", v.p);

	buf_reset(&v);
	for (size_t i = 0; i < m->nto; i++) {
		/* Stored recipients were checked when queued; an unsafe one is left out, never written raw. */
		if (!mail_address_ok(m->to[i]))
			continue;
		if (v.len)
			buf_adds(&v, ", ");
		buf_adds(&v, m->to[i]);
	}
	if (!v.len)
		buf_adds(&v, "undisclosed-recipients:;");
	if (!v.err)
		add_header_folded(&b, "To", v.p);

	buf_reset(&v);
	add_clean(&v, m->subject ? m->subject : "", LINE_HARD);
	if (!v.err) {
		/*
		 * Folding breaks only before a space; text that could make a line
		 * past LINE_HARD that way is encoded, in words that fold anywhere.
		 */
		if (needs_encoding(v.p) || strlen("Subject: ") + v.len > LINE_HARD)
			add_header_encoded(&b, "Subject", v.p);
		else
			add_header_folded(&b, "Subject", v.p);
	}
	free(v.p);
	b.err = b.err ? b.err : v.err;

	mail_date(m->date, date);
	buf_addf(&b, "Date: %s\r\n", date);
	buf_addf(&b, "Message-ID: %s\r\n", m->message_id);
	if (m->in_reply_to) {
		buf_addf(&b, "In-Reply-To: %s\r\n", m->in_reply_to);
		buf_addf(&b, "References: %s\r\n", m->in_reply_to);
	}
	buf_adds(&b, "MIME-Version: 1.0\r\n"
		     "Content-Type: text/plain; charset=utf-8\r\n"
		     "Content-Transfer-Encoding: 8bit\r\n"
		     /* RFC 3834: vacation responders must not answer it. */
		     "Auto-Submitted: auto-generated\r\n");
	buf_addf(&b, "X-Numwatch-Bisection: %lld\r\n", m->bisection_id);
	if (m->kind)
		buf_addf(&b, "X-Numwatch-Kind: %s\r\n", m->kind);
	buf_adds(&b, "\r\n");
	add_body(&b, m->body ? m->body : "");
	r = buf_take(&b, out, outlen);
	return r;
}

/* Whether the line matches /^>*From /, which an mbox reader would take for the start of a message. */
static bool from_line(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n && s[i] == '>')
		i++;
	return n - i >= 5 && memcmp(s + i, "From ", 5) == 0;
}

int mail_mbox_entry(const char *sender, long long date, const char *msg, size_t len, char **out,
		    size_t *outlen)
{
	time_t tt = (time_t)date;
	struct tm tm;
	struct buf b;
	size_t i = 0;

	/* Escaping adds at most one byte per line. */
	buf_init(&b, 2 * MAIL_MESSAGE_MAX + 512);
	if (!gmtime_r(&tt, &tm))
		memset(&tm, 0, sizeof(tm));
	buf_addf(&b, "From %s %s %s %2d %02d:%02d:%02d %04d\n",
		 sender && mail_address_ok(sender) ? sender : "MAILER-DAEMON", wday_names[tm.tm_wday % 7],
		 month_names[tm.tm_mon % 12], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 tm.tm_year + 1900);
	while (i < len) {
		const char *nl = memchr(msg + i, '\n', len - i);
		size_t end = nl ? (size_t)(nl - msg) : len, n = end - i;

		if (n && msg[i + n - 1] == '\r')
			n--;
		if (from_line(msg + i, n))
			buf_adds(&b, ">");
		buf_add(&b, msg + i, n);
		buf_adds(&b, "\n");
		i = nl ? end + 1 : len;
	}
	buf_adds(&b, "\n");
	return buf_take(&b, out, outlen);
}

double mail_rate_wait(const double *sent, size_t n, unsigned limit, double window, double now)
{
	size_t in_window = 0;
	double wait;

	if (limit == 0)
		return 0;
	while (in_window < n && sent[in_window] > now - window)
		in_window++;
	if (in_window < limit)
		return 0;
	/* The limit-th newest must leave the window before one more may go. */
	wait = sent[limit - 1] + window - now;
	return wait > 0 ? wait : 0;
}

unsigned mail_backoff_s(unsigned attempts, unsigned first, unsigned max)
{
	unsigned long long d = first;

	if (attempts == 0)
		return 0;
	for (unsigned i = 1; i < attempts && d < max; i++)
		d *= 2;
	return d > max ? max : (unsigned)d;
}
