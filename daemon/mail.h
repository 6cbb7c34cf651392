/*
 * mail: what numwatch's emails say and how they are written. Pure module: no
 * libuv, libpq or libcurl, so that every byte of a message is unit tested
 * (tests/unit/test_mail.c). The service that gathers the facts, queues the
 * mail in PostgreSQL and sends it is mailer.c.
 *
 * A bisection's mails form one thread: the culprit mail is its root, and the
 * follow-ups (the culprit was withdrawn; the check is clean again) answer it
 * with In-Reply-To and References. Message-IDs are derived from the bisection
 * and the kind of mail only, so that composing a mail again (after a restart,
 * or on another daemon) gives the same one.
 *
 * Text that comes from outside (commit titles and author names, trial error
 * texts) is cleaned before it goes into a message: invalid UTF-8 and control
 * characters are replaced, and each field is cut to a cap below.
 */
#ifndef NW_MAIL_H
#define NW_MAIL_H

#include <stdbool.h>
#include <stddef.h>

#include "caps.h"

enum mail_kind { MAIL_CULPRIT, MAIL_WITHDRAWN, MAIL_FIXED };

/* The name stored in mail.kind: "culprit", "withdrawn", "fixed". */
const char *mail_kind_name(enum mail_kind kind);
/* Parses a mail.kind; returns 0 or -EINVAL. */
int mail_kind_parse(const char *name, enum mail_kind *out);

/* A commit as a mail names it. All strings borrowed; NULL where unknown. */
struct mail_commit {
	const char *sha; /* 40 hex digits */
	const char *title;
	const char *author;
	const char *email;
};

/*
 * What a culprit mail says. Strings are borrowed; a NULL string or a NAN
 * number is left out of the mail.
 */
struct mail_culprit {
	long long bisection_id;
	const char *public_url; /* base of the dashboard links, without a trailing '/' */
	const char *repo;       /* repository name */
	const char *check;
	const char *dtype;
	struct mail_commit culprit;
	struct mail_commit good;   /* the last clean commit */
	double confidence;         /* posterior probability of the culprit, 0 to 1 */
	const char *failing_seeds; /* "3, 11, 19" */
	/* The worst failing trial stored at the culprit; when has_trial is false, 'seed' is a failing seed. */
	bool has_trial;
	bool has_seed;
	unsigned long long seed;
	const char *outcome; /* fail, crash, timeout, error */
	const char *family;
	const char *shape;  /* "[2, 1003]" */
	double ratio;       /* error over the tolerance budget (fails above 1) */
	const char *tensor; /* the worst output tensor */
	double max_abs;
	double max_rel;
	long long nonfinite; /* non-finite values where the reference is finite */
	const char *error;   /* the trial's error text (crash, timeout) */
	/* What the bisection learnt: its failing seeds' judgement ("seed_bound", "race", "unsure"; NULL: none). */
	const char *seeds;
	double rate; /* the share of fresh seeds failing at the culprit (NAN: unknown) */
	/* The other checks the same commit broke, one per line ("check dtype (bisection N)"); NULL: none. */
	const char *also;
	/*
	 * How to run the trial with the culprit's runner alone: the runner's own
	 * command line from its hello ({check}, {dtype}, {seed}, {runs}; NULL when
	 * it declares none), else 'runner', the runner's path inside the build
	 * directory (NULL: neither line is written).
	 */
	const char *repro_template;
	const char *runner;
};

/*
 * The runs of one seed a repro needs to see a failure that shows on a share
 * 'rate' of runs, at 99%: 1 where it shows every time (rate >= 0.99) or the
 * rate is unknown, at most NW_REPRO_RUNS_MAIL_MAX.
 */
unsigned mail_repro_runs(double rate);

/*
 * The command that runs one trial with a build's runner (as the SQL function
 * repro_command() of sql/030 writes it for the API): 'template' with its
 * placeholders filled in, or, when 'template' is NULL or empty,
 * "./RUNNER --check C --dtype D --seed S". Returns a malloc'd string, or NULL
 * when out of memory.
 */
char *mail_repro_command(const char *template, const char *runner, const char *check, const char *dtype,
			 unsigned long long seed, unsigned runs);

/* What a follow-up says. Strings are borrowed. */
struct mail_followup {
	enum mail_kind kind; /* MAIL_WITHDRAWN or MAIL_FIXED */
	long long bisection_id;
	const char *public_url;
	const char *repo;
	const char *check;
	const char *dtype;
	const char *root_subject;   /* the culprit mail's subject (unencoded) */
	struct mail_commit culprit; /* may be all NULL for a withdrawn culprit */
	struct mail_commit fixed;   /* MAIL_FIXED: the first clean commit after the culprit */
	/* MAIL_FIXED: the culprit's other check x dtype the same commit fixed, one a line; NULL: none. */
	const char *also_fixed;
};

/* A composed mail: UTF-8 subject and body ('\n' line ends). Owned; free with mail_text_release(). */
struct mail_text {
	char *subject;
	char *body;
};

