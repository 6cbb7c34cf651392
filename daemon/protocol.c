/*
 * protocol: runner protocol v1 codec (docs/protocol.md), on jansson.
 *
 * Every response line comes from a program built from an arbitrary commit, so
 * nothing in it is trusted: the line is bounded, each field is type-checked,
 * each string and array is bounded by caps.h, and a value that does not fit is
 * an error rather than something silently truncated (free text excepted).
 * Fields this file does not know are ignored, so that runners can add some.
 */
#include "protocol.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan8.h"

/* Longest field path quoted in a message ("checks[255].families[31]"). */
#define FIELD_PATH_MAX 96

size_t proto_utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xBF;
	size_t n, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		n = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		n = 3;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		n = 4;
	else
		return 0;
	/* No overlong forms, no surrogates, nothing past U+10FFFF. */
	if (s[0] == 0xE0)
		lo = 0xA0;
	else if (s[0] == 0xED)
		hi = 0x9F;
	else if (s[0] == 0xF0)
		lo = 0x90;
	else if (s[0] == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

/*
 * Messages quote what the runner sent, and end up in the log and in a text
 * column: bytes that are not valid UTF-8 (jansson quotes the raw bytes of a
 * bad token; a cut may split a character) and control characters (a forged
 * log line) become '?'.
 */
static void sanitize_message(char *msg)
{
	unsigned char *s = (unsigned char *)msg;
	size_t n;

	while (*s) {
		n = proto_utf8_len(s);
		if (n == 0 || (n == 1 && (*s < 0x20 || *s == 0x7f))) {
			*s++ = '?';
			continue;
		}
		s += n;
	}
}

char *proto_clean_text(char *dst, size_t dstlen, const char *src, size_t len, bool lines)
{
	if (dstlen == 0)
		return dst;
	if (len >= dstlen)
		len = dstlen - 1;
	memcpy(dst, src, len);
	dst[len] = '\0';
	/* A NUL inside is a byte like any other here: it must not end the text early. */
	for (size_t i = 0; i < len; i++)
		if (dst[i] == '\0')
			dst[i] = '?';
	/* Each piece between the newlines and tabs kept is cleaned alone (no character holds those bytes). */
	for (char *seg = dst;;) {
		char *end = seg + (lines ? strcspn(seg, "\n\t") : strlen(seg));
		char kept = *end;

		*end = '\0';
		sanitize_message(seg);
		*end = kept;
		if (!kept)
			break;
		seg = end + 1;
	}
	return dst;
}

bool proto_line_is_message(const char *line, size_t len)
{
	size_t i = 0;

	while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
		i++;
	return i < len && line[i] == '{';
}

static int proto_error(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int proto_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
		sanitize_message(err);
	}
	return -EPROTO;
}

/* ---- requests ---- */

/* Returns 'value' as a JSON string literal (malloc'd), or NULL (out of memory, invalid UTF-8). */
static char *json_quote(const char *value)
{
	json_t *s = json_string(value);
	char *out;

	if (!s)
		return NULL;
	out = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(s);
	return out;
}

char *proto_hello_request(void)
{
	return strdup("{\"op\":\"hello\",\"protocol\":1}\n");
}

char *proto_bye_request(void)
{
	return strdup("{\"op\":\"bye\"}\n");
}

/*
 * Written by hand rather than with json_pack(): the seed is unsigned and
 * jansson's integers are signed, and the key order "op" first is part of what
 * a simple runner may rely on.
 */
/* Whether 's' is written in JSON as itself between quotes (printable ASCII, no '"' or '\\'). */
static bool plain_json_string(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e || *s == '"' || *s == '\\')
			return false;
	return true;
}

/* Appends [s, s + n) at *p if it fits before 'end'. */
static bool put_bytes(char **p, const char *end, const char *s, size_t n)
{
	if ((size_t)(end - *p) < n)
		return false;
	memcpy(*p, s, n);
	*p += n;
	return true;
}

