/* mailer: queues culprit mail in PostgreSQL and sends it, off the loop, over SMTP or into an mbox file. */
#include "mailer.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "db.h"
#include "io.h"
#include "log.h"
#include "mail.h"
#include "nwd.h"
#include "queries.h"

/* The rate limit's window: [mail] rate_limit is per hour. */
#define RATE_WINDOW_S 3600
/* Bisections one sweep enqueues mail for; the rest wait for the next sweep. */
#define SWEEP_BATCH 100
/* A claimed mail is this daemon's for its send deadline plus this margin; then anyone may retry it. */
#define LEASE_MARGIN_S 60
/* SMTP connection deadline, when [mail] timeout is longer. */
#define CONNECT_TIMEOUT_S 30
/* Stored last_error text. */
#define ERROR_MAX 512
/* Waiting for the mbox file's lock, between tries. */
#define MBOX_LOCK_WAIT_NS (50 * 1000 * 1000L)

struct mailer {
	struct nwd *d;
	uv_timer_t timer;
	bool busy; /* a step (queries, then maybe a send) is under way: one at a time */
	bool draining, stopped;
	bool rate_logged; /* the rate limit's wait was logged (once per wait) */
	uint64_t next_sweep_ms;
};

/* One mail on its way: everything the worker thread needs, copied (a reload may free the config). */
struct send_job {
	uv_work_t req;
	struct mailer *m;
	long long id;
	long long bisection_id;
	char kind[16];
	unsigned attempts;
	bool smtp;
	char *url, *username, *password, *mbox;
	long use_ssl;
	long timeout_s;
	char sender[MAIL_ADDRESS_MAX + 1];
	struct curl_slist *rcpt;
	char to_text[512]; /* for the log line */
	char *data;        /* the formatted message (SMTP) or the mbox entry */
	size_t len, off;
	/* Written by the worker. */
	int rc;
	char error[ERROR_MAX];
};

static void step(struct mailer *m);

/*
 * The queries. Every one is parameterised; the types of parameters used in
 * a SELECT list are cast, since nothing else tells PostgreSQL what they are.
 */

/*
 * Bisections whose mail should be queued and is not ($1: repository, $2: at
 * most this many; $3: whether open regressions get bisections by themselves).
 * A culprit commit gets one mail, whatever number of checks it broke: the
 * bisection of its first check by name (then dtype) has it, listing the
 * others (culprit_sql), sent once no other
 * regression that may yet be blamed on the same commit (bisecting, or open
 * and about to be, its range holding it) is still being looked at, or after
 * six hours of waiting for one.
 */
#define sweep_sql nwq_mail_sweep /* sql/queries/mail_sweep.sql */

/*
 * The culprit mail's facts ($1: bisection): the check, both commits, and the
 * worst failing trial stored at the culprit (a confirmed failing seed first,
 * then a failure over a crash or a timeout, then the highest ratio; a null
 * ratio with a failure is a non-finite output, the worst there is) with its
 * worst tensor; and what the bisection learnt of the failure: whether its
 * failing seeds are seed-bound, and how often it shows at the culprit.
 */
#define culprit_sql nwq_mail_culprit /* sql/queries/mail_culprit.sql */

/* A follow-up's facts ($1: bisection): the thread's first mail, its recipients and the culprit. */
#define withdrawn_sql nwq_mail_withdrawn /* sql/queries/mail_withdrawn.sql */

/* The same, and the commit that is clean again ($2). */
#define fixed_sql nwq_mail_fixed /* sql/queries/mail_fixed.sql */

/*
 * Queues one mail; a second insert of the same (bisection, kind) or
 * Message-ID, or of a second culprit mail for one culprit commit
 * (mail_one_per_culprit), does nothing. Every daemon sweeps, and two sweeps
 * may compose the same mail at once: the unique indexes keep one, and the
 * claim (FOR UPDATE SKIP LOCKED, then a lease through next_try) sends it once.
 */
#define insert_sql nwq_mail_insert /* sql/queries/mail_insert.sql */

/*
 * The withdrawn follow-up. A culprit mail never tried is cancelled instead
 * (with any follow-up queued behind it): nobody has read it, so there is
 * nothing to take back. One statement, so that a claim by another daemon
 * (which sets attempts) and the cancel cannot both happen.
 */
#define withdrawn_insert_sql nwq_mail_withdrawn_insert /* sql/queries/mail_withdrawn_insert.sql */

