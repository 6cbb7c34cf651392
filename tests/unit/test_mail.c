/*
 * mail.c: what the culprit mail and its follow-ups say, and the bytes of the
 * message: headers, threading, subject encoding, the mbox entry, the rate
 * limit and the retry backoff. Also the [mail] section of the configuration.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "caps.h"
#include "config.h"
#include "mail.h"

#define SHA_BAD  "3f2a1c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
#define SHA_GOOD "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
#define SHA_FIX  "9e8d7c6b5a4f30211203f4e5d6c7b8a9f0e1d2c3"
/* Thu, 05 Mar 2026 12:00:00 +0000 */
#define DATE 1772712000LL

static struct mail_culprit culprit_facts(void)
{
	struct mail_culprit c = {
	    .bisection_id = 12,
	    .public_url = "https://numwatch.example.org",
	    .repo = "demo-kernels",
	    .check = "softmax.fwd",
	    .dtype = "bf16",
	    .culprit = {SHA_BAD, "softmax: vectorised 4-wide path", "Jane Doe", "jane@example.com"},
	    .good = {SHA_GOOD, "softmax: tidy", "Max Mustermann", "max@example.com"},
	    .confidence = 0.99321,
	    .failing_seeds = "3, 11, 19",
	    .has_trial = true,
	    .has_seed = true,
	    .seed = 3,
	    .outcome = "fail",
	    .family = "tail",
	    .shape = "[2, 1027]",
	    .ratio = 3.5,
	    .tensor = "y",
	    .max_abs = 0.001,
	    .max_rel = 0.0125,
	    .nonfinite = 0,
	    .error = NULL,
	    .seeds = "seed_bound",
	    .rate = 0.1875,
	};
	return c;
}

/* Everything up to and including the blank line that ends the headers. */
static char *headers_of(const char *msg)
{
	const char *end = strstr(msg, "\r\n\r\n");

	assert_non_null(end);
	return strndup(msg, (size_t)(end - msg) + 4);
}

static char *format(const char *subject, const char *in_reply_to, const char *body, const char *const *to,
		    size_t nto, size_t *len)
{
	struct mail_message m = {
	    .from = "numwatch <numwatch@example.org>",
	    .to = to,
	    .nto = nto,
	    .date = DATE,
	    .subject = subject,
	    .message_id = "<numwatch.bisect-12.culprit@example.org>",
	    .in_reply_to = in_reply_to,
	    .body = body,
	    .bisection_id = 12,
	};
	char *out = NULL;
	size_t l = 0;

	assert_int_equal(mail_format(&m, &out, &l), 0);
	assert_int_equal(strlen(out), l);
	if (len)
		*len = l;
	return out;
}

/* Every line of a formatted message ends in CRLF, has no bare CR or LF, and is at most 'max' bytes. */
static void assert_lines(const char *msg, size_t max)
{
	const char *s = msg;

	while (*s) {
		const char *crlf = strstr(s, "\r\n");

		assert_non_null(crlf);
		for (const char *p = s; p < crlf; p++)
			assert_true(*p != '\r' && *p != '\n');
		if ((size_t)(crlf - s) > max)
			fail_msg("line longer than %zu bytes: '%.*s'", max, (int)(crlf - s), s);
		s = crlf + 2;
	}
}

static void test_culprit_headers_exact(void **state)
{
	const char *to[] = {"jane@example.com", "team@example.org"};
	struct mail_culprit c = culprit_facts();
	struct mail_text t;
	char *msg, *headers;

	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_string_equal(
	    t.subject, "[numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax: vectorised 4-wide path");
	msg = format(t.subject, NULL, t.body, to, 2, NULL);
	headers = headers_of(msg);
	assert_string_equal(headers,
			    "From: numwatch <numwatch@example.org>\r\n"
			    "To: jane@example.com, team@example.org\r\n"
			    "Subject: [numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax:\r\n"
			    " vectorised 4-wide path\r\n"
			    "Date: Thu, 05 Mar 2026 12:00:00 +0000\r\n"
			    "Message-ID: <numwatch.bisect-12.culprit@example.org>\r\n"
			    "MIME-Version: 1.0\r\n"
			    "Content-Type: text/plain; charset=utf-8\r\n"
			    "Content-Transfer-Encoding: 8bit\r\n"
			    "Auto-Submitted: auto-generated\r\n"
			    "X-Numwatch-Bisection: 12\r\n"
			    "\r\n");
	/* Headers keep within 78 columns; body lines (links, the repro command) within 998 bytes. */
	assert_lines(headers, 78);
	assert_lines(msg, 998);
	/* The root of a thread answers nothing. */
	assert_null(strstr(msg, "In-Reply-To"));
	assert_null(strstr(msg, "References"));
	free(headers);
	free(msg);
	mail_text_release(&t);
}

