/*
 * bench/bisect-sim: a deterministic simulator driving the real bisection
 * module (daemon/bisect.c) over synthetic histories, against `git bisect`
 * with r repeats per probe and against the information-theoretic bound.
 * Run by bench/bisect-sim.sh, which appends its tables to docs/benchmarks.md.
 *
 * A history of n commits in first-parent order has 5% unbuildable and 5%
 * same-binary commits (never the bad commit), and a culprit drawn uniformly
 * among the others. Two culprit models:
 *
 *   race:    every trial at a commit at or after the culprit fails
 *            independently with rate q, every other trial with the baseline
 *            flake rate f;
 *   seeded:  a fixed share q of seeds fail, deterministically, at every
 *            commit from the culprit on (a shape bug: the seeds whose shape
 *            hits it); every other trial fails at f. A fresh seed at or
 *            after the culprit fails with q + (1 - q) f; a seed that failed
 *            at the bad commit fails for sure there if it is one of the
 *            culprit's seeds, and at f if it failed by a flake.
 *
 * The bisection starts as the daemon's does, from the bad commit's verdict:
 * the daemon's own statistics (stats_verdict, default [verdict] settings)
 * judge a first pass of fresh seeds (-f, 64) paired with the good commit's,
 * with more trials where the evidence is ambiguous, and the bad commit's
 * trials are drawn again until it says "regressed". Those trials are given
 * to the model; they are not counted in the trials below, which are the
 * search's own. A range "without a culprit" fails at f everywhere; its
 * first signal was a flake: the first pass had at least one failure (none
 * at f = 0: started by hand), since the verdicts hardly ever flag a flake
 * of that rate. The seeds that failed at the bad commit are the bisection's failing seeds
 * (bisect_params.failing_seeds), which the planner replays first at each
 * commit, two per probe, in order, as daemon/bisector.c does; what their
 * reruns at the bad commit say (bisect_judge_seeds) decides, as in the
 * daemon, whether a race's are replayed at all and whether a seed-bound
 * failure's reruns count as their replay there. The model is told f
 * (floored at 0.001), as the daemon tells it the good side's rate.
 *
 * usage: bisect-sim [-r RUNS] [-s SEED] [-j JOBS] [-f FIRST_PASS] [-n] [-q] [-v]
 *   -r  bisections per row (400)      -j  worker processes (2)
 *   -f  trials of the bad commit's first pass, before the verdict asks for more (64; at most 1024)
 *   -n  probes run all their trials instead of stopping at the first failure
 *   -q  quick: 128 commits and one slot only
 *   -m  culprit model: race, seeded, or both (both)
 *   -v  on stderr, where the search's trials went: below the culprit's
 *       parent, at the parent, at the culprit, above it; trials until the
 *       true culprit held 0.5 and 0.9; E[q | culprit] after the bad commit's trials
 *       and at the end; confirmation trials at the culprit and its parent
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bisect.h"
#include "stats.h"

#define UNBUILDABLE_SHARE  0.05
#define SAME_BINARY_SHARE  0.05
#define CONFIRM_TRIALS_MAX 4000
/* The daemon's [trials] max: the bad commit's verdict runs no more trials. */
#define VERDICT_TRIALS_MAX 1024
/* Commits whose first passes make the verdicts' pooled baseline rate (daemon/slot.c). */
#define POOL_COMMITS     8
#define CONFIRM_ATTEMPTS 3
#define ROUNDS_MAX       100000

/* xoshiro256**, seeded by splitmix64: the same numbers on every machine. */
struct rng {
	uint64_t s[4];
};

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
	uint64_t res = rotl(r->s[1] * 5, 7) * 9, t = r->s[1] << 17;

	r->s[2] ^= r->s[0];
	r->s[3] ^= r->s[1];
	r->s[1] ^= r->s[2];
	r->s[0] ^= r->s[3];
	r->s[2] ^= t;
	r->s[3] = rotl(r->s[3], 45);
	return res;
}

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		r->s[i] = z ^ (z >> 31);
	}
}

static double rng_unif(struct rng *r)
{
	return (rng_next(r) >> 11) * 0x1p-53;
}

static bool rng_bern(struct rng *r, double p)
{
	return rng_unif(r) < p;
}

struct cell {
	unsigned n;
	double q; /* 0: no culprit */
	double f;
	unsigned slots;
	double q_known; /* ablation: the model is told q */
	bool seeded;    /* the culprit fails a fixed share q of seeds, deterministically */
};

struct history {
	unsigned n;
	uint8_t *flags;
	int culprit; /* BISECT_NONE for a range without one */
	double q, f;
	unsigned nel;
	bool seeded;
	/* The bad commit's trials before the bisection, and the seeds that failed in them, in seed order. */
	unsigned fp_fails, fp_ran;
	unsigned nfailing;
	bool *failing_bad; /* seeded: the seed is one of the culprit's (else it failed by a flake) */
	struct stats_seed *verdict_seeds; /* the bad commit's verdict (bad_commit_verdict) */
	/*
	 * The failing seeds the bisection replays (bisect_params.failing_seeds),
	 * as indexes into failing_bad: the daemon leaves out a deterministic
	 * check's failing seeds whose repeats gave different outputs (a race or
	 * a flake: the other repeat passed). Both models, with repeats = 2.
	 */
	unsigned nreplay;
	unsigned *replay;
};

/* Options of the whole sweep. */
static unsigned first_pass = 64; /* the bad commit's first pass: the daemon's default per_commit */
static bool run_whole_batch;     /* -n: probes run all their trials (no stop at the first failure) */
static bool verbose;             /* -v: where the trials went, on stderr */

/* The failure rate of a fresh seed at commit j. */
static double rate_at(const struct history *h, int j)
{
	if (h->culprit == BISECT_NONE || j < h->culprit)
		return h->f;
	return h->seeded ? h->q + (1.0 - h->q) * h->f : h->q;
}

static void history_alloc(struct history *h, unsigned n)
{
	memset(h, 0, sizeof(*h));
	h->flags = malloc(n);
	h->failing_bad = malloc(VERDICT_TRIALS_MAX * sizeof(bool));
	h->replay = malloc(VERDICT_TRIALS_MAX * sizeof(unsigned));
	h->verdict_seeds = malloc(VERDICT_TRIALS_MAX * sizeof(struct stats_seed));
	if (!h->flags || !h->failing_bad || !h->replay || !h->verdict_seeds) {
		fprintf(stderr, "bisect-sim: out of memory\n");
		exit(1);
	}
}

