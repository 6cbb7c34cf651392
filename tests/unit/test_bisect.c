/*
 * Unit tests of the flake-aware bisection model (daemon/bisect.c).
 *
 * Posterior reference values were computed by a direct transcription of the
 * model in Python 3 (no shortcuts: the product of per-probe likelihoods for
 * each hypothesis, marginalised over the same q grid):
 *
 *   def post(n, elig, obs, f, prior_none, qs):
 *       P = []
 *       for i in range(n):
 *           if not elig[i]: P.append(0.0); continue
 *           L = prod(f**s * (1-f)**(t-s) for (j, s, t) in obs if j < i)
 *           M = sum(prod(q**s * (1-q)**(t-s) for (j, s, t) in obs if j >= i)
 *                   for q in qs) / len(qs)
 *           P.append((1 - prior_none) / sum(elig) * L * M)
 *       pn = prior_none * prod(f**s * (1-f)**(t-s) for (j, s, t) in obs)
 *       Z = sum(P) + pn
 *       return [x / Z for x in P], pn / Z
 *
 * with qs = [0.02 * r**g for g in range(16)], r = (0.999/0.02)**(1/15),
 * qs[15] = 0.999.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <string.h>

#include "bisect.h"

static void near(double got, double want, double rel, const char *what)
{
	double tol = rel * fmax(fabs(want), 1e-300);

	if (!(fabs(got - want) <= tol)) {
		print_error("%s: got %.15g, want %.15g (rel tol %g)\n", what, got, want, rel);
		fail();
	}
}

/* splitmix64: a small deterministic generator for simulated probes. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static bool rng_bern(uint64_t *s, double p)
{
	return (rng_next(s) >> 11) * 0x1p-53 < p;
}

/* A simulated history: commits at or after 'bug' fail at q, the others at f. */
struct world {
	int bug; /* BISECT_NONE: no culprit */
	double q, f;
	uint64_t rng;
};

static unsigned run(struct world *w, int commit, unsigned trials, bool stop, unsigned *ran)
{
	double rate = w->bug != BISECT_NONE && commit >= w->bug ? w->q : w->f;
	unsigned fails = 0, t;

	for (t = 0; t < trials; t++)
		if (rng_bern(&w->rng, rate)) {
			fails++;
			if (stop) {
				t++;
				break;
			}
		}
	*ran = t;
	return fails;
}

/* Runs the search to its end with k slots; returns the rounds, checks every plan. */
static unsigned search(struct bisect *b, struct world *w, unsigned k)
{
	struct bisect_plan plan[8];
	unsigned rounds = 0, n, ran;

	while (bisect_done(b, NULL, NULL) == BISECT_RUNNING) {
		assert_int_equal(bisect_next_probes(b, k, plan, &n), 0);
		assert_true(n >= 1 && n <= k);
		for (unsigned x = 0; x < n; x++) {
			unsigned fails;

			/* Never a commit without its own binary. */
			assert_int_equal(b->flags[plan[x].commit], 0);
			for (unsigned y = 0; y < x; y++)
				assert_int_not_equal(plan[x].commit, plan[y].commit);
			/* A split probe is the round's only one, of fresh seeds, a part per slot. */
			assert_true(plan[x].parts >= 1 && plan[x].parts <= k);
			if (plan[x].parts > 1) {
				assert_int_equal(n, 1);
				assert_false(plan[x].failing_seeds);
				assert_true(plan[x].trials >= plan[x].parts);
			}
			/* Each part stops at its own first failure, as the daemon's jobs do. */
			for (unsigned y = 0; y < plan[x].parts; y++) {
				unsigned size =
				    plan[x].trials / plan[x].parts + (y < plan[x].trials % plan[x].parts);

				fails = run(w, (int)plan[x].commit, size, plan[x].stop_on_failure, &ran);
				assert_int_equal(
				    bisect_observe(b, plan[x].commit, fails, ran, plan[x].failing_seeds), 0);
			}
		}
		rounds++;
		assert_true(rounds < 10000);
	}
	return rounds;
}

static void posterior_known_q(void **state)
{
	struct bisect_params p;
	struct bisect b;
	double post[3], none;

	/*
	 * Three commits, q known (0.5), f = 0.01, 10% on "no culprit"; one
	 * failure in two trials at commit 1. By hand: likelihoods 0.25, 0.25,
	 * 0.0099 (commit 1 precedes culprit 2, so it fails at f), 0.0099 for
	 * none; times priors 0.3, 0.3, 0.3, 0.1 and normalised.
	 */
	bisect_params_default(&p);
	p.flake_rate = 0.01;
	p.q_known = 0.5;
	assert_int_equal(bisect_init(&b, 3, NULL, &p), 0);
	assert_int_equal(bisect_observe(&b, 1, 1, 2, false), 0);
	assert_int_equal(bisect_posterior(&b, post, &none), 0);
	near(post[0], 0.075 / 0.15396, 1e-12, "c0");
	near(post[1], 0.487139516757599, 1e-12, "c1");
	near(post[2], 0.0192907248636009, 1e-12, "c2");
	near(none, 0.00643024162120031, 1e-12, "none");
	bisect_release(&b);
}

static void posterior_q_grid(void **state)
{
	struct bisect b;
	double post[5], none;
	const uint8_t flags[5] = {0, BISECT_UNBUILDABLE, BISECT_SAME_BINARY, 0, 0};
	struct bisect_params p;

	/* Marginalised over the q grid: see the Python model in the header. */
	assert_int_equal(bisect_init(&b, 4, NULL, NULL), 0);
	assert_int_equal(bisect_observe(&b, 3, 3, 10, false), 0);
	assert_int_equal(bisect_observe(&b, 1, 0, 20, false), 0);
	assert_int_equal(bisect_observe(&b, 2, 1, 5, false), 0);
	assert_int_equal(bisect_posterior(&b, post, &none), 0);
	near(post[0], 0.0248251523856201, 1e-10, "grid c0");
	near(post[1], 0.0248251523856201, 1e-10, "grid c1");
	near(post[2], 0.936213976752374, 1e-10, "grid c2");
	near(post[3], 0.0141357091013832, 1e-10, "grid c3");
	near(none, 9.37500291798332e-09, 1e-8, "grid none");
	bisect_release(&b);

	/* An unbuildable and a same-binary commit: probability exactly 0. */
	bisect_params_default(&p);
	p.flake_rate = 0.005;
	assert_int_equal(bisect_init(&b, 5, flags, &p), 0);
	assert_int_equal(bisect_observe(&b, 4, 2, 10, false), 0);
	assert_int_equal(bisect_observe(&b, 3, 1, 10, false), 0);
	assert_int_equal(bisect_observe(&b, 0, 0, 30, false), 0);
	assert_int_equal(bisect_posterior(&b, post, &none), 0);
	near(post[0], 0.0514692975646137, 1e-10, "flags c0");
	assert_true(post[1] == 0.0 && post[2] == 0.0);
	near(post[3], 0.803317184356417, 1e-10, "flags c3");
	near(post[4], 0.144772846168743, 1e-10, "flags c4");
	near(none, 0.00044067191022735, 1e-8, "flags none");
	bisect_release(&b);
}