static void test_culprit_body(void **state)
{
	struct mail_culprit c = culprit_facts();
	struct mail_text t;

	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	/* Everything the issue lists, each on its own line. */
	assert_non_null(strstr(t.body, "  Culprit:     3f2a1c9d0e1f  softmax: vectorised 4-wide path\n"
				       "               by Jane Doe <jane@example.com>\n"));
	assert_non_null(strstr(t.body, "  Last clean:  0a1b2c3d4e5f  softmax: tidy\n"
				       "               by Max Mustermann <max@example.com>\n"));
	/* Rounded down, never up to a certainty the bisection does not have. */
	assert_non_null(strstr(t.body, "  Confidence:  99.3% (bisection 12)\n"));
	assert_non_null(strstr(t.body, "  check:   softmax.fwd\n"));
	assert_non_null(strstr(t.body, "  dtype:   bf16\n"));
	assert_non_null(strstr(t.body, "  seed:    3\n"));
	assert_non_null(strstr(t.body, "  shape:   [2, 1027] (family tail)\n"));
	assert_non_null(strstr(t.body,
			       "  error:   ratio 3.5 to the tolerance budget (a trial fails above 1)\n"
			       "           in tensor y: max_abs 0.001, max_rel 0.0125\n"));
	assert_non_null(strstr(t.body, "  failing seeds: 3, 11, 19\n"));
	assert_non_null(strstr(t.body, "  rate:    18.8% of fresh seeds fail at the culprit;\n"
				       "           a failing seed fails again every time\n"));
	/* Seed-bound: one run of the seed reproduces it. */
	assert_non_null(strstr(t.body, "\n  numwatch repro --commit " SHA_BAD
				       " --check softmax.fwd --dtype bf16 --seed 3\n"));
	assert_non_null(strstr(t.body, "  commit:    https://numwatch.example.org/?view=commit&sha=" SHA_BAD
				       "#softmax.fwd/bf16\n"));
	assert_non_null(strstr(t.body, "  bisection: https://numwatch.example.org/?view=bisection&id=12\n"));
	mail_text_release(&t);

	/* A NaN output says so instead of a ratio. */
	c.ratio = NAN;
	c.nonfinite = 3;
	c.tensor = "dV";
	c.max_abs = c.max_rel = NAN;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.body, "  error:   3 non-finite values where the reference is finite\n"
				       "           in tensor dV\n"));
	mail_text_release(&t);

	/* Near-certain is not certain. */
	c.confidence = 0.99996;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.body, "Confidence:  99.9% "));
	mail_text_release(&t);
}

static void test_culprit_without_trial(void **state)
{
	struct mail_culprit c = culprit_facts();
	struct mail_text t;

	/* No stored failing trial at the culprit: the repro uses the bisection's failing seed. */
	c.has_trial = false;
	c.seed = 11;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_null(strstr(t.body, "worst failing trial"));
	assert_null(strstr(t.body, "error:"));
	assert_non_null(strstr(t.body, "--seed 11\n"));
	mail_text_release(&t);

	/* Without any seed, no repro command is made up. */
	c.has_seed = false;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_null(strstr(t.body, "numwatch repro"));
	mail_text_release(&t);

	/* The culprit and the check are required. */
	c.culprit.sha = NULL;
	assert_int_equal(mail_compose_culprit(&c, &t), -EINVAL);
	assert_null(t.subject);
	assert_null(t.body);
}

/*
 * A race: a failing seed fails again only as often as any seed, so one run
 * of the repro would most likely pass; it runs the seed often enough to see
 * the failure at 99%.
 */
static void test_culprit_race_repro_runs(void **state)
{
	struct mail_culprit c = culprit_facts();
	struct mail_text t;

	(void)state;
	c.seeds = "race";
	c.rate = 0.05;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.body, "  rate:    5.0% of fresh seeds fail at the culprit;\n"
				       "           a race: a failing seed fails again only as often\n"));
	/* 0.95^90 < 0.01 <= 0.95^89 */
	assert_non_null(strstr(t.body, " --dtype bf16 --seed 3 --runs 90\n"));
	assert_non_null(
	    strstr(t.body, "runs the seed 90 times,\nenough to see it fail with 99% probability"));
	mail_text_release(&t);

	/* Not judged either way: still repeated, by the rate. */
	c.seeds = "unsure";
	c.rate = 0.3;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.body, "  rate:    30.0% of fresh seeds fail at the culprit\n"));
	assert_non_null(strstr(t.body, " --seed 3 --runs 13\n"));
	mail_text_release(&t);

	/* A bisection from before the rate was kept: one run, no rate line. */
	c.seeds = NULL;
	c.rate = NAN;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_null(strstr(t.body, "rate:"));
	assert_non_null(strstr(t.body, " --seed 3\n"));
	mail_text_release(&t);

	assert_int_equal(mail_repro_runs(NAN), 1);
	assert_int_equal(mail_repro_runs(0.0), 1);
	assert_int_equal(mail_repro_runs(-0.5), 1);
	assert_int_equal(mail_repro_runs(1.0), 1);
	assert_int_equal(mail_repro_runs(0.995), 1);
	assert_int_equal(mail_repro_runs(0.5), 7);
	assert_int_equal(mail_repro_runs(0.02), 228);
	assert_int_equal(mail_repro_runs(1e-7), NW_REPRO_RUNS_MAIL_MAX);
}

