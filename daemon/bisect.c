/* bisect: posterior over culprits, probe planning and confirmation. */
#include "bisect.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

/* The smallest flake rate the model assumes: one flake must not rule a commit out. */
#define FLAKE_FLOOR 1e-4
/* The largest culprit rate on the grid: a rate of exactly 1 would let one pass veto. */
#define Q_MAX 0.999
/*
 * A probe runs until this share of the probability at or before it would be
 * left after all passes (see plan_trials()).
 */
#define PASS_SHRINK 0.5
/*
 * Prior mass of q_s, the rate at which a replayed failing seed fails at and
 * after the culprit, on the top of the grid (Q_MAX): a deterministic check's
 * failing seed fails again at every commit from the culprit on, so that a
 * clean replay is strong evidence against a culprit at or before it. The
 * rest is spread over the whole grid, so that a race (failing seeds no
 * likelier to fail again) is still learnt. The daemon replays only seeds
 * that failed their rerun too and, for a deterministic check, gave the same
 * output on every repeat (daemon/bisector.c), so nearly all are seed-bound.
 * Measured with bench/bisect-sim, 128 commits, one slot: seeded, q = 0.05,
 * 17.8 trials at 0.8 against 11.7 at 0.95 (37.0 and 16.5 at f = 0.005);
 * the race rows keep their trials and accuracy (99.7% at q = 0.3 and 0.05),
 * though more first confirmations withdraw at q = 0.3 (93% right at once
 * against 98%); 0.99 costs the race at q = 0.02, f = 0.005 accuracy (97.4%).
 */
#define FAILING_Q_ONE 0.95
/*
 * Failing seeds replayed by one probe, all of them run (no stop at the first
 * failure: each failure past the culprit sharpens q_s). Measured with
 * bench/bisect-sim, 128 commits, one slot: 2 seeds take 21.5 trials at
 * q = 0.05, f = 0 (87 at f = 0.005) against 26.5 (106) for 1 seed, and 16
 * at q = 1 against 11; 3 seeds, or stopping at the first failure, cost more.
 */
#define FAILING_PROBE_MAX 2
/*
 * Once a replayed failing seed is this sure to fail past the culprit (E[q_s]
 * over the posterior), one per probe is enough: a second one would only
 * repeat the first's answer.
 */
#define FAILING_SURE 0.99
/*
 * bisect_judge_seeds(): the odds either way before the failing seeds are
 * given up (a race) or their reruns taken as replays (seed-bound). Wrongly
 * given up, a seed-bound bug's search falls back to fresh seeds (at q = 0.05,
 * hundreds of trials instead of about ten); wrongly kept, a race's replays
 * cost a few trials. Measured with bench/bisect-sim, 128 commits, one slot:
 * a race at q = 0.3 took 77.8 trials with its failing seeds replayed and
 * 54.2 without; seeded at q = 0.05, 11.6 with the first round at the bad
 * commit and 9.7 with the reruns in its place.
 */
#define SEEDS_ODDS 99.0
/* Confirmation: the rate tested is this quantile of q given the culprit. */
#define CONFIRM_Q_QUANTILE 0.2
/* Confirmation: the chance of withdrawing a right culprit, per test. */
#define CONFIRM_WITHDRAW_ERROR 0.001
/* Confirmation gives up (withdraws) after the trials that would show this many failures at q. */
#define CONFIRM_FAILURES_MAX 30.0

void bisect_params_default(struct bisect_params *p)
{
	*p = (struct bisect_params){
	    .confidence = 0.99,
	    .prior_none = 0.1,
	    .flake_rate = 0.001,
	    .q_min = 0.02,
	    .batch_max = 512,
	    .max_trials = 50000,
	    .failing_seeds = 0,
	};
}

const char *bisect_status_name(enum bisect_status s)
{
	switch (s) {
	case BISECT_RUNNING:
		return "running";
	case BISECT_FOUND:
		return "culprit";
	case BISECT_NO_CULPRIT:
		return "no_culprit";
	case BISECT_EXHAUSTED:
		return "exhausted";
	}
	return "unknown";
}

static bool eligible(const struct bisect *b, unsigned i)
{
	return !(b->flags[i] & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY));
}

static bool params_ok(const struct bisect_params *p)
{
	return p->confidence > 0.5 && p->confidence < 1.0 && p->prior_none >= 0.0 && p->prior_none < 1.0 &&
	       p->flake_rate >= 0.0 && p->flake_rate < 0.2 && p->q_min > 0.0 && p->q_min < Q_MAX &&
	       p->q_known >= 0.0 && p->q_known <= 1.0 &&
	       (p->q_known == 0.0 || p->q_known > fmax(p->flake_rate, FLAKE_FLOOR)) && p->batch_max >= 1 &&
	       p->max_trials >= 1;
}

void bisect_release(struct bisect *b)
{
	if (!b)
		return;
	free(b->flags);
	free(b->probes);
	for (int k = 0; k < 2; k++) {
		free(b->fail[k]);
		free(b->trial[k]);
	}
	free(b->post);
	free(b->qpost);
	free(b->qbar);
	free(b->qbar_s);
	memset(b, 0, sizeof(*b));
}

