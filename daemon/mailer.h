/*
 * mailer: the culprit emails. Mail is queued in PostgreSQL (the mail table)
 * and sent from there, so nothing is lost and nothing is sent twice:
 *
 * - Enqueueing gathers the facts of a bisection with one query, composes the
 *   mail (mail.c) and inserts it with ON CONFLICT DO NOTHING: the table's
 *   UNIQUE (bisection_id, kind) and the stable Message-ID make a second
 *   enqueue of the same mail, on this daemon or another, a no-op.
 * - A sweep (every MAILER_SWEEP_MS) enqueues whatever should have been
 *   enqueued and was not (a daemon died between finishing a bisection and
 *   queuing its mail; a later commit made the check clean again).
 * - One mail at a time is claimed (FOR UPDATE SKIP LOCKED; next_try moved
 *   past the send's deadline as a lease) and sent on libuv's thread pool:
 *   over SMTP with libcurl, or appended to the mbox file when no smtp_url is
 *   configured. The loop thread alone touches the database. A failure is
 *   stored (attempts, last_error) and retried with exponential backoff; a
 *   follow-up waits until its thread's first mail has gone.
 * - At most [mail] rate_limit mails go per hour (counted in the database,
 *   for every daemon of the repository); the others wait.
 *
 * Delivery is at least once: a daemon killed after the server accepted a
 * mail and before storing that it did sends it again after the lease. The
 * Message-ID is the same, so mail clients show it once.
 */
#ifndef NW_MAILER_H
#define NW_MAILER_H

struct nwd;
struct mailer;

/* Starts the service (curl_global_init happens here, before any thread). */
int mailer_start(struct nwd *d, struct mailer **out);
/* Claims nothing more; a send in flight finishes (within [mail] timeout). nwd_service_stopped() when done. */
void mailer_drain(struct mailer *m);

/*
 * Enqueue API, for the bisection service. Each runs on the loop thread, does
 * its work asynchronously on d->db (gather, compose, insert) and logs what it
 * did; none needs the mailer service to exist. They queue behind whatever the
 * caller queued on d->db before, so a caller may call them right after
 * queuing the COMMIT that stores the bisection's outcome. Calling one twice
 * is harmless. Returns 0, or -ENOMEM when nothing could be queued (the sweep
 * will enqueue the mail later anyway).
 *
 * mailer_enqueue_culprit: the bisection has outcome 'culprit' and culprit_id
 *   set. Nothing is queued while its check x dtype is muted.
 * mailer_enqueue_withdrawn: the bisection's outcome became 'withdrawn' after a
 *   culprit mail was queued. If that mail was never tried, it is cancelled
 *   instead (state 'failed'), and nothing is sent; otherwise a follow-up goes
 *   in its thread. Nothing happens when there was no culprit mail.
 * mailer_enqueue_fixed: 'fixing_commit_id' (a commit after the culprit) is
 *   clean again for the bisection's check x dtype; a follow-up goes in the
 *   culprit mail's thread, once it has been sent.
 */
int mailer_enqueue_culprit(struct nwd *d, long long bisection_id);
int mailer_enqueue_withdrawn(struct nwd *d, long long bisection_id);
int mailer_enqueue_fixed(struct nwd *d, long long bisection_id, long long fixing_commit_id);

/* Housekeeping periods: the queue is polled every MAILER_POLL_MS, the sweep runs every MAILER_SWEEP_MS. */
#define MAILER_POLL_MS  2000
#define MAILER_SWEEP_MS 5000
/* Retries never wait longer than this. */
#define MAILER_RETRY_MAX_S 3600

#endif