/*
 * Whether any of the repository's mail is due (the claim's conditions, less
 * the lock), and the send times of its newest mails within the window ($1:
 * how many, $2: repository, $3: window).
 */
#define rate_sql nwq_mail_rate /* sql/queries/mail_rate.sql */

/*
 * Claims the oldest due mail ($1: repository, $2: lease in seconds). A
 * follow-up is due only once its thread's first mail has been sent, so that
 * a thread always reads in order.
 */
#define claim_sql nwq_mail_claim /* sql/queries/mail_claim.sql */

static const char sent_sql[] =
    "UPDATE mail SET state = 'sent', sent_at = now(), last_error = NULL WHERE id = $1";
static const char retry_sql[] = "UPDATE mail SET last_error = $2, next_try = now() + $3 * interval '1 second'"
				" WHERE id = $1 AND state = 'pending'";
static const char give_up_sql[] = "UPDATE mail SET state = 'failed', last_error = $2 WHERE id = $1";
/* On drain: a claimed mail that was not sent goes back as it was. */
static const char release_sql[] = "UPDATE mail SET attempts = greatest(attempts - 1, 0), next_try = now()"
				  " WHERE id = $1 AND state = 'pending'";

/*
 * Enqueueing.
 */

struct enqueue {
	struct nwd *d;
	enum mail_kind kind;
	long long bisection_id;
	long long fixing_commit_id;
};

static const char *col(PGresult *res, int c)
{
	return db_get(res, 0, c);
}

static double col_double(PGresult *res, int c)
{
	const char *v = col(res, c);

	return v ? strtod(v, NULL) : NAN;
}

/* The recipients of a culprit mail, '\n'-separated: the author (when configured and usable), then [mail] to. */
static int culprit_recipients(const struct config *cfg, const char *author_email, long long bisection_id,
			      char **out)
{
	struct mail_rcpts *r = calloc(1, sizeof(*r));
	size_t len = 0;
	char *s;

	if (!r)
		return -ENOMEM;
	if (cfg->mail_send_to_author && author_email && mail_rcpts_add(r, author_email) < 0)
		log_info(
		    "mail bisect-%lld.culprit: the author's address '%.100s' is not usable; not a recipient",
		    bisection_id, author_email);
	/* Checked when the configuration was loaded. */
	mail_rcpts_add_list(r, cfg->mail_to, NULL, 0);
	for (size_t i = 0; i < r->n; i++)
		len += strlen(r->addr[i]) + 1;
	s = malloc(len + 1);
	if (!s) {
		free(r);
		return -ENOMEM;
	}
	s[0] = '\0';
	for (size_t i = 0, n = 0; i < r->n; i++) {
		n += (size_t)sprintf(s + n, "%s%s", i ? "\n" : "", r->addr[i]);
	}
	free(r);
	*out = s;
	return 0;
}

static void on_inserted(PGresult *res, const char *error, void *data)
{
	struct enqueue *e = data;
	const char *kind = mail_kind_name(e->kind);

	if (error) {
		log_warn("mail bisect-%lld.%s: cannot queue: %s", e->bisection_id, kind, error);
	} else if (db_get_ll(res, 0, 0, 0) > 0) {
		log_info("mail bisect-%lld.%s: not sent, the culprit was withdrawn before its mail was tried",
			 e->bisection_id, mail_kind_name(MAIL_CULPRIT));
	} else if (db_get_ll(res, 0, 1, 0) > 0) {
		log_info("mail bisect-%lld.%s: queued", e->bisection_id, kind);
	} else {
		log_debug("mail bisect-%lld.%s: already queued", e->bisection_id, kind);
	}
	free(e);
}

static void insert(struct enqueue *e, const char *recipients, const char *thread_root,
		   const struct mail_text *t)
{
	const struct config *cfg = &e->d->cfg;
	char addr[MAIL_ADDRESS_MAX + 1], message_id[MAIL_MESSAGE_ID_MAX + 1], id[24], fix[24];
	const char *params[8] = {
	    mail_kind_name(e->kind), id, message_id, NULL, recipients, t->subject, t->body, fix};
	int rc;

	snprintf(id, sizeof(id), "%lld", e->bisection_id);
	/* A fixed mail is one per culprit and fixing commit (sql/060); 0 for the other kinds. */
	snprintf(fix, sizeof(fix), "%lld", e->kind == MAIL_FIXED ? e->fixing_commit_id : 0);
	if (mail_parse_from(cfg->mail_from, addr, sizeof(addr), NULL, 0) < 0 ||
	    mail_message_id(message_id, sizeof(message_id), e->bisection_id, e->kind,
			    mail_address_domain(addr)) < 0) {
		log_error("mail bisect-%lld.%s: bad From address '%s'", e->bisection_id, params[0],
			  cfg->mail_from);
		free(e);
		return;
	}
	params[3] = thread_root ? thread_root : message_id;
	rc = e->kind == MAIL_WITHDRAWN ? db_query(e->d->db, withdrawn_insert_sql, 7, params, on_inserted, e)
				       : db_query(e->d->db, insert_sql, 8, params, on_inserted, e);
	if (rc < 0) {
		log_warn("mail bisect-%lld.%s: cannot queue: %s", e->bisection_id, params[0], strerror(-rc));
		free(e);
	}
}