int bisect_init(struct bisect *b, unsigned n, const uint8_t *flags, const struct bisect_params *p)
{
	struct bisect_params def;
	double qlo, ratio;

	if (!b)
		return -EINVAL;
	memset(b, 0, sizeof(*b));
	if (!p) {
		bisect_params_default(&def);
		p = &def;
	}
	if (n == 0 || !params_ok(p))
		return -EINVAL;
	if (n > BISECT_RANGE_MAX)
		return -E2BIG;
	b->par = *p;
	b->n = n;
	b->flags = calloc(n, 1);
	for (int k = 0; k < 2; k++) {
		b->fail[k] = calloc(n, sizeof(unsigned));
		b->trial[k] = calloc(n, sizeof(unsigned));
	}
	b->post = calloc(n, sizeof(double));
	b->qpost = calloc((size_t)n * BISECT_QGRID, sizeof(double));
	b->qbar = calloc(n, sizeof(double));
	b->qbar_s = calloc(n, sizeof(double));
	if (!b->flags || !b->fail[0] || !b->fail[1] || !b->trial[0] || !b->trial[1] || !b->post ||
	    !b->qpost || !b->qbar || !b->qbar_s) {
		bisect_release(b);
		return -ENOMEM;
	}
	if (flags)
		for (unsigned i = 0; i < n; i++)
			b->flags[i] = flags[i] & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY);
	b->f = fmax(p->flake_rate, FLAKE_FLOOR);
	/*
	 * A culprit is a commit that fails clearly more often than the baseline:
	 * rates below 2 f are not told apart from flakes within any sane budget.
	 */
	qlo = fmax(p->q_min, 2.0 * b->f);
	ratio = pow(Q_MAX / qlo, 1.0 / (BISECT_QGRID - 1));
	for (int g = 0; g < BISECT_QGRID; g++)
		b->q[g] = qlo * pow(ratio, g);
	b->q[BISECT_QGRID - 1] = Q_MAX;
	/* A known rate (a deterministic check: 1) collapses the grid onto it. */
	if (p->q_known > 0.0)
		for (int g = 0; g < BISECT_QGRID; g++)
			b->q[g] = fmin(p->q_known, Q_MAX);
	b->dirty = true;
	return 0;
}

int bisect_set_flags(struct bisect *b, unsigned commit, unsigned flags)
{
	if (!b || commit >= b->n)
		return -EINVAL;
	b->flags[commit] = flags & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY);
	b->dirty = true;
	return 0;
}

static int observe(struct bisect *b, const struct bisect_probe *probe)
{
	int k = probe->failing_seeds ? 1 : 0;

	if (!b || probe->commit >= b->n || probe->failures > probe->trials)
		return -EINVAL;
	if (probe->trials == 0)
		return 0;
	if (b->nprobes >= BISECT_PROBES_MAX || b->trial[k][probe->commit] > UINT32_MAX - probe->trials)
		return -E2BIG;
	if (b->nprobes == b->probes_cap) {
		unsigned cap = b->probes_cap ? 2 * b->probes_cap : 64;
		struct bisect_probe *np = realloc(b->probes, cap * sizeof(*np));

		if (!np)
			return -ENOMEM;
		b->probes = np;
		b->probes_cap = cap;
	}
	b->probes[b->nprobes++] = *probe;
	b->fail[k][probe->commit] += probe->failures;
	b->trial[k][probe->commit] += probe->trials;
	b->total_trials += probe->trials;
	if (probe->free)
		b->free_trials += probe->trials;
	b->dirty = true;
	return 0;
}

int bisect_observe(struct bisect *b, unsigned commit, unsigned failures, unsigned trials, bool failing_seeds)
{
	return observe(b, &(struct bisect_probe){commit, trials, failures, failing_seeds, false});
}

int bisect_observe_free(struct bisect *b, unsigned commit, unsigned failures, unsigned trials,
			bool failing_seeds)
{
	return observe(b, &(struct bisect_probe){commit, trials, failures, failing_seeds, true});
}

/* Trials the search ran itself: what its budget counts. */
static unsigned long spent(const struct bisect *b)
{
	return b->total_trials - b->free_trials;
}

int bisect_replay(struct bisect *b, const struct bisect_probe *probes, unsigned n)
{
	if (!b || (n && !probes))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		int rc = observe(b, &probes[i]);

		if (rc)
			return rc;
	}
	return 0;
}

/* s log(p) + (t - s) log(1 - p), with 0 log 0 = 0. */
static double loglik(unsigned s, unsigned t, double lp, double l1p)
{
	return (s ? s * lp : 0.0) + (t - s ? (t - s) * l1p : 0.0);
}

/*
 * The prior weight of q[g] for fresh seeds (k = 0: uniform) and for
 * replayed failing seeds (k = 1: FAILING_Q_ONE on the top of the grid, the
 * rest spread uniformly over the whole grid).
 */