static void history_free(struct history *h)
{
	free(h->flags);
	free(h->failing_bad);
	free(h->replay);
	free(h->verdict_seeds);
}

/*
 * One seed at the bad commit: its first run and, if that failed, its rerun.
 * Seeded: the seed is one of the culprit's with probability q (the bad
 * commit is at or after the culprit) and then fails both runs; else each
 * run fails at f. Race: each run fails at the bad commit's rate. Returns
 * whether it is one of the culprit's (seeded).
 */
static bool bad_commit_seed(const struct history *h, struct rng *r, enum outcome *first, enum outcome *rerun)
{
	bool bad = h->seeded && h->culprit != BISECT_NONE && rng_bern(r, h->q);
	double p = h->seeded ? h->f : rate_at(h, (int)h->n - 1);

	*first = bad || rng_bern(r, p) ? OUTCOME_FAIL : OUTCOME_PASS;
	*rerun = *first == OUTCOME_PASS ? OUTCOME_NONE : bad || rng_bern(r, p) ? OUTCOME_FAIL : OUTCOME_PASS;
	return bad;
}

/* The good commit's run of a seed (every trial before the culprit fails at f), with a rerun if it failed. */
static void good_commit_seed(const struct history *h, struct rng *r, struct stats_seed *s)
{
	s->base_first = rng_bern(r, h->f) ? OUTCOME_FAIL : OUTCOME_PASS;
	s->base_rerun = s->base_first == OUTCOME_PASS ? OUTCOME_NONE
			: rng_bern(r, h->f)           ? OUTCOME_FAIL
						      : OUTCOME_PASS;
}

/* Seeds [from, to) at the bad commit, unpaired on the good one. */
static void bad_commit_seeds(struct history *h, struct rng *r, unsigned from, unsigned to)
{
	for (unsigned i = from; i < to; i++) {
		struct stats_seed *s = &h->verdict_seeds[i];

		*s = (struct stats_seed){.seed = i, .cand_ratio = NAN, .base_ratio = NAN};
		h->failing_bad[i] = bad_commit_seed(h, r, &s->cand_first, &s->cand_rerun);
	}
}

/*
 * The bad commit's first n trials as the bisection's start: their failures,
 * and its failing seeds in seed order (failing_bad compacted to them), of
 * which those whose rerun failed too are replayed (the daemon leaves out a
 * seed whose rerun passed: a race or a flake).
 */
static void keep_failing_seeds(struct history *h, unsigned n)
{
	h->fp_fails = h->nfailing = h->nreplay = 0;
	h->fp_ran = n;
	for (unsigned i = 0; i < n; i++) {
		const struct stats_seed *s = &h->verdict_seeds[i];

		if (s->cand_first != OUTCOME_FAIL)
			continue;
		h->fp_fails++;
		if (s->cand_rerun == OUTCOME_FAIL)
			h->replay[h->nreplay++] = h->nfailing;
		h->failing_bad[h->nfailing++] = h->failing_bad[i];
	}
}

/*
 * The bad commit's verdict, as the daemon reaches it (stats_verdict with the
 * default [verdict] parameters): a first pass of fresh seeds paired with the
 * good commit's, every failing seed rerun, more trials where the evidence is
 * ambiguous (up to [trials] max), and the good commit run on the failing
 * seeds it lacks; the pooled baseline rate is the good side's last
 * POOL_COMMITS first passes. A bisection starts only from a regression, so
 * the bad commit's trials are drawn again until the verdict says so. Seeded
 * culprits are judged as a deterministic check, races as a non-deterministic
 * one. Its trials are what the daemon gives the bisection (the first runs);
 * the failing seeds replayed are those whose rerun failed too.
 */
static void bad_commit_verdict(struct history *h, struct rng *r)
{
	struct stats_verdict_params vp;
	struct stats_evidence ev;

	stats_verdict_params_default(&vp);
	vp.max_trials = VERDICT_TRIALS_MAX;
	do {
		struct stats_verdict_input in = {.deterministic = h->seeded, .seeds = h->verdict_seeds};
		unsigned n = first_pass;

		bad_commit_seeds(h, r, 0, n);
		in.pool_trials = POOL_COMMITS * first_pass;
		for (unsigned i = 0; i < in.pool_trials; i++) {
			bool failed = rng_bern(r, h->f);

			/* The good commit's own first pass is paired with the bad commit's. */
			if (i < n) {
				good_commit_seed(h, r, &h->verdict_seeds[i]);
				failed = h->verdict_seeds[i].base_first == OUTCOME_FAIL;
			}
			in.pool_failures += failed;
		}
		for (;;) {
			in.nseeds = n;
			if (stats_verdict(&in, &vp, &ev)) {
				fprintf(stderr, "bisect-sim: stats_verdict failed\n");
				exit(1);
			}
			if (ev.verdict != VERDICT_PENDING)
				break;
			if (ev.needs_trials > 0 && n < VERDICT_TRIALS_MAX) {
				unsigned more = ev.needs_trials < VERDICT_TRIALS_MAX - n
						    ? ev.needs_trials
						    : VERDICT_TRIALS_MAX - n;

				bad_commit_seeds(h, r, n, n + more);
				n += more;
			} else if (ev.needs_baseline > 0) {
				unsigned filled = 0;

				for (unsigned i = 0; i < n; i++)
					if (h->verdict_seeds[i].base_first == OUTCOME_NONE) {
						good_commit_seed(h, r, &h->verdict_seeds[i]);
						filled++;
					}
				if (filled == 0)
					break;
			} else {
				break;
			}
		}
	} while (ev.verdict != VERDICT_REGRESSED);
	keep_failing_seeds(h, ev.cand.trials);
}

/*
 * A range without a culprit: the first signal was a flake. The bad commit's
 * first pass of fresh seeds is drawn again until one fails, unless nothing
 * can fail (f = 0: the bisection was started by hand).
 */
static void flake_first_pass(struct history *h, struct rng *r)
{
	do {
		bad_commit_seeds(h, r, 0, first_pass);
		keep_failing_seeds(h, first_pass);
	} while (h->fp_fails == 0 && h->f > 0.0);
}