static void bad_input(void **state)
{
	struct bisect_params p;
	struct bisect b;
	struct bisect_plan plan[2];
	unsigned n;

	assert_int_equal(bisect_init(&b, 0, NULL, NULL), -EINVAL);
	assert_int_equal(bisect_init(&b, BISECT_RANGE_MAX + 1, NULL, NULL), -E2BIG);
	bisect_params_default(&p);
	p.confidence = 1.0;
	assert_int_equal(bisect_init(&b, 4, NULL, &p), -EINVAL);
	bisect_params_default(&p);
	p.q_known = 0.0005; /* below the flake rate: no culprit could be told apart */
	assert_int_equal(bisect_init(&b, 4, NULL, &p), -EINVAL);
	assert_int_equal(bisect_init(&b, 4, NULL, NULL), 0);
	assert_int_equal(bisect_observe(&b, 4, 0, 1, false), -EINVAL);
	assert_int_equal(bisect_observe(&b, 0, 2, 1, false), -EINVAL);
	assert_int_equal(bisect_next_probes(&b, 0, plan, &n), -EINVAL);
	bisect_release(&b);
	/* Nothing eligible: over at once, nobody blamed. */
	{
		const uint8_t all[2] = {BISECT_UNBUILDABLE, BISECT_SAME_BINARY};
		int c;

		assert_int_equal(bisect_init(&b, 2, all, NULL), 0);
		assert_int_equal(bisect_done(&b, &c, NULL), BISECT_EXHAUSTED);
		assert_int_equal(bisect_next_probes(&b, 2, plan, &n), 0);
		assert_int_equal(n, 0);
		bisect_release(&b);
	}
}

static void deterministic_in_log2_rounds(void **state)
{
	struct bisect b;
	unsigned worst = 0, worst4 = 0;

	/*
	 * A deterministic culprit (every trial after it fails; the bad commit's
	 * first pass failed 64 of 64) at every position of 64 commits: found in
	 * about log2(64) = 6 rounds with one slot, about log5(64) = 2.6 with
	 * four (k-section).
	 */
	for (int bug = 0; bug < 64; bug++) {
		struct world w = {.bug = bug, .q = 1.0, .f = 0.0, .rng = 1 + bug};
		unsigned rounds;
		int c;

		assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
		assert_int_equal(bisect_observe(&b, 63, 64, 64, false), 0);
		rounds = search(&b, &w, 1);
		assert_int_equal(bisect_done(&b, &c, NULL), BISECT_FOUND);
		assert_int_equal(c, bug);
		assert_true(b.total_trials <= 64 + 9);
		worst = rounds > worst ? rounds : worst;
		bisect_release(&b);

		assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
		assert_int_equal(bisect_observe(&b, 63, 64, 64, false), 0);
		rounds = search(&b, &w, 4);
		assert_int_equal(bisect_done(&b, &c, NULL), BISECT_FOUND);
		assert_int_equal(c, bug);
		worst4 = rounds > worst4 ? rounds : worst4;
		bisect_release(&b);
	}
	if (worst > 8 || worst4 > 4) {
		print_error("rounds: worst %u with one slot (want <= 8), %u with four (want <= 4)\n", worst,
			    worst4);
		fail();
	}
}

static void long_probes_split_over_the_slots(void **state)
{
	struct bisect_plan one, plan[4];
	struct bisect b;
	unsigned n, n1, sectioned = 0, trials1 = 0, trials4 = 0;

	(void)state;
	/*
	 * A rare culprit (q = 0.05): the probe one slot would run is long, so
	 * four slots split it (the same commit and trials, in four parts)
	 * rather than probe four commits; the search still names the culprit,
	 * in about the trials one slot takes.
	 */
	for (int bug = 3; bug < 64; bug += 10) {
		struct world w = {.bug = bug, .q = 0.05, .f = 0.0, .rng = 7 + (uint64_t)bug};
		int c;

		assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
		assert_int_equal(bisect_observe(&b, 63, 3, 64, false), 0);
		assert_int_equal(bisect_next_probes(&b, 1, &one, &n1), 0);
		assert_int_equal(bisect_next_probes(&b, 4, plan, &n), 0);
		assert_int_equal(n1, 1);
		assert_true(one.trials >= 4);
		assert_int_equal(n, 1);
		assert_int_equal(plan[0].parts, 4);
		assert_int_equal(plan[0].commit, one.commit);
		assert_int_equal(plan[0].trials, one.trials);
		search(&b, &w, 4);
		assert_int_equal(bisect_done(&b, &c, NULL), BISECT_FOUND);
		assert_int_equal(c, bug);
		trials4 += (unsigned)b.total_trials - 64;
		bisect_release(&b);

		w.rng = 7 + (uint64_t)bug;
		assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
		assert_int_equal(bisect_observe(&b, 63, 3, 64, false), 0);
		search(&b, &w, 1);
		trials1 += (unsigned)b.total_trials - 64;
		bisect_release(&b);
	}
	if (trials4 > trials1 * 5 / 4) {
		print_error("4 slots took %u trials, one slot %u\n", trials4, trials1);
		fail();
	}
	/* A deterministic culprit's probes are one trial: four commits at once (k-section). */
	assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
	assert_int_equal(bisect_observe(&b, 63, 64, 64, false), 0);
	assert_int_equal(bisect_next_probes(&b, 4, plan, &n), 0);
	assert_int_equal(n, 4);
	for (unsigned x = 0; x < n; x++) {
		assert_int_equal(plan[x].parts, 1);
		sectioned++;
	}
	bisect_release(&b);
	assert_int_equal(sectioned, 4);
	/*
	 * q = 0.3: the probe one slot would run plans a few trials, fewer than
	 * the slots; they are split too (one part each), so that no slot probes
	 * a commit one slot would not have looked at.
	 */
	assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
	assert_int_equal(bisect_observe(&b, 63, 19, 64, false), 0);
	assert_int_equal(bisect_next_probes(&b, 1, &one, &n1), 0);
	assert_int_equal(bisect_next_probes(&b, 4, plan, &n), 0);
	assert_true(one.trials >= 2 && one.trials < 4);
	assert_int_equal(n, 1);
	assert_int_equal(plan[0].commit, one.commit);
	assert_int_equal(plan[0].parts, one.trials);
	bisect_release(&b);
}