static double qprior(int k, int g)
{
	double one = k ? FAILING_Q_ONE : 0.0;

	return (1.0 - one) / BISECT_QGRID + (g == BISECT_QGRID - 1 ? one : 0.0);
}

/*
 * Per hypothesis i, the log marginal likelihood of one kind of probes:
 * out[i] = sum_{j<i} ll(f) + log sum_g w_g exp(sum_{j>=i} ll(q_g)), w_g the
 * kind's prior weights (qprior()).
 * With qpost, also P(q_g | i) and its mean. O(n G).
 */
static void kind_loglik(const struct bisect *b, int k, double *out, double *qpost, double *qbar)
{
	double suf[BISECT_QGRID], lq[BISECT_QGRID], l1q[BISECT_QGRID];
	double lf = log(b->f), l1f = log1p(-b->f), pre = 0.0, lw = k ? 0.0 : -log((double)BISECT_QGRID);

	for (int g = 0; g < BISECT_QGRID; g++) {
		lq[g] = log(b->q[g]);
		l1q[g] = log1p(-b->q[g]);
		/* Failing seeds' prior weights enter as the suffix's start; fresh seeds' (uniform) as lw. */
		suf[g] = k ? log(qprior(k, g)) : 0.0;
	}
	/* Right to left for the suffix over q, then left to right for the prefix over f. */
	for (unsigned i = b->n; i-- > 0;) {
		unsigned s = b->fail[k][i], t = b->trial[k][i];
		double m = -INFINITY, sum = 0.0, mean = 0.0;

		if (t)
			for (int g = 0; g < BISECT_QGRID; g++)
				suf[g] += loglik(s, t, lq[g], l1q[g]);
		if (!eligible(b, i)) {
			out[i] = -INFINITY;
			continue;
		}
		for (int g = 0; g < BISECT_QGRID; g++)
			m = fmax(m, suf[g]);
		for (int g = 0; g < BISECT_QGRID; g++) {
			double w = exp(suf[g] - m);

			sum += w;
			mean += w * b->q[g];
			if (qpost)
				qpost[(size_t)i * BISECT_QGRID + g] = w;
		}
		out[i] = m + log(sum) + lw;
		qbar[i] = mean / sum;
		if (qpost)
			for (int g = 0; g < BISECT_QGRID; g++)
				qpost[(size_t)i * BISECT_QGRID + g] /= sum;
	}
	for (unsigned i = 0; i < b->n; i++) {
		if (eligible(b, i))
			out[i] += pre;
		pre += loglik(b->fail[k][i], b->trial[k][i], lf, l1f);
	}
	/* The "no culprit" hypothesis: everything at f. */
	out[b->n] = pre;
}

static int recompute(struct bisect *b)
{
	double *ll = NULL, *ls = NULL, m, z = 0.0, lprior, lnone;
	unsigned nel = 0;
	bool any_seeded = false;

	if (!b->dirty)
		return 0;
	ll = malloc((b->n + 1) * sizeof(double));
	ls = malloc((b->n + 1) * sizeof(double));
	if (!ll || !ls) {
		free(ll);
		free(ls);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < b->n; i++) {
		nel += eligible(b, i);
		any_seeded |= b->trial[1][i] != 0;
	}
	kind_loglik(b, 0, ll, b->qpost, b->qbar);
	if (any_seeded) {
		kind_loglik(b, 1, ls, NULL, b->qbar_s);
		for (unsigned i = 0; i <= b->n; i++)
			ll[i] += ls[i];
	} else {
		for (unsigned i = 0; i < b->n; i++)
			b->qbar_s[i] = b->qbar[i];
	}
	/* Uniform prior over eligible commits, prior_none on "no culprit". */
	lprior = nel ? log((1.0 - b->par.prior_none) / nel) : -INFINITY;
	lnone = nel ? log(b->par.prior_none) : 0.0;
	m = ll[b->n] + lnone;
	for (unsigned i = 0; i < b->n; i++)
		if (eligible(b, i))
			m = fmax(m, ll[i] + lprior);
	for (unsigned i = 0; i < b->n; i++) {
		b->post[i] = eligible(b, i) ? exp(ll[i] + lprior - m) : 0.0;
		z += b->post[i];
	}
	b->post_none = exp(ll[b->n] + lnone - m);
	z += b->post_none;
	for (unsigned i = 0; i < b->n; i++)
		b->post[i] /= z;
	b->post_none /= z;
	free(ll);
	free(ls);
	b->dirty = false;
	return 0;
}

int bisect_posterior(struct bisect *b, double *out, double *none)
{
	int rc;

	if (!b)
		return -EINVAL;
	rc = recompute(b);
	if (rc)
		return rc;
	if (out)
		memcpy(out, b->post, b->n * sizeof(double));
	if (none)
		*none = b->post_none;
	return 0;
}

double bisect_culprit_rate(struct bisect *b, unsigned commit)
{
	if (!b || commit >= b->n || recompute(b) || !eligible(b, commit))
		return NAN;
	return b->qbar[commit];
}

enum bisect_status bisect_done(struct bisect *b, int *culprit, double *prob)
{
	double best = -1.0;
	int arg = BISECT_NONE;
	unsigned nel = 0;