/* Appends 'v' in decimal (with its sign when 'neg') at *p if it fits before 'end'. */
static bool put_decimal(char **p, const char *end, unsigned long long v, bool neg)
{
	char tmp[24], *t = tmp + sizeof(tmp);

	do {
		*--t = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	if (neg)
		*--t = '-';
	return put_bytes(p, end, t, (size_t)(tmp + sizeof(tmp) - t));
}

#define PUT_LITERAL(p, end, lit) put_bytes(p, end, lit, sizeof(lit) - 1)

size_t proto_trial_request_buf(char *buf, size_t len, long id, const char *check, const char *dtype,
			       unsigned long long seed, unsigned repeats)
{
	char *p = buf;
	const char *end = buf + len;
	size_t nc = strlen(check), nd = strlen(dtype);

	if (!plain_json_string(check) || !plain_json_string(dtype))
		return 0;
	if (!PUT_LITERAL(&p, end, "{\"op\":\"trial\",\"id\":") ||
	    !put_decimal(&p, end, id < 0 ? 0ULL - (unsigned long long)id : (unsigned long long)id, id < 0) ||
	    !PUT_LITERAL(&p, end, ",\"check\":\"") || !put_bytes(&p, end, check, nc) ||
	    !PUT_LITERAL(&p, end, "\",\"dtype\":\"") || !put_bytes(&p, end, dtype, nd) ||
	    !PUT_LITERAL(&p, end, "\",\"seed\":") || !put_decimal(&p, end, seed, false) ||
	    !PUT_LITERAL(&p, end, ",\"repeats\":") || !put_decimal(&p, end, repeats, false) ||
	    !PUT_LITERAL(&p, end, ",\"family\":null}\n"))
		return 0;
	return (size_t)(p - buf);
}

char *proto_trial_request(long id, const char *check, const char *dtype, unsigned long long seed,
			  unsigned repeats, const char *family)
{
	char *qcheck = NULL, *qdtype = NULL, *qfamily = NULL, *line = NULL;

	/* Every trial sends one: names need no quoting (they are checked names), so no jansson. */
	if (!family && plain_json_string(check) && plain_json_string(dtype)) {
		if (asprintf(&line,
			     "{\"op\":\"trial\",\"id\":%ld,\"check\":\"%s\",\"dtype\":\"%s\",\"seed\":%llu,"
			     "\"repeats\":%u,\"family\":null}\n",
			     id, check, dtype, seed, repeats) < 0)
			return NULL;
		return line;
	}

	qcheck = json_quote(check);
	qdtype = json_quote(dtype);
	qfamily = family ? json_quote(family) : strdup("null");
	if (!qcheck || !qdtype || !qfamily)
		goto out;
	if (asprintf(&line,
		     "{\"op\":\"trial\",\"id\":%ld,\"check\":%s,\"dtype\":%s,\"seed\":%llu,\"repeats\":%u,"
		     "\"family\":%s}\n",
		     id, qcheck, qdtype, seed, repeats, qfamily) < 0)
		line = NULL;
out:
	free(qcheck);
	free(qdtype);
	free(qfamily);
	return line;
}

/* ---- compact re-encoding ---- */

struct buf {
	char *data;
	size_t len, cap;
	bool oom;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->data, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void buf_add_string(struct buf *b, const char *s)
{
	char *q = json_quote(s);

	if (!q) {
		b->oom = true;
		return;
	}
	buf_adds(b, q);
	free(q);
}

/*
 * The shortest "%.Ng" that reads back as the same double. jansson always
 * writes 17 digits (4.72 becomes 4.7199999999999998), which is exact but is
 * not what the runner sent and not what a person reading the dashboard
 * expects. Up to 15 digits, %g output is already the shortest.
 */
static void buf_add_real(struct buf *b, double v)
{
	char tmp[40];
	int prec;

	for (prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	/* Keep it a real for a reader that tells integers from reals, as jansson does. */
	if (!strpbrk(tmp, ".eE"))
		strcat(tmp, ".0");
	buf_adds(b, tmp);
}

/* buf_add_real()'s shortest "%.Ng" as it is stored: without the ".0"; "" when not finite. */
static void real_text(char *dst, size_t len, double v)
{
	dst[0] = '\0';
	if (!isfinite(v))
		return;
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(dst, len, "%.*g", prec, v);
		if (strtod(dst, NULL) == v)
			return;
	}
}

static void dump_value(struct buf *b, json_t *v)
{
	char tmp[32];
	const char *key;
	json_t *item;
	size_t i;
	bool first = true;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		buf_add(b, "{", 1);
		json_object_foreach(v, key, item)
		{
			if (!first)
				buf_add(b, ",", 1);
			first = false;
			buf_add_string(b, key);
			buf_add(b, ":", 1);
			dump_value(b, item);
		}
		buf_add(b, "}", 1);
		break;
	case JSON_ARRAY:
		buf_add(b, "[", 1);
		json_array_foreach(v, i, item)
		{
			if (i)
				buf_add(b, ",", 1);
			dump_value(b, item);
		}
		buf_add(b, "]", 1);
		break;
	case JSON_STRING:
		buf_add_string(b, json_string_value(v));
		break;
	case JSON_INTEGER:
		snprintf(tmp, sizeof(tmp), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		buf_adds(b, tmp);
		break;
	case JSON_REAL:
		buf_add_real(b, json_real_value(v));
		break;
	case JSON_TRUE:
		buf_adds(b, "true");
		break;
	case JSON_FALSE:
		buf_adds(b, "false");
		break;
	case JSON_NULL:
		buf_adds(b, "null");
		break;
	}
}

/* Returns the compact encoding of 'v' (malloc'd), or NULL when out of memory. */
static char *encode_compact(json_t *v)
{
	struct buf b = {0};

	dump_value(&b, v);
	if (b.oom) {
		free(b.data);
		return NULL;
	}
	return b.data;
}

/* ---- field validation ---- */

enum str_kind {
	STR_NAME,  /* identifier: non-empty, bounded, letters, digits and . _ - + : */
	STR_TOKEN, /* non-empty, bounded, no control characters (digests, tensor names) */
	STR_ASCII, /* non-empty, bounded, printable ASCII without spaces (case digests) */
	STR_TEXT,  /* free text: truncated to fit, never refused for its length */
	/* a command line: non-empty, no control characters, refused rather than cut (a cut one would run) */
	STR_COMMAND,
};

/*
 * Names end up in URLs, file names and the shell command of a repro email,
 * so they are kept to characters that need no quoting anywhere.
 */
static bool name_char_ok(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
	       c == '_' || c == '-' || c == '+' || c == ':';
}

/* Copies UTF-8 'src' into 'dst', cutting at a character boundary if it does not fit. */
static void copy_truncated(char *dst, size_t dstlen, const char *src)
{
	size_t n = strlen(src);

	if (n >= dstlen) {
		n = dstlen - 1;
		while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/*
 * Each getter: 'pfx' names the enclosing object in messages ("" or
 * "tensors[0]."); an absent or null optional field leaves *out as it is and
 * returns 0; otherwise 0 or -EPROTO with the reason in err.
 */
static int check_string(json_t *v, const char *path, enum str_kind kind, char *dst, size_t dstlen, char *err,
			size_t errlen)
{
	const char *s;
	size_t len, i;

	if (!json_is_string(v))
		return proto_error(err, errlen, "field '%s' must be a string", path);
	s = json_string_value(v);
	len = strlen(s); /* jansson refuses \u0000 in strings, so this is the length */
	if (kind == STR_TEXT) {
		copy_truncated(dst, dstlen, s);
		return 0;
	}
	if (len == 0)
		return proto_error(err, errlen, "field '%s' must not be empty", path);
	if (len >= dstlen)
		return proto_error(err, errlen, "field '%s' is too long (%zu bytes, at most %zu)", path, len,
				   dstlen - 1);
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (kind == STR_NAME && !name_char_ok(c))
			return proto_error(err, errlen,
					   "field '%s' must contain only letters, digits and '._-+:'", path);
		if ((kind == STR_TOKEN || kind == STR_COMMAND) && (c < 0x20 || c == 0x7f))
			return proto_error(err, errlen, "field '%s' must not contain control characters",
					   path);
		if (kind == STR_ASCII && (c <= 0x20 || c >= 0x7f))
			return proto_error(
			    err, errlen, "field '%s' must contain only printable ASCII characters, no spaces",
			    path);
	}
	memcpy(dst, s, len + 1);
	return 0;
}

static int get_string(json_t *obj, const char *pfx, const char *key, bool required, enum str_kind kind,
		      char *dst, size_t dstlen, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	char path[FIELD_PATH_MAX];

	if (!v || (json_is_null(v) && !required)) {
		if (required)
			return proto_error(err, errlen, "missing field '%s%s'", pfx, key);
		return 0;
	}
	snprintf(path, sizeof(path), "%s%s", pfx, key);
	return check_string(v, path, kind, dst, dstlen, err, errlen);
}

static int get_integer(json_t *obj, const char *pfx, const char *key, bool required, long long min,
		       long long max, long long *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	long long n;

	if (!v || (json_is_null(v) && !required)) {
		if (required)
			return proto_error(err, errlen, "missing field '%s%s'", pfx, key);
		return 0;
	}
	if (!json_is_integer(v))
		return proto_error(err, errlen, "field '%s%s' must be an integer", pfx, key);
	n = json_integer_value(v);
	if (n < min || n > max)
		return proto_error(err, errlen, "field '%s%s' is out of range (%lld, expected %lld to %lld)",
				   pfx, key, n, min, max);
	*out = n;
	return 0;
}

/*
 * A non-negative number. JSON has no NaN or infinity (jansson refuses them on
 * input), so a value that is not finite is sent as null when 'nullable', and
 * read as NAN.
 */
static int get_number(json_t *obj, const char *pfx, const char *key, bool required, bool nullable,
		      double *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	double d;

	if (!v) {
		if (required)
			return proto_error(err, errlen, "missing field '%s%s'", pfx, key);
		return 0;
	}
	if (json_is_null(v) && nullable) {
		*out = NAN;
		return 0;
	}
	if (!json_is_number(v))
		return proto_error(err, errlen, "field '%s%s' must be a number%s", pfx, key,
				   nullable ? " or null" : "");
	d = json_number_value(v);
	if (!isfinite(d) || d < 0)
		return proto_error(err, errlen, "field '%s%s' must be a non-negative number", pfx, key);
	*out = d;
	return 0;
}

static int get_bool(json_t *obj, const char *pfx, const char *key, bool required, bool *out, char *err,
		    size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (!v || (json_is_null(v) && !required)) {
		if (required)
			return proto_error(err, errlen, "missing field '%s%s'", pfx, key);
		return 0;
	}
	if (!json_is_boolean(v))
		return proto_error(err, errlen, "field '%s%s' must be true or false", pfx, key);
	*out = json_is_true(v);
	return 0;
}

/*
 * An array field: returns the array (borrowed) in *out, NULL when absent or
 * null and optional; refuses more than 'max' elements.
 */
static int get_array(json_t *obj, const char *pfx, const char *key, bool required, size_t max, json_t **out,
		     char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	*out = NULL;
	if (!v || (json_is_null(v) && !required)) {
		if (required)
			return proto_error(err, errlen, "missing field '%s%s'", pfx, key);
		return 0;
	}
	if (!json_is_array(v))
		return proto_error(err, errlen, "field '%s%s' must be an array", pfx, key);
	if (json_array_size(v) > max)
		return proto_error(err, errlen, "field '%s%s' has too many elements (%zu, at most %zu)", pfx,
				   key, json_array_size(v), max);
	*out = v;
	return 0;
}

/* An array of distinct names, e.g. a check's dtypes. */
static int get_name_list(json_t *obj, const char *pfx, const char *key, bool required, size_t max,
			 char (*names)[NW_PROTO_NAME_MAX], unsigned *n, char *err, size_t errlen)
{
	char path[FIELD_PATH_MAX];
	json_t *arr, *item;
	size_t i, j;
	int r;

	*n = 0;
	r = get_array(obj, pfx, key, required, max, &arr, err, errlen);
	if (r < 0 || !arr)
		return r;
	json_array_foreach(arr, i, item)
	{
		snprintf(path, sizeof(path), "%s%s[%zu]", pfx, key, i);
		r = check_string(item, path, STR_NAME, names[i], NW_PROTO_NAME_MAX, err, errlen);
		if (r < 0)
			return r;
		for (j = 0; j < i; j++)
			if (strcmp(names[j], names[i]) == 0)
				return proto_error(err, errlen, "field '%s%s' lists '%s' twice", pfx, key,
						   names[i]);
	}
	*n = (unsigned)json_array_size(arr);
	return 0;
}

/* An array of non-negative integers, e.g. a shape. */
static int get_index_list(json_t *obj, const char *pfx, const char *key, size_t max, long *dims, unsigned *n,
			  char *err, size_t errlen)
{
	json_t *arr, *item;
	size_t i;
	int r;

	*n = 0;
	r = get_array(obj, pfx, key, false, max, &arr, err, errlen);
	if (r < 0 || !arr)
		return r;
	json_array_foreach(arr, i, item)
	{
		if (!json_is_integer(item) || json_integer_value(item) < 0 ||
		    json_integer_value(item) > LONG_MAX)
			return proto_error(err, errlen, "field '%s%s[%zu]' must be a non-negative integer",
					   pfx, key, i);
		if (dims)
			dims[i] = (long)json_integer_value(item);
	}
	*n = (unsigned)json_array_size(arr);
	return 0;
}

/* ---- responses ---- */

/* Whether the bare word 'tok' is at line[i], ending at a JSON delimiter. */
static bool token_at(const char *line, size_t len, size_t i, const char *tok)
{
	size_t n = strlen(tok);

	return i + n <= len && memcmp(line + i, tok, n) == 0 &&
	       (i + n == len || (line[i + n] != '\0' && strchr(" \t\r,]}", line[i + n]) != NULL));
}

/*
 * Python's json.dumps() writes NaN, Infinity and -Infinity, which JSON does
 * not have. Copies 'line' to 'out' (room for len + len / 3 + 1 bytes) with
 * each such word outside a string, in a value's place, replaced by null, and
 * describes in 'note' the first one that stood for a "ratio" (the measure a
 * verdict rests on). Returns how many it replaced; *outlen is the new length.
 */
static unsigned rewrite_nonfinite(const char *line, size_t len, char *out, size_t *outlen, char *note,
				  size_t notelen)
{
	static const char *const words[] = {"-Infinity", "Infinity", "NaN"};
	const char *key = NULL, *str = NULL;
	size_t keylen = 0, slen = 0, o = 0;
	char prev = '\0'; /* the last byte outside strings that is not blank */
	unsigned replaced = 0;

	for (size_t i = 0; i < len; i++) {
		char c = line[i];
		const char *w = NULL;

		if (c == '"') {
			size_t j = i + 1;

			while (j < len && line[j] != '"')
				j += line[j] == '\\' ? 2 : 1;
			if (j >= len) {
				/* Not closed: the rest is copied, and the JSON parser will say what is wrong. */
				memcpy(out + o, line + i, len - i);
				o += len - i;
				break;
			}
			str = line + i + 1;
			slen = j - i - 1;
			memcpy(out + o, line + i, j - i + 1);
			o += j - i + 1;
			i = j;
			prev = '"';
			continue;
		}
		if (c == ':' && prev == '"') {
			key = str;
			keylen = slen;
		}
		if (prev == ':' || prev == '[' || prev == ',')
			for (size_t k = 0; k < sizeof(words) / sizeof(words[0]) && !w; k++)
				if (token_at(line, len, i, words[k]))
					w = words[k];
		if (w) {
			if (!note[0] && key && keylen == 5 && memcmp(key, "ratio", 5) == 0)
				snprintf(note, notelen, "'ratio' was %s", w);
			memcpy(out + o, "null", 4);
			o += 4;
			i += strlen(w) - 1;
			prev = 'l';
			replaced++;
			continue;
		}
		out[o++] = c;
		if (c != ' ' && c != '\t' && c != '\r')
			prev = c;
	}
	*outlen = o;
	return replaced;
}

/*
 * Parses one line into an object whose "op" is 'op'. Returns 0 with a new
 * reference in *root, -ENOTSUP for an "unknown op" answer, or -EPROTO.
 * With 'nonfinite' (a trial's answer), the words NaN and Infinity are read as
 * null, and 'nonfinite' says which ratio was one ("" when none was).
 */
static int load_line(const char *line, size_t len, const char *op, json_t **root, char *nonfinite,
		     size_t nflen, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *obj, *v;
	const char *error;
	int r;

	*root = NULL;
	if (!line)
		line = "";
	if (len > NW_PROTO_LINE_MAX)
		return proto_error(err, errlen, "line too long (%zu bytes, at most %d)", len,
				   NW_PROTO_LINE_MAX);
	if (memchr(line, '\0', len))
		return proto_error(err, errlen, "line contains a nul byte");
	obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj) {
		/* The usual mistake of a Python runner: json.dumps() writes NaN and Infinity. */
		bool words = memmem(line, len, "NaN", 3) || memmem(line, len, "Infinity", 8);
		char *fixed = words && nonfinite ? malloc(len + len / 3 + 1) : NULL;
		size_t fixed_len;

		if (fixed && rewrite_nonfinite(line, len, fixed, &fixed_len, nonfinite, nflen) > 0)
			obj = json_loadb(fixed, fixed_len, JSON_REJECT_DUPLICATES, NULL);
		free(fixed);
		if (!obj) {
			if (nonfinite)
				nonfinite[0] = '\0';
			return proto_error(err, errlen, "not json: %s at column %d%s", jerr.text, jerr.column,
					   words ? " (nan and infinity are not json: send null)" : "");
		}
	}
	if (!json_is_object(obj)) {
		r = proto_error(err, errlen, "not a json object");
		goto fail;
	}
	v = json_object_get(obj, "op");
	if (!v) {
		r = proto_error(err, errlen, "missing field 'op'");
		goto fail;
	}
	if (!json_is_string(v)) {
		r = proto_error(err, errlen, "field 'op' must be a string");
		goto fail;
	}
	if (strcmp(json_string_value(v), op) != 0) {
		r = proto_error(err, errlen, "op '%.64s' does not match request '%s'", json_string_value(v),
				op);
		goto fail;
	}
	error = json_string_value(json_object_get(obj, "error"));
	if (error && strcmp(error, "unknown op") == 0 && !json_object_get(obj, "verdict")) {
		if (errlen)
			snprintf(err, errlen, "runner does not know op '%s'", op);
		r = -ENOTSUP;
		goto fail;
	}
	*root = obj;
	return 0;
fail:
	json_decref(obj);
	return r;
}

static int parse_check(json_t *obj, size_t index, struct proto_check *c, char *err, size_t errlen)
{
	char pfx[FIELD_PATH_MAX];
	int r;

	snprintf(pfx, sizeof(pfx), "checks[%zu].", index);
	if (!json_is_object(obj))
		return proto_error(err, errlen, "field 'checks[%zu]' must be an object", index);
	if ((r = get_string(obj, pfx, "check", true, STR_NAME, c->check, sizeof(c->check), err, errlen)) <
		0 ||
	    (r = get_string(obj, pfx, "op", true, STR_NAME, c->op, sizeof(c->op), err, errlen)) < 0 ||
	    (r = get_string(obj, pfx, "pass", true, STR_NAME, c->pass, sizeof(c->pass), err, errlen)) < 0 ||
	    (r = get_name_list(obj, pfx, "dtypes", true, NW_PROTO_DTYPES_MAX, c->dtypes, &c->ndtypes, err,
			       errlen)) < 0 ||
	    (r = get_name_list(obj, pfx, "families", false, NW_PROTO_FAMILIES_MAX, c->families, &c->nfamilies,
			       err, errlen)) < 0 ||
	    (r = get_bool(obj, pfx, "deterministic", true, &c->deterministic, err, errlen)) < 0)
		return r;
	return 0;
}

static int parse_device(json_t *root, struct proto_hello *out, char *err, size_t errlen)
{
	json_t *dev = json_object_get(root, "device");
	char *json;
	size_t len;
	int r;

	strcpy(out->device_json, "{}");
	if (!dev || json_is_null(dev))
		return 0;
	if (!json_is_object(dev))
		return proto_error(err, errlen, "field 'device' must be an object");
	if ((r = get_string(dev, "device.", "backend", false, STR_NAME, out->backend, sizeof(out->backend),
			    err, errlen)) < 0 ||
	    (r = get_string(dev, "device.", "name", false, STR_TEXT, out->device_name,
			    sizeof(out->device_name), err, errlen)) < 0)
		return r;
	/* Stored whole for the health page; cutting JSON would make it invalid, so a huge one is refused. */
	json = encode_compact(dev);
	if (!json)
		return proto_error(err, errlen, "out of memory");
	len = strlen(json);
	if (len >= sizeof(out->device_json)) {
		free(json);
		return proto_error(err, errlen, "field 'device' is too long (%zu bytes encoded, at most %zu)",
				   len, sizeof(out->device_json) - 1);
	}
	memcpy(out->device_json, json, len + 1);
	free(json);
	return 0;
}

/*
 * The hello's "pipeline" (protocol.h): read leniently, since a version-1
 * runner may carry the field from before it had a meaning.
 */
static long long pipeline_of(json_t *root, bool *ignored)
{
	json_t *v = json_object_get(root, "pipeline");
	long long n;

	*ignored = false;
	if (!v || json_is_null(v))
		return 1;
	if (!json_is_integer(v) || (n = json_integer_value(v)) < 1) {
		*ignored = true;
		return 1;
	}
	return n > NW_PROTO_PIPELINE_MAX ? NW_PROTO_PIPELINE_MAX : n;
}

int proto_parse_hello(const char *line, size_t len, struct proto_hello *out, char *err, size_t errlen)
{
	long long protocol = 0, pipeline = 1;
	json_t *root = NULL, *checks, *item;
	size_t i, j;
	int r;

	memset(out, 0, sizeof(*out));
	if (errlen)
		err[0] = '\0';
	r = load_line(line, len, "hello", &root, NULL, 0, err, errlen);
	if (r < 0)
		return r;
	/* A runner that cannot serve at all may say why instead of listing checks. */
	if (json_is_string(json_object_get(root, "error")) && !json_object_get(root, "checks")) {
		r = proto_error(err, errlen, "runner refused hello: '%.200s'",
				json_string_value(json_object_get(root, "error")));
		goto out;
	}
	if ((r = get_integer(root, "", "protocol", true, LLONG_MIN, LLONG_MAX, &protocol, err, errlen)) < 0)
		goto out;
	if (protocol != PROTO_VERSION) {
		r = proto_error(err, errlen, "unsupported protocol version %lld (expected %d)", protocol,
				PROTO_VERSION);
		goto out;
	}
	out->protocol = PROTO_VERSION;
	if ((r = get_string(root, "", "runner", false, STR_TEXT, out->runner, sizeof(out->runner), err,
			    errlen)) < 0 ||
	    (r = parse_device(root, out, err, errlen)) < 0 ||
	    (r = get_string(root, "", "repro", false, STR_COMMAND, out->repro, sizeof(out->repro), err,
			    errlen)) < 0 ||
	    (r = get_array(root, "", "checks", true, NW_PROTO_CHECKS_MAX, &checks, err, errlen)) < 0)
		goto out;
	/* A command without the seed would print one trial for every failing seed. */
	if (out->repro[0] && !strstr(out->repro, "{seed}")) {
		r = proto_error(err, errlen, "field 'repro' must contain '{seed}'");
		goto out;
	}
	if (json_array_size(checks)) {
		out->checks = calloc(json_array_size(checks), sizeof(*out->checks));
		if (!out->checks) {
			r = proto_error(err, errlen, "out of memory");
			goto out;
		}
	}
	json_array_foreach(checks, i, item)
	{
		r = parse_check(item, i, &out->checks[i], err, errlen);
		if (r < 0)
			goto out;
		/* The check name is the key the daemon stores results under. */
		for (j = 0; j < i; j++) {
			if (strcmp(out->checks[j].check, out->checks[i].check) == 0) {
				r = proto_error(err, errlen, "duplicate check '%s' in field 'checks'",
						out->checks[i].check);
				goto out;
			}
		}
		out->nchecks++;
	}
	pipeline = pipeline_of(root, &out->pipeline_ignored);
	out->pipeline = (unsigned)pipeline;
	r = 0;
out:
	json_decref(root);
	if (r < 0)
		proto_hello_release(out);
	return r;
}

static int parse_tensor(json_t *obj, size_t index, struct proto_tensor *t, char *err, size_t errlen)
{
	static const char *const counters[] = {"nonfinite", "ref_nonfinite", "unwritten", "canary",
					       "excluded"};
	long *const fields[] = {&t->nonfinite, &t->ref_nonfinite, &t->unwritten, &t->canary, &t->excluded};
	char pfx[FIELD_PATH_MAX];
	double unused;
	bool flag;
	unsigned n;
	size_t i;
	int r;

	snprintf(pfx, sizeof(pfx), "tensors[%zu].", index);
	if (!json_is_object(obj))
		return proto_error(err, errlen, "field 'tensors[%zu]' must be an object", index);
	if ((r = get_string(obj, pfx, "name", true, STR_TOKEN, t->name, sizeof(t->name), err, errlen)) < 0 ||
	    (r = get_number(obj, pfx, "ratio", true, true, &t->ratio, err, errlen)) < 0)
		return r;
	for (i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		long long v = 0;

		if ((r = get_integer(obj, pfx, counters[i], false, 0, LONG_MAX, &v, err, errlen)) < 0)
			return r;
		*fields[i] = (long)v;
	}
	/*
	 * Not kept in the struct, but stored with the trial (tensors_json):
	 * checked so that what is stored has the documented types.
	 */
	if ((r = get_number(obj, pfx, "max_abs", false, true, &unused, err, errlen)) < 0 ||
	    (r = get_number(obj, pfx, "max_rel", false, true, &unused, err, errlen)) < 0 ||
	    (r = get_number(obj, pfx, "max_ulp", false, true, &unused, err, errlen)) < 0 ||
	    (r = get_index_list(obj, pfx, "worst", NW_PROTO_SHAPE_MAX, NULL, &n, err, errlen)) < 0 ||
	    (r = get_bool(obj, pfx, "tail", false, &flag, err, errlen)) < 0)
		return r;
	return 0;
}

static int parse_case(json_t *root, struct proto_trial *out, char *err, size_t errlen)
{
	json_t *c = json_object_get(root, "case");
	long long gen = -1;
	int r;

	if (!c || json_is_null(c))
		return 0;
	if (!json_is_object(c))
		return proto_error(err, errlen, "field 'case' must be an object");
	if ((r = get_string(c, "case.", "family", false, STR_NAME, out->family, sizeof(out->family), err,
			    errlen)) < 0 ||
	    (r = get_index_list(c, "case.", "shape", NW_PROTO_SHAPE_MAX, out->shape, &out->ndim, err,
				errlen)) < 0 ||
	    (r = get_integer(c, "case.", "gen", false, 0, INT_MAX, &gen, err, errlen)) < 0 ||
	    (r = get_string(c, "case.", "digest", false, STR_ASCII, out->case_digest,
			    sizeof(out->case_digest), err, errlen)) < 0)
		return r;
	out->gen = (int)gen;
	return 0;
}

static int parse_verdict(json_t *root, struct proto_trial *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(root, "verdict");
	const char *s;

	if (!v)
		return proto_error(err, errlen, "missing field 'verdict'");
	if (!json_is_string(v))
		return proto_error(err, errlen, "field 'verdict' must be a string");
	s = json_string_value(v);
	if (strcmp(s, "pass") == 0)
		out->verdict = OUTCOME_PASS;
	else if (strcmp(s, "fail") == 0)
		out->verdict = OUTCOME_FAIL;
	else if (strcmp(s, "error") == 0)
		out->verdict = OUTCOME_ERROR;
	else
		return proto_error(err, errlen,
				   "field 'verdict' must be 'pass', 'fail' or 'error', not '%.64s'", s);
	return 0;
}

int proto_parse_trial_ref(const char *line, size_t len, long expect_id, struct proto_trial *out, char *err,
			  size_t errlen)
{
	long long id = 0, differ = 0;
	json_t *root = NULL, *tensors, *item;
	size_t i;
	int r;

	memset(out, 0, sizeof(*out));
	out->gen = -1;
	out->ratio = NAN;
	out->kernel_us = NAN;
	if (errlen)
		err[0] = '\0';
	r = load_line(line, len, "trial", &root, out->nonfinite, sizeof(out->nonfinite), err, errlen);
	if (r < 0)
		goto out;
	if ((r = get_integer(root, "", "id", true, LLONG_MIN, LLONG_MAX, &id, err, errlen)) < 0)
		goto out;
	if (id != expect_id) {
		r = proto_error(err, errlen, "id %lld does not match request %ld", id, expect_id);
		goto out;
	}
	out->id = (long)id;
	if ((r = parse_verdict(root, out, err, errlen)) < 0 ||
	    (r = get_bool(root, "", "fatal", false, &out->fatal, err, errlen)) < 0)
		goto out;
	if (out->verdict == OUTCOME_ERROR) {
		/* The runner's own words, kept even when long: they are what the user will read. */
		if ((r = get_string(root, "", "error", false, STR_TEXT, out->error, sizeof(out->error), err,
				    errlen)) < 0)
			goto out;
	} else if (out->fatal) {
		r = proto_error(err, errlen, "field 'fatal' is true but verdict is not 'error'");
		goto out;
	}
	/* A pass or a fail is judged by its ratio; an error may have none. */
	if ((r = get_number(root, "", "ratio", out->verdict != OUTCOME_ERROR, true, &out->ratio, err,
			    errlen)) < 0 ||
	    (r = parse_case(root, out, err, errlen)) < 0 ||
	    (r = get_string(root, "", "digest", false, STR_TOKEN, out->digest, sizeof(out->digest), err,
			    errlen)) < 0 ||
	    (r = get_integer(root, "", "digests_differ", false, 0, INT_MAX, &differ, err, errlen)) < 0 ||
	    (r = get_number(root, "", "kernel_us", false, true, &out->kernel_us, err, errlen)) < 0 ||
	    (r = get_array(root, "", "tensors", false, NW_PROTO_TENSORS_MAX, &tensors, err, errlen)) < 0)
		goto out;
	out->digests_differ = (long)differ;
	json_array_foreach(tensors, i, item)
	{
		r = parse_tensor(item, i, &out->tensors[i], err, errlen);
		if (r < 0)
			goto out;
		out->ntensors++;
	}
	out->tensors_json = tensors ? encode_compact(tensors) : strdup("[]");
	if (!out->tensors_json) {
		r = proto_error(err, errlen, "out of memory");
		goto out;
	}
	real_text(out->ratio_text, sizeof(out->ratio_text), out->ratio);
	real_text(out->kernel_us_text, sizeof(out->kernel_us_text), out->kernel_us);
	r = 0;
out:
	json_decref(root);
	if (r < 0) {
		proto_trial_release(out);
		out->gen = -1;
		out->ratio = NAN;
		out->kernel_us = NAN;
	}
	return r;
}

/* ---- the trial answer without jansson ----
 *
 * Every trial's answer is decoded on the daemon's one thread, and jansson
 * (a tree of allocated objects, then the tensors re-encoded through it) was
 * most of the daemon's cost per trial (docs/benchmarks.md, "Daemon ceiling").
 * This decoder takes the common answer without allocating: JSON whose strings
 * are plain printable ASCII without escapes, and fields that pass every rule.
 * Anything else, a line that breaks a rule included, goes to the reference
 * decoder (jansson), which decides and says why: so this one never refuses a
 * line, and what it accepts it decodes exactly as the reference decoder does
 * (tests/unit/test_protocol.c compares the two on mutated answers).
 */

/* Deeper nesting, or more keys in one object, is left to the reference decoder. */
#define FAST_DEPTH_MAX 16
#define FAST_KEYS_MAX  64

/* The span of a member's value in the line; v is NULL where the member is absent. */
struct fast_member {
	const char *v, *vend;
};

/* The members the decoder reads: of the answer, of its case, of each of its tensors. */
enum {
	TOP_OP,
	TOP_ID,
	TOP_VERDICT,
	TOP_FATAL,
	TOP_RATIO,
	TOP_CASE,
	TOP_DIGEST,
	TOP_DIFFER,
	TOP_KERNEL_US,
	TOP_TENSORS,
	TOP_ERROR,
	TOP_KEYS
};
enum { CASE_FAMILY, CASE_SHAPE, CASE_GEN, CASE_DIGEST, CASE_KEYS };
enum {
	TEN_NAME,
	TEN_RATIO,
	TEN_NONFINITE,
	TEN_REF_NONFINITE,
	TEN_UNWRITTEN,
	TEN_CANARY,
	TEN_EXCLUDED,
	TEN_MAX_ABS,
	TEN_MAX_REL,
	TEN_MAX_ULP,
	TEN_WORST,
	TEN_TAIL,
	TEN_KEYS
};

struct fast_keys {
	const char *const *names;
	const unsigned char *lens;
	int n;
};

static const char *const top_names[TOP_KEYS] = {"op",        "id",      "verdict", "fatal",
						"ratio",     "case",    "digest",  "digests_differ",
						"kernel_us", "tensors", "error"};
static const unsigned char top_lens[TOP_KEYS] = {2, 2, 7, 5, 5, 4, 6, 14, 9, 7, 5};
static const char *const case_names[CASE_KEYS] = {"family", "shape", "gen", "digest"};
static const unsigned char case_lens[CASE_KEYS] = {6, 5, 3, 6};
static const char *const tensor_names[TEN_KEYS] = {"name",      "ratio",   "nonfinite", "ref_nonfinite",
						   "unwritten", "canary",  "excluded",  "max_abs",
						   "max_rel",   "max_ulp", "worst",     "tail"};
static const unsigned char tensor_lens[TEN_KEYS] = {4, 5, 9, 13, 9, 6, 8, 7, 7, 7, 5, 4};
static const struct fast_keys top_keys = {top_names, top_lens, TOP_KEYS};
static const struct fast_keys case_keys = {case_names, case_lens, CASE_KEYS};
static const struct fast_keys tensor_keys = {tensor_names, tensor_lens, TEN_KEYS};

/* What the check of the line notes of the members the decoder reads. */
struct fast_spans {
	struct fast_member top[TOP_KEYS], casem[CASE_KEYS];
	struct fast_member tensors[NW_PROTO_TENSORS_MAX][TEN_KEYS];
	unsigned ntensors; /* objects among the elements of the tensors array */
	unsigned nelems;   /* elements of the tensors array */
	bool tensors_plain;
};

/*
 * The line is read once (fast_value() checks it as jansson would, and notes
 * where the members the decoder reads are: the top object's, its case's,
 * each tensor's), then those members are read from their spans, and the
 * tensors, stored as their compact re-encoding, are copied as they are
 * when they are written so already (no blank, every number as it would be
 * written). Before (issue 18) the line was read five times over: 2.0-2.7 ->
 * 0.8 µs for the instant runner's answer, 3.4 -> 1.0 µs for a C runner's
 * two tensors (callgrind: 44 500 -> 16 200 and 75 600 -> 23 600
 * instructions).
 */
enum fast_in { IN_NONE, IN_CASE, IN_TENSORS };

struct fast {
	const char *p, *end;
	struct buf *out;          /* the compact re-encoding, when wanted */
	struct fast_spans *spans; /* where the members read are noted, when wanted */
	enum fast_in in;          /* within the top object's case or tensors value */
	/* Blanks skipped, and numbers not written as the re-encoding would (counted while 'canon'). */
	unsigned irregular;
	bool canon;
};

struct fast_num {
	bool is_int;
	long long i;
	double d;
};

/*
 * The scanners below read through local pointers, not f->p: a char read may
 * alias the struct, so a loop on f->p stores and loads it again at every byte.
 */
static inline bool fast_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static inline void fast_ws(struct fast *f)
{
	const char *p = f->p, *end = f->end;

	if (p >= end || !fast_blank(*p))
		return;
	while (p < end && fast_blank(*p))
		p++;
	f->p = p;
	f->irregular++;
}

static bool fast_lit(struct fast *f, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(f->end - f->p) < n || memcmp(f->p, lit, n) != 0)
		return false;
	f->p += n;
	return true;
}

/* A string of printable ASCII without escapes: its bytes are [*s, *s + *n). */
static bool fast_string(struct fast *f, const char **s, size_t *n)
{
	const char *p = f->p, *end = f->end, *start;

	if (p >= end || *p != '"')
		return false;
	start = ++p;
	/* Eight bytes at a time while eight are left: the first byte that is not plain ends the run. */
	p = scan8_skip(p, end, '"', '\\', 0x7f);
	for (; p < end; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '"') {
			*s = start;
			*n = (size_t)(p - start);
			f->p = p + 1;
			return true;
		}
		if (c < 0x20 || c > 0x7e || c == '\\')
			return false;
	}
	return false;
}