static void unbuildable_and_same_binary_never_blamed(void **state)
{
	uint8_t flags[32] = {0};
	struct bisect b;
	double post[32];

	/*
	 * The change that breaks things is in commit 10, which does not build,
	 * and 11 has the same binary as 10's parent chain: the first commit that
	 * can be blamed is 12. Commits 20 and 21 are unbuildable / same binary
	 * as well. The search must name 12 and never probe a flagged commit
	 * (search() asserts that for every plan).
	 */
	flags[10] = BISECT_UNBUILDABLE;
	flags[11] = BISECT_SAME_BINARY;
	flags[20] = BISECT_UNBUILDABLE;
	flags[21] = BISECT_SAME_BINARY;
	for (unsigned s = 0; s < 10; s++) {
		struct world w = {.bug = 10, .q = 0.3, .f = 0.002, .rng = 100 + s};
		int c;

		assert_int_equal(bisect_init(&b, 32, flags, NULL), 0);
		assert_int_equal(bisect_observe(&b, 31, 20, 64, false), 0);
		search(&b, &w, s % 2 ? 2 : 1);
		assert_int_equal(bisect_done(&b, &c, NULL), BISECT_FOUND);
		assert_int_equal(c, 12);
		assert_int_equal(bisect_posterior(&b, post, NULL), 0);
		assert_true(post[10] == 0.0 && post[11] == 0.0 && post[20] == 0.0 && post[21] == 0.0);
		/* The parent re-tested beside it is the nearest commit with a binary. */
		assert_int_equal(bisect_confirm_parent(&b, 12), 11);
		assert_int_equal(bisect_confirm_parent(&b, 0), BISECT_NONE);
		bisect_release(&b);
	}
	/* Flags learnt during the search (a build failed) take effect at once. */
	assert_int_equal(bisect_init(&b, 4, NULL, NULL), 0);
	assert_int_equal(bisect_set_flags(&b, 2, BISECT_UNBUILDABLE), 0);
	assert_int_equal(bisect_posterior(&b, post, NULL), 0);
	assert_true(post[2] == 0.0);
	bisect_release(&b);
}

static void flakes_only_end_in_no_culprit(void **state)
{
	struct bisect b;
	unsigned none = 0;

	/*
	 * 48 commits, no culprit, everything flakes at 0.5%; the first signal was
	 * one of those flakes (2 failures in 64 at the bad commit). Nobody may be
	 * blamed: the search ends in "no culprit", or names a commit that the
	 * confirmation with fresh seeds withdraws.
	 */
	for (unsigned s = 0; s < 12; s++) {
		struct world w = {.bug = BISECT_NONE, .q = 0.0, .f = 0.005, .rng = 7000 + s};
		struct bisect_params p;
		struct bisect_confirm_result cr;
		enum bisect_status st;
		int c;

		bisect_params_default(&p);
		p.flake_rate = 0.005;
		assert_int_equal(bisect_init(&b, 48, NULL, &p), 0);
		assert_int_equal(bisect_observe(&b, 47, 2, 64, false), 0);
		search(&b, &w, 1 + s % 3);
		st = bisect_done(&b, &c, NULL);
		assert_int_not_equal(st, BISECT_RUNNING);
		none += st == BISECT_NO_CULPRIT;
		if (st == BISECT_FOUND) {
			unsigned cf = 0, ct = 0, pf = 0, pt = 0, ran;
			int parent = bisect_confirm_parent(&b, (unsigned)c);

			do {
				assert_int_equal(bisect_confirm(&b, (unsigned)c, cf, ct, pf, pt, 0, &cr), 0);
				cf += run(&w, c, cr.more_culprit, false, &ran);
				ct += ran;
				pf += run(&w, parent, cr.more_parent, false, &ran);
				pt += ran;
			} while (cr.verdict == BISECT_CONFIRM_CONTINUE);
			assert_int_equal(cr.verdict, BISECT_WITHDRAWN);
		}
		bisect_release(&b);
	}
	if (none < 10) {
		print_error("only %u of 12 flake-only ranges ended in \"no culprit\"\n", none);
		fail();
	}
}

