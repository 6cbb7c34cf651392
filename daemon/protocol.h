/*
 * protocol: encoder and decoder for runner protocol v1 (docs/protocol.md).
 *
 * Pure module (jansson only): it turns requests into lines and response lines
 * into validated structs. It never trusts a line: every field is type-checked
 * and every string and array is bounded by the caps in caps.h. A line that
 * fails validation is a protocol error; the caller kills the runner.
 */
#ifndef NW_PROTOCOL_H
#define NW_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>

#include "caps.h"
#include "outcome.h"

#define PROTO_VERSION 1

struct proto_check {
	char check[NW_PROTO_NAME_MAX]; /* "softmax.fwd" */
	char op[NW_PROTO_NAME_MAX];    /* "softmax" */
	char pass[NW_PROTO_NAME_MAX];  /* "fwd" / "bwd" */
	char dtypes[NW_PROTO_DTYPES_MAX][NW_PROTO_NAME_MAX];
	unsigned ndtypes;
	char families[NW_PROTO_FAMILIES_MAX][NW_PROTO_NAME_MAX];
	unsigned nfamilies;
	bool deterministic;
};

struct proto_hello {
	int protocol;
	char runner[NW_PROTO_TEXT_MAX];  /* free text, may be empty */
	char backend[NW_PROTO_NAME_MAX]; /* "cuda" or "host" */
	char device_name[NW_PROTO_TEXT_MAX];
	char device_json[NW_PROTO_TEXT_MAX]; /* the "device" object re-encoded compactly, "{}" if absent */
	/*
	 * The runner's command line for one trial, with {check}, {dtype}, {seed}
	 * and {runs} placeholders; "" when it declares none.
	 */
	char repro[NW_PROTO_TEXT_MAX];
	/*
	 * Trial requests the runner takes outstanding (its "pipeline"): it reads
	 * them as lines from a stream and answers them in order. 1 when it
	 * declares none: one request at a time, as every version-1 runner.
	 * Before the field had a meaning it was an unknown field, ignored: a value
	 * that is not an integer of 1 or more is read as 1 (pipeline_ignored set,
	 * for a warning), and one above NW_PROTO_PIPELINE_MAX as the maximum.
	 */
	unsigned pipeline;
	bool pipeline_ignored;
	struct proto_check *checks; /* owned; freed by proto_hello_release() */
	unsigned nchecks;
};

struct proto_tensor {
	char name[NW_PROTO_NAME_MAX];
	double ratio;
	long nonfinite, ref_nonfinite, unwritten, canary, excluded;
};

/* Room for a double written by "%.17g" ("-1.2345678901234567e-308"). */
#define NW_PROTO_REAL_TEXT 32

/* A decoded trial answer. verdict is OUTCOME_PASS, OUTCOME_FAIL or OUTCOME_ERROR. */
struct proto_trial {
	long id;
	enum outcome verdict;
	bool fatal;                     /* only with OUTCOME_ERROR */
	char error[NW_PROTO_TEXT_MAX];  /* only with OUTCOME_ERROR */
	char family[NW_PROTO_NAME_MAX]; /* "" when the runner gave no case */
	/*
	 * case.digest: a hash of the inputs the runner generated for the seed
	 * (printable ASCII, no spaces), "" when absent (a runner older than it).
	 */
	char case_digest[NW_PROTO_NAME_MAX];
	long shape[NW_PROTO_SHAPE_MAX];
	unsigned ndim;
	int gen;      /* generator version, -1 if absent */
	double ratio; /* NAN if absent (error answers) */
	struct proto_tensor tensors[NW_PROTO_TENSORS_MAX];
	unsigned ntensors;
	char digest[NW_PROTO_NAME_MAX];
	long digests_differ;
	double kernel_us;   /* NAN if absent */
	char *tensors_json; /* owned: the "tensors" array re-encoded compactly, for storage */
	/*
	 * "'ratio' was NaN" where a ratio came as the word NaN, Infinity or
	 * -Infinity (Python's json.dumps writes them; they are not JSON): read
	 * as null like every such word, but the trial cannot have passed. "" if none.
	 */
	char nonfinite[32];
	/*
	 * ratio and kernel_us as text that reads back as the same double (the
	 * shortest "%.15g" to "%.17g" that does, as the runner wrote it when
	 * that is so), "" when not finite: what the store writes, without
	 * formatting a double at every trial.
	 */
	char ratio_text[NW_PROTO_REAL_TEXT];
	char kernel_us_text[NW_PROTO_REAL_TEXT];
};