/* The runner's own command line beside numwatch repro: its template filled in, or the configured runner. */
static void test_culprit_runner_repro(void **state)
{
	struct mail_culprit c = culprit_facts();
	struct mail_text t;
	char *cmd;

	(void)state;
	c.runner = "bin/pyrunner";
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.body, "\n  numwatch repro --commit " SHA_BAD
				       " --check softmax.fwd --dtype bf16 --seed 3\n"
				       "\nOr with the runner alone, in a build directory of the culprit:\n\n"
				       "  ./bin/pyrunner --check softmax.fwd --dtype bf16 --seed 3\n"));
	mail_text_release(&t);

	c.repro_template =
	    "python3 -m mylib.checks --check {check} --dtype {dtype} --seed {seed} --runs {runs}";
	c.seeds = "race";
	c.rate = 0.05;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(
	    t.body, "enough to see it fail with 99% probability at that rate.\n"
		    "\nOr with the runner's own command line:\n\n"
		    "  python3 -m mylib.checks --check softmax.fwd --dtype bf16 --seed 3 --runs 90\n"));
	/* numwatch repro stays the first command (tests/integration/bisect_race.sh reads it). */
	assert_true(strstr(t.body, "numwatch repro") < strstr(t.body, "python3 -m"));
	mail_text_release(&t);

	/* Without a seed there is nothing to run. */
	c.has_seed = false;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_null(strstr(t.body, "python3 -m"));
	mail_text_release(&t);

	/* Placeholders repeat, unknown ones stay as written; no template: the runner's options. */
	cmd = mail_repro_command("r {seed} {seed} {other} {runs}", "x", "a.fwd", "f32",
				 18446744073709551615ULL, 0);
	assert_string_equal(cmd, "r 18446744073709551615 18446744073709551615 {other} 1");
	free(cmd);
	cmd = mail_repro_command("", "numwatch-runner-cuda", "msda.bwd", "f32", 1187, 5);
	assert_string_equal(cmd, "./numwatch-runner-cuda --check msda.bwd --dtype f32 --seed 1187");
	free(cmd);
}

/* A commit that fixes several of one culprit's regressions: one reply names them all. */
static void test_followup_fixed_several(void **state)
{
	struct mail_followup f = {
	    .kind = MAIL_FIXED,
	    .bisection_id = 12,
	    .public_url = "https://numwatch.example.org",
	    .repo = "demo-kernels",
	    .check = "softmax.bwd",
	    .dtype = "bf16",
	    .root_subject = "[numwatch] softmax.bwd bf16 and 2 more regressed by 3f2a1c9d: softmax",
	    .fixed = {SHA_FIX, "softmax: fix the tail", "Jane Doe", "jane@example.com"},
	    .also_fixed = "softmax.bwd (f32)\nsoftmax.fwd (bf16\r\nBcc: x@y)",
	};
	struct mail_text t;

	(void)state;
	assert_int_equal(mail_compose_followup(&f, &t), 0);
	assert_non_null(strstr(t.body, "softmax.bwd (bf16) is clean again in demo-kernels.\n"));
	assert_non_null(strstr(t.body, "\nThe same commit also fixed (one mail for all of them):\n"
				       "  - softmax.bwd (f32)\n"
				       "  - softmax.fwd (bf16"));
	assert_null(strstr(t.body, "\r"));
	mail_text_release(&t);
}

