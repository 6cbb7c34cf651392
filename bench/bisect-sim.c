/*
 * bench/bisect-sim: a deterministic simulator driving the real bisection
 * module (daemon/bisect.c) over synthetic histories, against `git bisect`
 * with r repeats per probe and against the information-theoretic bound.
 * Run by bench/bisect-sim.sh, which appends its tables to docs/benchmarks.md.
 *
 * A history of n commits in first-parent order has 5% unbuildable and 5%
 * same-binary commits (never the bad commit), and a culprit drawn uniformly
 * among the others; every trial at a commit at or after the culprit fails
 * independently with rate q, every other trial with the baseline flake rate
 * f. A range "without a culprit" fails at f everywhere. The bisection starts
 * as the daemon's does: the bad commit's first pass (FIRST_PASS trials) had
 * at least one failure, and those trials are given to the model; they are
 * not counted in the trials below, which are the search's own. The model is
 * told f (floored at 0.001), as the daemon tells it the good side's rate.
 *
 * usage: bisect-sim [-r RUNS] [-s SEED] [-j JOBS] [-q]   (-q: a quick sweep)
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

static unsigned FIRST_PASS = 100;
#define UNBUILDABLE_SHARE 0.05
#define SAME_BINARY_SHARE 0.05
#define CONFIRM_TRIALS_MAX 4000
#define ROUNDS_MAX 100000

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
};

struct history {
	unsigned n;
	uint8_t *flags;
	int culprit; /* BISECT_NONE for a range without one */
	double q, f;
	unsigned nel;
};

static double rate_at(const struct history *h, int j)
{
	return h->culprit != BISECT_NONE && j >= h->culprit ? h->q : h->f;
}

static void make_history(struct history *h, const struct cell *c, struct rng *r)
{
	unsigned pick;

	h->n = c->n;
	h->q = c->q;
	h->f = c->f;
	h->nel = 0;
	for (unsigned i = 0; i < c->n; i++) {
		double u = rng_unif(r);

		h->flags[i] = i + 1 == c->n		   ? 0
			      : u < UNBUILDABLE_SHARE	   ? BISECT_UNBUILDABLE
			      : u < UNBUILDABLE_SHARE + SAME_BINARY_SHARE ? BISECT_SAME_BINARY
								   : 0;
		h->nel += h->flags[i] == 0;
	}
	h->culprit = BISECT_NONE;
	if (c->q <= 0.0)
		return;
	pick = (unsigned)(rng_unif(r) * h->nel);
	for (unsigned i = 0; i < c->n; i++)
		if (h->flags[i] == 0 && pick-- == 0) {
			h->culprit = (int)i;
			break;
		}
}

/* Trials at one commit until the first failure or 'max'; returns the failures (0 or 1). */
static unsigned run_probe(const struct history *h, int j, unsigned max, bool stop, struct rng *r, unsigned *ran)
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

struct ours {
	double trials, rounds, confirm_trials, log2_nel;
	double ph1, ph2, sph1, sph2; /* TUNING */
	unsigned runs, right, right_search, ended_none, blamed;
};