static void gathered_culprit(struct enqueue *e, PGresult *res)
{
	struct mail_culprit c = {0};
	struct mail_text t;
	char *recipients = NULL;
	const char *seed_text;
	int rc;

	c.bisection_id = e->bisection_id;
	c.public_url = e->d->cfg.public_url;
	c.check = col(res, 0);
	c.dtype = col(res, 1);
	c.confidence = col_double(res, 2);
	c.failing_seeds = col(res, 3);
	c.culprit = (struct mail_commit){col(res, 4), col(res, 5), col(res, 6), col(res, 7)};
	c.good = (struct mail_commit){col(res, 8), col(res, 9), col(res, 10), col(res, 11)};
	c.repo = col(res, 12);
	c.has_trial = col(res, 13) != NULL;
	seed_text = c.has_trial ? col(res, 13) : col(res, 23);
	if (seed_text) {
		c.has_seed = true;
		c.seed = strtoull(seed_text, NULL, 10);
	}
	c.outcome = col(res, 14);
	c.family = col(res, 15);
	c.shape = col(res, 16);
	c.ratio = col_double(res, 17);
	c.error = col(res, 18);
	c.tensor = col(res, 19);
	c.max_abs = col_double(res, 20);
	c.max_rel = col_double(res, 21);
	c.nonfinite = isnan(col_double(res, 22)) ? 0 : (long long)col_double(res, 22);
	c.seeds = col(res, 24);
	c.rate = col_double(res, 25);
	c.also = col(res, 26);
	/* The culprit commit's mail is its first check's bisection's, whichever asked. */
	e->bisection_id = db_get_ll(res, 0, 27, e->bisection_id);
	c.bisection_id = e->bisection_id;
	c.repro_template = col(res, 28);
	c.runner = col(res, 29);

	rc = mail_compose_culprit(&c, &t);
	if (rc == 0)
		rc = culprit_recipients(&e->d->cfg, c.culprit.email, e->bisection_id, &recipients);
	if (rc < 0) {
		log_error("mail bisect-%lld.culprit: cannot compose: %s", e->bisection_id, strerror(-rc));
		mail_text_release(&t);
		free(e);
		return;
	}
	insert(e, recipients, NULL, &t);
	free(recipients);
	mail_text_release(&t);
}

static void gathered_followup(struct enqueue *e, PGresult *res)
{
	struct mail_followup f = {0};
	struct mail_text t;
	int rc;

	f.kind = e->kind;
	f.bisection_id = e->bisection_id;
	f.public_url = e->d->cfg.public_url;
	f.check = col(res, 0);
	f.dtype = col(res, 1);
	f.repo = col(res, 2);
	f.culprit = (struct mail_commit){col(res, 3), col(res, 4), col(res, 5), col(res, 6)};
	f.root_subject = col(res, 8);
	if (e->kind == MAIL_FIXED) {
		f.fixed = (struct mail_commit){col(res, 10), col(res, 11), col(res, 12), col(res, 13)};
		f.also_fixed = col(res, 14);
	}
	rc = mail_compose_followup(&f, &t);
	if (rc < 0) {
		log_error("mail bisect-%lld.%s: cannot compose: %s", e->bisection_id, mail_kind_name(e->kind),
			  strerror(-rc));
		free(e);
		return;
	}
	/* The thread's recipients stay those of its first mail. */
	insert(e, col(res, 9) ? col(res, 9) : "", col(res, 7), &t);
	mail_text_release(&t);
}