	if (!b || recompute(b))
		return BISECT_EXHAUSTED;
	for (unsigned i = 0; i < b->n; i++) {
		nel += eligible(b, i);
		if (eligible(b, i) && b->post[i] > best) {
			best = b->post[i];
			arg = (int)i;
		}
	}
	if (b->post_none >= best) {
		best = b->post_none;
		arg = BISECT_NONE;
	}
	if (culprit)
		*culprit = arg;
	if (prob)
		*prob = best;
	if (nel == 0)
		return BISECT_EXHAUSTED;
	if (best >= b->par.confidence)
		return arg == BISECT_NONE ? BISECT_NO_CULPRIT : BISECT_FOUND;
	if (spent(b) >= b->par.max_trials)
		return BISECT_EXHAUSTED;
	return BISECT_RUNNING;
}

/* Binary entropy in nats. */
static double h2(double p)
{
	if (p <= 0.0 || p >= 1.0)
		return 0.0;
	return -p * log(p) - (1.0 - p) * log1p(-p);
}

/*
 * Expected information about the culprit from one fresh trial at each
 * eligible commit j: I = H(Y) - E[H(Y | culprit)], where Y fails with
 * E[q | i] for culprits i <= j and with f otherwise (later culprits and "no
 * culprit"). Prefix sums make it O(n) for all j. Also the mass at or
 * before j, in mass[].
 */
static void info_gain(const struct bisect *b, double *eig, double *mass)
{
	double a1 = 0.0, a2 = 0.0, m = 0.0, hf = h2(b->f);

	for (unsigned j = 0; j < b->n; j++) {
		if (!eligible(b, j)) {
			eig[j] = -1.0;
			mass[j] = m;
			continue;
		}
		a1 += b->post[j] * b->qbar[j];
		a2 += b->post[j] * h2(b->qbar[j]);
		m += b->post[j];
		eig[j] = h2(a1 + (1.0 - m) * b->f) - a2 - (1.0 - m) * hf;
		mass[j] = m;
	}
}

/*
 * How many trials a probe at j runs (it stops at its first failure). After
 * T passes at j, the probability that the culprit is at or before j falls
 * from M to S(T) / (S(T) + (1 - M)(1 - f)^T), S(T) = sum_{i<=j, g} P(i)
 * P(q_g | i) (1 - q_g)^T. The probe is worth continuing while the split it
 * makes is still near the best one; PASS_SHRINK = 1/2 stops it when the
 * passes would have halved that probability, at which point a new split
 * point is better (measured with bench/bisect-sim: smaller batches cost
 * rounds for no fewer trials, larger ones cost trials).
 */
static unsigned plan_trials(const struct bisect *b, unsigned j, double mass, unsigned cap)
{
	double w[BISECT_QGRID] = {0}, surv[BISECT_QGRID], target;
	unsigned t;

	if (mass <= 0.0)
		return 1;
	for (unsigned i = 0; i <= j; i++) {
		if (!eligible(b, i) || b->post[i] == 0.0)
			continue;
		for (int g = 0; g < BISECT_QGRID; g++)
			w[g] += b->post[i] * b->qpost[(size_t)i * BISECT_QGRID + g];
	}
	for (int g = 0; g < BISECT_QGRID; g++)
		surv[g] = 1.0;
	target = PASS_SHRINK * mass;
	for (t = 1; t < cap; t++) {
		double s = 0.0, rest = (1.0 - mass) * pow(1.0 - b->f, t + 1);

		for (int g = 0; g < BISECT_QGRID; g++) {
			surv[g] *= 1.0 - b->q[g];
			s += w[g] * surv[g] * (1.0 - b->q[g]);
		}
		/* After t + 1 passes: still above the target, so run it. */
		if (s / (s + rest) < target)
			break;
	}
	return t;
}

/*
 * The passes at j after which the search would be over (one hypothesis at
 * the confidence), or 'cap' if none within it. A lone probe that ran that
 * far would end the search whatever it was planned for, so it need not run
 * further: the trials past that point could not change the answer. After
 * t passes at j a culprit i <= j keeps post[i] sum_g P(q_g | i) (1 - q_g)^t,
 * a later one and "no culprit" post (1 - f)^t. Culprits that share the data
 * at and after them share P(q | i): they are taken in runs, so that this is
 * O(runs G) per pass. Out of memory: 'cap'.
 */