static void make_history(struct history *h, const struct cell *c, struct rng *r)
{
	unsigned pick;

	h->n = c->n;
	h->q = c->q;
	h->f = c->f;
	h->seeded = c->seeded;
	h->nel = 0;
	h->nfailing = h->nreplay = h->fp_fails = h->fp_ran = 0;
	for (unsigned i = 0; i < c->n; i++) {
		double u = rng_unif(r);

		/* The bad commit built (it failed its checks), so it is never flagged. */
		h->flags[i] = 0;
		if (i + 1 < c->n && u < UNBUILDABLE_SHARE)
			h->flags[i] = BISECT_UNBUILDABLE;
		else if (i + 1 < c->n && u < UNBUILDABLE_SHARE + SAME_BINARY_SHARE)
			h->flags[i] = BISECT_SAME_BINARY;
		h->nel += h->flags[i] == 0;
	}
	h->culprit = BISECT_NONE;
	if (c->q > 0.0) {
		pick = (unsigned)(rng_unif(r) * h->nel);
		for (unsigned i = 0; i < c->n; i++)
			if (h->flags[i] == 0 && pick-- == 0) {
				h->culprit = (int)i;
				break;
			}
	}
	/* The history's own numbers, so that ours and git bisect see the same failing seeds. */
	if (h->culprit != BISECT_NONE)
		bad_commit_verdict(h, r);
	else
		flake_first_pass(h, r);
}

/*
 * Whether failing seed s (an index into failing_bad) fails at commit j.
 * Seeded: for sure if it is the culprit's and j is at or after it, else at
 * f. Race: as any seed does (the seed has nothing to do with the failure).
 */
static bool failing_seed_fails(const struct history *h, unsigned s, int j, struct rng *r)
{
	bool flake;

	if (!h->seeded)
		return rng_bern(r, rate_at(h, j));
	flake = rng_bern(r, h->f);
	return (h->failing_bad[s] && h->culprit != BISECT_NONE && j >= h->culprit) || flake;
}

/* Failing seeds offset.. at one commit, stopping at the first failure if 'stop'; returns the failures. */
static unsigned run_failing(const struct history *h, int j, unsigned offset, unsigned max, bool stop,
			    struct rng *r, unsigned *ran)
{
	unsigned fails = 0, t;

	for (t = 0; t < max && offset + t < h->nreplay; t++) {
		if (failing_seed_fails(h, h->replay[offset + t], j, r)) {
			fails++;
			if (stop) {
				t++;
				break;
			}
		}
	}
	*ran = t;
	return fails;
}

/* Up to 'max' trials at one commit, stopping at the first failure if 'stop'; returns the failures. */
static unsigned run_probe(const struct history *h, int j, unsigned max, bool stop, struct rng *r,
			  unsigned *ran)
{
	unsigned fails = 0, t;

	for (t = 0; t < max; t++) {
		if (rng_bern(r, rate_at(h, j))) {
			fails++;
			if (stop) {
				t++;
				break;
			}
		}
	}
	*ran = t;
	return fails;
}

/*
 * A fresh-seed probe split into plan->parts parts of about equal size, run
 * at once on as many slots, a trial each per step; with 'stop' a failure
 * ends every part after that step, as the daemon's slots end a split
 * probe's other parts (slot.c stop_siblings). Returns the failures; *ran
 * gets the trials, *longest the steps if longer.
 */
static unsigned run_parts(const struct history *h, const struct bisect_plan *plan, bool stop, struct rng *r,
			  unsigned *ran, unsigned *longest)
{
	unsigned parts = plan->parts ? plan->parts : 1, fails = 0, steps = 0;

	*ran = 0;
	for (bool failed = false; !(stop && failed); steps++) {
		bool any = false;

		for (unsigned y = 0; y < parts; y++) {
			if (steps >= plan->trials / parts + (y < plan->trials % parts))
				continue;
			any = true;
			(*ran)++;
			if (rng_bern(r, rate_at(h, (int)plan->commit))) {
				fails++;
				failed = true;
			}
		}
		if (!any)
			break;
	}
	if (steps > *longest)
		*longest = steps;
	return fails;
}

struct ours {
	double trials, rounds, wall, confirm_trials, log2_nel;
	unsigned runs, right, right_first, ended_none, blamed;
	/* -v: where the search's trials went, relative to the true culprit. */
	double t_below, t_parent, t_culprit, t_above; /* trials */
	double p_below, p_parent, p_culprit, p_above; /* probes */
	double t_to50, t_to90;      /* trials until P(true culprit) first reached 0.5, 0.9 */
	double q_first, q_end;      /* E[q | true culprit] after the bad commit's trials, at the end */
	double verdict_trials;      /* the bad commit's trials before the search (its verdict's) */
	double c_culprit, c_parent; /* confirmation trials at the culprit named, at its parent */
	/* Seeded. */
	double nfailing;  /* failing seeds the bad commit gave */
	double t_failing; /* the search's trials that replayed a failing seed */
	double qs_end;    /* E[q_s | true culprit] at the end */
};

/* The nearest eligible commit before the culprit: the one the end of the search must clear. */
static int search_parent(const struct history *h)
{
	for (int i = h->culprit; i-- > 0;)
		if (h->flags[i] == 0)
			return i;
	return BISECT_NONE;
}

/* -v: files one probe of the search by where it ran against the true culprit. */
static void account(struct ours *acc, const struct history *h, struct bisect *b, int j, unsigned ran,
		    unsigned long trials, bool *r50, bool *r90)
{
	int par = search_parent(h);
	double *post;

	if (h->culprit == BISECT_NONE)
		return;
	if (j == h->culprit) {
		acc->t_culprit += ran;
		acc->p_culprit++;
	} else if (j > h->culprit) {
		acc->t_above += ran;
		acc->p_above++;
	} else if (j == par) {
		acc->t_parent += ran;
		acc->p_parent++;
	} else {
		acc->t_below += ran;
		acc->p_below++;
	}
	post = malloc(b->n * sizeof(double));
	if (post && bisect_posterior(b, post, NULL) == 0) {
		if (!*r50 && post[h->culprit] >= 0.5) {
			*r50 = true;
			acc->t_to50 += trials;
		}
		if (!*r90 && post[h->culprit] >= 0.9) {
			*r90 = true;
			acc->t_to90 += trials;
		}
	}
	free(post);
}