static void test_followup_threading(void **state)
{
	const char *root = "<numwatch.bisect-12.culprit@example.org>";
	const char *to[] = {"jane@example.com"};
	struct mail_followup f = {
	    .kind = MAIL_FIXED,
	    .bisection_id = 12,
	    .public_url = "https://numwatch.example.org",
	    .repo = "demo-kernels",
	    .check = "softmax.fwd",
	    .dtype = "bf16",
	    .root_subject =
		"[numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax: vectorised 4-wide path",
	    .culprit = {SHA_BAD, "softmax: vectorised 4-wide path", "Jane Doe", "jane@example.com"},
	    .fixed = {SHA_FIX, "softmax: fix the tail", "Jane Doe", "jane@example.com"},
	};
	struct mail_message m = {
	    .from = "numwatch@example.org",
	    .to = to,
	    .nto = 1,
	    .date = DATE,
	    .message_id = "<numwatch.bisect-12.fixed@example.org>",
	    .in_reply_to = root,
	    .bisection_id = 12,
	};
	struct mail_text t;
	char *msg, *headers;
	size_t len;

	assert_int_equal(mail_compose_followup(&f, &t), 0);
	assert_string_equal(t.subject,
			    "Re: [numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax: vectorised "
			    "4-wide path");
	assert_non_null(strstr(t.body, "softmax.fwd (bf16) is clean again in demo-kernels.\n"));
	assert_non_null(strstr(t.body, "  Clean again: 9e8d7c6b5a4f  softmax: fix the tail\n"));
	assert_non_null(
	    strstr(t.body, "  commit:    https://numwatch.example.org/?view=commit&sha=" SHA_FIX));
	assert_null(strstr(t.body, "also fixed"));
	m.subject = t.subject;
	m.body = t.body;
	assert_int_equal(mail_format(&m, &msg, &len), 0);
	headers = headers_of(msg);
	assert_string_equal(headers,
			    "From: numwatch@example.org\r\n"
			    "To: jane@example.com\r\n"
			    "Subject: Re: [numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax:\r\n"
			    " vectorised 4-wide path\r\n"
			    "Date: Thu, 05 Mar 2026 12:00:00 +0000\r\n"
			    "Message-ID: <numwatch.bisect-12.fixed@example.org>\r\n"
			    "In-Reply-To: <numwatch.bisect-12.culprit@example.org>\r\n"
			    "References: <numwatch.bisect-12.culprit@example.org>\r\n"
			    "MIME-Version: 1.0\r\n"
			    "Content-Type: text/plain; charset=utf-8\r\n"
			    "Content-Transfer-Encoding: 8bit\r\n"
			    "Auto-Submitted: auto-generated\r\n"
			    "X-Numwatch-Bisection: 12\r\n"
			    "\r\n");
	free(headers);
	free(msg);
	mail_text_release(&t);

	/* A withdrawn culprit: one "Re: ", however often the subject was answered. */
	f.kind = MAIL_WITHDRAWN;
	f.root_subject = "Re: [numwatch] x";
	assert_int_equal(mail_compose_followup(&f, &t), 0);
	assert_string_equal(t.subject, "Re: [numwatch] x");
	assert_non_null(strstr(t.body, "has been withdrawn"));
	assert_non_null(strstr(t.body, "  Withdrawn:   3f2a1c9d0e1f  softmax: vectorised 4-wide path\n"));
	mail_text_release(&t);

	/* A malformed Message-ID is refused rather than written into a header. */
	m.subject = "x";
	m.body = "x\n";
	m.in_reply_to = "<a b>";
	assert_int_equal(mail_format(&m, &msg, &len), -EINVAL);
	m.in_reply_to = "no-brackets@example.org";
	assert_int_equal(mail_format(&m, &msg, &len), -EINVAL);
}

static int b64_value(char c)
{
	const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = strchr(tab, c);

	return p && c ? (int)(p - tab) : -1;
}

/* Decodes every "=?UTF-8?B?...?=" word of a Subject header; each word must hold whole characters. */
static char *decode_subject(const char *msg)
{
	const char *s = strstr(msg, "Subject:");
	const char *end = strstr(s, "\r\nDate:");
	char *out = calloc(1, 4096);
	size_t n = 0;

	assert_non_null(s);
	while ((s = strstr(s, "=?UTF-8?B?")) && s < end) {
		const char *e = strstr(s + 10, "?=");
		size_t start = n;
		uint32_t acc = 0;
		int bits = 0;

		for (const char *p = s + 10; p < e; p++) {
			if (*p == '=')
				break;
			assert_true(b64_value(*p) >= 0);
			acc = (acc << 6) | (uint32_t)b64_value(*p);
			bits += 6;
			if (bits >= 8) {
				bits -= 8;
				out[n++] = (char)((acc >> bits) & 0xFF);
			}
		}
		/* A word must not end inside a character. */
		assert_true(n == start || ((unsigned char)out[n - 1] & 0xC0) != 0xC0);
		assert_true(((unsigned char)out[start] & 0xC0) != 0x80);
		s = e + 2;
	}
	return out;
}

static void test_subject_encoding(void **state)
{
	const char *subject = "[numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax: vektorisierter "
			      "Pfad für große C — 4×, ≥1024 ✓ ünïcödé ünïcödé ünïcödé";
	const char *to[] = {"jane@example.com"};
	char *msg, *decoded, *unfolded;
	size_t j = 0;

	msg = format(subject, NULL, "body\n", to, 1, NULL);
	assert_non_null(strstr(msg, "Subject: =?UTF-8?B?"));
	/* Encoded words are folded: no header line past 78 columns. */
	assert_lines(msg, 78);
	decoded = decode_subject(msg);
	assert_string_equal(decoded, subject);
	free(decoded);
	free(msg);

	/* Plain ASCII is left readable; "=?" would be taken for an encoded word, so it is encoded. */
	msg = format("[numwatch] a =?x?= b", NULL, "body\n", to, 1, NULL);
	assert_non_null(strstr(msg, "Subject: =?UTF-8?B?"));
	decoded = decode_subject(msg);
	assert_string_equal(decoded, "[numwatch] a =?x?= b");
	free(decoded);
	free(msg);

	/* A long ASCII subject is folded at spaces; unfolding gives it back exactly. */
	subject = "[numwatch] a.long.check.name float32 regressed by 01234567: a title with  two spaces "
		  "and many words that go on and on past the seventy-eight columns of a line";
	msg = format(subject, NULL, "body\n", to, 1, NULL);
	assert_lines(msg, 78);
	unfolded = calloc(1, strlen(msg) + 1);
	for (const char *p = strstr(msg, "Subject: ") + 9; strncmp(p, "\r\nDate:", 7) != 0; p++) {
		if (p[0] == '\r' && p[1] == '\n') {
			p++;
			continue;
		}
		unfolded[j++] = *p;
	}
	assert_string_equal(unfolded, subject);
	free(unfolded);
	free(msg);
}

