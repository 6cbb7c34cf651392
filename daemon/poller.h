/*
 * poller: watches the repository. It keeps a bare mirror under the state
 * directory, fetches on a timer, reads the branch's first-parent history and
 * stores new commits (author, email, title, time) with a build job for each.
 * A force-push marks dropped commits unreachable without deleting their
 * results; an unreachable remote is retried with exponential backoff.
 */
#ifndef NW_POLLER_H
#define NW_POLLER_H

struct nwd;
struct poller;

int poller_start(struct nwd *d, struct poller **out);
/* Poll now (SIGHUP, tests). */
void poller_poll_now(struct poller *p);
void poller_stop(struct poller *p);
/* Polls that worked since start: until the first, this host's mirror may lack commits others imported. */
unsigned poller_polls(const struct poller *p);
/* Consecutive failed polls (0 when the last one worked). */
unsigned poller_failures(const struct poller *p);

#endif