/*
 * Re-tests culprit and parent with fresh seeds until bisect_confirm decides.
 * On a withdrawal the fresh trials are evidence like any other and go into
 * the posterior, so that the search can go on from there.
 */
static int confirm(struct bisect *b, const struct history *h, int culprit, struct rng *r,
		   unsigned long *ctrials, bool *confirmed, struct ours *acc)
{
	unsigned cf = 0, ct = 0, pf = 0, pt = 0, ran;
	struct bisect_confirm_result cr;
	int parent = bisect_confirm_parent(b, (unsigned)culprit), rc;

	for (;;) {
		rc = bisect_confirm(b, (unsigned)culprit, cf, ct, pf, pt, CONFIRM_TRIALS_MAX, &cr);
		if (rc)
			return rc;
		if (cr.verdict != BISECT_CONFIRM_CONTINUE)
			break;
		cf += run_probe(h, culprit, cr.more_culprit, false, r, &ran);
		ct += ran;
		pf += run_probe(h, parent, cr.more_parent, false, r, &ran);
		pt += ran;
		*ctrials += (unsigned long)cr.more_culprit + cr.more_parent;
		acc->c_culprit += cr.more_culprit;
		acc->c_parent += cr.more_parent;
	}
	*confirmed = cr.verdict == BISECT_CONFIRMED;
	if (!*confirmed) {
		rc = bisect_observe(b, (unsigned)culprit, cf, ct, false);
		if (rc == 0 && parent != BISECT_NONE)
			rc = bisect_observe(b, (unsigned)parent, pf, pt, false);
	}
	return rc;
}

static int bisect_once(const struct cell *c, struct history *h, struct rng *r, struct ours *acc)
{
	struct bisect_params p;
	struct bisect b;
	struct bisect_plan plan[16];
	unsigned rounds = 0, fails, ran, nplan, attempts = 0;
	unsigned long trials = 0, ctrials = 0, wall = 0;
	enum bisect_status st;
	enum bisect_seeds judged;
	int culprit = BISECT_NONE, rc;
	bool blamed = false, r50 = false, r90 = false;

	/* The bad commit's verdict trials (make_history): observations already paid for. */
	fails = h->fp_fails;
	ran = h->fp_ran;
	acc->verdict_trials += ran;
	bisect_params_default(&p);
	/* The daemon gives the good side's rate, floored: it cannot know that f is exactly 0. */
	p.flake_rate = fmax(c->f, 0.001);
	p.q_known = c->q_known;
	/* What the failing seeds' reruns say (each failing seed was rerun once; nreplay failed again). */
	judged = bisect_judge_seeds(fails, ran, h->nfailing, h->nreplay, p.flake_rate);
	p.failing_seeds = judged == BISECT_SEEDS_RACE ? 0 : h->nreplay;
	rc = bisect_init(&b, c->n, h->flags, &p);
	if (rc)
		return rc;
	bisect_observe(&b, c->n - 1, fails, ran, false);
	/* Seed-bound: the kept seeds' failed reruns are their replay at the bad commit. */
	if (judged == BISECT_SEEDS_BOUND)
		bisect_observe(&b, c->n - 1, p.failing_seeds, p.failing_seeds, true);
	acc->nfailing += p.failing_seeds;
	if (verbose && h->culprit != BISECT_NONE)
		acc->q_first += bisect_culprit_rate(&b, (unsigned)h->culprit);

	for (;;) {
		while (bisect_done(&b, NULL, NULL) == BISECT_RUNNING && rounds < ROUNDS_MAX) {
			rc = bisect_next_probes(&b, c->slots, plan, &nplan);
			if (rc)
				goto out;
			if (nplan == 0)
				break;
			unsigned longest = 0;

			for (unsigned x = 0; x < nplan; x++) {
				bool stop = plan[x].stop_on_failure && !run_whole_batch;

				/* Failing seeds: the next ones not yet run at this commit, as the daemon picks them. */
				if (plan[x].failing_seeds) {
					fails =
					    run_failing(h, (int)plan[x].commit, b.trial[1][plan[x].commit],
							plan[x].trials, stop, r, &ran);
					acc->t_failing += ran;
				} else {
					fails = run_parts(h, &plan[x], stop, r, &ran, &longest);
				}
				trials += ran;
				if (ran > longest && plan[x].parts <= 1)
					longest = ran;
				rc = bisect_observe(&b, plan[x].commit, fails, ran, plan[x].failing_seeds);
				if (rc)
					goto out;
				if (verbose)
					account(acc, h, &b, (int)plan[x].commit, ran, trials, &r50, &r90);
			}
			rounds++;
			wall += longest;
		}
		st = bisect_done(&b, &culprit, NULL);
		/* At most CONFIRM_ATTEMPTS culprits are put to the test: then nobody is blamed. */
		if (st != BISECT_FOUND || attempts++ == CONFIRM_ATTEMPTS)
			break;
		rc = confirm(&b, h, culprit, r, &ctrials, &blamed, acc);
		if (rc)
			goto out;
		/* What a daemon that stops at the first withdrawal would have said. */
		if (attempts == 1)
			acc->right_first +=
			    h->culprit == BISECT_NONE ? !blamed : blamed && culprit == h->culprit;
		if (blamed)
			break;
	}
	if (attempts == 0)
		acc->right_first += h->culprit == BISECT_NONE;
	acc->ended_none += st == BISECT_NO_CULPRIT;
	acc->runs++;
	acc->blamed += blamed;
	acc->right += h->culprit == BISECT_NONE ? !blamed : blamed && culprit == h->culprit;
	acc->trials += trials;
	acc->rounds += rounds;
	acc->wall += wall;
	acc->confirm_trials += ctrials;
	acc->log2_nel += log2(h->nel);
	if (verbose && h->culprit != BISECT_NONE) {
		acc->q_end += bisect_culprit_rate(&b, (unsigned)h->culprit);
		if (bisect_posterior(&b, NULL, NULL) == 0)
			acc->qs_end += b.qbar_s[h->culprit];
	}
out:
	bisect_release(&b);
	return rc;
}

/*
 * `git bisect run` with r repeats per probe: bad if any fails (stopping
 * there). With 'seed' >= 0 (seeded model) each probe instead runs the one
 * failing seed of the report with that index, r = 1.
 */