/*
 * A subject with a run of text too long to fold at a space (found by
 * tests/fuzz/fuzz_mail.c): written plain, "Subject: " and 995 bytes made a
 * 1004-byte line, past RFC 5322's 998. It is encoded instead, in words that
 * fold, and decodes to itself.
 */
static void test_subject_unbreakable(void **state)
{
	const char *to[] = {"jane@example.com"};
	char subject[996], *msg, *decoded;

	memset(subject, 'x', sizeof(subject) - 1);
	subject[sizeof(subject) - 1] = '\0';
	msg = format(subject, NULL, "body\n", to, 1, NULL);
	assert_lines(msg, 998);
	decoded = decode_subject(msg);
	assert_string_equal(decoded, subject);
	free(decoded);
	free(msg);

	/* Spaces do not help when they all come before one long word. */
	memset(subject, ' ', 600);
	msg = format(subject, NULL, "body\n", to, 1, NULL);
	assert_lines(msg, 998);
	decoded = decode_subject(msg);
	assert_string_equal(decoded, subject);
	free(decoded);
	free(msg);
}

static void test_outside_text_cleaned(void **state)
{
	struct mail_culprit c = culprit_facts();
	const char *to[] = {"jane@example.com"};
	char title[600];
	struct mail_text t;
	char *msg;

	/* A commit title cannot add a header, and invalid UTF-8 is replaced. */
	c.culprit.title = "fix\r\nBcc: victim@example.com\r\n\r\nhello \xff\xfe end";
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_null(strchr(t.subject, '\r'));
	assert_null(strchr(t.subject, '\n'));
	assert_non_null(strstr(t.subject, "hello \xEF\xBF\xBD\xEF\xBF\xBD end"));
	msg = format(t.subject, NULL, t.body, to, 1, NULL);
	assert_null(strstr(msg, "\r\nBcc:"));
	assert_lines(msg, 998);
	free(msg);
	mail_text_release(&t);

	/* A long title is cut at MAIL_TITLE_MAX bytes on a character boundary, with "...". */
	memset(title, 'a', sizeof(title));
	memcpy(title + 198, "\xC3\xBC", 2); /* "ü" ends exactly at the cut: kept */
	title[sizeof(title) - 1] = '\0';
	c.culprit.title = title;
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.subject, "a\xC3\xBC..."));
	mail_text_release(&t);
	memcpy(title + 198, "a\xC3\xBC", 3); /* "ü" across the cut: left out whole */
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.subject, "aa..."));
	assert_null(strchr(t.subject, '\xC3'));
	mail_text_release(&t);

	/* A check name that a shell would misread is quoted in the repro command. */
	c = culprit_facts();
	c.check = "odd check's $name";
	assert_int_equal(mail_compose_culprit(&c, &t), 0);
	assert_non_null(strstr(t.body, "--check 'odd check'\\''s $name' --dtype bf16"));
	assert_non_null(strstr(t.body, "#odd%20check%27s%20%24name/bf16"));
	mail_text_release(&t);
}

static void test_body_lines(void **state)
{
	const char *to[] = {"jane@example.com"};
	char *body = malloc(3000), *msg;

	/* LF becomes CRLF, and no line passes 998 bytes however long the text. */
	memset(body, 'x', 2500);
	strcpy(body + 2500, "\nshort\r\nlast");
	msg = format("s", NULL, body, to, 1, NULL);
	assert_lines(msg, 998);
	assert_non_null(strstr(msg, "\r\nshort\r\nlast\r\n"));
	free(msg);
	free(body);

	/* No recipients is still a valid header. */
	msg = format("s", NULL, "b\n", NULL, 0, NULL);
	assert_non_null(strstr(msg, "\r\nTo: undisclosed-recipients:;\r\n"));
	free(msg);
}

static void test_mbox_escaping(void **state)
{
	const char msg[] = "From: numwatch@example.org\r\n"
			   "Subject: s\r\n"
			   "\r\n"
			   "From the culprit on, it fails.\r\n"
			   ">From quoted already\r\n"
			   ">>From twice\r\n"
			   " From indented\r\n"
			   "Fromage\r\n"
			   "last line\r\n";
	char *out;
	size_t len;

	assert_int_equal(mail_mbox_entry("numwatch@example.org", DATE, msg, strlen(msg), &out, &len), 0);
	assert_int_equal(strlen(out), len);
	assert_string_equal(out, "From numwatch@example.org Thu Mar  5 12:00:00 2026\n"
				 "From: numwatch@example.org\n"
				 "Subject: s\n"
				 "\n"
				 ">From the culprit on, it fails.\n"
				 ">>From quoted already\n"
				 ">>>From twice\n"
				 " From indented\n"
				 "Fromage\n"
				 "last line\n"
				 "\n");
	free(out);

	/* A message without a final newline still ends its entry properly; a bad sender is not written. */
	assert_int_equal(mail_mbox_entry("not an address", DATE, "a\r\nb", 4, &out, &len), 0);
	assert_string_equal(out, "From MAILER-DAEMON Thu Mar  5 12:00:00 2026\na\nb\n\n");
	free(out);
}