static int bisect_once(const struct cell *c, struct history *h, struct rng *r, struct ours *acc)
{
	struct bisect_params p;
	struct bisect b;
	struct bisect_plan plan[16];
	unsigned rounds = 0, fails, ran, nplan;
	unsigned long trials = 0, ctrials = 0;
	enum bisect_status st;
	int culprit, rc;
	bool blamed = false;

	bisect_params_default(&p);
	p.flake_rate = fmax(c->f, 0.001);
	{ extern double bisect_tune_qtrue; if (getenv("QTRUE")) bisect_tune_qtrue = c->q > 0 ? fmin(c->q, 0.999) : 0.05; } /* TUNING */
	rc = bisect_init(&b, c->n, h->flags, &p);
	if (rc)
		return rc;
	/* The first pass that raised the regression: at least one failure, unless nothing can fail. */
	do
		fails = run_probe(h, (int)c->n - 1, FIRST_PASS, false, r, &ran);
	while (fails == 0 && rate_at(h, (int)c->n - 1) > 0.0);
	bisect_observe(&b, c->n - 1, fails, ran, false);

	while ((st = bisect_done(&b, &culprit, NULL)) == BISECT_RUNNING && rounds < ROUNDS_MAX) {
		rc = bisect_next_probes(&b, c->slots, plan, &nplan);
		if (rc || nplan == 0)
			break;
		for (unsigned x = 0; x < nplan; x++) {
			fails = run_probe(h, (int)plan[x].commit, plan[x].trials, plan[x].stop_on_failure, r, &ran);
			trials += ran;
			rc = bisect_observe(&b, plan[x].commit, fails, ran, plan[x].failing_seeds);
			if (rc)
				goto out;
		}
		{ double pr; static __thread int dummy; (void)dummy; bisect_done(&b, NULL, &pr); if (pr < 0.5) acc->ph1 = trials; if (pr < 0.9) acc->ph2 = trials; } /* TUNING */
		rounds++;
	}
	st = bisect_done(&b, &culprit, NULL);
	if (st == BISECT_FOUND) {
		unsigned cf = 0, ct = 0, pf = 0, pt = 0;
		struct bisect_confirm_result cr;
		int parent = bisect_confirm_parent(&b, (unsigned)culprit);

		acc->right_search += culprit == h->culprit;
		for (;;) {
			rc = bisect_confirm(&b, (unsigned)culprit, cf, ct, pf, pt, CONFIRM_TRIALS_MAX, &cr);
			if (rc)
				goto out;
			if (cr.verdict != BISECT_CONFIRM_CONTINUE)
				break;
			cf += run_probe(h, culprit, cr.more_culprit, false, r, &ran);
			ct += ran;
			pf += run_probe(h, parent, cr.more_parent, false, r, &ran);
			pt += ran;
			ctrials += (unsigned long)cr.more_culprit + cr.more_parent;
		}
		blamed = cr.verdict == BISECT_CONFIRMED;
	} else {
		acc->right_search += h->culprit == BISECT_NONE;
		acc->ended_none += st == BISECT_NO_CULPRIT;
	}
	acc->runs++;
	acc->blamed += blamed;
	acc->right += h->culprit == BISECT_NONE ? !blamed : blamed && culprit == h->culprit;
	acc->trials += trials; acc->sph1 += acc->ph1; acc->sph2 += acc->ph2; acc->ph1 = acc->ph2 = 0; /* TUNING */
	acc->rounds += rounds;
	acc->confirm_trials += ctrials;
	acc->log2_nel += log2(h->nel);
out:
	bisect_release(&b);
	return rc;
}

/* `git bisect run` with r repeats per probe: bad if any fails (stopping there). */
static bool git_once(const struct history *h, unsigned r, struct rng *rng, unsigned long *trials, unsigned *probes)
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
		if (run_probe(h, pick, r, true, rng, &ran))
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

static void git_eval(const struct cell *c, unsigned runs, uint64_t seed, unsigned r, struct git *g)
{
	struct history h = {.flags = malloc(c->n)};
	unsigned long trials = 0;
	unsigned probes = 0, right = 0;

	for (unsigned i = 0; i < runs; i++) {
		struct rng rr, rt;

		/* The same histories as ours (same seed), and common numbers across r. */
		rng_seed(&rr, seed + i);
		make_history(&h, c, &rr);
		rng_seed(&rt, (seed + i) ^ 0x5eedull);
		right += git_once(&h, r, &rt, &trials, &probes);
	}
	g->r = r;
	g->acc = (double)right / runs;
	g->trials = (double)trials / runs;
	g->rounds = (double)probes / runs;
	free(h.flags);
}

/*
 * The r for git bisect: the smallest reaching 'target' accuracy, else the
 * most accurate one. Accuracy first rises with r (a bad commit is seen) and
 * then falls when f > 0 (good commits flake once in r), so all are tried.
 */
static bool git_choose(const struct cell *c, unsigned runs, uint64_t seed, double target, struct git *best)
{
	static const unsigned rs[] = {1,   2,   3,   4,   6,   8,   12,  16,   24,   32,   48,  64,
				      96,  128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072};
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
	double bound;
	double seconds;
};

static void run_cell(struct row *row, unsigned runs, uint64_t seed)
{
	struct history h = {.flags = malloc(row->c.n)};
	struct timespec t0, t1;

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
		row->bound = row->o.log2_nel / row->o.runs / capacity(row->c.q, row->c.f);
		row->git_reached = git_choose(&row->c, runs, seed, (double)row->o.right / row->o.runs, &row->g);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	row->seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	free(h.flags);
}