static void on_gathered(PGresult *res, const char *error, void *data)
{
	struct enqueue *e = data;

	if (error) {
		log_warn("mail bisect-%lld.%s: cannot read the bisection: %s", e->bisection_id,
			 mail_kind_name(e->kind), error);
		free(e);
		return;
	}
	if (PQntuples(res) == 0) {
		/* Not (or no longer) in the state the mail is about, or muted. */
		log_debug("mail bisect-%lld.%s: nothing to send", e->bisection_id, mail_kind_name(e->kind));
		free(e);
		return;
	}
	if (e->kind == MAIL_CULPRIT)
		gathered_culprit(e, res);
	else
		gathered_followup(e, res);
}

static int enqueue(struct nwd *d, enum mail_kind kind, long long bisection_id, long long fixing_commit_id)
{
	struct enqueue *e = calloc(1, sizeof(*e));
	char id[24], fix[24];
	const char *params[2] = {id, fix};
	const char *sql = kind == MAIL_CULPRIT     ? culprit_sql
			  : kind == MAIL_WITHDRAWN ? withdrawn_sql
						   : fixed_sql;
	int rc;

	if (!e)
		return -ENOMEM;
	e->d = d;
	e->kind = kind;
	e->bisection_id = bisection_id;
	e->fixing_commit_id = fixing_commit_id;
	snprintf(id, sizeof(id), "%lld", bisection_id);
	snprintf(fix, sizeof(fix), "%lld", fixing_commit_id);
	rc = db_query(d->db, sql, kind == MAIL_FIXED ? 2 : 1, params, on_gathered, e);
	if (rc < 0)
		free(e);
	return rc;
}

int mailer_enqueue_culprit(struct nwd *d, long long bisection_id)
{
	return enqueue(d, MAIL_CULPRIT, bisection_id, 0);
}

int mailer_enqueue_withdrawn(struct nwd *d, long long bisection_id)
{
	return enqueue(d, MAIL_WITHDRAWN, bisection_id, 0);
}

int mailer_enqueue_fixed(struct nwd *d, long long bisection_id, long long fixing_commit_id)
{
	return enqueue(d, MAIL_FIXED, bisection_id, fixing_commit_id);
}

/*
 * Sending, on the thread pool: nothing here touches the loop, the database or
 * the configuration.
 */

static size_t read_message(char *buf, size_t size, size_t nitems, void *data)
{
	struct send_job *j = data;
	size_t n = j->len - j->off;

	if (n > size * nitems)
		n = size * nitems;
	memcpy(buf, j->data + j->off, n);
	j->off += n;
	return n;
}

static void send_smtp(struct send_job *j)
{
	char errbuf[CURL_ERROR_SIZE] = "", from[MAIL_ADDRESS_MAX + 3];
	CURL *c = curl_easy_init();
	CURLcode rc;
	long code = 0;

	if (!c) {
		j->rc = -ENOMEM;
		snprintf(j->error, sizeof(j->error), "cannot start a libcurl session");
		return;
	}
	snprintf(from, sizeof(from), "<%s>", j->sender);
	curl_easy_setopt(c, CURLOPT_URL, j->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
#else
	curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_SMTP | CURLPROTO_SMTPS));
#endif
	curl_easy_setopt(c, CURLOPT_MAIL_FROM, from);
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT, j->rcpt);
	/* An author's address the server refuses must not hold back the mail to the others. */
#if LIBCURL_VERSION_NUM >= 0x080200
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT_ALLOWFAILS, 1L);
#else
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT_ALLLOWFAILS, 1L);
#endif
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, read_message);
	curl_easy_setopt(c, CURLOPT_READDATA, j);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)j->len);
	curl_easy_setopt(c, CURLOPT_USE_SSL, j->use_ssl);
	if (j->username && *j->username) {
		curl_easy_setopt(c, CURLOPT_USERNAME, j->username);
		curl_easy_setopt(c, CURLOPT_PASSWORD, j->password ? j->password : "");
	}
	curl_easy_setopt(c, CURLOPT_TIMEOUT, j->timeout_s);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT,
			 j->timeout_s < CONNECT_TIMEOUT_S ? j->timeout_s : CONNECT_TIMEOUT_S);
	/* Signals belong to the loop thread; libcurl must not use SIGALRM for its deadlines. */
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		const char *what = errbuf[0] ? errbuf : curl_easy_strerror(rc);

		j->rc = -EIO;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (code)
			snprintf(j->error, sizeof(j->error), "%s (last reply %ld)", what, code);
		else
			snprintf(j->error, sizeof(j->error), "%s", what);
	}
	curl_easy_cleanup(c);
}

/*
 * Appends the entry to the mbox file under flock() (mutt and other readers
 * lock it too). An entry must start on a line of its own after an empty
 * line, whatever the file ended with; a write that fails half-way is cut off
 * again, so the file never ends in half a message.
 */