static void test_date(void **state)
{
	char buf[MAIL_DATE_MAX];

	mail_date(0, buf);
	assert_string_equal(buf, "Thu, 01 Jan 1970 00:00:00 +0000");
	mail_date(DATE, buf);
	assert_string_equal(buf, "Thu, 05 Mar 2026 12:00:00 +0000");
	mail_date(951782400, buf); /* a leap day */
	assert_string_equal(buf, "Tue, 29 Feb 2000 00:00:00 +0000");
}

static void test_message_id(void **state)
{
	char buf[MAIL_MESSAGE_ID_MAX + 1], small[10];

	assert_int_equal(mail_message_id(buf, sizeof(buf), 12, MAIL_CULPRIT, "example.org"), 0);
	assert_string_equal(buf, "<numwatch.bisect-12.culprit@example.org>");
	assert_int_equal(mail_message_id(buf, sizeof(buf), 12, MAIL_WITHDRAWN, "example.org"), 0);
	assert_string_equal(buf, "<numwatch.bisect-12.withdrawn@example.org>");
	assert_int_equal(mail_message_id(buf, sizeof(buf), 7, MAIL_FIXED, NULL), 0);
	assert_string_equal(buf, "<numwatch.bisect-7.fixed@localhost>");
	assert_int_equal(mail_message_id(small, sizeof(small), 12, MAIL_CULPRIT, "example.org"), -ENOSPC);
}

static void test_rate_limit(void **state)
{
	const double now = 100000;
	/* Newest first, as the daemon's query returns them. */
	const double sent[] = {now - 10, now - 600, now - 1200, now - 3500, now - 3700, now - 9000};

	/* Under the limit: go now. */
	assert_true(mail_rate_wait(sent, 6, 5, 3600, now) == 0);
	assert_true(mail_rate_wait(NULL, 0, 1, 3600, now) == 0);
	/* Four in the last hour with a limit of 4: wait until the oldest of them is an hour old. */
	assert_true(fabs(mail_rate_wait(sent, 6, 4, 3600, now) - 100) < 1e-9);
	/* A limit of 2: the second newest (600 s ago) must leave the window. */
	assert_true(fabs(mail_rate_wait(sent, 6, 2, 3600, now) - 3000) < 1e-9);
	/* Only the newest 'limit' are needed, which is what the daemon reads. */
	assert_true(fabs(mail_rate_wait(sent, 2, 2, 3600, now) - 3000) < 1e-9);
	/* Mails older than the window do not count. */
	assert_true(mail_rate_wait(sent + 4, 2, 1, 3600, now) == 0);
	/* No limit. */
	assert_true(mail_rate_wait(sent, 6, 0, 3600, now) == 0);
	/* A mail sent exactly one window ago no longer counts. */
	{
		const double edge[] = {now - 3600};

		assert_true(mail_rate_wait(edge, 1, 1, 3600, now) == 0);
	}
}

static void test_backoff(void **state)
{
	assert_int_equal(mail_backoff_s(0, 60, 3600), 0);
	assert_int_equal(mail_backoff_s(1, 60, 3600), 60);
	assert_int_equal(mail_backoff_s(2, 60, 3600), 120);
	assert_int_equal(mail_backoff_s(3, 60, 3600), 240);
	assert_int_equal(mail_backoff_s(6, 60, 3600), 1920);
	assert_int_equal(mail_backoff_s(7, 60, 3600), 3600);
	/* Never overflows, however many attempts. */
	assert_int_equal(mail_backoff_s(1000000, 60, 3600), 3600);
	assert_int_equal(mail_backoff_s(40, 4000000000u, 4000000000u), 4000000000u);
}