static void rare_culprit_with_two_slots_and_resume(void **state)
{
	uint8_t flags[64] = {0};
	struct bisect a, b;
	struct bisect_plan pa[2], pb[2];
	uint64_t pick = 42;
	unsigned na, nb, ran, rounds = 0;
	int ca, cb;
	json_t *j;

	/*
	 * The demo: 64 commits, a culprit failing 5% of trials at a
	 * random position, three unbuildable commits and two that change
	 * nothing in the binary, two slots. Half-way the state is saved to JSON
	 * (what the daemon has in PostgreSQL), "the daemon is killed", and a
	 * bisection restored from it must make exactly the same plans as one
	 * that never stopped: no probe repeated, none lost.
	 */
	flags[5] = flags[33] = flags[50] = BISECT_UNBUILDABLE;
	flags[12] = flags[40] = BISECT_SAME_BINARY;
	struct world w = {.q = 0.05, .f = 0.0, .rng = 99};

	do
		w.bug = (int)(rng_next(&pick) % 64);
	while (flags[w.bug]);
	assert_int_equal(bisect_init(&a, 64, flags, NULL), 0);
	assert_int_equal(bisect_observe(&a, 63, 4, 64, false), 0);
	while (bisect_done(&a, NULL, NULL) == BISECT_RUNNING && rounds < 6) {
		assert_int_equal(bisect_next_probes(&a, 2, pa, &na), 0);
		for (unsigned x = 0; x < na; x++) {
			unsigned fails = run(&w, (int)pa[x].commit, pa[x].trials, true, &ran);

			assert_int_equal(bisect_observe(&a, pa[x].commit, fails, ran, false), 0);
		}
		rounds++;
	}
	j = bisect_to_json(&a);
	assert_non_null(j);
	assert_int_equal(bisect_from_json(&b, j), 0);
	json_decref(j);
	assert_int_equal(b.nprobes, a.nprobes);
	assert_int_equal(b.total_trials, a.total_trials);
	/* Both go on from the same state with the same outcomes. */
	while (bisect_done(&a, &ca, NULL) == BISECT_RUNNING) {
		assert_int_equal(bisect_next_probes(&a, 2, pa, &na), 0);
		assert_int_equal(bisect_next_probes(&b, 2, pb, &nb), 0);
		assert_int_equal(na, nb);
		for (unsigned x = 0; x < na; x++) {
			unsigned fails;

			assert_int_equal(pa[x].commit, pb[x].commit);
			assert_int_equal(pa[x].trials, pb[x].trials);
			fails = run(&w, (int)pa[x].commit, pa[x].trials, true, &ran);
			assert_int_equal(bisect_observe(&a, pa[x].commit, fails, ran, false), 0);
			assert_int_equal(bisect_observe(&b, pb[x].commit, fails, ran, false), 0);
		}
	}
	assert_int_equal(bisect_done(&b, &cb, NULL), BISECT_FOUND);
	assert_int_equal(ca, cb);
	assert_int_equal(cb, w.bug);
	bisect_release(&a);
	bisect_release(&b);
}

static void replay_order_does_not_matter(void **state)
{
	const struct bisect_probe probes[] = {
	    {30, 40, 0, false, false}, {60, 7, 1, false, false}, {45, 20, 1, false, false},
	    {38, 60, 0, false, true},  {41, 15, 1, true, false}, {39, 50, 0, false, false},
	    {40, 12, 1, false, false},
	};
	struct bisect_probe rev[7];
	struct bisect a, b;
	double pa[64], pb[64], na, nb;

	for (int i = 0; i < 7; i++)
		rev[i] = probes[6 - i];
	assert_int_equal(bisect_init(&a, 64, NULL, NULL), 0);
	assert_int_equal(bisect_init(&b, 64, NULL, NULL), 0);
	assert_int_equal(bisect_replay(&a, probes, 7), 0);
	assert_int_equal(bisect_replay(&b, rev, 7), 0);
	assert_int_equal(bisect_posterior(&a, pa, &na), 0);
	assert_int_equal(bisect_posterior(&b, pb, &nb), 0);
	assert_memory_equal(pa, pb, sizeof(pa));
	assert_true(na == nb);
	/* The evidence points at 40 or 41. */
	assert_true(pa[40] + pa[41] > 0.5);
	bisect_release(&a);
	bisect_release(&b);
}

static void json_rejects_garbage(void **state)
{
	struct bisect b;
	json_t *j;

	j = json_loads(
	    "{\"n\": 3, \"params\": {\"confidence\": 0.99, \"prior_none\": 0.1, \"flake_rate\": 0.001,"
	    " \"q_min\": 0.02}, \"flags\": [0, 0, 0], \"probes\": [[5, 10, 1, false]]}",
	    0, NULL);
	assert_non_null(j);
	assert_int_equal(bisect_from_json(&b, j), -EINVAL); /* commit 5 of 3 */
	json_decref(j);
	j = json_loads(
	    "{\"n\": 3, \"params\": {\"confidence\": 0.99, \"prior_none\": 0.1, \"flake_rate\": 0.001,"
	    " \"q_min\": 0.02}, \"flags\": [0, 0], \"probes\": []}",
	    0, NULL);
	assert_int_equal(bisect_from_json(&b, j), -EINVAL); /* flags of the wrong length */
	json_decref(j);
	j = json_loads(
	    "{\"n\": 3, \"params\": {\"confidence\": 0.99, \"prior_none\": 0.1, \"flake_rate\": 0.001,"
	    " \"q_min\": 0.02}, \"flags\": [0, 0, 0], \"probes\": [[1, 10, 11, false]]}",
	    0, NULL);
	assert_int_equal(bisect_from_json(&b, j), -EINVAL); /* more failures than trials */
	json_decref(j);
}

static void confirmation(void **state)
{
	struct bisect b;
	struct bisect_confirm_result cr;

	assert_int_equal(bisect_init(&b, 16, NULL, NULL), 0);
	assert_int_equal(bisect_observe(&b, 15, 64, 64, false), 0);
	assert_int_equal(bisect_observe(&b, 7, 1, 1, false), 0);
	assert_int_equal(bisect_observe(&b, 6, 0, 1, false), 0);
	/* Fails every time, parent clean: confirmed. */
	assert_int_equal(bisect_confirm(&b, 7, 5, 5, 0, 5, 0, &cr), 0);
	assert_int_equal(cr.verdict, BISECT_CONFIRMED);
	assert_int_equal(cr.parent, 6);
	/* The fresh seeds never fail on the culprit: withdrawn. */
	assert_int_equal(bisect_confirm(&b, 7, 0, 20, 0, 20, 0, &cr), 0);
	assert_int_equal(cr.verdict, BISECT_WITHDRAWN);
	/* The parent fails as well: the failure is older, withdrawn. */
	assert_int_equal(bisect_confirm(&b, 7, 5, 5, 5, 5, 0, &cr), 0);
	assert_int_equal(cr.verdict, BISECT_WITHDRAWN);
	/* Nothing run yet: asks for trials on both. */
	assert_int_equal(bisect_confirm(&b, 7, 0, 0, 0, 0, 0, &cr), 0);
	assert_int_equal(cr.verdict, BISECT_CONFIRM_CONTINUE);
	assert_true(cr.more_culprit > 0 && cr.more_parent > 0);
	bisect_release(&b);

	/* A rare culprit: q near 0.05, so the parent needs about 90+ clean trials. */
	assert_int_equal(bisect_init(&b, 16, NULL, NULL), 0);
	assert_int_equal(bisect_observe(&b, 15, 5, 100, false), 0);
	assert_int_equal(bisect_observe(&b, 8, 3, 60, false), 0);
	assert_int_equal(bisect_observe(&b, 7, 0, 150, false), 0);
	assert_int_equal(bisect_confirm(&b, 8, 2, 40, 0, 30, 0, &cr), 0);
	assert_int_equal(cr.verdict, BISECT_CONFIRM_CONTINUE);
	assert_int_equal(cr.more_culprit, 0); /* two failures in 40 already show it */
	assert_true(cr.more_parent > 30);
	assert_int_equal(bisect_confirm(&b, 8, 2, 40, 0, 30 + cr.more_parent, 0, &cr), 0);
	assert_int_equal(cr.verdict, BISECT_CONFIRMED);
	bisect_release(&b);
}