static void append_mbox(struct send_job *j)
{
	const struct timespec pause = {0, MBOX_LOCK_WAIT_NS};
	struct timespec start, now;
	const char *sep = "";
	struct stat st;
	char tail[2];
	int fd, rc;

	/* Read-write: the end of the file is read to see how the last entry ended. */
	fd = open(j->mbox, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0) {
		j->rc = -errno;
		snprintf(j->error, sizeof(j->error), "cannot open '%s': %s", j->mbox, strerror(errno));
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR) {
			j->rc = -errno;
			snprintf(j->error, sizeof(j->error), "cannot lock '%s': %s", j->mbox,
				 strerror(errno));
			goto out;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= j->timeout_s) {
			j->rc = -ETIMEDOUT;
			snprintf(j->error, sizeof(j->error),
				 "cannot lock '%s': held by another process for %ld s", j->mbox,
				 j->timeout_s);
			goto out;
		}
		nanosleep(&pause, NULL);
	}
	if (fstat(fd, &st) < 0) {
		j->rc = -errno;
		snprintf(j->error, sizeof(j->error), "cannot stat '%s': %s", j->mbox, strerror(errno));
		goto out;
	}
	if (st.st_size == 1)
		sep = pread(fd, tail, 1, 0) == 1 && tail[0] == '\n' ? "\n" : "\n\n";
	else if (st.st_size >= 2 && pread(fd, tail, 2, st.st_size - 2) == 2)
		sep = tail[1] != '\n' ? "\n\n" : tail[0] != '\n' ? "\n" : "";
	else if (st.st_size >= 2)
		sep = "\n\n";
	rc = io_write_full(fd, sep, strlen(sep));
	if (rc == 0)
		rc = io_write_full(fd, j->data, j->len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (rc < 0) {
		j->rc = rc;
		snprintf(j->error, sizeof(j->error), "cannot write '%s': %s%s", j->mbox, strerror(-rc),
			 ftruncate(fd, st.st_size) < 0 ? " (and cannot cut the partial entry off again)"
						       : "");
	}
out:
	close(fd); /* releases the lock */
}

static void work(uv_work_t *req)
{
	struct send_job *j = req->data;

	if (j->smtp)
		send_smtp(j);
	else
		append_mbox(j);
}

/*
 * The service, on the loop thread.
 */

static void job_free(struct send_job *j)
{
	if (!j)
		return;
	if (j->password)
		explicit_bzero(j->password, strlen(j->password));
	free(j->password);
	free(j->url);
	free(j->username);
	free(j->mbox);
	free(j->data);
	curl_slist_free_all(j->rcpt);
	free(j);
}

static void on_timer(uv_timer_t *t)
{
	step(t->data);
}

static void stop(struct mailer *m)
{
	if (m->stopped)
		return;
	m->stopped = true;
	log_info("mail: stopped");
	nwd_service_stopped(m->d);
}

/* The step is over: wait 'ms' for the next one (or stop, when draining). */
static void idle(struct mailer *m, uint64_t ms)
{
	m->busy = false;
	if (m->draining) {
		stop(m);
		return;
	}
	uv_timer_start(&m->timer, on_timer, ms, 0);
}

static void on_marked(PGresult *res, const char *error, void *data)
{
	struct send_job *j = data;

	if (error)
		log_warn("mail bisect-%lld.%s: cannot store the result of the send: %s", j->bisection_id,
			 j->kind, error);
	idle(j->m, 0); /* more may be due */
	job_free(j);
}

static void after_work(uv_work_t *req, int status)
{
	struct send_job *j = req->data;
	struct mailer *m = j->m;
	char id[24], delay[24];
	const char *params[3] = {id, j->error, delay};
	unsigned wait;

	snprintf(id, sizeof(id), "%lld", j->id);
	if (status < 0 && !j->rc) {
		j->rc = status;
		snprintf(j->error, sizeof(j->error), "not sent: %s", uv_strerror(status));
	}
	if (j->rc == 0) {
		if (j->smtp)
			log_info("mail bisect-%lld.%s: sent to %s", j->bisection_id, j->kind, j->to_text);
		else
			log_info("mail bisect-%lld.%s: written to '%s' (no smtp_url)", j->bisection_id,
				 j->kind, j->mbox);
		if (db_query(m->d->db, sent_sql, 1, params, on_marked, j) < 0)
			on_marked(NULL, "out of memory", j);
		return;
	}
	wait = mail_backoff_s(j->attempts, m->d->cfg.mail_retry_s, MAILER_RETRY_MAX_S);
	snprintf(delay, sizeof(delay), "%u", wait);
	log_warn("mail bisect-%lld.%s: attempt %u failed: %s; next try in %u s", j->bisection_id, j->kind,
		 j->attempts, j->error, wait);
	if (db_query(m->d->db, retry_sql, 3, params, on_marked, j) < 0)
		on_marked(NULL, "out of memory", j);
}