static void test_addresses(void **state)
{
	char addr[MAIL_ADDRESS_MAX + 1], name[MAIL_NAME_MAX + 1], bad[64];
	struct mail_rcpts *r = calloc(1, sizeof(*r));
	char long_local[300];

	assert_true(mail_address_ok("jane@example.com"));
	assert_true(mail_address_ok("jane.doe+numwatch@mail.example.co.uk"));
	assert_true(mail_address_ok("root@localhost"));
	assert_false(mail_address_ok(""));
	assert_false(mail_address_ok("jane"));
	assert_false(mail_address_ok("@example.com"));
	assert_false(mail_address_ok("jane@"));
	assert_false(mail_address_ok("jane@@example.com"));
	assert_false(mail_address_ok("a@b@example.com"));
	assert_false(mail_address_ok("jane doe@example.com"));
	assert_false(mail_address_ok("jane@example.com\r\nRCPT TO:<x@y>"));
	assert_false(mail_address_ok("<jane@example.com>"));
	assert_false(mail_address_ok("jane,bob@example.com"));
	assert_false(mail_address_ok(".jane@example.com"));
	assert_false(mail_address_ok("ja..ne@example.com"));
	assert_false(mail_address_ok("jane@exa_mple.com"));
	assert_false(mail_address_ok("jane@example..com"));
	assert_false(mail_address_ok("jäne@example.com"));
	memset(long_local, 'a', sizeof(long_local));
	strcpy(long_local + 250, "@example.com");
	assert_false(mail_address_ok(long_local));
	assert_string_equal(mail_address_domain("jane@example.com"), "example.com");

	assert_int_equal(mail_parse_from("numwatch@example.org", addr, sizeof(addr), name, sizeof(name)), 0);
	assert_string_equal(addr, "numwatch@example.org");
	assert_string_equal(name, "");
	assert_int_equal(
	    mail_parse_from("  numwatch CI <ci@example.org> ", addr, sizeof(addr), name, sizeof(name)), 0);
	assert_string_equal(addr, "ci@example.org");
	assert_string_equal(name, "numwatch CI");
	assert_int_equal(
	    mail_parse_from("\"numwatch, CI\" <ci@example.org>", addr, sizeof(addr), name, sizeof(name)), 0);
	assert_string_equal(name, "numwatch, CI");
	assert_int_equal(mail_parse_from("numwatch <ci@example.org", addr, sizeof(addr), NULL, 0), -EINVAL);
	assert_int_equal(mail_parse_from("num\"watch <ci@example.org>", addr, sizeof(addr), NULL, 0),
			 -EINVAL);
	assert_int_equal(mail_parse_from("numwatch <not an address>", addr, sizeof(addr), NULL, 0), -EINVAL);

	/* Recipients: unique without regard to case, bounded. */
	assert_int_equal(mail_rcpts_add(r, "jane@example.com"), 1);
	assert_int_equal(mail_rcpts_add(r, "JANE@example.com"), 0);
	assert_int_equal(mail_rcpts_add(r, "not an address"), -EINVAL);
	assert_int_equal(mail_rcpts_add_list(r, " team@example.org,jane@example.com , oncall@example.org",
					     bad, sizeof(bad)),
			 0);
	assert_int_equal(r->n, 3);
	assert_string_equal(r->addr[1], "team@example.org");
	assert_string_equal(r->addr[2], "oncall@example.org");
	assert_int_equal(mail_rcpts_add_list(r, "  ", bad, sizeof(bad)), 0);
	assert_int_equal(mail_rcpts_add_list(r, "a@example.org,,b@example.org", bad, sizeof(bad)), -EINVAL);
	assert_string_equal(bad, "");
	assert_int_equal(mail_rcpts_add_list(r, "a@example.org, b at example.org", bad, sizeof(bad)),
			 -EINVAL);
	assert_string_equal(bad, "b at example.org");
	for (int i = 0; r->n < MAIL_RECIPIENTS_MAX; i++) {
		snprintf(addr, sizeof(addr), "user%d@example.org", i);
		assert_true(mail_rcpts_add(r, addr) >= 0);
	}
	assert_int_equal(mail_rcpts_add(r, "one-too-many@example.org"), -ENOSPC);
	free(r);
}

/* Writes 'text' to a fresh file and loads it as the configuration. */
static int load(const char *text, struct config *cfg, char *err, size_t errlen)
{
	char path[] = "/tmp/test_mail_conf.XXXXXX";
	int fd = mkstemp(path), rc;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	rc = config_load(cfg, path, err, errlen);
	unlink(path);
	return rc;
}

#define BASE "[daemon]\nstate_dir = /var/lib/nw\n[repository]\nurl = /srv/repo\n[build]\ncommand = make\n"