/*
 * A JSON number (RFC 8259's grammar), read as jansson reads it: an integer
 * unless it has a fraction or an exponent; an integer that does not fit, or
 * a real that overflows, is jansson's to refuse. With 'need_value' false
 * (only checking), a number that plainly fits is not converted.
 */
static bool fast_number(struct fast *f, struct fast_num *num, bool need_value)
{
	const char *p = f->p, *end = f->end, *start = p, *int_start;
	size_t int_len;
	long exp = 0;
	bool exp_neg = false;
	char tmp[48];
	size_t len;
	/* The significant digits as an integer (while they are 15 at most), how many, and those after the point. */
	uint64_t mant = 0;
	int sig = 0, frac = 0;

	num->is_int = true;
	if (p < end && *p == '-')
		p++;
	int_start = p;
	if (p < end && *p == '0')
		p++;
	else if (p < end && *p >= '1' && *p <= '9')
		for (; p < end && *p >= '0' && *p <= '9'; p++) {
			if (sig < 16)
				mant = mant * 10 + (uint64_t)(*p - '0');
			sig++;
		}
	else
		return false;
	int_len = (size_t)(p - int_start);
	if (p < end && *p == '.') {
		num->is_int = false;
		p++;
		if (p >= end || *p < '0' || *p > '9')
			return false;
		for (; p < end && *p >= '0' && *p <= '9'; p++) {
			if (sig == 0 && *p == '0') {
				frac++; /* a leading zero: no significant digit yet */
				continue;
			}
			if (sig < 16)
				mant = mant * 10 + (uint64_t)(*p - '0');
			sig++;
			frac++;
		}
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		num->is_int = false;
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			exp_neg = *p++ == '-';
		if (p >= end || *p < '0' || *p > '9')
			return false;
		while (p < end && *p >= '0' && *p <= '9') {
			if (exp < 100000)
				exp = exp * 10 + (*p - '0');
			p++;
		}
	}
	f->p = p;
	/* Below 10^301 a real is finite; 18 digits fit a long long. */
	if (!need_value && (num->is_int ? int_len <= 18 : (long)int_len + (exp_neg ? -exp : exp) <= 300))
		return true;
	if (num->is_int && int_len <= 18) {
		long long v = 0;

		for (const char *c = int_start; c < int_start + int_len; c++)
			v = v * 10 + (*c - '0');
		num->i = *start == '-' ? -v : v;
		num->d = (double)num->i;
		return true;
	}
	/*
	 * A real of at most 15 significant digits times a power of ten up to
	 * 10^22: both exact doubles, so one multiplication or division rounds
	 * as strtod() does (Clinger's fast path).
	 */
	if (!num->is_int && sig <= 15) {
		static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
					     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
					     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
		long e10 = (exp_neg ? -exp : exp) - frac;

		if (e10 >= -22 && e10 <= 22) {
			double d = (double)mant;

			d = e10 < 0 ? d / p10[-e10] : d * p10[e10];
			num->d = *start == '-' ? -d : d;
			return true;
		}
	}
	len = (size_t)(p - start);
	if (len >= sizeof(tmp))
		return false;
	memcpy(tmp, start, len);
	tmp[len] = '\0';
	errno = 0;
	if (num->is_int) {
		num->i = strtoll(tmp, NULL, 10);
		num->d = (double)num->i;
		return errno == 0; /* jansson refuses an integer that does not fit */
	}
	num->d = strtod(tmp, NULL);
	return !isinf(num->d); /* jansson refuses an overflow, takes an underflow */
}