static bool git_once(const struct history *h, unsigned r, int seed, struct rng *rng, unsigned long *trials,
		     unsigned *probes)
{
	int lo = -1, hi = (int)h->n - 1;

	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2, pick = -1;
		unsigned ran;

		/* git bisect skip: the nearest buildable commit still in the range. */
		for (int d = 0; pick < 0 && (mid - d > lo || mid + d < hi); d++) {
			if (mid - d > lo && !(h->flags[mid - d] & BISECT_UNBUILDABLE))
				pick = mid - d;
			else if (mid + d < hi && !(h->flags[mid + d] & BISECT_UNBUILDABLE))
				pick = mid + d;
		}
		if (pick < 0)
			break; /* only unbuildable commits left: git names the range, the user blames 'hi' */
		(*probes)++;
		if (seed >= 0) {
			ran = 1;
			if (failing_seed_fails(h, (unsigned)seed, pick, rng))
				hi = pick;
			else
				lo = pick;
		} else if (run_probe(h, pick, r, true, rng, &ran))
			hi = pick;
		else
			lo = pick;
		*trials += ran;
	}
	return hi == h->culprit;
}

struct git {
	unsigned r;
	double acc, trials, rounds;
};

/* r fresh seeds per probe, or (r = 0, seeded model) the report's first failing seed. */
static void git_eval(const struct cell *c, unsigned runs, uint64_t seed, unsigned r, struct git *g)
{
	struct history h;
	unsigned long trials = 0;
	unsigned probes = 0, right = 0;

	history_alloc(&h, c->n);
	for (unsigned i = 0; i < runs; i++) {
		struct rng rr, rt;

		/* The same histories as ours (same seed), and common numbers across r. */
		rng_seed(&rr, seed + i);
		make_history(&h, c, &rr);
		rng_seed(&rt, (seed + i) ^ 0x5eedull);
		right += git_once(&h, r ? r : 1, r ? -1 : 0, &rt, &trials, &probes);
	}
	g->r = r;
	g->acc = (double)right / runs;
	g->trials = (double)trials / runs;
	g->rounds = (double)probes / runs;
	history_free(&h);
}

/*
 * The r for git bisect: the smallest reaching 'target' accuracy, else the
 * most accurate one. Accuracy first rises with r (a bad commit is seen) and
 * then falls when f > 0 (good commits flake once in r), so all are tried.
 */
static bool git_choose(const struct cell *c, unsigned runs, uint64_t seed, double target, struct git *best)
{
	static const unsigned rs[] = {1,  2,   3,   4,   6,   8,   12,  16,   24,   32,   48,  64,
				      96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072};
	struct git g;

	memset(best, 0, sizeof(*best));
	for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++) {
		git_eval(c, runs, seed, rs[i], &g);
		if (g.acc >= target) {
			*best = g;
			return true;
		}
		if (g.acc > best->acc)
			*best = g;
		/* Past the peak by a wide margin: larger r only adds false bads. */
		if (best->acc > 0 && g.acc < best->acc - 0.2)
			break;
	}
	return false;
}

/* Mutual information of one trial at the best split: the channel's capacity, in bits. */
static double capacity(double q, double f)
{
	double lo = 0.0, hi = 1.0;

	for (int it = 0; it < 200; it++) {
		double a = lo + (hi - lo) / 3, b2 = hi - (hi - lo) / 3;
		double ia, ib;
#define H2(p) ((p) <= 0 || (p) >= 1 ? 0.0 : -(p)*log2(p) - (1 - (p)) * log2(1 - (p)))
		ia = H2(a * q + (1 - a) * f) - a * H2(q) - (1 - a) * H2(f);
		ib = H2(b2 * q + (1 - b2) * f) - b2 * H2(q) - (1 - b2) * H2(f);
		if (ia < ib)
			lo = a;
		else
			hi = b2;
	}
	{
		double x = (lo + hi) / 2;

		return H2(x * q + (1 - x) * f) - x * H2(q) - (1 - x) * H2(f);
	}
#undef H2
}

struct row {
	struct cell c;
	struct ours o;
	struct git g;
	bool git_reached;
	struct git gs; /* seeded: git bisect with the report's failing seed */
	double bound;
	double seconds;
	unsigned sidx; /* the row's numbers: seed + 1000003 sidx */
};

/* Seeded rows take their numbers from this index on, whatever rows -m keeps. */
#define SEEDED_SIDX 100

static void run_cell(struct row *row, unsigned runs, uint64_t seed)
{
	struct history h;
	struct timespec t0, t1;

	history_alloc(&h, row->c.n);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(&row->o, 0, sizeof(row->o));
	for (unsigned i = 0; i < runs; i++) {
		struct rng rr, rt;

		rng_seed(&rr, seed + i);
		make_history(&h, &row->c, &rr);
		rng_seed(&rt, (seed + i) ^ 0xb15ec7ull);
		if (bisect_once(&row->c, &h, &rt, &row->o)) {
			fprintf(stderr, "bisect-sim: bisection failed\n");
			exit(1);
		}
	}
	if (row->c.q > 0.0) {
		/* Seeded: a replayed failing seed is a q = 1 channel, the best trial there is. */
		row->bound =
		    row->o.log2_nel / row->o.runs / capacity(row->c.seeded ? 1.0 : row->c.q, row->c.f);
		row->git_reached =
		    git_choose(&row->c, runs, seed, (double)row->o.right / row->o.runs, &row->g);
		if (row->c.seeded)
			git_eval(&row->c, runs, seed, 0, &row->gs);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	row->seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	history_free(&h);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bisect-sim [-r RUNS] [-s SEED] [-j JOBS] [-f FIRST_PASS] [-m race|seeded|both] [-n] "
		"[-q] [-v]\n");
	exit(2);
}

#define ROWS_MAX 256

static const char culprit_header[] =
    "| commits | q | f | slots | trials | rounds | wall | confirm trials | accuracy | no retry | bound "
    "| trials / bound | git r | git trials | git accuracy | git / ours |\n"
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
    "| ---: | ---: |\n";

