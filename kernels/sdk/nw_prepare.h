/*
 * Trials prepared ahead on a worker thread (prepare.c), for nw_trial_run().
 */
#ifndef NW_PREPARE_H
#define NW_PREPARE_H

#include <stdbool.h>

#include "numwatch_check.h"

/*
 * Validates t's request and resets the rest: the family resolved (seed %
 * nfamilies unless asked), the index within it. 0, or an error recorded in t.
 */
int nw_trial_setup(const struct nw_check *c, struct nw_trial *t);
/*
 * The trial prepared ahead for request req, if that is what was prepared:
 * true with *t set up and prepared, *prepared and prepare()'s *rc (the
 * caller releases *prepared when *rc is 0). False: prepare it in line.
 */
bool nw_prepare_take(const struct nw_check *c, const struct nw_trial *req, struct nw_trial *t,
		     void **prepared, int *rc);
/* Starts preparing request req (the guess at the next one) on the worker thread. */
void nw_prepare_ahead(const struct nw_check *c, const struct nw_trial *req);
/* c->release_prepared(prepared), on the worker thread if there is one (the device must be done with it). */
void nw_prepare_release(const struct nw_check *c, void *prepared);

#endif