/*
 * Whether the number token [s, end) is already what dump_value() writes for
 * it, so that it is copied as it is: an integer of at most 18 digits but
 * "-0", or a real that "%.15g" writes the same: at most 15 significant
 * digits (which a double in its normal range keeps), no trailing zero in its
 * fraction, and in fixed notation when its first significant digit is from
 * 10^-4 to 10^14, else as one digit, the fraction, 'e', the exponent's sign
 * and at least two digits ("1.17549e-38", "1e+20").
 */
static bool fast_canonical(const char *s, const char *end)
{
	const char *c = s, *dot = NULL, *e = NULL, *first;

	if (c < end && *c == '-')
		c++;
	for (const char *d = c; d < end && !e; d++) {
		if (*d == '.')
			dot = d;
		else if (*d == 'e')
			e = d;
		else if (*d == 'E')
			return false;
	}
	if (e) {
		const char *x = e + 1, *m = e;
		int v = 0, exp10;

		/* One digit, not 0, then the fraction without a trailing zero. */
		if (*c < '1' || *c > '9' || (m - c > 1 && (c[1] != '.' || m[-1] == '0' || m - c == 2)))
			return false;
		if (m - c - (m - c > 1) > 15)
			return false;
		if (x >= end || (*x != '+' && *x != '-'))
			return false;
		x++;
		/* Two digits at least, a third only when needed (printf's "e-05", "e+100"). */
		if (end - x < 2 || end - x > 3 || (end - x == 3 && *x == '0'))
			return false;
		for (const char *d = x; d < end; d++)
			v = v * 10 + (*d - '0');
		exp10 = x[-1] == '-' ? -v : v;
		return (exp10 < -4 || exp10 >= 15) && exp10 >= -307 && exp10 <= 307;
	}
	if (!dot)
		return end - c <= 18 && !(*s == '-' && *c == '0');
	if (end[-1] == '0' || dot + 1 == end)
		return false;
	for (first = c; first < end && (*first == '0' || *first == '.'); first++)
		;
	if (first == end)
		return false; /* 0.0 is written "0.0", but -0.0 "-0.0": left to the formatter */
	/* Significant digits from the first non-zero one to the last (end[-1]), the point not counted. */
	if ((end - first) - (first < dot) > 15)
		return false;
	{
		int exp10 = first < dot ? (int)(dot - first) - 1 : -(int)(first - dot);

		return exp10 >= -4 && exp10 < 15;
	}
}