/*
 * Requests. Each returns a malloc'd, '\n'-terminated line (caller frees), or
 * NULL when out of memory. 'family' may be NULL (the runner picks by seed).
 */
char *proto_hello_request(void);
char *proto_trial_request(long id, const char *check, const char *dtype, unsigned long long seed,
			  unsigned repeats, const char *family);
char *proto_bye_request(void);
/*
 * proto_trial_request()'s line for a request without a family, written into
 * 'buf' without allocating (a slot sends one every trial): its length, or 0
 * when it does not fit in 'len' bytes or a name needs quoting, and then
 * proto_trial_request() writes it.
 */
size_t proto_trial_request_buf(char *buf, size_t len, long id, const char *check, const char *dtype,
			       unsigned long long seed, unsigned repeats);
/* Room for proto_trial_request_buf()'s line with a job's check and dtype (jobs.h). */
#define NW_PROTO_REQUEST_MAX 256

/*
 * Whether a line the runner wrote can be a protocol message: its first
 * character that is not blank is '{'. Anything else (a library's banner, a
 * debug print) is output that strayed onto stdout, not an answer.
 */
bool proto_line_is_message(const char *line, size_t len);

/*
 * Copies 'len' bytes of runner output (a stderr tail, a stray line) into
 * 'dst', cut to fit, as text fit for the log and a text column: bytes that
 * are not valid UTF-8, NUL and control characters become '?', except a
 * newline or tab where 'lines'. Returns dst.
 */
char *proto_clean_text(char *dst, size_t dstlen, const char *src, size_t len, bool lines);

/*
 * Responses. 'line' need not be NUL-terminated; 'len' excludes the '\n'.
 * Each returns 0 on success, or -EPROTO with a lowercase message in 'err'
 * saying what is wrong ("missing field 'checks'", "id 18 does not match
 * request 17", "not json: ..."). An "error":"unknown op" answer to the
 * request is reported as -ENOTSUP.
 */
int proto_parse_hello(const char *line, size_t len, struct proto_hello *out, char *err, size_t errlen);
int proto_parse_trial(const char *line, size_t len, long expect_id, struct proto_trial *out, char *err,
		      size_t errlen);
int proto_parse_bye(const char *line, size_t len, char *err, size_t errlen);
/*
 * The reference decoder of trial answers (jansson): proto_parse_trial leaves
 * to it every line its own decoder does not take (anything unusual, and every
 * line it must refuse), and decodes the others exactly as this one would.
 * Exposed, with proto_parse_trial's own decoder, for the test that compares
 * the two.
 */
int proto_parse_trial_ref(const char *line, size_t len, long expect_id, struct proto_trial *out, char *err,
			  size_t errlen);
/*
 * proto_parse_trial's own decoder (no allocation but the tensors' encoding):
 * 1 when it decoded the line ('out' filled, as the reference decoder would),
 * 0 when it leaves the line to the reference decoder ('out' holds nothing to
 * release).
 */
int proto_parse_trial_fast(const char *line, size_t len, long expect_id, struct proto_trial *out);

/*
 * Length of the valid UTF-8 sequence at 's' (as PostgreSQL and jansson judge
 * it: no overlong forms, no surrogates, nothing past U+10FFFF), or 0 when the
 * bytes there are not one. Reads at most as far as the first byte announces,
 * stopping at a NUL (which is never a continuation byte).
 */
size_t proto_utf8_len(const unsigned char *s);

void proto_hello_release(struct proto_hello *h);
void proto_trial_release(struct proto_trial *t);

#endif