static unsigned passes_to_done(const struct bisect *b, unsigned j, unsigned cap)
{
	double *w = NULL, *top = NULL, *mass = NULL, *surv = NULL;
	double later = b->post_none, later_top = b->post_none, fsurv = 1.0;
	const double *prev = NULL;
	unsigned runs = 0, t;

	/* At most one run per eligible commit at or before j. */
	w = malloc((size_t)(j + 1) * BISECT_QGRID * sizeof(double));
	top = malloc((j + 1) * sizeof(double));
	mass = malloc((j + 1) * sizeof(double));
	surv = malloc(BISECT_QGRID * sizeof(double));
	if (!w || !top || !mass || !surv) {
		t = cap;
		goto out;
	}
	for (unsigned i = 0; i < b->n; i++) {
		const double *row = b->qpost + (size_t)i * BISECT_QGRID;

		if (!eligible(b, i) || b->post[i] == 0.0)
			continue;
		if (i > j) {
			later += b->post[i];
			later_top = fmax(later_top, b->post[i]);
			continue;
		}
		if (!prev || memcmp(prev, row, BISECT_QGRID * sizeof(double)) != 0) {
			memcpy(w + (size_t)runs * BISECT_QGRID, row, BISECT_QGRID * sizeof(double));
			top[runs] = mass[runs] = 0.0;
			runs++;
			prev = row;
		}
		mass[runs - 1] += b->post[i];
		top[runs - 1] = fmax(top[runs - 1], b->post[i]);
	}
	for (int g = 0; g < BISECT_QGRID; g++)
		surv[g] = 1.0;
	for (t = 1; t < cap; t++) {
		double z, best;

		fsurv *= 1.0 - b->f;
		for (int g = 0; g < BISECT_QGRID; g++)
			surv[g] *= 1.0 - b->q[g];
		z = later * fsurv;
		best = later_top * fsurv;
		for (unsigned r = 0; r < runs; r++) {
			double l = 0.0;

			for (int g = 0; g < BISECT_QGRID; g++)
				l += w[(size_t)r * BISECT_QGRID + g] * surv[g];
			z += mass[r] * l;
			best = fmax(best, top[r] * l);
		}
		if (z > 0.0 && best >= b->par.confidence * z)
			break;
	}
out:
	free(w);
	free(top);
	free(mass);
	free(surv);
	return t;
}

/* Failing seeds per probe: FAILING_PROBE_MAX, or one once they are as good as certain (FAILING_SURE). */
static unsigned failing_probe_size(const struct bisect *b)
{
	double m = 0.0, z = 0.0;
	bool replayed = false;

	/* Before any replay E[q_s] is only the fresh seeds' rate: q_s is still to be learnt. */
	for (unsigned i = 0; i < b->n; i++)
		replayed |= b->trial[1][i] > 0;
	if (!replayed)
		return FAILING_PROBE_MAX;
	for (unsigned i = 0; i < b->n; i++)
		if (eligible(b, i)) {
			m += b->post[i] * b->qbar_s[i];
			z += b->post[i];
		}
	return z > 0.0 && m >= FAILING_SURE * z ? 1 : FAILING_PROBE_MAX;
}

enum bisect_seeds bisect_judge_seeds(unsigned failures, unsigned trials, unsigned reruns,
				     unsigned rerun_failures, double flake_rate)
{
	double f = fmax(flake_rate, FLAKE_FLOOR), p, race, bound;

	if (reruns == 0 || rerun_failures > reruns || failures > trials || trials == 0)
		return BISECT_SEEDS_UNSURE;
	/*
	 * Every trial failed and every rerun too: a race and a seed-bound bug
	 * look alike there, and either way a failing seed fails again as surely
	 * as any seed, so its reruns stand for its replay at the bad commit
	 * (measured with bench/bisect-sim, q = 1, 16 commits: 6.1 trials with a
	 * round of replays there first, 3.9 without). Giving up the replays
	 * instead would leave a seed-bound bug that fails 95% to 99.5% of fresh
	 * seeds (64 of 64 failing) to fresh seeds, whose rare passes past the
	 * culprit the model, sure of q near 1, reads as strong evidence.
	 */
	if (failures == trials && rerun_failures == reruns)
		return BISECT_SEEDS_BOUND;
	/* The first pass's rate, kept off 0 and 1 (near 1 a race and a seed-bound failure look alike). */
	p = fmin(fmax((failures + 0.5) / (trials + 1.0), f), Q_MAX);
	race = loglik(rerun_failures, reruns, log(p), log1p(-p));
	p = 1.0 - fmin(1.0, f / p) * (1.0 - f);
	bound = loglik(rerun_failures, reruns, log(p), log1p(-p));
	if (race - bound >= log(SEEDS_ODDS))
		return BISECT_SEEDS_RACE;
	if (bound - race >= log(SEEDS_ODDS))
		return BISECT_SEEDS_BOUND;
	return BISECT_SEEDS_UNSURE;
}

const char *bisect_seeds_name(enum bisect_seeds s)
{
	switch (s) {
	case BISECT_SEEDS_UNSURE:
		return "unsure";
	case BISECT_SEEDS_BOUND:
		return "seed_bound";
	case BISECT_SEEDS_RACE:
		return "race";
	}
	return "unknown";
}

/* Whether commit j is among pick[0..np-1]. */
static bool picked(const unsigned *pick, unsigned np, unsigned j)
{
	for (unsigned x = 0; x < np; x++)
		if (pick[x] == j)
			return true;
	return false;
}

/* The eligible commit not yet picked whose one trial tells the most about the culprit, or -1. */
static int most_informative(const struct bisect *b, const double *eig, const unsigned *pick, unsigned np)
{
	double best = -0.5;
	int arg = -1;

	for (unsigned j = 0; j < b->n; j++)
		if (eig[j] > best && !picked(pick, np, j)) {
			best = eig[j];
			arg = (int)j;
		}
	return arg;
}