static void fast_put_string(struct fast *f, const char *s, size_t n)
{
	/* Plain printable ASCII without '"' or '\': what jansson writes for it is the same bytes, quoted. */
	buf_add(f->out, "\"", 1);
	buf_add(f->out, s, n);
	buf_add(f->out, "\"", 1);
}

/* The index of the key [s, s + n) among 'k', or -1. */
static int fast_key(const struct fast_keys *k, const char *s, size_t n)
{
	for (int i = 0; i < k->n; i++)
		if (k->lens[i] == n && k->names[i][0] == s[0] && memcmp(k->names[i], s, n) == 0)
			return i;
	return -1;
}

/*
 * Any JSON value: checked as jansson would (duplicate keys refused),
 * re-encoded as dump_value() would, the members read noted (f->spans).
 */
static bool fast_value(struct fast *f, int depth)
{
	struct fast_num num;
	const char *s;
	size_t n;

	if (depth > FAST_DEPTH_MAX || f->p >= f->end)
		return false;
	switch (*f->p) {
	case '{': {
		const char *keys[FAST_KEYS_MAX];
		size_t lens[FAST_KEYS_MAX];
		unsigned nkeys = 0;
		const struct fast_keys *known = NULL;
		struct fast_member *slots = NULL;
		unsigned seen = 0; /* the known keys read */

		if (f->spans && depth == 0) {
			known = &top_keys;
			slots = f->spans->top;
		} else if (f->spans && depth == 1 && f->in == IN_CASE) {
			known = &case_keys;
			slots = f->spans->casem;
		} else if (f->spans && depth == 2 && f->in == IN_TENSORS) {
			/* An element of the tensors array. */
			if (f->spans->ntensors == NW_PROTO_TENSORS_MAX)
				return false;
			known = &tensor_keys;
			slots = f->spans->tensors[f->spans->ntensors++];
			memset(slots, 0, TEN_KEYS * sizeof(*slots));
		}
		f->p++;
		if (f->out)
			buf_add(f->out, "{", 1);
		fast_ws(f);
		if (f->p < f->end && *f->p == '}') {
			f->p++;
			if (f->out)
				buf_add(f->out, "}", 1);
			return true;
		}
		for (bool first = true;; first = false) {
			int k;

			fast_ws(f);
			if (!fast_string(f, &s, &n))
				return false;
			/* Duplicate keys refused: a key read twice by its bit, any other against the others. */
			k = known ? fast_key(known, s, n) : -1;
			if (k >= 0) {
				if (seen & 1u << k)
					return false;
				seen |= 1u << k;
			} else {
				if (nkeys == FAST_KEYS_MAX)
					return false;
				for (unsigned i = 0; i < nkeys; i++)
					if (lens[i] == n && keys[i][0] == s[0] && memcmp(keys[i], s, n) == 0)
						return false;
				keys[nkeys] = s;
				lens[nkeys++] = n;
			}
			if (f->out) {
				if (!first)
					buf_add(f->out, ",", 1);
				fast_put_string(f, s, n);
				buf_add(f->out, ":", 1);
			}
			fast_ws(f);
			if (f->p >= f->end || *f->p++ != ':')
				return false;
			fast_ws(f);
			if (k < 0) {
				if (!fast_value(f, depth + 1))
					return false;
			} else {
				const char *v = f->p;
				unsigned irregular = f->irregular;

				if (depth == 0 && k == TOP_CASE && v < f->end && *v == '{')
					f->in = IN_CASE;
				/* Only the tensors are stored as their re-encoding: only their numbers are looked at. */
				if (depth == 0 && k == TOP_TENSORS) {
					f->canon = true;
					if (v < f->end && *v == '[')
						f->in = IN_TENSORS;
				}
				if (!fast_value(f, depth + 1))
					return false;
				slots[k] = (struct fast_member){v, f->p};
				if (depth == 0 && k == TOP_TENSORS)
					f->spans->tensors_plain = f->irregular == irregular;
				if (depth == 0) {
					f->in = IN_NONE;
					f->canon = false;
				}
			}
			fast_ws(f);
			if (f->p < f->end && *f->p == ',') {
				f->p++;
				continue;
			}
			if (f->p < f->end && *f->p == '}') {
				f->p++;
				if (f->out)
					buf_add(f->out, "}", 1);
				return true;
			}
			return false;
		}
	}
	case '[':
		f->p++;
		if (f->out)
			buf_add(f->out, "[", 1);
		fast_ws(f);
		if (f->p < f->end && *f->p == ']') {
			f->p++;
			if (f->out)
				buf_add(f->out, "]", 1);
			return true;
		}
		for (bool first = true;; first = false) {
			fast_ws(f);
			if (f->out && !first)
				buf_add(f->out, ",", 1);
			if (depth == 1 && f->in == IN_TENSORS)
				f->spans->nelems++;
			if (!fast_value(f, depth + 1))
				return false;
			fast_ws(f);
			if (f->p < f->end && *f->p == ',') {
				f->p++;
				continue;
			}
			if (f->p < f->end && *f->p == ']') {
				f->p++;
				if (f->out)
					buf_add(f->out, "]", 1);
				return true;
			}
			return false;
		}
	case '"':
		if (!fast_string(f, &s, &n))
			return false;
		if (f->out)
			fast_put_string(f, s, n);
		return true;
	case 't':
		if (!fast_lit(f, "true"))
			return false;
		if (f->out)
			buf_adds(f->out, "true");
		return true;
	case 'f':
		if (!fast_lit(f, "false"))
			return false;
		if (f->out)
			buf_adds(f->out, "false");
		return true;
	case 'n':
		if (!fast_lit(f, "null"))
			return false;
		if (f->out)
			buf_adds(f->out, "null");
		return true;
	default:
		s = f->p;
		if (!fast_number(f, &num, false))
			return false;
		if (!f->out) {
			if (f->canon && !fast_canonical(s, f->p))
				f->irregular++;
			return true;
		}
		if (fast_canonical(s, f->p)) {
			buf_add(f->out, s, (size_t)(f->p - s));
			return true;
		}
		{
			struct fast g = {.p = s, .end = f->p};

			if (!fast_number(&g, &num, true))
				return false;
		}
		if (num.is_int) {
			char tmp[32];

			snprintf(tmp, sizeof(tmp), "%lld", num.i);
			buf_adds(f->out, tmp);
		} else {
			buf_add_real(f->out, num.d);
		}
		return true;
	}
}