static void test_config_mail(void **state)
{
	char pwpath[] = "/tmp/test_mail_pw.XXXXXX", text[1024], err[512];
	struct config cfg;
	int fd;

	/* Defaults: the mbox in the state directory, no SMTP. */
	assert_int_equal(load(BASE, &cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg.mail_smtp_url, "");
	assert_string_equal(cfg.mail_mbox, "/var/lib/nw/mail.mbox");
	assert_string_equal(cfg.mail_starttls, "try");
	assert_string_equal(cfg.mail_to, "");
	assert_int_equal(cfg.mail_rate_limit, 20);
	assert_true(cfg.mail_send_to_author);
	assert_int_equal(cfg.mail_timeout_s, 60);
	assert_int_equal(cfg.mail_retry_s, 60);
	assert_int_equal(strncmp(cfg.mail_from, "numwatch@", 9), 0);
	assert_true(mail_address_ok(cfg.mail_from));
	config_release(&cfg);

	/* Every option, and the password read from its file. */
	fd = mkstemp(pwpath);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "s3cret#;\n", 9), 9);
	close(fd);
	snprintf(text, sizeof(text),
		 BASE "[mail]\nsmtp_url = smtps://mail.example.org:465\nfrom = numwatch CI <ci@example.org>\n"
		      "to = team@example.org, oncall@example.org\nstarttls = yes\nusername = ci\n"
		      "password_file = %s\nrate_limit = 5\nmbox = /tmp/x.mbox\nsend_to_author = false\n"
		      "timeout = 30s\nretry = 2m\n",
		 pwpath);
	assert_int_equal(load(text, &cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg.mail_smtp_url, "smtps://mail.example.org:465");
	assert_string_equal(cfg.mail_from, "numwatch CI <ci@example.org>");
	assert_string_equal(cfg.mail_to, "team@example.org, oncall@example.org");
	assert_string_equal(cfg.mail_starttls, "yes");
	assert_string_equal(cfg.mail_username, "ci");
	assert_string_equal(cfg.mail_password, "s3cret#;");
	assert_int_equal(cfg.mail_rate_limit, 5);
	assert_string_equal(cfg.mail_mbox, "/tmp/x.mbox");
	assert_false(cfg.mail_send_to_author);
	assert_int_equal(cfg.mail_timeout_s, 30);
	assert_int_equal(cfg.mail_retry_s, 120);
	config_release(&cfg);

	/* Errors name the file's line and what is wrong. */
	assert_int_equal(load(BASE "[mail]\nsmtp_url = http://mail.example.org\n", &cfg, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err,
			       ":8: invalid value 'http://mail.example.org' for 'smtp_url': expected a url "
			       "starting with smtp:// or smtps://"));
	assert_int_equal(load(BASE "[mail]\nto = team@example.org, nobody\n", &cfg, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, ":8: invalid value 'team@example.org, nobody' for 'to': expected a "
				    "comma-separated list of addresses"));
	assert_int_equal(load(BASE "[mail]\nstarttls = maybe\n", &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(
	    strstr(err, ":8: invalid value 'maybe' for 'starttls': expected 'no', 'try' or 'yes'"));
	assert_int_equal(load(BASE "[mail]\nsend_to_author = perhaps\n", &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(
	    strstr(err, ":8: invalid value 'perhaps' for 'send_to_author': expected true or false"));
	assert_int_equal(load(BASE "[mail]\nfrom = numwatch\n", &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":8: invalid value 'numwatch' for 'from'"));
	assert_int_equal(load(BASE "[mail]\nrate_limit = 0\n", &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":8: invalid value '0' for 'rate_limit'"));
	snprintf(text, sizeof(text), BASE "[mail]\npassword = x\npassword_file = %s\n", pwpath);
	assert_int_equal(load(text, &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, ":9: 'password' and 'password_file' are both set in [mail]"));
	assert_int_equal(load(BASE "[mail]\npassword_file = /nonexistent/pw\n", &cfg, err, sizeof(err)),
			 -ENOENT);
	assert_non_null(
	    strstr(err, ":8: cannot read password_file '/nonexistent/pw': No such file or directory"));

	/* The first line of a regular file of at most MAIL_PASSWORD_FILE_MAX bytes, nothing else. */
	fd = open(pwpath, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "pw\r\nrest\n", 10), 10);
	close(fd);
	snprintf(text, sizeof(text), BASE "[mail]\npassword_file = %s\n", pwpath);
	assert_int_equal(load(text, &cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg.mail_password, "pw");
	config_release(&cfg);
	{
		char big[MAIL_PASSWORD_FILE_MAX + 1];

		memset(big, 'x', sizeof(big));
		big[2] = '\n';
		fd = open(pwpath, O_WRONLY | O_TRUNC);
		assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
		close(fd);
	}
	assert_int_equal(load(text, &cfg, err, sizeof(err)), -EFBIG);
	assert_non_null(strstr(err, ":8: password_file '"));
	assert_non_null(strstr(err, "' is larger than 4096 bytes: not a password file"));
	unlink(pwpath);
	/* /dev/zero once allocated until it failed; a FIFO without a writer blocked the load for ever. */
	assert_int_equal(load(BASE "[mail]\npassword_file = /dev/zero\n", &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(
	    strstr(err, ":8: cannot read password_file '/dev/zero': a device, not a regular file"));
	assert_int_equal(mkfifo(pwpath, 0600), 0);
	assert_int_equal(load(text, &cfg, err, sizeof(err)), -EINVAL);
	unlink(pwpath);
	assert_non_null(strstr(err, "': a FIFO, not a regular file"));
	assert_int_equal(load(BASE "[mail]\npassword_file = /tmp\n", &cfg, err, sizeof(err)), -EISDIR);
	assert_non_null(strstr(err, ":8: cannot read password_file '/tmp': Is a directory"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_culprit_headers_exact),
	    cmocka_unit_test(test_culprit_body),
	    cmocka_unit_test(test_culprit_without_trial),
	    cmocka_unit_test(test_culprit_race_repro_runs),
	    cmocka_unit_test(test_culprit_runner_repro),
	    cmocka_unit_test(test_followup_threading),
	    cmocka_unit_test(test_followup_fixed_several),
	    cmocka_unit_test(test_subject_encoding),
	    cmocka_unit_test(test_subject_unbreakable),
	    cmocka_unit_test(test_outside_text_cleaned),
	    cmocka_unit_test(test_body_lines),
	    cmocka_unit_test(test_mbox_escaping),
	    cmocka_unit_test(test_date),
	    cmocka_unit_test(test_message_id),
	    cmocka_unit_test(test_rate_limit),
	    cmocka_unit_test(test_backoff),
	    cmocka_unit_test(test_addresses),
	    cmocka_unit_test(test_config_mail),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