/*
 * One probe at j: up to seeds_per_probe failing seeds not yet run there
 * first (each once per commit, run whole), then fresh seeds until the first
 * failure, at most plan_trials() of them; a lone probe (the round's only
 * one) no further than the passes that would end the search. Returns the fresh trials
 * planned before that last cut (0 for failing seeds).
 */
static unsigned plan_probe(const struct bisect *b, unsigned j, double mass, unsigned cap,
			   unsigned seeds_per_probe, bool lone, struct bisect_plan *p)
{
	unsigned used = b->trial[1][j], planned = 0;

	*p = (struct bisect_plan){.commit = j, .stop_on_failure = true, .parts = 1};
	if (b->par.failing_seeds > used) {
		p->failing_seeds = true;
		p->trials = b->par.failing_seeds - used;
		if (p->trials > seeds_per_probe)
			p->trials = seeds_per_probe;
		p->stop_on_failure = false;
	} else {
		p->trials = planned = plan_trials(b, j, mass, cap);
		if (lone)
			p->trials = passes_to_done(b, j, p->trials);
	}
	if (p->trials > cap)
		p->trials = cap;
	if (p->trials == 0)
		p->trials = 1;
	return planned;
}

/* The trials one probe may run when np probes share what is left of the budget. */
static unsigned probe_cap(const struct bisect *b, unsigned np)
{
	unsigned left = spent(b) < b->par.max_trials ? b->par.max_trials - (unsigned)spent(b) : 0;
	unsigned cap = b->par.batch_max;

	if (np && cap > left / np + 1)
		cap = left / np + 1;
	return cap;
}

int bisect_next_probes(struct bisect *b, unsigned k, struct bisect_plan *out, unsigned *nout)
{
	double *eig = NULL, *mass = NULL;
	unsigned *pick = NULL, np = 0, cap, seeds_per_probe;
	int rc;

	if (!b || !out || !nout || k == 0)
		return -EINVAL;
	*nout = 0;
	if (bisect_done(b, NULL, NULL) != BISECT_RUNNING)
		return 0;
	rc = recompute(b);
	if (rc)
		return rc;
	eig = malloc(b->n * sizeof(double));
	mass = malloc(b->n * sizeof(double));
	pick = malloc(k * sizeof(unsigned));
	if (!eig || !mass || !pick) {
		rc = -ENOMEM;
		goto out;
	}
	info_gain(b, eig, mass);
	seeds_per_probe = failing_probe_size(b);
	/*
	 * The failing seeds are replayed at the bad commit first: whether they
	 * fail again there says whether they fail for sure past the culprit (a
	 * deterministic check) or as any seed does (a race), before their
	 * passes elsewhere are taken as evidence either way.
	 */
	if (b->par.failing_seeds > 0 && eligible(b, b->n - 1) && b->trial[1][b->n - 1] == 0)
		pick[np++] = b->n - 1;
	/*
	 * Slots to spare for one probe of several trials: when the probe one
	 * slot would run plans two fresh trials or more (a failure that does
	 * not show every time), its trials are split over up to k slots
	 * instead of probing k commits. The k-section's other probes land
	 * where one slot would not have looked, and each runs to its own
	 * first failure. Measured with bench/bisect-sim, 128 commits, 4 slots:
	 * a race at q = 0.05 took 711 trials and 279 trial-times of wall with
	 * the k-section, 471 and 142 split; at q = 0.3, 98.7 and 38.1 with the
	 * k-section, 65.5 and 26.1 split (split only from k trials: the
	 * k-section). Where every trial fails past the culprit (q = 1) a probe
	 * is one trial and the k-section stays: it cuts the rounds from log2 N
	 * to log_{k+1} N.
	 */
	if (k > 1) {
		int j = np ? (int)pick[0] : most_informative(b, eig, pick, 0);

		/* Judged by the probe's planned length; it may then stop short at the search's end. */
		if (j >= 0 && plan_probe(b, (unsigned)j, mass[j], probe_cap(b, 1), seeds_per_probe, true,
					 &out[0]) >= 2) {
			out[0].parts = out[0].trials < k ? out[0].trials : k;
			*nout = 1;
			goto out;
		}
	}
	if (k - np > 1) {
		unsigned ks = k - np;

		/* k-section: the commits where the posterior CDF crosses m/(ks+1). */
		for (unsigned m = 1; m <= ks; m++) {
			double level = (double)m / (ks + 1);
			unsigned last = 0, j;
			bool found = false;

			for (j = 0; j < b->n; j++) {
				if (!eligible(b, j))
					continue;
				last = j;
				if (mass[j] >= level) {
					found = true;
					break;
				}
			}
			if (!found)
				j = last;
			if (eligible(b, j) && !picked(pick, np, j))
				pick[np++] = j;
		}
	}
	/* Then by information gain, for k = 1 and where quantiles coincided. */
	while (np < k) {
		int j = most_informative(b, eig, pick, np);

		if (j < 0)
			break;
		pick[np++] = (unsigned)j;
	}
	cap = probe_cap(b, np);
	for (unsigned x = 0; x < np; x++)
		plan_probe(b, pick[x], mass[pick[x]], cap, seeds_per_probe, np == 1, &out[x]);
	*nout = np;
out:
	free(eig);
	free(mass);
	free(pick);
	return rc;
}