static void on_given_up(PGresult *res, const char *error, void *data)
{
	idle(data, 0);
}

static void on_released(PGresult *res, const char *error, void *data)
{
	idle(data, MAILER_POLL_MS);
}

/*
 * Prepares the claimed mail (row 0 of 'res') for the worker. Returns 0 with
 * *out set, -ENOMEM (try again later), or -EINVAL when the mail can never go
 * (the reason in 'why').
 */
static int prepare(struct mailer *m, PGresult *res, struct send_job **out, char *why, size_t whylen)
{
	const struct config *cfg = &m->d->cfg;
	struct send_job *j = calloc(1, sizeof(*j));
	struct mail_rcpts *r = calloc(1, sizeof(*r));
	const char *to[MAIL_RECIPIENTS_MAX];
	const char *rtext = col(res, 5) ? col(res, 5) : "";
	struct mail_message msg = {0};
	enum mail_kind kind = MAIL_CULPRIT;
	char *formatted = NULL;
	size_t len = 0, n = 0;
	int rc;

	why[0] = '\0';
	if (!j || !r)
		goto oom;
	j->m = m;
	j->req.data = j;
	j->id = db_get_ll(res, 0, 0, 0);
	snprintf(j->kind, sizeof(j->kind), "%s", col(res, 1) ? col(res, 1) : "?");
	mail_kind_parse(j->kind, &kind);
	j->bisection_id = db_get_ll(res, 0, 2, 0);
	j->attempts = (unsigned)db_get_ll(res, 0, 9, 1);
	/* Recipients were checked when the mail was queued; checked again, since they go into commands. */
	for (const char *s = rtext; *s;) {
		const char *nl = strchr(s, '\n');
		size_t l = nl ? (size_t)(nl - s) : strlen(s);
		char one[MAIL_ADDRESS_MAX + 1];

		if (l && l <= MAIL_ADDRESS_MAX) {
			memcpy(one, s, l);
			one[l] = '\0';
			mail_rcpts_add(r, one);
		}
		s += l + (nl ? 1 : 0);
	}
	for (size_t i = 0; i < r->n; i++) {
		struct curl_slist *t;
		char bracketed[MAIL_ADDRESS_MAX + 3];

		to[i] = r->addr[i];
		snprintf(bracketed, sizeof(bracketed), "<%s>", r->addr[i]);
		t = curl_slist_append(j->rcpt, bracketed);
		if (!t)
			goto oom;
		j->rcpt = t;
		if (n < sizeof(j->to_text))
			n += (size_t)snprintf(j->to_text + n, sizeof(j->to_text) - n, "%s%s", i ? ", " : "",
					      r->addr[i]);
	}
	if (mail_parse_from(cfg->mail_from, j->sender, sizeof(j->sender), NULL, 0) < 0) {
		snprintf(why, whylen, "bad From address '%s'", cfg->mail_from);
		goto fail;
	}
	msg.from = cfg->mail_from;
	msg.to = to;
	msg.nto = r->n;
	msg.date = db_get_ll(res, 0, 8, (long long)time(NULL));
	msg.subject = col(res, 6);
	msg.message_id = col(res, 3);
	msg.in_reply_to = kind == MAIL_CULPRIT ? NULL : col(res, 4);
	msg.body = col(res, 7);
	msg.bisection_id = j->bisection_id;
	msg.kind = mail_kind_name(kind);
	rc = mail_format(&msg, &formatted, &len);
	if (rc < 0) {
		snprintf(why, whylen, "cannot format the message: %s", strerror(-rc));
		goto fail;
	}
	j->smtp = cfg->mail_smtp_url && cfg->mail_smtp_url[0];
	j->timeout_s = (long)cfg->mail_timeout_s;
	if (j->smtp) {
		if (r->n == 0) {
			snprintf(why, whylen,
				 "no recipients (send_to_author is off, or the author's address is "
				 "unusable, and [mail] to is empty)");
			free(formatted);
			goto fail;
		}
		j->data = formatted;
		j->len = len;
		j->url = strdup(cfg->mail_smtp_url);
		j->username = strdup(cfg->mail_username ? cfg->mail_username : "");
		j->password = strdup(cfg->mail_password ? cfg->mail_password : "");
		j->use_ssl = strcmp(cfg->mail_starttls, "yes") == 0   ? (long)CURLUSESSL_ALL
			     : strcmp(cfg->mail_starttls, "try") == 0 ? (long)CURLUSESSL_TRY
								      : (long)CURLUSESSL_NONE;
		if (!j->url || !j->username || !j->password)
			goto oom;
	} else {
		rc = mail_mbox_entry(j->sender, msg.date, formatted, len, &j->data, &j->len);
		free(formatted);
		if (rc < 0) {
			snprintf(why, whylen, "cannot write the mbox entry: %s", strerror(-rc));
			goto fail;
		}
		j->mbox = strdup(cfg->mail_mbox);
		if (!j->mbox)
			goto oom;
	}
	free(r);
	*out = j;
	return 0;
oom:
	snprintf(why, whylen, "out of memory");
	free(r);
	job_free(j);
	return -ENOMEM;
fail:
	free(r);
	job_free(j);
	return -EINVAL;
}