static void failing_seeds_first(void **state)
{
	struct bisect_params p;
	struct bisect b;
	struct bisect_plan plan[1];
	unsigned n;

	/* Three seeds failed at the bad commit: they are replayed there first, two at a time, run whole. */
	bisect_params_default(&p);
	p.failing_seeds = 3;
	assert_int_equal(bisect_init(&b, 32, NULL, &p), 0);
	assert_int_equal(bisect_observe(&b, 31, 3, 64, false), 0);
	assert_int_equal(bisect_next_probes(&b, 1, plan, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(plan[0].commit, 31);
	assert_true(plan[0].failing_seeds);
	assert_false(plan[0].stop_on_failure);
	assert_int_equal(plan[0].trials, 2);
	/*
	 * They fail again there (a deterministic, seed-bound bug); then the
	 * search proper, one failing seed per probe: two of two at the bad
	 * commit already make a replayed seed as good as certain (E[q_s]).
	 */
	assert_int_equal(bisect_observe(&b, 31, 2, 2, true), 0);
	assert_int_equal(bisect_next_probes(&b, 1, plan, &n), 0);
	assert_int_not_equal(plan[0].commit, 31);
	assert_true(plan[0].failing_seeds);
	assert_int_equal(plan[0].trials, 1);
	assert_int_equal(bisect_observe(&b, plan[0].commit, 1, 1, true), 0);
	{
		unsigned first = plan[0].commit;

		assert_int_equal(bisect_next_probes(&b, 1, plan, &n), 0);
		assert_int_not_equal(plan[0].commit, first);
		assert_true(plan[0].failing_seeds);
		/* q_s is learnt on its own grid: near 1 after three of three, fresh trials' rate still near 3/64. */
		assert_true(b.qbar_s[first] > 0.9);
		assert_true(b.qbar[first] < 0.2);
	}
	bisect_release(&b);
}

/*
 * Every trial failed at the bad commit and every rerun too: a race and a
 * seed-bound bug look alike there, and either way the reruns stand for the
 * failing seeds' replay at the bad commit (seed-bound), so the search spends
 * no round there and replays one seed per probe: one trial a probe, as git
 * bisect. (Giving the failing seeds up instead would leave a bug failing 97%
 * of fresh seeds to fresh passes past the culprit, read as strong evidence.)
 */
static void every_seed_fails_no_round_at_the_bad_commit(void **state)
{
	struct bisect_params p;
	struct bisect b;
	struct bisect_plan plan[1];
	unsigned n, probes = 0;
	int culprit;

	(void)state;
	assert_int_equal(bisect_judge_seeds(64, 64, 64, 64, 0.001), BISECT_SEEDS_BOUND);
	assert_int_equal(bisect_judge_seeds(3, 3, 3, 3, 0.001), BISECT_SEEDS_BOUND);
	/* One rerun that passed: the rule does not apply, the odds decide. */
	assert_int_not_equal(bisect_judge_seeds(64, 64, 64, 63, 0.001), BISECT_SEEDS_BOUND);
	bisect_params_default(&p);
	p.failing_seeds = 64;
	assert_int_equal(bisect_init(&b, 32, NULL, &p), 0);
	assert_int_equal(bisect_observe(&b, 31, 64, 64, false), 0);
	/* As the daemon records them (bisector.c): the reruns are the replay at the bad commit. */
	assert_int_equal(bisect_observe(&b, 31, 64, 64, true), 0);
	while (bisect_next_probes(&b, 1, plan, &n) == 0 && n > 0) {
		assert_true(plan[0].failing_seeds);
		assert_int_equal(plan[0].trials, 1);
		assert_int_not_equal(plan[0].commit, 31);
		/* The culprit is 11: every trial from it on fails. */
		assert_int_equal(bisect_observe(&b, plan[0].commit, plan[0].commit >= 11, 1, true), 0);
		probes++;
	}
	assert_int_equal(bisect_done(&b, &culprit, NULL), BISECT_FOUND);
	assert_int_equal(culprit, 11);
	/* A binary search over 31 candidates: five probes, a sixth at most. */
	assert_true(probes <= 6);
	bisect_release(&b);
}

/*
 * A seed-bound bug (its failing seeds fail at every commit from the culprit,
 * 10, on): the failing seeds go two per probe until a replayed seed is as
 * good as certain to fail past the culprit (E[q_s] over the posterior at
 * least 0.99), then one per probe.
 */
static void failing_seeds_one_per_probe_once_certain(void **state)
{
	struct bisect_params p;
	struct bisect b;
	struct bisect_plan plan[1];
	unsigned n, round, pairs = 0;
	bool single = false;

	(void)state;
	bisect_params_default(&p);
	p.failing_seeds = 4;
	assert_int_equal(bisect_init(&b, 32, NULL, &p), 0);
	assert_int_equal(bisect_observe(&b, 31, 4, 64, false), 0);
	for (round = 0; round < 40 && !single; round++) {
		unsigned c, fails, ran;

		assert_int_equal(bisect_next_probes(&b, 1, plan, &n), 0);
		if (n == 0)
			break;
		c = plan[0].commit;
		if (plan[0].failing_seeds && plan[0].trials == 1) {
			double m = 0.0, z = 0.0;

			for (unsigned i = 0; i < b.n; i++) {
				m += b.post[i] * b.qbar_s[i];
				z += b.post[i];
			}
			assert_true(m >= 0.99 * z);
			single = true;
			break;
		}
		if (plan[0].failing_seeds) {
			assert_int_equal(plan[0].trials, 2);
			pairs++;
			ran = 2;
			fails = c >= 10 ? 2 : 0;
		} else {
			ran = c >= 10 ? 1 : plan[0].trials;
			fails = c >= 10 ? 1 : 0;
		}
		assert_int_equal(bisect_observe(&b, c, fails, ran, plan[0].failing_seeds), 0);
	}
	assert_true(pairs >= 1); /* two at a time while q_s is still being learnt */
	assert_true(single);
	bisect_release(&b);
}

/*
 * The failing seeds, driven as daemon/bisector.c drives them: a probe
 * replays the list from the model's own count of failing-seed trials at its
 * commit (b->trial[1]), and the slot runs them in order, stopping at the
 * first failure when the plan says so. No seed runs twice at a commit, no
 * plan asks for more seeds than are left there (the daemon would trim it to
 * nothing and queue an empty round, planned again the same), every round
 * queues trials, and a deterministic culprit is found in few trials: seeds
 * 0, 1 and 3 are the culprit's, seed 2 failed by a flake. Two slots and one.
 */
static void failing_seeds_as_the_daemon_runs_them(void **state)
{
	static const bool culprits_seed[4] = {true, true, false, true};
	const unsigned nfailing = 4, ncommits = 64;

	(void)state;
	for (unsigned k = 1; k <= 2; k++) {
		for (int bug = 0; bug < (int)ncommits; bug += 7) {
			struct world w = {.bug = bug, .q = 0.05, .f = 0.0, .rng = 99 + (uint64_t)bug};
			bool used[64][4] = {{false}};
			struct bisect_params p;
			struct bisect b;
			struct bisect_plan plan[2];
			unsigned n, rounds = 0;
			int culprit;

			bisect_params_default(&p);
			p.failing_seeds = nfailing;
			assert_int_equal(bisect_init(&b, ncommits, NULL, &p), 0);
			assert_int_equal(bisect_observe(&b, ncommits - 1, 3, 64, false), 0);
			while (bisect_done(&b, NULL, NULL) == BISECT_RUNNING) {
				unsigned queued = 0;

				assert_int_equal(bisect_next_probes(&b, k, plan, &n), 0);
				assert_true(n >= 1);
				for (unsigned x = 0; x < n; x++) {
					unsigned c = plan[x].commit, fails = 0, ran = 0;

					if (plan[x].failing_seeds) {
						unsigned offset = b.trial[1][c];

						assert_true(plan[x].trials >= 1);
						assert_true(offset + plan[x].trials <= nfailing);
						for (unsigned s = offset; s < offset + plan[x].trials; s++) {
							assert_false(used[c][s]);
							used[c][s] = true;
							ran++;
							if (culprits_seed[s] && (int)c >= bug) {
								fails++;
								if (plan[x].stop_on_failure)
									break;
							}
						}
					} else {
						fails = run(&w, (int)c, plan[x].trials,
							    plan[x].stop_on_failure, &ran);
					}
					queued += ran;
					assert_int_equal(
					    bisect_observe(&b, c, fails, ran, plan[x].failing_seeds), 0);
				}
				assert_true(queued > 0);
				assert_true(++rounds < 1000);
			}
			assert_int_equal(bisect_done(&b, &culprit, NULL), BISECT_FOUND);
			assert_int_equal(culprit, bug);
			bisect_release(&b);
		}
	}
}

/*
 * A lone probe stops at the passes that would end the search: had it run
 * one trial fewer (all passing), the search would still be running. Checked
 * on copies of the bisection (bisect_to_json), over whole searches.
 */
static void lone_probe_stops_at_the_decision(void **state)
{
	unsigned capped = 0;

	(void)state;
	for (uint64_t seed = 1; seed <= 6; seed++) {
		struct world w = {.bug = 9, .q = 0.3, .f = 0.01, .rng = seed};
		struct bisect b;
		struct bisect_params p;
		unsigned rounds = 0;

		bisect_params_default(&p);
		p.flake_rate = 0.01;
		assert_int_equal(bisect_init(&b, 16, NULL, &p), 0);
		assert_int_equal(bisect_observe(&b, 15, 20, 64, false), 0);
		while (bisect_done(&b, NULL, NULL) == BISECT_RUNNING) {
			struct bisect_plan plan;
			struct bisect all, fewer;
			json_t *j;
			unsigned n, fails, ran;

			assert_int_equal(bisect_next_probes(&b, 1, &plan, &n), 0);
			assert_int_equal(n, 1);
			j = bisect_to_json(&b);
			assert_non_null(j);
			assert_int_equal(bisect_from_json(&all, j), 0);
			assert_int_equal(bisect_from_json(&fewer, j), 0);
			json_decref(j);
			assert_int_equal(
			    bisect_observe(&all, plan.commit, 0, plan.trials, plan.failing_seeds), 0);
			assert_int_equal(
			    bisect_observe(&fewer, plan.commit, 0, plan.trials - 1, plan.failing_seeds), 0);
			if (bisect_done(&all, NULL, NULL) != BISECT_RUNNING) {
				capped++;
				assert_int_equal(bisect_done(&fewer, NULL, NULL), BISECT_RUNNING);
			}
			bisect_release(&all);
			bisect_release(&fewer);
			fails = run(&w, (int)plan.commit, plan.trials, true, &ran);
			assert_int_equal(bisect_observe(&b, plan.commit, fails, ran, plan.failing_seeds), 0);
			assert_true(++rounds < 1000);
		}
		bisect_release(&b);
	}
	/* The situation arises: some probes could have ended the search by passing. */
	assert_true(capped > 0);
}

/*
 * bisect_judge_seeds(): the bad commit's reruns of its failing seeds tell a
 * race (reruns fail at the first pass's rate) from a seed-bound failure
 * (reruns fail again but for the flakes among them), each at odds of 99.
 */
static void failing_seeds_judged_by_their_reruns(void **state)
{
	(void)state;
	/* A race at 30%: 19 of 64 failed, 6 of their reruns did. */
	assert_int_equal(bisect_judge_seeds(19, 64, 19, 6, 0.001), BISECT_SEEDS_RACE);
	/* A race at 5%: none of the 3 failed again. */
	assert_int_equal(bisect_judge_seeds(3, 64, 3, 0, 0.001), BISECT_SEEDS_RACE);
	/* Seed-bound: 3 of 3 failed again; with a flake among 4 at f = 0.5%, 3 of 4. */
	assert_int_equal(bisect_judge_seeds(3, 64, 3, 3, 0.001), BISECT_SEEDS_BOUND);
	assert_int_equal(bisect_judge_seeds(4, 64, 4, 3, 0.005), BISECT_SEEDS_BOUND);
	/*
	 * One of one failed again: 41 times likelier seed-bound (0.957 against
	 * 0.023), short of 99. Two of three: either way short of 99.
	 */
	assert_int_equal(bisect_judge_seeds(1, 64, 1, 1, 0.001), BISECT_SEEDS_UNSURE);
	assert_int_equal(bisect_judge_seeds(3, 64, 3, 2, 0.005), BISECT_SEEDS_UNSURE);
	/*
	 * Everything fails: a race and a seed-bound failure look alike, and a
	 * failing seed fails again as surely as any: seed-bound
	 * (every_seed_fails_no_round_at_the_bad_commit).
	 */
	assert_int_equal(bisect_judge_seeds(64, 64, 64, 64, 0.001), BISECT_SEEDS_BOUND);
	/* Nearly everything fails: still alike, and the odds say so. */
	assert_int_equal(bisect_judge_seeds(63, 64, 63, 63, 0.001), BISECT_SEEDS_UNSURE);
	/* Nothing rerun, or counts that cannot be. */
	assert_int_equal(bisect_judge_seeds(3, 64, 0, 0, 0.001), BISECT_SEEDS_UNSURE);
	assert_int_equal(bisect_judge_seeds(3, 64, 3, 4, 0.001), BISECT_SEEDS_UNSURE);
	assert_int_equal(bisect_judge_seeds(65, 64, 3, 3, 0.001), BISECT_SEEDS_UNSURE);
	assert_int_equal(bisect_judge_seeds(0, 0, 3, 3, 0.001), BISECT_SEEDS_UNSURE);
	assert_string_equal(bisect_seeds_name(BISECT_SEEDS_RACE), "race");
	assert_string_equal(bisect_seeds_name(BISECT_SEEDS_BOUND), "seed_bound");
}

/*
 * A seed-bound failure's reruns recorded as the replay at the bad commit:
 * the first round goes straight into the range, one failing seed per probe
 * once they are as good as certain, as bench/bisect-sim measures.
 */
static void seed_bound_reruns_skip_the_first_round(void **state)
{
	struct bisect b;
	struct bisect_params p;
	struct bisect_plan plan[4];
	unsigned np = 0;

	(void)state;
	bisect_params_default(&p);
	p.failing_seeds = 3;
	assert_int_equal(bisect_init(&b, 64, NULL, &p), 0);
	assert_int_equal(bisect_observe(&b, 63, 3, 64, false), 0);
	assert_int_equal(bisect_observe(&b, 63, 3, 3, true), 0);
	assert_int_equal(bisect_next_probes(&b, 1, plan, &np), 0);
	assert_int_equal(np, 1);
	assert_true(plan[0].commit < 63);
	assert_true(plan[0].failing_seeds);
	bisect_release(&b);
}

/*
 * Issue 13, scale: a range of 4096 commits with the plan's 256 trials at
 * each (about 10^6 trials observed) keeps a finite posterior, and the
 * search, which did not pay for those trials, still has its budget.
 */
#define SCALE_N      4096
#define SCALE_PLAN   256
#define SCALE_BUGGED 3000

static void all_finite(struct bisect *b, const char *what)
{
	static double post[SCALE_N];
	double none = -1.0, sum = 0.0;

	assert_true(b->n <= SCALE_N);
	assert_int_equal(bisect_posterior(b, post, &none), 0);
	for (unsigned i = 0; i < b->n; i++) {
		if (!(isfinite(post[i]) && post[i] >= 0.0 && post[i] <= 1.0)) {
			print_error("%s: P(culprit = %u) = %g\n", what, i, post[i]);
			fail();
		}
		sum += post[i];
		if (!(b->flags[i] & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY))) {
			double q = bisect_culprit_rate(b, i);

			if (!(isfinite(q) && q > 0.0 && q < 1.0)) {
				print_error("%s: E[q | culprit = %u] = %g\n", what, i, q);
				fail();
			}
		}
	}
	assert_true(isfinite(none) && none >= 0.0 && none <= 1.0);
	near(sum + none, 1.0, 1e-9, what);
}

/* The plan at every commit: 2% flakes (5 of 256), 7% from SCALE_BUGGED on (18 of 256). */
static void observe_plans(struct bisect *b, bool free)
{
	for (unsigned i = 0; i < SCALE_N; i++) {
		unsigned f = i >= SCALE_BUGGED ? 18 : 5;

		if (free)
			assert_int_equal(bisect_observe_free(b, i, f, SCALE_PLAN, false), 0);
		else
			assert_int_equal(bisect_observe(b, i, f, SCALE_PLAN, false), 0);
	}
}

static void scale_posterior_4096_commits(void **state)
{
	struct bisect_params par;
	struct bisect b;
	struct bisect_plan plan[4];
	struct bisect_confirm_result r;
	unsigned nplan = 0;
	int culprit = BISECT_NONE;
	double prob = 0.0;

	bisect_params_default(&par);
	par.flake_rate = 0.02;
	assert_int_equal(bisect_init(&b, SCALE_N, NULL, &par), 0);
	observe_plans(&b, true);
	assert_int_equal(b.total_trials, (unsigned long)SCALE_N * SCALE_PLAN);
	all_finite(&b, "4096 commits of plan results");
	/* The plan results alone point at the culprit; it is then confirmed with fresh seeds. */
	assert_int_equal(bisect_done(&b, &culprit, &prob), BISECT_FOUND);
	assert_int_equal(culprit, SCALE_BUGGED);
	assert_int_equal(bisect_confirm(&b, SCALE_BUGGED, 70000, 1000000, 20000, 1000000, 0, &r), 0);
	assert_true(isfinite(r.llr_culprit) && isfinite(r.llr_parent) && isfinite(r.p1));
	/* A million probe trials more at the commits around it, each failing as the plan did. */
	for (unsigned i = SCALE_BUGGED - 2; i <= SCALE_BUGGED + 1; i++)
		assert_int_equal(bisect_observe(&b, i, i >= SCALE_BUGGED ? 17500 : 5000, 250000, false), 0);
	all_finite(&b, "and a million probe trials");
	assert_int_equal(bisect_next_probes(&b, 4, plan, &nplan), 0);
	bisect_release(&b);
}

static void scale_budget_is_the_searchs(void **state)
{
	struct bisect_params par;
	struct bisect paid, free;
	struct bisect_plan plan[4];
	unsigned nplan = 0;
	json_t *j;
	struct bisect back;
	static double pa[SCALE_N], pb[SCALE_N];
	double na, nb;

	/*
	 * A culprit at the bad commit, failing 8 of its 256 plan trials against
	 * a flake rate of 1% (3 of 256 everywhere before it), is not told from
	 * the plan results alone: the search must probe. 10^6 plan trials are
	 * twenty times its budget: counted against it, it ended at once.
	 */
	bisect_params_default(&par);
	par.flake_rate = 0.01;
	assert_int_equal(bisect_init(&paid, SCALE_N, NULL, &par), 0);
	assert_int_equal(bisect_init(&free, SCALE_N, NULL, &par), 0);
	for (unsigned i = 0; i < SCALE_N; i++) {
		unsigned f = i == SCALE_N - 1 ? 8 : 3;

		assert_int_equal(bisect_observe(&paid, i, f, SCALE_PLAN, false), 0);
		assert_int_equal(bisect_observe_free(&free, i, f, SCALE_PLAN, false), 0);
	}
	all_finite(&free, "an unsure culprit's plan results");
	assert_int_equal(bisect_done(&paid, NULL, NULL), BISECT_EXHAUSTED);
	assert_int_equal(bisect_done(&free, NULL, NULL), BISECT_RUNNING);
	assert_int_equal(bisect_next_probes(&free, 1, plan, &nplan), 0);
	assert_int_equal(nplan, 1);
	assert_true(plan[0].commit < SCALE_N && plan[0].trials >= 1 && plan[0].trials <= par.batch_max);
	assert_int_equal(bisect_next_probes(&free, 4, plan, &nplan), 0);
	assert_true(nplan >= 1);
	/* The budget counts the search's own trials from there. */
	assert_int_equal(bisect_observe(&free, 100, 0, par.max_trials, false), 0);
	assert_int_equal(bisect_done(&free, NULL, NULL), BISECT_EXHAUSTED);
	/* Stored and replayed (JSON), the free results stay free. */
	j = bisect_to_json(&free);
	assert_non_null(j);
	assert_int_equal(bisect_from_json(&back, j), 0);
	json_decref(j);
	assert_int_equal(back.free_trials, free.free_trials);
	assert_int_equal(back.total_trials, free.total_trials);
	assert_int_equal(bisect_posterior(&free, pa, &na), 0);
	assert_int_equal(bisect_posterior(&back, pb, &nb), 0);
	assert_memory_equal(pa, pb, sizeof(pa));
	bisect_release(&paid);
	bisect_release(&free);
	bisect_release(&back);
}

static void scale_extremes_stay_finite(void **state)
{
	struct bisect_params par;
	struct bisect b;
	struct bisect_plan plan[2];
	unsigned nplan = 0;
	uint8_t flags[SCALE_N] = {0};

	/* A million failures at the bad commit and a million passes just before it, at the smallest flake rate. */
	bisect_params_default(&par);
	par.flake_rate = 0.0;
	par.max_trials = 10000000;
	assert_int_equal(bisect_init(&b, SCALE_N, NULL, &par), 0);
	assert_int_equal(bisect_observe(&b, SCALE_N - 1, 1000000, 1000000, false), 0);
	assert_int_equal(bisect_observe(&b, SCALE_N - 2, 0, 1000000, false), 0);
	all_finite(&b, "a million failures against a million passes");
	/* And the contradiction: the bad commit passes a million replays of its failing seeds. */
	assert_int_equal(bisect_observe(&b, SCALE_N - 1, 0, 1000000, true), 0);
	all_finite(&b, "a million clean replays at the bad commit");
	assert_int_equal(bisect_next_probes(&b, 2, plan, &nplan), 0);
	bisect_release(&b);
	/* Every commit but one unbuildable: all the mass on it and on "no culprit". */
	for (unsigned i = 0; i < SCALE_N - 1; i++)
		flags[i] = BISECT_UNBUILDABLE;
	assert_int_equal(bisect_init(&b, SCALE_N, flags, NULL), 0);
	observe_plans(&b, true);
	all_finite(&b, "one eligible commit of 4096");
	bisect_release(&b);
	/* What the bad commit's reruns say, at any count. */
	assert_int_equal(bisect_judge_seeds(70000, 1000000, 70000, 70000, 0.001), BISECT_SEEDS_BOUND);
	assert_int_equal(bisect_judge_seeds(70000, 1000000, 70000, 4900, 0.001), BISECT_SEEDS_RACE);
	assert_int_equal(bisect_judge_seeds(UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, 0.0),
			 BISECT_SEEDS_BOUND);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(posterior_known_q),
	    cmocka_unit_test(posterior_q_grid),
	    cmocka_unit_test(bad_input),
	    cmocka_unit_test(deterministic_in_log2_rounds),
	    cmocka_unit_test(long_probes_split_over_the_slots),
	    cmocka_unit_test(unbuildable_and_same_binary_never_blamed),
	    cmocka_unit_test(flakes_only_end_in_no_culprit),
	    cmocka_unit_test(rare_culprit_with_two_slots_and_resume),
	    cmocka_unit_test(replay_order_does_not_matter),
	    cmocka_unit_test(json_rejects_garbage),
	    cmocka_unit_test(confirmation),
	    cmocka_unit_test(failing_seeds_first),
	    cmocka_unit_test(every_seed_fails_no_round_at_the_bad_commit),
	    cmocka_unit_test(failing_seeds_one_per_probe_once_certain),
	    cmocka_unit_test(failing_seeds_as_the_daemon_runs_them),
	    cmocka_unit_test(lone_probe_stops_at_the_decision),
	    cmocka_unit_test(failing_seeds_judged_by_their_reruns),
	    cmocka_unit_test(seed_bound_reruns_skip_the_first_round),
	    cmocka_unit_test(scale_posterior_4096_commits),
	    cmocka_unit_test(scale_budget_is_the_searchs),
	    cmocka_unit_test(scale_extremes_stay_finite),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