/* The member 'i' of 'spans', or NULL where it is absent. */
#define fast_get(spans, i) ((spans)[i].v ? &(spans)[i] : NULL)

static bool fast_is_null(const struct fast_member *m)
{
	return m->vend - m->v == 4 && memcmp(m->v, "null", 4) == 0;
}

/* A member that is a whole number (as the value it was checked to be). */
static bool fast_num_of(const struct fast_member *m, struct fast_num *num)
{
	struct fast f = {.p = m->v, .end = m->vend};

	return fast_number(&f, num, true) && f.p == f.end;
}

/* get_integer(): absent or null when optional leaves *out; else an integer in [min, max]. */
static bool fast_get_integer(const struct fast_member *m, long long min, long long max, long long *out)
{
	struct fast_num num;

	if (!m || fast_is_null(m))
		return true;
	if (!fast_num_of(m, &num) || !num.is_int || num.i < min || num.i > max)
		return false;
	*out = num.i;
	return true;
}

/* get_number(): absent leaves *out, null is NAN; else a finite number, 0 or more. */
static bool fast_get_number(const struct fast_member *m, double *out)
{
	struct fast_num num;

	if (!m)
		return true;
	if (fast_is_null(m)) {
		if (out)
			*out = NAN;
		return true;
	}
	/* Only checked (out NULL): a number without a sign is finite and 0 or more already. */
	if (!out && *m->v != '-') {
		struct fast f = {.p = m->v, .end = m->vend};

		return fast_number(&f, &num, false) && f.p == f.end;
	}
	if (!fast_num_of(m, &num) || !isfinite(num.d) || num.d < 0)
		return false;
	if (out)
		*out = num.d;
	return true;
}