static void on_claimed(PGresult *res, const char *error, void *data)
{
	struct mailer *m = data;
	struct send_job *j;
	char why[256], id[24];
	const char *params[2] = {id, why};
	int rc;

	if (error) {
		log_warn("mail: cannot claim a mail: %s", error);
		idle(m, MAILER_POLL_MS);
		return;
	}
	if (PQntuples(res) == 0) {
		idle(m, MAILER_POLL_MS);
		return;
	}
	snprintf(id, sizeof(id), "%s", col(res, 0));
	if (m->draining) {
		if (db_query(m->d->db, release_sql, 1, params, on_released, m) < 0)
			idle(m, 0);
		return;
	}
	rc = prepare(m, res, &j, why, sizeof(why));
	if (rc == -ENOMEM) {
		log_warn("mail bisect-%s.%s: out of memory; trying again later",
			 col(res, 2) ? col(res, 2) : "?", col(res, 1) ? col(res, 1) : "?");
		if (db_query(m->d->db, release_sql, 1, params, on_released, m) < 0)
			idle(m, MAILER_POLL_MS);
		return;
	}
	if (rc < 0) {
		/* A mail that can never go (no recipients, say) is kept, marked failed, with the reason. */
		log_error("mail bisect-%s.%s: given up: %s", col(res, 2) ? col(res, 2) : "?",
			  col(res, 1) ? col(res, 1) : "?", why);
		if (db_query(m->d->db, give_up_sql, 2, params, on_given_up, m) < 0)
			idle(m, MAILER_POLL_MS);
		return;
	}
	rc = uv_queue_work(m->d->loop, &j->req, work, after_work);
	if (rc < 0) {
		j->rc = rc;
		snprintf(j->error, sizeof(j->error), "cannot queue the send: %s", uv_strerror(rc));
		after_work(&j->req, 0);
	}
}

static void claim(struct mailer *m)
{
	char repo[16], lease[24];
	const char *params[2] = {repo, lease};

	snprintf(repo, sizeof(repo), "%d", m->d->repo_id);
	snprintf(lease, sizeof(lease), "%u", m->d->cfg.mail_timeout_s + LEASE_MARGIN_S);
	if (db_query(m->d->db, claim_sql, 2, params, on_claimed, m) < 0)
		idle(m, MAILER_POLL_MS);
}

static void on_rate(PGresult *res, const char *error, void *data)
{
	struct mailer *m = data;
	unsigned limit = m->d->cfg.mail_rate_limit;
	double sent[512], *times = sent, now, wait;
	int n;

	if (error) {
		log_warn("mail: cannot read the rate of sent mail: %s", error);
		idle(m, MAILER_POLL_MS);
		return;
	}
	if (m->draining) {
		idle(m, 0);
		return;
	}
	n = PQntuples(res);
	if (n == 0 || strcmp(PQgetvalue(res, 0, 2), "t") != 0) {
		/* Nothing is due. */
		idle(m, MAILER_POLL_MS);
		return;
	}
	if ((size_t)n > sizeof(sent) / sizeof(sent[0]) && !(times = malloc((size_t)n * sizeof(double)))) {
		idle(m, MAILER_POLL_MS);
		return;
	}
	now = db_get_double(res, 0, 0, 0);
	for (int i = 0; i < n; i++)
		times[i] = db_get_double(res, i, 1, -INFINITY);
	wait = mail_rate_wait(times, (size_t)n, limit, RATE_WINDOW_S, now);
	if (times != sent)
		free(times);
	if (wait > 0) {
		if (!m->rate_logged)
			log_info(
			    "mail: %u mails sent in the last hour, the rate_limit; the next waits %.0f s",
			    limit, ceil(wait));
		m->rate_logged = true;
		/* The sweep goes on meanwhile. */
		idle(m, wait * 1000 < MAILER_SWEEP_MS ? (uint64_t)(wait * 1000) + 1 : MAILER_SWEEP_MS);
		return;
	}
	m->rate_logged = false;
	claim(m);
}