/* ---------------------------------------------------------------------------
 * Confirmation
 */

int bisect_confirm_parent(const struct bisect *b, unsigned culprit)
{
	if (!b || culprit >= b->n)
		return BISECT_NONE;
	for (unsigned i = culprit; i-- > 0;)
		if (!(b->flags[i] & BISECT_UNBUILDABLE))
			return (int)i;
	return BISECT_NONE;
}

/* One side of the confirmation: where its log-likelihood ratio stands against A and B. */
static enum sprt_decision confirm_side(const struct sprt *s, double llr, unsigned trials)
{
	if (llr >= s->a)
		return SPRT_ACCEPT_H1;
	if (llr <= s->b)
		return SPRT_ACCEPT_H0;
	if (s->par.max_trials && trials >= s->par.max_trials)
		return SPRT_UNDECIDED;
	return SPRT_CONTINUE;
}

int bisect_confirm(struct bisect *b, unsigned culprit, unsigned culprit_failures, unsigned culprit_trials,
		   unsigned parent_failures, unsigned parent_trials, unsigned max_trials,
		   struct bisect_confirm_result *out)
{
	struct sprt_params pc, pp;
	struct sprt sc, sp;
	enum sprt_decision c_dec, p_dec;
	double cdf = 0.0, q1 = 0.0, wrong;
	int rc;

	if (!b || !out || culprit >= b->n || culprit_failures > culprit_trials ||
	    parent_failures > parent_trials)
		return -EINVAL;
	rc = recompute(b);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->parent = bisect_confirm_parent(b, culprit);
	/*
	 * The rate to confirm: a low quantile of q given this culprit. A test
	 * against an overstated rate accepts H0 on a true culprit that fails
	 * less often than guessed (and withdraws it); one against a rate below
	 * the truth only needs more trials.
	 */
	for (int g = 0; g < BISECT_QGRID; g++) {
		q1 = b->q[g];
		cdf += b->qpost[(size_t)culprit * BISECT_QGRID + g];
		if (cdf >= CONFIRM_Q_QUANTILE)
			break;
	}
	q1 = fmin(Q_MAX, fmax(q1, fmax(b->par.q_min, 2.0 * b->f)));
	wrong = 1.0 - b->par.confidence;
	/*
	 * Each test has two errors: naming a wrong culprit (a culprit at f
	 * accepted as failing, a parent at q accepted as clean), kept at
	 * 1 - confidence like the search; and withdrawing a right one, kept at
	 * CONFIRM_WITHDRAW_ERROR, since the search already stands for it.
	 */
	pc = (struct sprt_params){.p0 = b->f, .p1 = q1, .alpha = wrong, .beta = CONFIRM_WITHDRAW_ERROR};
	pp = (struct sprt_params){.p0 = b->f, .p1 = q1, .alpha = CONFIRM_WITHDRAW_ERROR, .beta = wrong};
	pc.max_trials = pp.max_trials = max_trials ? max_trials : (unsigned)ceil(CONFIRM_FAILURES_MAX / q1);
	out->p0 = b->f;
	out->p1 = q1;
	if ((rc = sprt_init(&sc, &pc)) || (rc = sprt_init(&sp, &pp)))
		return rc;
	/*
	 * The caller runs the confirmation in batches and calls again with the
	 * sums, so the boundaries are checked on the cumulative log-likelihood
	 * ratio of the counts (a group-sequential SPRT): that depends on the
	 * counts only, not on the order the trials came back in.
	 */
	out->llr_culprit = culprit_failures * sc.inc_fail + (culprit_trials - culprit_failures) * sc.inc_pass;
	out->llr_parent = parent_failures * sp.inc_fail + (parent_trials - parent_failures) * sp.inc_pass;
	c_dec = confirm_side(&sc, out->llr_culprit, culprit_trials);
	p_dec = confirm_side(&sp, out->llr_parent, parent_trials);
	if (c_dec == SPRT_ACCEPT_H0 || c_dec == SPRT_UNDECIDED || p_dec == SPRT_ACCEPT_H1 ||
	    p_dec == SPRT_UNDECIDED) {
		out->verdict = BISECT_WITHDRAWN;
	} else if (c_dec == SPRT_ACCEPT_H1 && p_dec == SPRT_ACCEPT_H0) {
		out->verdict = BISECT_CONFIRMED;
	} else {
		out->verdict = BISECT_CONFIRM_CONTINUE;
		/* The culprit needs failures: about two at the rate tested. */
		if (c_dec == SPRT_CONTINUE)
			out->more_culprit = (unsigned)ceil(2.0 / q1);
		/* The parent needs passes down to B. */
		if (p_dec == SPRT_CONTINUE)
			out->more_parent = (unsigned)ceil((out->llr_parent - sp.b) / -sp.inc_pass);
		if (culprit_trials + out->more_culprit > pc.max_trials)
			out->more_culprit = pc.max_trials - culprit_trials;
		if (parent_trials + out->more_parent > pp.max_trials)
			out->more_parent = pp.max_trials - parent_trials;
	}
	return 0;
}