/*
 * real_text() of the number 'm' read as 'v': its own text when that is what
 * "%.15g" writes for it (a real fast_canonical() takes, an integer of at most
 * 15 digits), without formatting; else formatted.
 */
static void fast_real_text(const struct fast_member *m, double v, char *dst, size_t len)
{
	size_t n = m ? (size_t)(m->vend - m->v) : 0;

	if (m && isfinite(v) && n < len && fast_canonical(m->v, m->vend) &&
	    (n <= 15 || memchr(m->v, '.', n) || memchr(m->v, 'e', n))) {
		memcpy(dst, m->v, n);
		dst[n] = '\0';
		return;
	}
	real_text(dst, len, v);
}

/* get_bool(): absent or null leaves *out. */
static bool fast_get_bool(const struct fast_member *m, bool *out)
{
	if (!m || fast_is_null(m))
		return true;
	if (m->vend - m->v == 4 && memcmp(m->v, "true", 4) == 0)
		*out = true;
	else if (m->vend - m->v == 5 && memcmp(m->v, "false", 5) == 0)
		*out = false;
	else
		return false;
	return true;
}

/* get_string(): absent or null when optional leaves dst; else a string of the kind, copied. */
static bool fast_get_string(const struct fast_member *m, bool required, enum str_kind kind, char *dst,
			    size_t dstlen)
{
	struct fast f;
	const char *s;
	size_t n;

	if (!m)
		return !required;
	if (fast_is_null(m))
		return !required;
	f = (struct fast){.p = m->v, .end = m->vend};
	if (!fast_string(&f, &s, &n) || n == 0 || n >= dstlen)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		/* Control characters cannot be here (fast_string); a token takes any other byte. */
		if ((kind == STR_NAME && !name_char_ok(c)) || (kind == STR_ASCII && c == ' ') ||
		    (kind != STR_NAME && kind != STR_TOKEN && kind != STR_ASCII))
			return false;
	}
	memcpy(dst, s, n);
	dst[n] = '\0';
	return true;
}