static void check_rate(struct mailer *m)
{
	char limit[16], repo[16], window[16];
	const char *params[3] = {limit, repo, window};

	snprintf(limit, sizeof(limit), "%u", m->d->cfg.mail_rate_limit);
	snprintf(repo, sizeof(repo), "%d", m->d->repo_id);
	snprintf(window, sizeof(window), "%d", RATE_WINDOW_S);
	if (db_query(m->d->db, rate_sql, 3, params, on_rate, m) < 0)
		idle(m, MAILER_POLL_MS);
}

static void on_swept(PGresult *res, const char *error, void *data)
{
	struct mailer *m = data;

	if (error) {
		log_warn("mail: sweep failed: %s", error);
	} else {
		for (int i = 0; i < PQntuples(res); i++) {
			enum mail_kind kind;
			long long id = db_get_ll(res, i, 1, 0);

			if (mail_kind_parse(db_get(res, i, 0), &kind) < 0)
				continue;
			log_debug("mail bisect-%lld.%s: found by the sweep", id, mail_kind_name(kind));
			enqueue(m->d, kind, id, db_get_ll(res, i, 2, 0));
		}
	}
	if (m->draining) {
		idle(m, 0);
		return;
	}
	check_rate(m);
}

static void step(struct mailer *m)
{
	char repo[16], batch[16];
	const char *params[3] = {repo, batch, m->d->cfg.bisect_automatic ? "true" : "false"};

	if (m->busy || m->draining)
		return;
	uv_timer_stop(&m->timer);
	m->busy = true;
	if (uv_now(m->d->loop) < m->next_sweep_ms) {
		check_rate(m);
		return;
	}
	m->next_sweep_ms = uv_now(m->d->loop) + MAILER_SWEEP_MS;
	snprintf(repo, sizeof(repo), "%d", m->d->repo_id);
	snprintf(batch, sizeof(batch), "%d", SWEEP_BATCH);
	if (db_query(m->d->db, sweep_sql, 3, params, on_swept, m) < 0)
		check_rate(m);
}

void mailer_drain(struct mailer *m)
{
	m->draining = true;
	uv_timer_stop(&m->timer);
	if (!m->busy)
		stop(m);
}

/* The SMTP URL without any user:password@ it may hold, for the log. */
static void url_for_log(const char *url, char *buf, size_t len)
{
	const char *host = strstr(url, "://"), *at, *slash;

	host = host ? host + 3 : url;
	slash = strchr(host, '/');
	at = memchr(host, '@', slash ? (size_t)(slash - host) : strlen(host));
	if (at)
		snprintf(buf, len, "%.*s%s", (int)(host - url), url, at + 1);
	else
		snprintf(buf, len, "%s", url);
}

int mailer_start(struct nwd *d, struct mailer **out)
{
	static bool curl_ready;
	const struct config *cfg = &d->cfg;
	struct mailer *m;
	char url[256];

	/* Not thread-safe, so done here, on the loop thread, before the first send starts a thread. */
	if (!curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
			log_error("mail: cannot initialise libcurl");
			return -EIO;
		}
		curl_ready = true;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->d = d;
	uv_timer_init(d->loop, &m->timer);
	m->timer.data = m;
	/* The first step waits a little, so that start-up's own queries go first. */
	uv_timer_start(&m->timer, on_timer, MAILER_POLL_MS / 2, 0);
	if (cfg->mail_smtp_url[0]) {
		url_for_log(cfg->mail_smtp_url, url, sizeof(url));
		log_info("mail: sending over %s as %s, at most %u mails per hour", url, cfg->mail_from,
			 cfg->mail_rate_limit);
	} else {
		log_info("mail: no smtp_url; mail goes to '%s'", cfg->mail_mbox);
	}
	*out = m;
	return 0;
}