static void print_culprit_row(const struct row *r)
{
	double t = r->o.trials / r->o.runs;

	printf("| %u | %g | %g | %u | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | %.1f | %.2f | ", r->c.n,
	       r->c.q, r->c.f, r->c.slots, t, r->o.rounds / r->o.runs, r->o.wall / r->o.runs,
	       r->o.confirm_trials / r->o.runs, 100.0 * r->o.right / r->o.runs,
	       100.0 * r->o.right_first / r->o.runs, r->bound, t / r->bound);
	if (r->git_reached)
		printf("%u | %.1f | %.1f%% | %.1fx |\n", r->g.r, r->g.trials, 100.0 * r->g.acc,
		       r->g.trials / t);
	else
		printf("%u* | %.1f | %.1f%% | never reaches ours |\n", r->g.r, r->g.trials, 100.0 * r->g.acc);
}

static const char seeded_header[] =
    "| commits | q | f | slots | failing seeds | trials | rounds | wall | confirm trials | accuracy | no "
    "retry "
    "| bound | trials / bound | git r | git trials | git accuracy | git / ours | git, failing seed: trials "
    "| accuracy | git / ours |\n"
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
    "---: "
    "| ---: | ---: | ---: | ---: | ---: |\n";

static void print_seeded_row(const struct row *r)
{
	double t = r->o.trials / r->o.runs;

	printf("| %u | %g | %g | %u | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | %.1f | %.2f | ",
	       r->c.n, r->c.q, r->c.f, r->c.slots, r->o.nfailing / r->o.runs, t, r->o.rounds / r->o.runs,
	       r->o.wall / r->o.runs, r->o.confirm_trials / r->o.runs, 100.0 * r->o.right / r->o.runs,
	       100.0 * r->o.right_first / r->o.runs, r->bound, t / r->bound);
	if (r->git_reached)
		printf("%u | %.1f | %.1f%% | %.2fx | ", r->g.r, r->g.trials, 100.0 * r->g.acc,
		       r->g.trials / t);
	else
		printf("%u* | %.1f | %.1f%% | never reaches ours | ", r->g.r, r->g.trials, 100.0 * r->g.acc);
	printf("%.1f | %.1f%% | %.2fx%s |\n", r->gs.trials, 100.0 * r->gs.acc, r->gs.trials / t,
	       r->gs.acc >= (double)r->o.right / r->o.runs ? "" : " (less accurate)");
}

static const char none_header[] =
    "| commits | f | slots | trials | rounds | wall | confirm trials | ended \"no culprit\" | "
    "nobody blamed | no retry |\n"
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";

static void print_none_row(const struct row *r)
{
	printf("| %u | %g | %u | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | %.1f%% |\n", r->c.n, r->c.f,
	       r->c.slots, r->o.trials / r->o.runs, r->o.rounds / r->o.runs, r->o.wall / r->o.runs,
	       r->o.confirm_trials / r->o.runs, 100.0 * r->o.ended_none / r->o.runs,
	       100.0 * r->o.right / r->o.runs, 100.0 * r->o.right_first / r->o.runs);
}

/* The line of the target cell (128 commits, q = 0.05, one slot) for one model. */
static void print_target_row(const struct row *r, double acc, double t)
{
	if (!r->c.seeded) {
		printf(
		    "- Race: 128 commits, q = 0.05, f = %g, one slot: accuracy %.1f%%, %.2fx the bound; git "
		    "bisect %s %.1fx our trials (r = %u, %.1f%%).\n",
		    r->c.f, 100.0 * acc, t / r->bound,
		    r->git_reached ? "matches it with" : "never matches it, at best with", r->g.trials / t,
		    r->g.r, 100.0 * r->g.acc);
		return;
	}
	printf("- Seeded: 128 commits, q = 0.05, f = %g, one slot: accuracy %.1f%% in %.1f trials, %.2fx the "
	       "bound log2 N / C(1, f); git bisect with fresh seeds %s %.2fx our trials (r = %u, %.1f%%); ",
	       r->c.f, 100.0 * acc, t, t / r->bound,
	       r->git_reached ? "matches it with" : "never matches it, at best with", r->g.trials / t, r->g.r,
	       100.0 * r->g.acc);
	printf("git bisect with the report's failing seed %s: %.1f%% in %.2fx our trials.\n",
	       r->gs.acc >= acc ? "matches it" : "does not match it", 100.0 * r->gs.acc, r->gs.trials / t);
}

/* One model's targets (seeded or race), read off its rows. */
static void print_model_targets(const struct row *rows, unsigned nrows, bool seeded)
{
	const char *model = seeded ? "Seeded" : "Race";
	double acc_min = 1.0, blame_free_min = 1.0, ratio_lo[2] = {1e9, 1e9}, ratio_hi[2] = {0.0, 0.0};
	unsigned slots[2] = {1, 1};
	bool have_acc = false, have_none = false;

	for (unsigned i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		double acc = (double)r->o.right / r->o.runs, t = r->o.trials / r->o.runs;

		if (r->c.q_known > 0.0 || r->c.seeded != seeded)
			continue;
		if (r->c.q <= 0.0) {
			blame_free_min = fmin(blame_free_min, acc);
			have_none = true;
			continue;
		}
		if (r->c.n == 128 && r->c.q == 0.05) {
			acc_min = fmin(acc_min, acc);
			have_acc = true;
			if (r->c.slots == 1)
				print_target_row(r, acc, t);
		}
		slots[r->c.slots > 1] = r->c.slots;
		ratio_lo[r->c.slots > 1] = fmin(ratio_lo[r->c.slots > 1], t / r->bound);
		ratio_hi[r->c.slots > 1] = fmax(ratio_hi[r->c.slots > 1], t / r->bound);
	}
	if (have_acc)
		printf("- %s: accuracy at q = 0.05 over 128 commits, all rows: at least %.1f%% (target "
		       "99%%): %s.\n",
		       model, 100.0 * acc_min, acc_min >= 0.99 ? "met" : "not met");
	if (have_none)
		printf("- %s: nobody blamed in at least %.1f%% (target 100%%): %s.\n",
		       seeded ? "Seeded, ranges without a culprit (the first pass's flaky seeds replayed)"
			      : "Race: ranges without a culprit",
		       100.0 * blame_free_min, blame_free_min >= 1.0 ? "met" : "not met");
	for (int k = 0; k < 2; k++)
		if (ratio_hi[k] > 0.0)
			printf("- %s: search trials against the bound%s, %u slot%s, all culprit rows: %.2fx "
			       "to %.2fx (target 1.5x).\n",
			       model, seeded ? " log2 N / C(1, f)" : "", slots[k], slots[k] > 1 ? "s" : "",
			       ratio_lo[k], ratio_hi[k]);
}

