/*
 * bisector: the daemon side of flake-aware bisection. It queues a bisection
 * when a check regresses (from its last clean commit), and for every running
 * bisection replays the stored probes through the pure model in bisect.c,
 * queues the next probes (k at once, k = the number of slots) as "probe"
 * jobs ahead of background work, and when one commit holds the configured
 * probability re-tests it and its parent with fresh seeds before naming it.
 * Everything it knows is in PostgreSQL, so a restart resumes where it stood.
 */
#ifndef NW_BISECTOR_H
#define NW_BISECTOR_H

struct nwd;
struct bisector;

int bisector_start(struct nwd *d, struct bisector **out);
/* A probe finished, or a verdict changed: look again soon. */
void bisector_kick(struct bisector *b);
void bisector_stop(struct bisector *b);

#endif
