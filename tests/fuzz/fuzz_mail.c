/*
 * fuzz_mail: the culprit mail's headers as mail_format() writes them from
 * outside text (a commit title in the subject, configured From and To).
 * Input: 8 bytes date, 8 bytes bisection id, then From, the To list
 * (comma-separated), Subject, Message-ID, In-Reply-To ("" for none), body
 * and X-Numwatch-Kind ("" for none), separated by NUL bytes.
 *
 * Checked on every formatted message: lines end in CRLF, with no other CR
 * or LF; no line passes 998 bytes; the header block is printable ASCII,
 * each line a "Name: value" or a folded continuation; the Subject, unfolded
 * and RFC 2047-decoded, is valid UTF-8 in encoded words of whole characters
 * and gives back a subject that needed no cleaning byte for byte; the mbox
 * entry of the message has no unescaped "From " line.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "mail.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { F_FROM, F_TO, F_SUBJECT, F_ID, F_REPLY, F_BODY, F_KIND, NFIELDS };

static int b64(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Appends the base64 text s[0..n) decoded to 'out' (at 'len'); false when it is not base64. */
static bool b64_decode(const char *s, size_t n, char *out, size_t *len)
{
	if (n % 4)
		return false;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];

		for (int k = 0; k < 4; k++)
			v[k] = s[i + k] == '=' && k >= 2 && i + 4 == n ? 0 : b64(s[i + k]);
		if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0)
			return false;
		out[(*len)++] = (char)(v[0] << 2 | v[1] >> 4);
		if (s[i + 2] != '=')
			out[(*len)++] = (char)((v[1] & 15) << 4 | v[2] >> 2);
		if (s[i + 3] != '=')
			out[(*len)++] = (char)((v[2] & 3) << 6 | v[3]);
	}
	return true;
}

/* Whether 's' needed no cleaning: valid UTF-8 without C0, DEL or C1 controls, and short. */
static bool clean_subject(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);

	if (n > 900 || !fuzz_utf8_valid(s, n))
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] == 0x7f || (p[i] == 0xC2 && i + 1 < n && p[i + 1] < 0xA0))
			return false;
	return true;
}

/* The Subject value: unfolded, its encoded words decoded; checks each word on the way. */
static void check_subject(const char *value, size_t n, const char *subject)
{
	char *unfolded = malloc(n + 1), *decoded = malloc(n + 1);
	size_t u = 0, d = 0;

	if (!unfolded || !decoded)
		abort();
	for (size_t i = 0; i < n; i++) {
		if (value[i] == '\r' && i + 2 < n + 1 && value[i + 1] == '\n')
			i++; /* unfolding removes the CRLF only */
		else
			unfolded[u++] = value[i];
	}
	unfolded[u] = '\0';
	if (strncmp(unfolded, " =?UTF-8?B?", 11) == 0) {
		/* Encoded words, separated by one space (folding whitespace between words is dropped). */
		const char *w = unfolded + 1;

		while (*w) {
			const char *end = strstr(w + 10, "?=");
			size_t before = d, wlen;

			if (strncmp(w, "=?UTF-8?B?", 10) != 0 || !end)
				fuzz_fail("Subject: malformed encoded word at '%.40s'", w);
			wlen = (size_t)(end + 2 - w);
			if (wlen > 75)
				fuzz_fail("Subject: encoded word of %zu characters, RFC 2047 allows 75",
					  wlen);
			if (!b64_decode(w + 10, (size_t)(end - w - 10), decoded, &d))
				fuzz_fail("Subject: encoded word is not base64: '%.*s'", (int)wlen, w);
			if (!fuzz_utf8_valid(decoded + before, d - before))
				fuzz_fail("Subject: encoded word does not hold whole UTF-8 characters");
			w = end + 2;
			if (*w == ' ')
				w++;
			else if (*w)
				fuzz_fail("Subject: text after an encoded word: '%.40s'", w);
		}
		decoded[d] = '\0';
	} else {
		/* A plain value, after "Subject:" and its one space. */
		snprintf(decoded, n + 1, "%s", unfolded[0] == ' ' ? unfolded + 1 : unfolded);
	}
	if (clean_subject(subject) && strcmp(decoded, subject) != 0)
		fuzz_fail("Subject: '%s' reads back as '%s'", subject, decoded);
	free(unfolded);
	free(decoded);
}