/* The targets, read off the rows (so that a rerun states its own numbers). */
static void print_targets(const struct row *rows, unsigned nrows)
{
	printf("\n#### Targets\n\n");
	print_model_targets(rows, nrows, false);
	print_model_targets(rows, nrows, true);
}

int main(int argc, char **argv)
{
	static const unsigned ns[] = {16, 128, 1024};
	static const double qs[] = {1.0, 0.3, 0.05, 0.02};
	static const double fs[] = {0.0, 0.005};
	static const unsigned ks[] = {1, 4};
	unsigned runs = 400, jobs = 2, nrows = 0, nseeded = 0;
	uint64_t seed = 20261122;
	bool quick = false, race = true, seeded = true;
	struct row *rows;
	double secs = 0.0;
	int opt;

	while ((opt = getopt(argc, argv, "r:s:j:f:m:nqv")) != -1) {
		switch (opt) {
		case 'r':
			runs = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 's':
			seed = strtoull(optarg, NULL, 10);
			break;
		case 'j':
			jobs = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'f':
			first_pass = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'm':
			race = strcmp(optarg, "seeded") != 0;
			seeded = strcmp(optarg, "race") != 0;
			if (!race && !seeded)
				usage();
			if (strcmp(optarg, "race") && strcmp(optarg, "seeded") && strcmp(optarg, "both"))
				usage();
			break;
		case 'n':
			run_whole_batch = true;
			break;
		case 'q':
			quick = true;
			break;
		case 'v':
			verbose = true;
			break;
		default:
			usage();
		}
	}
	if (runs == 0 || jobs == 0 || jobs > 64 || first_pass == 0 || first_pass > VERDICT_TRIALS_MAX ||
	    optind != argc)
		usage();
	/* Shared with the workers, which each fill every jobs-th row. */
	rows =
	    mmap(NULL, ROWS_MAX * sizeof(*rows), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rows == MAP_FAILED)
		return 1;
	if (race) {
		/* Ranges with a culprit. */
		for (size_t a = 0; a < 3; a++)
			for (size_t b = 0; b < 4; b++)
				for (size_t c = 0; c < 2; c++)
					for (size_t d = 0; d < 2; d++)
						if (!quick || (ns[a] == 128 && ks[d] == 1))
							rows[nrows++].c = (struct cell){ns[a], qs[b], fs[c],
											ks[d], 0.0,   false};
		/* Ranges without one. */
		for (size_t a = 0; a < 3; a++)
			for (size_t c = 0; c < 2; c++)
				for (size_t d = 0; d < 2; d++)
					if (!quick || (ns[a] == 128 && ks[d] == 1))
						rows[nrows++].c =
						    (struct cell){ns[a], 0.0, fs[c], ks[d], 0.0, false};
		/* Ablation: the model told q, which separates the planner from learning q. */
		for (size_t b = 1; b < 4; b++)
			for (size_t c = 0; c < 2; c++)
				rows[nrows++].c = (struct cell){128, qs[b], fs[c], 1, qs[b], false};
		for (unsigned i = 0; i < nrows; i++)
			rows[i].sidx = i;
	}
	if (seeded) {
		/* The seeded model: the same grid. */
		for (size_t a = 0; a < 3; a++)
			for (size_t b = 0; b < 4; b++)
				for (size_t c = 0; c < 2; c++)
					for (size_t d = 0; d < 2; d++)
						if (!quick || (ns[a] == 128 && ks[d] == 1)) {
							rows[nrows].sidx = SEEDED_SIDX + nseeded++;
							rows[nrows++].c = (struct cell){ns[a], qs[b], fs[c],
											ks[d], 0.0,   true};
						}
		/* Without a culprit, where the first pass's flaky seeds are replayed (f = 0: none failed). */
		for (size_t a = 0; a < 3; a++)
			for (size_t d = 0; d < 2; d++)
				if (!quick || (ns[a] == 128 && ks[d] == 1)) {
					rows[nrows].sidx = SEEDED_SIDX + nseeded++;
					rows[nrows++].c = (struct cell){ns[a], 0.0, fs[1], ks[d], 0.0, true};
				}
	}

	for (unsigned w = 0; w < jobs; w++) {
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			/* Rows are dealt round-robin; the big ones are spread by their order. */
			for (unsigned i = w; i < nrows; i += jobs)
				run_cell(&rows[i], runs, seed + 1000003ull * rows[i].sidx);
			_exit(0);
		}
	}
	for (unsigned w = 0; w < jobs; w++) {
		int status;

		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "bisect-sim: a worker failed\n");
			return 1;
		}
	}

	if (race) {
		printf("#### Ranges with a culprit: a race (every trial fails independently at rate q)\n\n");
		printf(
		    "%u simulated bisections per row. *trials*: the search's trials (the bad commit's "
		    "verdict trials, a first pass of %u and more where the verdict asked for them, are "
		    "given to the model, not counted); *confirm trials*: re-testing culprit and "
		    "parent "
		    "with fresh seeds; *accuracy*: the right commit named after confirmation (a withdrawn "
		    "culprit's "
		    "fresh trials go into the posterior and the search goes on); *no retry*: the same if the "
		    "bisection ended at the first withdrawal; *bound*: "
		    "log2(eligible commits) / capacity of one trial. git bisect: r repeats per probe, bad if "
		    "any "
		    "fails; r is the smallest reaching our accuracy, or (r*) the most accurate r when none "
		    "does.%s\n\n",
		    runs, first_pass, run_whole_batch ? " Probes ran all their trials (-n)." : "");
		fputs(culprit_header, stdout);
		for (unsigned i = 0; i < nrows; i++)
			if (rows[i].c.q > 0.0 && rows[i].c.q_known == 0.0 && !rows[i].c.seeded)
				print_culprit_row(&rows[i]);

		printf("\n#### Ranges without a culprit\n\n");
		printf("The first signal was a flake (with f = 0: started by hand, the first pass saw no "
		       "failure). "
		       "git bisect names a commit every time.\n\n");
		fputs(none_header, stdout);
		for (unsigned i = 0; i < nrows; i++)
			if (rows[i].c.q <= 0.0 && !rows[i].c.seeded)
				print_none_row(&rows[i]);

		printf("\n#### Ablation: the model told q\n\n");
		printf("The same cells with the culprit's rate given to the model (`q_known`): the gap to "
		       "the rows "
		       "above is the price of learning q from the bad commit's verdict trials and the "
		       "probes.\n\n");
		fputs(culprit_header, stdout);
		for (unsigned i = 0; i < nrows; i++)
			if (rows[i].c.q_known > 0.0)
				print_culprit_row(&rows[i]);
		printf("\n");
	}

	if (seeded) {
		printf("#### Ranges with a culprit: deterministic per seed (failing seeds replayed)\n\n");
		printf("%u simulated bisections per row, columns as above. *failing seeds*: the seeds that "
		       "failed at the "
		       "bad commit (a first pass of %u fresh seeds, and more where its verdict asked), which "
		       "the model is given and replays first "
		       "at each "
		       "commit, two per probe (at the bad commit first), each once per commit; *trials* "
		       "counts them with the fresh ones. "
		       "*bound*: "
		       "log2(eligible commits) / C(1, f), a replayed failing seed being a q = 1 channel. git "
		       "bisect "
		       "with fresh seeds: r repeats per probe as above; *git, failing seed*: one run per "
		       "probe with "
		       "the first failing seed of the report (r = 1), the accuracy it reaches whatever it "
		       "is.%s\n\n",
		       runs, first_pass, run_whole_batch ? " Probes ran all their trials (-n)." : "");
		fputs(seeded_header, stdout);
		for (unsigned i = 0; i < nrows; i++)
			if (rows[i].c.q > 0.0 && rows[i].c.seeded)
				print_seeded_row(&rows[i]);

		printf("\n#### Ranges without a culprit: the first pass's failing seeds replayed\n\n");
		printf(
		    "The seeded model's f = 0.005 rows: the seeds that failed in the first pass failed by a "
		    "flake, "
		    "and the model replays them first (with f = 0 nothing failed, and the rows are the ones "
		    "above).\n\n");
		fputs(none_header, stdout);
		for (unsigned i = 0; i < nrows; i++)
			if (rows[i].c.q <= 0.0 && rows[i].c.seeded)
				print_none_row(&rows[i]);
	}

	print_targets(rows, nrows);
	for (unsigned i = 0; i < nrows; i++)
		secs += rows[i].seconds;
	fprintf(stderr, "bisect-sim: %u rows, %.1f cpu-seconds\n", nrows, secs);
	if (verbose && race) {
		fprintf(stderr,
			"where the search's trials went (per bisection; probes in brackets):\n"
			"| commits | q | f | slots | q known | bad commit's trials | below parent | parent | "
			"culprit | above | to P=0.5 | to P=0.9 | E[q] start | E[q] end | confirm: "
			"culprit | confirm: parent |\n"
			"| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
			"| ---: | ---: | ---: | ---: |\n");
		for (unsigned i = 0; i < nrows; i++) {
			const struct row *r = &rows[i];
			double u = r->o.runs;

			if (r->c.q <= 0.0 || r->c.seeded)
				continue;
			fprintf(stderr,
				"| %u | %g | %g | %u | %s | %.1f | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | "
				"%.1f (%.1f) | %.1f | %.1f | %.3f | %.3f | %.1f | %.1f |\n",
				r->c.n, r->c.q, r->c.f, r->c.slots, r->c.q_known > 0 ? "yes" : "no",
				r->o.verdict_trials / u, r->o.t_below / u, r->o.p_below / u,
				r->o.t_parent / u, r->o.p_parent / u, r->o.t_culprit / u, r->o.p_culprit / u,
				r->o.t_above / u, r->o.p_above / u, r->o.t_to50 / u, r->o.t_to90 / u,
				r->o.q_first / u, r->o.q_end / u, r->o.c_culprit / u, r->o.c_parent / u);
		}
	}
	if (verbose && seeded) {
		fprintf(
		    stderr,
		    "seeded: where the search's trials went (per bisection; probes in brackets):\n"
		    "| commits | q | f | slots | bad commit's trials | failing seeds | failing-seed trials "
		    "| below parent | parent | culprit | above | to P=0.5 | to P=0.9 | E[q] end | E[q_s] end "
		    "| confirm: culprit | "
		    "confirm: parent |\n"
		    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
		    "---: | ---: | ---: | ---: | ---: |\n");
		for (unsigned i = 0; i < nrows; i++) {
			const struct row *r = &rows[i];
			double u = r->o.runs;

			if (r->c.q <= 0.0 || !r->c.seeded)
				continue;
			fprintf(stderr,
				"| %u | %g | %g | %u | %.1f | %.1f | %.1f | %.1f (%.1f) | %.1f (%.1f) | %.1f "
				"(%.1f) | "
				"%.1f (%.1f) | %.1f | %.1f | %.3f | %.3f | %.1f | %.1f |\n",
				r->c.n, r->c.q, r->c.f, r->c.slots, r->o.verdict_trials / u,
				r->o.nfailing / u, r->o.t_failing / u, r->o.t_below / u, r->o.p_below / u,
				r->o.t_parent / u, r->o.p_parent / u, r->o.t_culprit / u, r->o.p_culprit / u,
				r->o.t_above / u, r->o.p_above / u, r->o.t_to50 / u, r->o.t_to90 / u,
				r->o.q_end / u, r->o.qs_end / u, r->o.c_culprit / u, r->o.c_parent / u);
		}
	}
	if (getenv("BISECT_SIM_DEBUG"))
		for (unsigned i = 0; i < nrows; i++)
			fprintf(stderr,
				"n=%u q=%g f=%g k=%u qk=%g first-try-right=%.1f%% blamed=%.1f%% right=%.1f%% "
				"%.1fs\n",
				rows[i].c.n, rows[i].c.q, rows[i].c.f, rows[i].c.slots, rows[i].c.q_known,
				100.0 * rows[i].o.right_first / rows[i].o.runs,
				100.0 * rows[i].o.blamed / rows[i].o.runs,
				100.0 * rows[i].o.right / rows[i].o.runs, rows[i].seconds);
	return 0;
}