/* Composes the culprit mail. Returns 0, -ENOMEM, or -EINVAL when a required field is missing. */
int mail_compose_culprit(const struct mail_culprit *c, struct mail_text *out);
/* Composes a follow-up: subject "Re: " + the root's subject. Same returns. */
int mail_compose_followup(const struct mail_followup *f, struct mail_text *out);
void mail_text_release(struct mail_text *t);

/*
 * A mail's Message-ID, "<numwatch.bisect-12.culprit@example.org>": stable for
 * one bisection and kind, so a mail composed twice is one mail. 'domain' is
 * the From address's domain. Returns 0, or -ENOSPC when 'len' is too small.
 */
int mail_message_id(char *buf, size_t len, long long bisection_id, enum mail_kind kind, const char *domain);

/*
 * Whether 'addr' is an address numwatch sends to: a plain ASCII
 * local@domain, at most MAIL_ADDRESS_MAX bytes, with nothing that could end
 * a header or an SMTP command (no spaces, controls, quotes, <>, commas).
 */
bool mail_address_ok(const char *addr);
/* The domain of an address (after its last '@'); borrowed from 'addr'. */
const char *mail_address_domain(const char *addr);

/*
 * Parses a From value, "addr" or "Display Name <addr>" (a printable ASCII
 * name without '"', '\\', '<' or '>', at most MAIL_NAME_MAX bytes). Writes
 * the address to 'addr' and, when 'name' is not NULL, the name ("" when
 * none). Returns 0 or -EINVAL.
 */
int mail_parse_from(const char *from, char *addr, size_t addrlen, char *name, size_t namelen);

/* A recipient list: unique addresses, compared without case. */
struct mail_rcpts {
	char addr[MAIL_RECIPIENTS_MAX][MAIL_ADDRESS_MAX + 1];
	size_t n;
};

/* Adds one address. Returns 1 when added, 0 when already listed, -EINVAL when not an address, -ENOSPC when full. */
int mail_rcpts_add(struct mail_rcpts *r, const char *addr);
/*
 * Adds a comma-separated list (spaces around entries ignored; an empty list
 * adds nothing). Stops at the first bad entry and returns -EINVAL (its text,
 * cut, in 'bad' when not NULL) or -ENOSPC; 0 on success.
 */
int mail_rcpts_add_list(struct mail_rcpts *r, const char *list, char *bad, size_t badlen);

/* A message to format. Strings are borrowed. */
struct mail_message {
	const char *from;        /* From value as configured: "addr" or "Name <addr>" */
	const char *const *to;   /* recipients (addresses) */
	size_t nto;              /* 0: "undisclosed-recipients:;" */
	long long date;          /* seconds since the epoch (the mail's creation, so retries keep it) */
	const char *subject;     /* UTF-8; RFC 2047-encoded when it is not plain ASCII */
	const char *message_id;  /* with angle brackets */
	const char *in_reply_to; /* the thread root's Message-ID, NULL for the root itself */
	const char *body;        /* UTF-8, '\n' line ends */
	long long bisection_id;  /* X-Numwatch-Bisection, for filters */
	const char *kind;        /* X-Numwatch-Kind: culprit, withdrawn, fixed (NULL: none) */
};

/*
 * Writes an RFC 5322 message: headers (folded under 78 columns where they
 * can be), a blank line and the body, every line ending in CRLF, none longer
 * than 998 bytes. Dot-stuffing is the SMTP client's business (libcurl does
 * it). On success *out is a NUL-terminated buffer the caller frees and
 * *outlen its length. Returns 0, -EINVAL (bad From), -ENOMEM, or -E2BIG past
 * MAIL_MESSAGE_MAX.
 */
int mail_format(const struct mail_message *m, char **out, size_t *outlen);

/*
 * Writes one mbox entry for a formatted message ("mboxrd"): a "From SENDER
 * DATE" line in asctime() form (UTC), the message with LF line ends and every
 * line matching /^>*From / given one more '>', and an empty line after it.
 * 'sender' is the envelope sender's address. Returns 0, -ENOMEM or -E2BIG;
 * the caller frees *out.
 */
int mail_mbox_entry(const char *sender, long long date, const char *msg, size_t len, char **out,
		    size_t *outlen);

/* Formats 't' for a Date header, in UTC: "Thu, 05 Mar 2026 12:00:00 +0000". */
void mail_date(long long t, char buf[MAIL_DATE_MAX]);

/*
 * The rate limit: at most 'limit' mails in any 'window' seconds. 'sent' holds
 * the send times of recent mails, newest first (at least the 'limit' newest,
 * or all of them). Returns how many seconds to wait before the next mail may
 * go: 0 when it may go now. A 'limit' of 0 means no limit.
 */
double mail_rate_wait(const double *sent, size_t n, unsigned limit, double window, double now);

/*
 * Seconds to wait before the next attempt after 'attempts' failed ones:
 * 'first' after the first failure, doubling, at most 'max'.
 */
unsigned mail_backoff_s(unsigned attempts, unsigned first, unsigned max);

#endif