/* ---------------------------------------------------------------------------
 * JSON
 */

json_t *bisect_to_json(struct bisect *b)
{
	json_t *o = NULL, *flags = NULL, *probes = NULL, *post = NULL;

	if (!b || recompute(b))
		return NULL;
	flags = json_array();
	probes = json_array();
	post = json_array();
	if (!flags || !probes || !post)
		goto error;
	for (unsigned i = 0; i < b->n; i++)
		if (json_array_append_new(flags, json_integer(b->flags[i])) ||
		    json_array_append_new(post, json_real(b->post[i])))
			goto error;
	for (unsigned i = 0; i < b->nprobes; i++) {
		const struct bisect_probe *p = &b->probes[i];

		json_t *e = json_pack("[I, I, I, b]", (json_int_t)p->commit, (json_int_t)p->trials,
				      (json_int_t)p->failures, p->failing_seeds);

		/* A free result says so in a fifth item (older documents have four). */
		if (e && p->free && json_array_append_new(e, json_true()))
			e = NULL;
		if (json_array_append_new(probes, e))
			goto error;
	}
	o = json_pack("{s:i, s:I, s:{s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I}, s:o, s:o, s:o, s:f, s:I}",
		      "version", 1, "n", (json_int_t)b->n, "params", "confidence", b->par.confidence,
		      "prior_none", b->par.prior_none, "flake_rate", b->par.flake_rate, "q_min", b->par.q_min,
		      "q_known", b->par.q_known, "batch_max", (json_int_t)b->par.batch_max, "max_trials",
		      (json_int_t)b->par.max_trials, "failing_seeds", (json_int_t)b->par.failing_seeds,
		      "flags", flags, "probes", probes, "posterior", post, "posterior_none", b->post_none,
		      "trials", (json_int_t)b->total_trials);
	/* json_pack's "o" took the three arrays, whether it succeeded or not. */
	return o;
error:
	json_decref(flags);
	json_decref(probes);
	json_decref(post);
	return NULL;
}

int bisect_from_json(struct bisect *b, const json_t *j)
{
	struct bisect_params p;
	json_t *flags, *probes, *x;
	json_int_t n, batch, maxt, fs;
	uint8_t *fl = NULL;
	size_t idx;
	int rc;

	if (!b || !json_is_object(j))
		return -EINVAL;
	bisect_params_default(&p);
	batch = p.batch_max;
	maxt = p.max_trials;
	fs = p.failing_seeds;
	if (json_unpack((json_t *)j, "{s:I, s:{s:F, s:F, s:F, s:F, s?F, s?I, s?I, s?I}, s:o, s:o}", "n", &n,
			"params", "confidence", &p.confidence, "prior_none", &p.prior_none, "flake_rate",
			&p.flake_rate, "q_min", &p.q_min, "q_known", &p.q_known, "batch_max", &batch,
			"max_trials", &maxt, "failing_seeds", &fs, "flags", &flags, "probes", &probes))
		return -EINVAL;
	if (n < 1 || n > BISECT_RANGE_MAX || !json_is_array(flags) || json_array_size(flags) != (size_t)n ||
	    !json_is_array(probes) || batch < 1 || batch > UINT32_MAX || maxt < 1 || maxt > UINT32_MAX ||
	    fs < 0 || fs > UINT32_MAX)
		return -EINVAL;
	p.batch_max = (unsigned)batch;
	p.max_trials = (unsigned)maxt;
	p.failing_seeds = (unsigned)fs;
	fl = malloc((size_t)n);
	if (!fl)
		return -ENOMEM;
	json_array_foreach(flags, idx, x)
	{
		if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 3) {
			free(fl);
			return -EINVAL;
		}
		fl[idx] = (uint8_t)json_integer_value(x);
	}
	rc = bisect_init(b, (unsigned)n, fl, &p);
	free(fl);
	if (rc)
		return rc;
	json_array_foreach(probes, idx, x)
	{
		json_int_t c, t, f;
		int seeded = 0;
		json_t *free_item = json_array_get(x, 4);

		if (json_unpack(x, "[I, I, I, b*]", &c, &t, &f, &seeded) || c < 0 || c >= n || t < 0 ||
		    t > UINT32_MAX || f < 0 || f > t || json_array_size(x) > 5 ||
		    (free_item && !json_is_boolean(free_item))) {
			rc = -EINVAL;
			goto error;
		}
		rc = observe(b, &(struct bisect_probe){(unsigned)c, (unsigned)t, (unsigned)f, seeded,
						       json_is_true(free_item)});
		if (rc)
			goto error;
	}
	return 0;
error:
	bisect_release(b);
	return rc;
}
