/*
 * slot: one runner slot (a GPU, or the host). It claims "trials" jobs, keeps a
 * runner of the job's commit alive across trials, speaks protocol v1 with it,
 * and stores every trial it sends with its outcome (PROTOCOL.md's table: a
 * crash, a timeout or a protocol error is recorded, the runner restarted).
 * When a job's plan is complete it stores the verdict for that commit x check
 * x dtype.
 */
#ifndef NW_SLOT_H
#define NW_SLOT_H

#include <stdbool.h>

#include "config.h"

struct nwd;
struct slot;

int slot_start(struct nwd *d, const struct config_slot *cfg, struct slot **out);
/* New work may be claimable. */
void slot_kick(struct slot *s);
/* Whether the slot waits for work it could not claim (the builder may build some for it). */
bool slot_idle(const struct slot *s);
/* Finish the trial in flight, give the job back, stop the runner; nwd_service_stopped() when done. */
void slot_drain(struct slot *s);
void slot_free(struct slot *s);

/* For the health endpoint: a short JSON-ready description (borrowed strings). */
/* "idle", "claiming", "loading", "starting", "running", "restarting", "finishing", "stopped". */
#define SLOT_STATES 8

struct slot_status {
	const char *name;
	int gpu;
	const char *state;  /* "idle", "starting", "running", "restarting", "stopped" */
	const char *commit; /* sha of the job's commit, "" when idle */
	const char *check;
	const char *dtype;
	int runner_pid; /* 0 when no runner */
	unsigned restarts;
	unsigned long long trials;
	double state_s[SLOT_STATES]; /* seconds in each state since the start (slot_state_name) */
	double trial_s;              /* seconds with a trial in flight */
	/* seconds with a second request waiting behind the trial in flight (a pipeline, issue 18) */
	double ahead_s;
};
void slot_status(const struct slot *s, struct slot_status *out);
const char *slot_state_name(int state);

/* Strikes after which a job's run is given up as infra_error (PROTOCOL.md). */
#define SLOT_MAX_STRIKES 3

#endif