static void usage(void)
{
	fprintf(stderr, "usage: bisect-sim [-r RUNS] [-s SEED] [-j JOBS] [-q]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const unsigned ns[] = {16, 128, 1024};
	static const double qs[] = {1.0, 0.3, 0.05, 0.02, 0.0};
	static const double fs[] = {0.0, 0.005};
	static const unsigned ks[] = {1, 4};
	unsigned runs = 400, jobs = 2, nrows = 0;
	uint64_t seed = 20261122;
	bool quick = false;
	struct row *rows;
	int opt;

	while ((opt = getopt(argc, argv, "r:s:j:q")) != -1) {
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
		case 'q':
			quick = true;
			break;
		default:
			usage();
		}
	}
	{ extern double bisect_tune_shrink; if (getenv("SHRINK")) bisect_tune_shrink = atof(getenv("SHRINK")); if (getenv("FP")) FIRST_PASS = atoi(getenv("FP")); } /* TUNING */
	if (runs == 0 || jobs == 0 || jobs > 64)
		usage();
	/* Shared with the workers, which each fill every jobs-th row. */
	rows = mmap(NULL, 64 * sizeof(*rows), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rows == MAP_FAILED)
		return 1;
	for (size_t a = 0; a < 3; a++)
		for (size_t b = 0; b < 5; b++)
			for (size_t c = 0; c < 2; c++)
				for (size_t d = 0; d < 2; d++) {
					if (quick && (ns[a] == 1024 || ks[d] == 4))
						continue;
					rows[nrows++].c = (struct cell){ns[a], qs[b], fs[c], ks[d]};
				}
	for (unsigned w = 0; w < jobs; w++) {
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			for (unsigned i = w; i < nrows; i += jobs)
				run_cell(&rows[i], runs, seed + 1000003ull * i);
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

	printf("Ranges with a culprit (%u simulated bisections per row; trials are the search's, the bad "
	       "commit's %u first-pass trials are given to the model and not counted; confirmation trials "
	       "apart). git bisect: r repeats per probe, a probe is bad if any fails; r is the smallest "
	       "reaching our accuracy (`r`), or the most accurate when none does (`r*`).\n\n",
	       runs, FIRST_PASS);
	printf("| commits | q | f | slots | trials | rounds | confirm trials | accuracy | bound | trials / bound "
	       "| git r | git trials | git accuracy | git / ours |\n");
	printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (unsigned i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		double t = r->o.trials / r->o.runs;

		if (r->c.q <= 0.0)
			continue;
		printf("| %u | %g | %g | %u | %.1f | %.1f | %.1f | %.1f%% | %.1f | %.2f | %u%s | %.1f | %.1f%% | %.1fx |\n",
		       r->c.n, r->c.q, r->c.f, r->c.slots, t, r->o.rounds / r->o.runs,
		       r->o.confirm_trials / r->o.runs, 100.0 * r->o.right / r->o.runs, r->bound, t / r->bound,
		       r->g.r, r->git_reached ? "" : "*", r->g.trials, 100.0 * r->g.acc, r->g.trials / t);
	}
	printf("\nRanges without a culprit (the first signal was a flake; with f = 0 the bisection was "
	       "started by hand and the first pass saw nothing). git bisect always names a commit here.\n\n");
	printf("| commits | f | slots | trials | rounds | ended \"no culprit\" | nobody blamed |\n");
	printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (unsigned i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];

		if (r->c.q > 0.0)
			continue;
		printf("| %u | %g | %u | %.1f | %.1f | %.1f%% | %.1f%% |\n", r->c.n, r->c.f, r->c.slots,
		       r->o.trials / r->o.runs, r->o.rounds / r->o.runs, 100.0 * r->o.ended_none / r->o.runs,
		       100.0 * r->o.right / r->o.runs);
	}
	{
		double secs = 0.0;

		for (unsigned i = 0; i < nrows; i++)
			secs += rows[i].seconds;
		fprintf(stderr, "bisect-sim: %u rows, %.1f cpu-seconds\n", nrows, secs);
		if (getenv("BISECT_SIM_DEBUG"))
			for (unsigned i = 0; i < nrows; i++)
				fprintf(stderr, "n=%u q=%g f=%g k=%u search-right=%.1f%% blamed=%.1f%% right=%.1f%%\n",
					rows[i].c.n, rows[i].c.q, rows[i].c.f, rows[i].c.slots,
					100.0 * rows[i].o.right_search / rows[i].o.runs,
					100.0 * rows[i].o.blamed / rows[i].o.runs, 100.0 * rows[i].o.right / rows[i].o.runs),
				fprintf(stderr, "   trials to 0.5: %.1f  to 0.9: %.1f total %.1f\n", rows[i].o.sph1 / rows[i].o.runs, rows[i].o.sph2 / rows[i].o.runs, rows[i].o.trials / rows[i].o.runs);
	}
	return 0;
}