static void check_message(const char *msg, size_t len, const char *subject)
{
	size_t i = 0;
	bool headers = true, seen_subject = false;

	if (strlen(msg) != len)
		fuzz_fail("message length %zu, strlen %zu", len, strlen(msg));
	while (i < len) {
		const char *line = msg + i, *cr = memchr(line, '\r', len - i);
		const char *lf = memchr(line, '\n', len - i);
		size_t n;

		if (!cr || !lf || lf != cr + 1)
			fuzz_fail("line at byte %zu does not end in CRLF (or holds a bare CR or LF)", i);
		n = (size_t)(cr - line);
		if (n > 998)
			fuzz_fail("line at byte %zu is %zu bytes long, RFC 5322 allows 998", i, n);
		if (headers && n == 0) {
			headers = false;
		} else if (headers) {
			for (size_t k = 0; k < n; k++)
				if ((unsigned char)line[k] < 0x20 || (unsigned char)line[k] >= 0x7f)
					fuzz_fail("header line at byte %zu is not printable ASCII", i);
			if (line[0] != ' ' && line[0] != '\t') {
				const char *colon = memchr(line, ':', n);

				if (!colon || colon == line || memchr(line, ' ', (size_t)(colon - line)))
					fuzz_fail("header line '%.*s' is neither 'Name: value' nor folded",
						  (int)n, line);
			}
			if (strncmp(line, "Subject:", 8) == 0) {
				/* The value runs to the next line that is not a continuation. */
				const char *end = line + n;

				while (end + 2 < msg + len && (end[2] == ' ' || end[2] == '\t')) {
					const char *next =
					    memchr(end + 2, '\r', (size_t)(msg + len - end - 2));

					if (!next)
						fuzz_fail("unterminated Subject");
					end = next;
				}
				check_subject(line + 8, (size_t)(end - line - 8), subject);
				seen_subject = true;
			}
		}
		i += n + 2;
	}
	if (headers || !seen_subject)
		fuzz_fail("no end of headers or no Subject");
}

static void check_mbox(const char *msg, size_t len, long long date)
{
	char *entry;
	size_t elen;
	int r = mail_mbox_entry("numwatch@example.org", date, msg, len, &entry, &elen);

	if (r == -E2BIG)
		return;
	if (r != 0)
		fuzz_fail("mail_mbox_entry returned %d", r);
	if (strncmp(entry, "From numwatch@example.org ", 26) != 0)
		fuzz_fail("mbox entry starts with '%.40s'", entry);
	for (const char *nl = strchr(entry, '\n'); nl && nl[1]; nl = strchr(nl + 1, '\n'))
		if (strncmp(nl + 1, "From ", 5) == 0)
			fuzz_fail("mbox entry has an unescaped From line");
	free(entry);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *f[NFIELDS], *out = NULL, *to_copy, *save = NULL;
	const char *to[MAIL_RECIPIENTS_MAX];
	struct mail_rcpts rcpts = {0};
	struct mail_message m = {0};
	char bad[64];
	size_t outlen, nto = 0;
	int r;

	if (size < 16)
		return 0;
	memcpy(&m.date, data, 8);
	memcpy(&m.bisection_id, data + 8, 8);
	fuzz_split(data + 16, size - 16, '\0', f, NFIELDS);
	to_copy = strdup(f[F_TO]);
	if (!to_copy)
		abort();
	for (char *t = strtok_r(to_copy, ",", &save); t && nto < MAIL_RECIPIENTS_MAX;
	     t = strtok_r(NULL, ",", &save))
		to[nto++] = t;
	/* What mailer.c does with the configured list before a mail is queued. */
	r = mail_rcpts_add_list(&rcpts, f[F_TO], bad, sizeof(bad));
	if (r < 0 && !fuzz_terminated(bad, sizeof(bad)))
		fuzz_fail("mail_rcpts_add_list: 'bad' not terminated");

	m.from = f[F_FROM];
	m.to = to;
	m.nto = nto;
	m.subject = f[F_SUBJECT];
	m.message_id = f[F_ID];
	m.in_reply_to = f[F_REPLY][0] ? f[F_REPLY] : NULL;
	m.body = f[F_BODY];
	/* X-Numwatch-Kind comes from mail_kind_name(), never from outside. */
	m.kind = f[F_KIND][0] ? mail_kind_name((enum mail_kind)((unsigned char)f[F_KIND][0] % 3)) : NULL;
	r = mail_format(&m, &out, &outlen);
	if (r == 0) {
		check_message(out, outlen, m.subject);
		check_mbox(out, outlen, m.date);
		free(out);
	} else if (r != -EINVAL && r != -E2BIG) {
		fuzz_fail("mail_format returned %d", r);
	}
	free(to_copy);
	free(f[0]);
	return 0;
}