/* get_index_list(): absent or null is none; else at most 'max' integers, 0 or more. */
static bool fast_get_index_list(const struct fast_member *m, size_t max, long *dims, unsigned *n)
{
	struct fast f;
	unsigned count = 0;

	*n = 0;
	if (!m || fast_is_null(m))
		return true;
	f = (struct fast){.p = m->v, .end = m->vend};
	if (*f.p++ != '[')
		return false;
	fast_ws(&f);
	if (*f.p == ']')
		return true;
	for (;;) {
		struct fast_num num;

		fast_ws(&f);
		if (count == max || !fast_number(&f, &num, true) || !num.is_int || num.i < 0)
			return false;
		if (dims)
			dims[count] = (long)num.i;
		count++;
		fast_ws(&f);
		if (*f.p == ']')
			break;
		f.p++; /* ',' */
	}
	*n = count;
	return true;
}

/* A tensor, from its members' spans (TEN_*). */
static bool fast_tensor(const struct fast_member *m, struct proto_tensor *t)
{
	long *const fields[] = {&t->nonfinite, &t->ref_nonfinite, &t->unwritten, &t->canary, &t->excluded};
	const struct fast_member *ratio = fast_get(m, TEN_RATIO);
	unsigned dims;
	bool flag;

	if (!fast_get_string(fast_get(m, TEN_NAME), true, STR_TOKEN, t->name, sizeof(t->name)))
		return false;
	if (!ratio || !fast_get_number(ratio, &t->ratio))
		return false;
	for (int i = 0; i < 5; i++) {
		long long v = 0;

		if (!fast_get_integer(fast_get(m, TEN_NONFINITE + i), 0, LONG_MAX, &v))
			return false;
		*fields[i] = (long)v;
	}
	return fast_get_number(fast_get(m, TEN_MAX_ABS), NULL) &&
	       fast_get_number(fast_get(m, TEN_MAX_REL), NULL) &&
	       fast_get_number(fast_get(m, TEN_MAX_ULP), NULL) &&
	       fast_get_index_list(fast_get(m, TEN_WORST), NW_PROTO_SHAPE_MAX, NULL, &dims) &&
	       fast_get_bool(fast_get(m, TEN_TAIL), &flag);
}

int proto_parse_trial_fast(const char *line, size_t len, long expect_id, struct proto_trial *out)
{
	struct fast_spans sp;
	struct fast f = {.p = line, .end = line + len, .spans = &sp};
	const struct fast_member *v, *m = sp.top, *cm = sp.casem;
	struct fast_num num;
	struct buf enc = {0};
	long long gen = -1, differ = 0;
	bool fatal = false;

	if (len > NW_PROTO_LINE_MAX)
		return 0;
	memset(sp.top, 0, sizeof(sp.top));
	memset(sp.casem, 0, sizeof(sp.casem));
	sp.ntensors = sp.nelems = 0;
	sp.tensors_plain = false;
	fast_ws(&f);
	if (f.p >= f.end || *f.p != '{')
		return 0;
	/* Checked whole, the members read noted on the way. */
	if (!fast_value(&f, 0))
		return 0;
	fast_ws(&f);
	if (f.p != f.end)
		return 0;
	/* An "error" member (an error answer, "unknown op") is the reference decoder's. */
	if (fast_get(m, TOP_ERROR))
		return 0;
	v = fast_get(m, TOP_OP);
	if (!v || v->vend - v->v != 7 || memcmp(v->v, "\"trial\"", 7) != 0)
		return 0;
	v = fast_get(m, TOP_ID);
	if (!v || !fast_num_of(v, &num) || !num.is_int || num.i != expect_id)
		return 0;
	memset(out, 0, sizeof(*out));
	out->gen = -1;
	out->ratio = NAN;
	out->kernel_us = NAN;
	out->id = (long)num.i;
	v = fast_get(m, TOP_VERDICT);
	if (v && v->vend - v->v == 6 && memcmp(v->v, "\"pass\"", 6) == 0)
		out->verdict = OUTCOME_PASS;
	else if (v && v->vend - v->v == 6 && memcmp(v->v, "\"fail\"", 6) == 0)
		out->verdict = OUTCOME_FAIL;
	else
		return 0;
	if (!fast_get_bool(fast_get(m, TOP_FATAL), &fatal) || fatal)
		return 0;
	v = fast_get(m, TOP_RATIO);
	if (!v || !fast_get_number(v, &out->ratio))
		return 0;
	fast_real_text(v, out->ratio, out->ratio_text, sizeof(out->ratio_text));
	v = fast_get(m, TOP_CASE);
	if (v && !fast_is_null(v)) {
		if (*v->v != '{' ||
		    !fast_get_string(fast_get(cm, CASE_FAMILY), false, STR_NAME, out->family,
				     sizeof(out->family)) ||
		    !fast_get_index_list(fast_get(cm, CASE_SHAPE), NW_PROTO_SHAPE_MAX, out->shape,
					 &out->ndim) ||
		    !fast_get_integer(fast_get(cm, CASE_GEN), 0, INT_MAX, &gen) ||
		    !fast_get_string(fast_get(cm, CASE_DIGEST), false, STR_ASCII, out->case_digest,
				     sizeof(out->case_digest)))
			return 0;
		out->gen = (int)gen;
	}
	if (!fast_get_string(fast_get(m, TOP_DIGEST), false, STR_TOKEN, out->digest, sizeof(out->digest)) ||
	    !fast_get_integer(fast_get(m, TOP_DIFFER), 0, INT_MAX, &differ) ||
	    !fast_get_number(fast_get(m, TOP_KERNEL_US), &out->kernel_us))
		return 0;
	fast_real_text(fast_get(m, TOP_KERNEL_US), out->kernel_us, out->kernel_us_text,
		       sizeof(out->kernel_us_text));
	out->digests_differ = (long)differ;
	v = fast_get(m, TOP_TENSORS);
	if (!v || fast_is_null(v)) {
		out->tensors_json = strdup("[]");
		return out->tensors_json ? 1 : 0;
	}
	/* An array whose elements are all tensors (objects). */
	if (*v->v != '[' || sp.nelems != sp.ntensors)
		return 0;
	for (unsigned i = 0; i < sp.ntensors; i++) {
		if (!fast_tensor(sp.tensors[i], &out->tensors[i]))
			return 0;
		out->ntensors++;
	}
	/* The whole array, as it is stored: its own text when that is its re-encoding. */
	enc.data = malloc((size_t)(v->vend - v->v) + 64);
	enc.cap = enc.data ? (size_t)(v->vend - v->v) + 64 : 0;
	if (!enc.data)
		return 0;
	if (sp.tensors_plain) {
		memcpy(enc.data, v->v, (size_t)(v->vend - v->v));
		enc.data[v->vend - v->v] = '\0';
	} else {
		f = (struct fast){.p = v->v, .end = v->vend, .out = &enc};
		if (!fast_value(&f, 0) || enc.oom) {
			free(enc.data);
			return 0;
		}
	}
	out->tensors_json = enc.data;
	return 1;
}

int proto_parse_trial(const char *line, size_t len, long expect_id, struct proto_trial *out, char *err,
		      size_t errlen)
{
	if (line && proto_parse_trial_fast(line, len, expect_id, out)) {
		if (errlen)
			err[0] = '\0';
		return 0;
	}
	return proto_parse_trial_ref(line, len, expect_id, out, err, errlen);
}

int proto_parse_bye(const char *line, size_t len, char *err, size_t errlen)
{
	json_t *root = NULL;
	int r;

	if (errlen)
		err[0] = '\0';
	r = load_line(line, len, "bye", &root, NULL, 0, err, errlen);
	json_decref(root);
	return r;
}

void proto_hello_release(struct proto_hello *h)
{
	free(h->checks);
	memset(h, 0, sizeof(*h));
}

void proto_trial_release(struct proto_trial *t)
{
	free(t->tensors_json);
	memset(t, 0, sizeof(*t));
}
