/* bisector: bisections queued, probed and decided, all state in PostgreSQL. */
#include "bisector.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bisect.h"
#include "db.h"
#include "log.h"
#include "mailer.h"
#include "nwd.h"

/* How often running bisections are looked at without a kick. */
#define TICK_MS 2000
/* Bisections advanced per step. */
#define BATCH 8
/* The highest baseline flake rate a bisection assumes (its culprits fail at 2 f or more). */
#define FLAKE_RATE_MAX 0.1
/* Culprits withdrawn before a bisection gives up blaming anyone. */
#define MAX_WITHDRAWALS 3

/* Open regressions get their bisection (queue_bisections(), sql/007). */
static const char queue_sql[] = "SELECT queue_bisections($1)";

static const char running_sql[] =
    "SELECT b.id FROM bisections b WHERE b.repo_id = $1 AND b.state <> 'done' ORDER BY b.id LIMIT 8";

/*
 * The rerun of a failing seed at the bad commit: its second run there from
 * before the bisection, infrastructure faults and sanitizer runs left out
 * (the plan reruns every seed that failed; NULL when it has not yet).
 */
#define RERUN_SQL(seed)                                                                                      \
	"(SELECT t.outcome FROM trials t WHERE t.commit_id = bd.id AND t.check_id = b.check_id"              \
	"  AND t.dtype = b.dtype AND t.seed = " seed                                                         \
	" AND t.outcome <> 'infra_error' AND t.sanitizer IS NULL"                                            \
	"  AND t.finished_at <= b.created_at ORDER BY t.attempt OFFSET 1 LIMIT 1)"
/* The failing seeds with their reruns, in order, for REPLAYED_SQL. */
#define FAILING_RERUNS_SQL                                                                                   \
	"(SELECT " RERUN_SQL("f.seed") " AS rerun, f.seed, f.o"                                              \
				       " FROM unnest(b.failing_seeds) WITH ORDINALITY f(seed, o))"
/* A deterministic check's seed whose repeats gave different outputs at the bad commit. */
#define DIFFERED_SQL(seed)                                                                                   \
	"(k.deterministic AND EXISTS (SELECT 1 FROM trials t WHERE t.commit_id = bd.id"                      \
	"  AND t.check_id = b.check_id AND t.dtype = b.dtype AND t.seed = " seed " AND t.digests_differ > 0" \
	"  AND t.sanitizer IS NULL AND t.finished_at <= b.created_at))"
/*
 * The bad commit's failing seeds that a bisection replays, in order: all of
 * them but those that passed their rerun there (a seed-bound failure comes
 * back; a race's or a flake's mostly does not) and, for a deterministic
 * check, those whose repeats gave different outputs there (a race). Such a
 * seed fails again only as any seed does, and a replay that passes would be
 * misread as evidence that the commit is clean or that the failure was a
 * flake. Those whose rerun failed come first: for a seed-bound failure their
 * reruns count as the replay at the bad commit (settle()), and the planner
 * takes a commit's replays from the front of the list. Only trials from
 * before the bisection count, and the list is frozen in the bisection's
 * posterior ('replayed') at its first save: a probe's seeds are picked by
 * their place in it, so it must never change under them.
 */
#define REPLAYED_SQL                                                                                         \
	"(SELECT coalesce(json_agg(u.seed ORDER BY u.rerun IS NULL, u.o), '[]') FROM " FAILING_RERUNS_SQL    \
	" u WHERE u.rerun IS DISTINCT FROM 'pass' AND NOT " DIFFERED_SQL("u.seed") ")"
#define FROZEN_REPLAYED_SQL "coalesce(b.posterior->'replayed', " REPLAYED_SQL "::jsonb)"
/* Whether the bisection's replayed seeds and flake rate are frozen (settle() has run and saved). */
#define FROZEN_SQL "coalesce(b.posterior ? 'replayed', false)"
/* The bad commit's failing seeds' reruns, [reruns, failed again], for bisect_judge_seeds(). */
#define RERUNS_SQL                                                                                           \
	"(SELECT json_build_array(count(r.rerun), count(r.rerun) FILTER (WHERE r.rerun <> 'pass'))"          \
	" FROM " FAILING_RERUNS_SQL " r)"
/* Of the seeds REPLAYED_SQL keeps, those whose rerun failed (the first of its list). */
#define KEPT_RERUNS_SQL                                                                                      \
	"(SELECT count(*) FROM jsonb_array_elements_text(" REPLAYED_SQL "::jsonb) e(seed)"                   \
	" WHERE " RERUN_SQL("e.seed::bigint") " IS NOT NULL)"
/* The good side's [trials, failures] for the flake rate: library_rate() (sql/006) up to the good commit. */
#define GOOD_SIDE_SQL                                                                                        \
	"(SELECT json_build_array(r.trials, r.failures)"                                                     \
	" FROM library_rate(b.repo_id, b.check_id, b.dtype, g.position, 16) r)"

/*
 * Everything one step needs, as one JSON document: the range with each
 * commit's build, the good commit's runner hash, the plan results already
 * stored for the range (first runs: observations for free), every probe, and
 * the highest seed run at each commit (fresh seeds start above it).
 * Nothing once it is done: a done bisection is final. Another daemon may
 * finish it between running_sql's list and this read, and a step of it then
 * (its step number still the latest) would open it again: seen with four
 * daemons, a confirmed culprit re-tested, its mail queued meanwhile with no
 * culprit_id, and so no longer one mail per culprit.
 */
static const char load_sql[] =
    "SELECT json_build_object('id', b.id, 'state', b.state, 'check_id', b.check_id, 'dtype', b.dtype,"
    " 'check', k.name, 'failing_seeds', " FROZEN_REPLAYED_SQL ", 'frozen', " FROZEN_SQL ","
    " 'replayed_reruns', CASE WHEN " FROZEN_SQL " THEN coalesce((b.posterior->>'replayed_reruns')::int, 0)"
    "  ELSE " KEPT_RERUNS_SQL " END,"
    " 'flake_rate', (b.posterior->>'flake_rate')::float8, 'seeds', b.posterior->'seeds',"
    " 'reruns', CASE WHEN NOT " FROZEN_SQL " THEN " RERUNS_SQL " END,"
    " 'good_side', CASE WHEN NOT " FROZEN_SQL " THEN " GOOD_SIDE_SQL " END,"
    " 'good', g.id, 'good_sha', g.sha,"
    " 'good_hash', (SELECT runner_hash FROM builds WHERE commit_id = g.id AND status = 'ok'),"
    " 'range', (SELECT coalesce(json_agg(json_build_object('id', c.id, 'sha', c.sha, 'build', bu.status,"
    "   'hash', bu.runner_hash, 'plan_trials', st.trials, 'plan_failures', st.failures,"
    "   'max_seed', (SELECT max(t.seed) FROM trials t WHERE t.commit_id = c.id AND t.check_id = b.check_id"
    "    AND t.dtype = b.dtype)) ORDER BY c.position), '[]')"
    "   FROM commits c LEFT JOIN builds bu ON bu.commit_id = c.id"
    "   LEFT JOIN stats st ON st.commit_id = c.id AND st.check_id = b.check_id AND st.dtype = b.dtype"
    "    AND st.verdict NOT IN ('pending', 'build_failed', 'infra_error')"
    "   WHERE c.repo_id = b.repo_id AND c.reachable AND c.position > g.position AND c.position <= "
    "bd.position),"
    " 'good_max_seed', (SELECT max(t.seed) FROM trials t WHERE t.commit_id = g.id AND t.check_id = b.check_id"
    "   AND t.dtype = b.dtype),"
    " 'probes', (SELECT coalesce(json_agg(json_build_object('commit', p.commit_id, 'trials', p.trials,"
    "   'failures', p.failures, 'purpose', p.purpose, 'failing', p.failing_seeds, 'round', p.round,"
    "   'done', p.finished_at IS NOT NULL, 'seeds', cardinality(p.seeds)) ORDER BY p.id), '[]')"
    "   FROM probes p WHERE p.bisection_id = b.id),"
    " 'racy_seeds', cardinality(b.failing_seeds) - jsonb_array_length(" FROZEN_REPLAYED_SQL "),"
    " 'withdrawals', coalesce((b.posterior->>'withdrawals')::int, 0),"
    " 'confirm_from', coalesce((b.posterior->>'confirm_from')::int, 0), 'log', b.log, 'step', b.step,"
    " 'regression_state', (SELECT x.state FROM regressions x WHERE x.id = b.regression_id))::text"
    " FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits g ON g.id = b.good_commit_id"
    " JOIN commits bd ON bd.id = b.bad_commit_id WHERE b.id = $1 AND b.state <> 'done'";

/* Unbuilt commits of a range are built first. */
static const char hurry_builds_sql[] =
    "UPDATE jobs SET priority = 10 WHERE kind = 'build' AND state = 'queued' AND priority > 10"
    " AND commit_id = ANY ($1::bigint[])";

/*
 * A step's writes, all in one statement (bisection_save(), sql/040): its
 * probes and the bisection's new state, under the bisection's row lock, and
 * only if no other step was saved since this one loaded the bisection (its
 * step counter): whichever daemons step it, each step is written once.
 */
static const char save_sql[] =
    "SELECT bisection_save($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb)";

/* What follows a saved step. */
enum after {
	AFTER_NOTHING = 0,
	AFTER_KICK = 1, /* new probes: wake the slots */
	AFTER_STEP = 2, /* step again at once (confirmation starts, a withdrawn culprit's search goes on) */
	AFTER_MAIL_WITHDRAWN = 4, /* the culprit mail's follow-up */
};

struct bisector {
	struct nwd *d;
	uv_timer_t timer;
	bool busy, again, stopped;
	long long ids[BATCH];
	unsigned nids, next;
};

static void step(struct bisector *b);
static void next_bisection(struct bisector *b);

static void step_done(struct bisector *b)
{
	b->busy = false;
	if (b->again && !b->stopped) {
		b->again = false;
		step(b);
	}
}

static void on_query(PGresult *res, const char *error, void *data)
{
	if (error)
		log_warn("bisect: %s", error);
}

/* One bisection's step, with what load_sql returned. */
struct ctx {
	struct bisector *b;
	json_t *probes;        /* probes to queue with the step's save: bisection_save()'s rows */
	long long withdrawals; /* culprits withdrawn so far; the search goes on after each, up to a limit */
	long long
	    confirm_from; /* a confirmation counts only probes of later rounds (the last withdrawal's) */
	json_t *doc;
	json_t *log; /* entries to append */
};

static const char *jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static long long jint(json_t *o, const char *key, long long dflt)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static void log_event(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_event(struct ctx *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Logged once the step is saved (on_saved): a step another daemon saved first did not happen. */
	json_array_append_new(c->log, json_pack("{s:s, s:I}", "msg", msg, "at", (json_int_t)time(NULL)));
}

/*
 * Seeds as a JSON array: 'failing' picks from the bisection's failing seeds
 * from the offset-th on; else fresh seeds, the offset-th past the commit's
 * highest on (the parts of one probe take disjoint ones).
 */
static json_t *seed_json(struct ctx *c, json_t *commit, bool failing, unsigned offset, unsigned count)
{
	json_t *s = json_array();
	json_t *fs = json_object_get(c->doc, "failing_seeds");
	long long start = jint(commit, "max_seed", -1) + 1;

	if (!s)
		return NULL;
	/* Fresh seeds continue the commit's sequence past the plan (paired across commits). */
	if (start < (long long)c->b->d->cfg.trials_per_commit)
		start = c->b->d->cfg.trials_per_commit;
	for (unsigned i = 0; i < count; i++) {
		long long seed =
		    failing ? json_integer_value(json_array_get(fs, offset + i)) : start + offset + i;

		json_array_append_new(s, json_integer(seed));
	}
	return s;
}

static void queue_probe(struct ctx *c, json_t *commit, unsigned trials, bool failing, bool stop, int round,
			const char *purpose, unsigned offset)
{
	json_t *seeds = seed_json(c, commit, failing, offset, trials);

	if (!seeds)
		return;
	json_array_append_new(c->probes,
			      json_pack("{s:I, s:o, s:b, s:i, s:s, s:b}", "commit",
					(json_int_t)jint(commit, "id", 0), "seeds", seeds, "stop", stop,
					"round", round, "purpose", purpose, "failing", failing));
}

/*
 * Fresh seeds at one commit as 'parts' probes of about equal size, one job
 * each, so that as many slots run them at once; their seeds are disjoint.
 */
static void queue_parts(struct ctx *c, json_t *commit, unsigned trials, unsigned parts, bool stop, int round,
			const char *purpose)
{
	if (parts == 0)
		parts = 1;
	if (parts > trials)
		parts = trials;
	for (unsigned y = 0, first = 0; y < parts; y++) {
		unsigned size = trials / parts + (y < trials % parts);

		queue_probe(c, commit, size, false, stop, round, purpose, first);
		first += size;
	}
}

/*
 * The posterior as stored and served: each commit's probability, "no
 * culprit", and what the search settled (its replayed seeds, their judgement,
 * the flake rate assumed); culprit_rate is E[q] of fresh seeds at the commit
 * now most likely the culprit (the culprit, once confirmed): how often the
 * failure shows there (the culprit mail's repro runs the seed often enough
 * to see it).
 */
static json_t *posterior_json(struct ctx *c, struct bisect *m, json_t *range, const char *status)
{
	double *post = calloc(m->n, sizeof(double)), none = 0, rate = NAN;
	json_t *commits = json_array();
	int lead = BISECT_NONE;

	if (post && bisect_posterior(m, post, &none) == 0) {
		for (unsigned i = 0; i < m->n; i++)
			json_array_append_new(commits, json_pack("{s:s, s:f, s:i}", "sha",
								 jstr(json_array_get(range, i), "sha"), "p",
								 post[i], "flags", m->flags[i]));
	}
	free(post);
	bisect_done(m, &lead, NULL);
	if (lead != BISECT_NONE)
		rate = bisect_culprit_rate(m, (unsigned)lead);
	return json_pack("{s:o, s:f, s:s, s:I, s:I, s:I, s:O, s:I, s:f, s:O?, s:o}", "commits", commits,
			 "none", none, "status", status, "trials", (json_int_t)m->total_trials, "withdrawals",
			 (json_int_t)c->withdrawals, "confirm_from", (json_int_t)c->confirm_from, "replayed",
			 json_object_get(c->doc, "failing_seeds"), "replayed_reruns",
			 (json_int_t)jint(c->doc, "replayed_reruns", 0), "flake_rate", m->par.flake_rate,
			 "seeds", json_object_get(c->doc, "seeds"), "culprit_rate",
			 isnan(rate) ? json_null() : json_real(rate));
}

/* Whether the bisection's log (stored, or still to be stored) has an entry containing 'needle'. */
static bool logged(struct ctx *c, const char *needle)
{
	json_t *logs[2] = {json_object_get(c->doc, "log"), c->log}, *e;
	size_t i;

	for (int k = 0; k < 2; k++)
		json_array_foreach(logs[k], i, e)
		{
			const char *msg = json_string_value(json_object_get(e, "msg"));

			if (msg && strstr(msg, needle))
				return true;
		}
	return false;
}

/* A saved step: what it logged, and what follows it. */
struct saved {
	struct bisector *b;
	long long id;
	json_t *log;
	enum after after;
};

static void on_saved(PGresult *res, const char *error, void *data)
{
	struct saved *v = data;
	json_t *e;
	size_t i;

	if (error) {
		log_warn("bisect %lld: cannot save the step: %s", v->id, error);
	} else if (strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
		log_debug("bisect %lld: another daemon stepped it meanwhile; its step stands", v->id);
	} else {
		json_array_foreach(v->log, i, e)
		    log_info("bisect %lld: %s", v->id, json_string_value(json_object_get(e, "msg")));
		if (v->after & AFTER_MAIL_WITHDRAWN)
			mailer_enqueue_withdrawn(v->b->d, v->id);
		if (v->after & AFTER_KICK)
			nwd_kick(v->b->d);
		if (v->after & AFTER_STEP)
			bisector_kick(v->b);
	}
	json_decref(v->log);
	free(v);
}

static void save(struct ctx *c, const char *state, const char *outcome, long long culprit, double confidence,
		 json_t *posterior, enum after after)
{
	char id[24], step[24], cul[24], conf[32], *post, *log, *probes;
	struct saved *v = malloc(sizeof(*v));

	/* Said once, with the first save (the log is stored with the posterior). */
	if (jint(c->doc, "racy_seeds", 0) > 0 && !logged(c, "not replayed"))
		log_event(
		    c,
		    "%lld failing seeds not replayed: their repeats differed, or they passed their rerun"
		    " (a race or a flake)",
		    jint(c->doc, "racy_seeds", 0));
	post = json_dumps(posterior, JSON_COMPACT);
	log = json_dumps(c->log, JSON_COMPACT);
	probes = json_dumps(c->probes, JSON_COMPACT);
	json_decref(posterior);
	snprintf(id, sizeof(id), "%lld", jint(c->doc, "id", 0));
	snprintf(step, sizeof(step), "%lld", jint(c->doc, "step", 0));
	snprintf(cul, sizeof(cul), "%lld", culprit);
	snprintf(conf, sizeof(conf), "%.6f", confidence);
	if (v && post && log && probes) {
		const char *params[9] = {
		    id,   step, state, outcome, culprit > 0 ? cul : NULL, isnan(confidence) ? NULL : conf,
		    post, log,  probes};

		v->b = c->b;
		v->id = jint(c->doc, "id", 0);
		v->log = json_incref(c->log);
		v->after = after;
		if (db_query(c->b->d->db, save_sql, 9, params, on_saved, v) < 0) {
			json_decref(v->log);
			free(v);
		}
	} else {
		log_error("bisect %s: out of memory saving a step", id);
		free(v);
	}
	free(post);
	free(log);
	free(probes);
}

/*
 * Settled at a bisection's first step and frozen in its posterior with the
 * replayed seeds: the flake rate the model assumes, the good side's
 * observed rate between the model's default and FLAKE_RATE_MAX (the
 * default where the check has no results there: it is newer than the good
 * commit), and what the bad commit's reruns say about its failing
 * seeds (bisect_judge_seeds): a race's are not replayed, and a seed-bound
 * failure's failed reruns are their replay at the bad commit.
 */
static void settle(struct ctx *c, json_t *range)
{
	json_t *bad = json_array_get(range, json_array_size(range) - 1), *side, *reruns;
	struct bisect_params def;
	enum bisect_seeds judged;
	long long nrerun, nagain,
	    nfailing = (long long)json_array_size(json_object_get(c->doc, "failing_seeds"));
	double f, trials;

	bisect_params_default(&def);
	if (json_is_true(json_object_get(c->doc, "frozen"))) {
		/* Bisections from before the flake rate was stored ran with the default. */
		if (!json_is_number(json_object_get(c->doc, "flake_rate")))
			json_object_set_new(c->doc, "flake_rate", json_real(def.flake_rate));
		return;
	}
	side = json_object_get(c->doc, "good_side");
	trials = json_number_value(json_array_get(side, 0));
	f = trials > 0 ? json_number_value(json_array_get(side, 1)) / trials : 0.0;
	f = fmin(fmax(f, def.flake_rate), FLAKE_RATE_MAX);
	json_object_set_new(c->doc, "flake_rate", json_real(f));
	reruns = json_object_get(c->doc, "reruns");
	nrerun = json_integer_value(json_array_get(reruns, 0));
	nagain = json_integer_value(json_array_get(reruns, 1));
	judged =
	    bisect_judge_seeds((unsigned)jint(bad, "plan_failures", 0), (unsigned)jint(bad, "plan_trials", 0),
			       (unsigned)nrerun, (unsigned)nagain, f);
	json_object_set_new(c->doc, "seeds", json_string(bisect_seeds_name(judged)));
	if (judged == BISECT_SEEDS_RACE && nfailing > 0) {
		log_event(c,
			  "%lld of %lld failing seeds failed again on their rerun, against %lld of %lld %s",
			  nagain, nrerun, jint(bad, "plan_failures", 0), jint(bad, "plan_trials", 0),
			  "in the first pass: a race, so fresh seeds only");
		json_object_set_new(c->doc, "failing_seeds", json_array());
	}
	if (judged != BISECT_SEEDS_BOUND)
		json_object_set_new(c->doc, "replayed_reruns", json_integer(0));
}

/* The model, rebuilt from the stored range, plan results and probes. */
static int build_model(struct ctx *c, struct bisect *m, bool *unbuilt)
{
	json_t *range = json_object_get(c->doc, "range"), *probes = json_object_get(c->doc, "probes");
	unsigned n = (unsigned)json_array_size(range);
	uint8_t *flags = calloc(n ? n : 1, 1);
	struct bisect_params par;
	const char *prev_hash = jstr(c->doc, "good_hash");
	long long reruns;
	json_t *p;
	size_t i;
	int rc;

	if (!flags)
		return -ENOMEM;
	*unbuilt = false;
	for (i = 0; i < n; i++) {
		json_t *commit = json_array_get(range, i);
		const char *build = jstr(commit, "build"), *hash = jstr(commit, "hash");

		if (!*build)
			*unbuilt = true;
		else if (strcmp(build, "ok") != 0)
			flags[i] |= BISECT_UNBUILDABLE;
		else if (*prev_hash && strcmp(hash, prev_hash) == 0)
			flags[i] |= BISECT_SAME_BINARY;
		if (strcmp(build, "ok") == 0)
			prev_hash = hash;
	}
	settle(c, range);
	bisect_params_default(&par);
	par.confidence = c->b->d->cfg.bisect_confidence;
	par.prior_none = c->b->d->cfg.bisect_prior_none;
	par.max_trials = c->b->d->cfg.bisect_max_trials;
	par.flake_rate = json_number_value(json_object_get(c->doc, "flake_rate"));
	/* The failing seeds replayed first (REPLAYED_SQL and settle(): racy ones left out). */
	par.failing_seeds = (unsigned)json_array_size(json_object_get(c->doc, "failing_seeds"));
	rc = bisect_init(m, n, flags, &par);
	free(flags);
	if (rc < 0)
		return rc;
	/* A seed-bound failure's failed reruns: the failing seeds' replay at the bad commit. */
	reruns = jint(c->doc, "replayed_reruns", 0);
	if (reruns > (long long)par.failing_seeds)
		reruns = par.failing_seeds;
	/* A bad commit with its parent's binary is never observed: then none were taken. */
	if (reruns > 0 && (m->flags[n - 1] & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY)))
		reruns = 0;
	json_object_set_new(c->doc, "replayed_reruns", json_integer(reruns));
	/* Both are free: the search's budget ([bisect] max_trials) is for its own probes. */
	if (reruns > 0)
		bisect_observe_free(m, n - 1, (unsigned)reruns, (unsigned)reruns, true);
	/* The plan's first runs are observations already paid for. */
	for (i = 0; i < n; i++) {
		json_t *commit = json_array_get(range, i);
		long long t = jint(commit, "plan_trials", 0), f = jint(commit, "plan_failures", 0);

		if (t > 0 && !(m->flags[i] & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY)))
			bisect_observe_free(m, (unsigned)i, (unsigned)f, (unsigned)t, false);
	}
	json_array_foreach(probes, i, p)
	{
		long long commit = jint(p, "commit", 0);

		/* Confirmation trials are fresh seeds too: a withdrawn culprit's search goes on with them. */
		if (!json_is_true(json_object_get(p, "done")))
			continue;
		for (size_t k = 0; k < n; k++) {
			if (jint(json_array_get(range, k), "id", -1) == commit) {
				bisect_observe(m, (unsigned)k, (unsigned)jint(p, "failures", 0),
					       (unsigned)jint(p, "trials", 0),
					       json_is_true(json_object_get(p, "failing")));
				break;
			}
		}
	}
	return 0;
}

/*
 * Probes still running (any purpose: fresh seeds are numbered from what is
 * stored, so a new probe at a commit waits for every probe there), and the
 * highest round so far.
 */
static unsigned open_probes(struct ctx *c, int *round)
{
	json_t *p;
	size_t i;
	unsigned open = 0;

	*round = 0;
	json_array_foreach(json_object_get(c->doc, "probes"), i, p)
	{
		if ((int)jint(p, "round", 0) > *round)
			*round = (int)jint(p, "round", 0);
		if (!json_is_true(json_object_get(p, "done")))
			open++;
	}
	return open;
}

/*
 * Fresh-seed confirmation counts at one commit id, since the last withdrawal:
 * a culprit named again after one is re-tested with new seeds, not judged
 * again on the trials that withdrew it.
 */
static void confirm_counts(struct ctx *c, long long commit, unsigned *fails, unsigned *trials)
{
	json_t *p;
	size_t i;

	*fails = *trials = 0;
	json_array_foreach(json_object_get(c->doc, "probes"), i, p)
	{
		if (jint(p, "commit", 0) == commit && strcmp(jstr(p, "purpose"), "confirm") == 0 &&
		    jint(p, "round", 0) > c->confirm_from && json_is_true(json_object_get(p, "done"))) {
			*fails += (unsigned)jint(p, "failures", 0);
			*trials += (unsigned)jint(p, "trials", 0);
		}
	}
}

static void search(struct ctx *c, struct bisect *m, json_t *range)
{
	struct bisect_plan plan[64];
	unsigned k = c->b->d->nslots ? c->b->d->nslots : 1, nplan = 0;
	int culprit = BISECT_NONE, round;
	double prob = 0;
	enum bisect_status st = bisect_done(m, &culprit, &prob);

	if (k > 64)
		k = 64;
	if (st == BISECT_FOUND) {
		json_t *commit = json_array_get(range, (size_t)culprit);

		log_event(c,
			  "%.12s holds %.4f after %lu trials; re-testing it and its parent with fresh seeds",
			  jstr(commit, "sha"), prob, m->total_trials);
		save(c, "confirming", NULL, 0, prob, posterior_json(c, m, range, "confirming"), AFTER_STEP);
		return;
	}
	if (st != BISECT_RUNNING) {
		log_event(c, "no culprit (%s, P(no culprit) %.4f after %lu trials): nobody is blamed",
			  bisect_status_name(st), prob, m->total_trials);
		save(c, "done", "no_culprit", 0, prob, posterior_json(c, m, range, bisect_status_name(st)),
		     AFTER_NOTHING);
		return;
	}
	if (open_probes(c, &round) > 0)
		return; /* a round is in flight */
	if (bisect_next_probes(m, k, plan, &nplan) < 0 || nplan == 0) {
		log_event(c, "nothing left to probe: nobody is blamed");
		save(c, "done", "no_culprit", 0, prob, posterior_json(c, m, range, "exhausted"),
		     AFTER_NOTHING);
		return;
	}
	for (unsigned i = 0; i < nplan; i++) {
		json_t *commit = json_array_get(range, plan[i].commit);
		/*
		 * Failing seeds: the next ones not yet run at this commit, counted as
		 * the model counts them (the trials of the finished failing-seed
		 * probes there; a finished probe's seeds are the ones it ran, and
		 * no probe is open when a round is planned). The slot runs a
		 * probe's seeds in ascending order and the list is ascending, so
		 * the ones run are always the first of it.
		 */
		unsigned offset = plan[i].failing_seeds ? m->trial[1][plan[i].commit] : 0;
		unsigned trials = plan[i].trials;
		size_t nfail = json_array_size(json_object_get(c->doc, "failing_seeds"));

		if (plan[i].failing_seeds && offset + trials > nfail)
			trials = offset < nfail ? (unsigned)(nfail - offset) : 0;
		if (trials == 0)
			continue;
		if (plan[i].parts > 1) {
			queue_parts(c, commit, trials, plan[i].parts, plan[i].stop_on_failure, round + 1,
				    "search");
			log_event(c, "round %d: probe %.12s with %u fresh seeds in %u parts", round + 1,
				  jstr(commit, "sha"), trials, plan[i].parts);
			continue;
		}
		queue_probe(c, commit, trials, plan[i].failing_seeds, plan[i].stop_on_failure, round + 1,
			    "search", offset);
		log_event(c, "round %d: probe %.12s with %u %s seeds", round + 1, jstr(commit, "sha"), trials,
			  plan[i].failing_seeds ? "failing" : "fresh");
	}
	save(c, "running", NULL, 0, prob, posterior_json(c, m, range, "running"), AFTER_KICK);
}

static void confirm(struct ctx *c, struct bisect *m, json_t *range)
{
	int culprit = BISECT_NONE, parent, round;
	double prob = 0;
	struct bisect_confirm_result r;
	unsigned cf, ct, pf, pt, slots;
	long long culprit_id, parent_id;
	json_t *cc, *pc;

	bisect_done(m, &culprit, &prob);
	if (culprit < 0) {
		log_event(c, "lost its culprit while confirming: nobody is blamed");
		save(c, "done", "no_culprit", 0, prob, posterior_json(c, m, range, "no culprit"),
		     AFTER_NOTHING);
		return;
	}
	parent = bisect_confirm_parent(m, (unsigned)culprit);
	/* A commit whose binary equals its parent's is never probed: the same experiment runs further back. */
	while (parent >= 0 && (m->flags[parent] & (BISECT_UNBUILDABLE | BISECT_SAME_BINARY)))
		parent--;
	cc = json_array_get(range, (size_t)culprit);
	culprit_id = jint(cc, "id", 0);
	if (parent >= 0) {
		pc = json_array_get(range, (size_t)parent);
		parent_id = jint(pc, "id", 0);
	} else {
		/* The parent is the last good commit itself. */
		pc = json_pack("{s:I, s:s, s:I}", "id", (json_int_t)jint(c->doc, "good", 0), "sha",
			       jstr(c->doc, "good_sha"), "max_seed",
			       (json_int_t)jint(c->doc, "good_max_seed", -1));
		json_array_append_new(json_object_get(c->doc, "range"), pc); /* owned by doc from here */
		parent_id = jint(pc, "id", 0);
	}
	confirm_counts(c, culprit_id, &cf, &ct);
	confirm_counts(c, parent_id, &pf, &pt);
	if (bisect_confirm(m, (unsigned)culprit, cf, ct, pf, pt, 0, &r) < 0)
		return;
	if (r.verdict == BISECT_CONFIRMED) {
		log_event(c,
			  "culprit %.12s confirmed: %u/%u fresh seeds fail there, %u/%u at its parent %.12s",
			  jstr(cc, "sha"), cf, ct, pf, pt, jstr(pc, "sha"));
		/*
		 * The mail goes out from the mailer's sweep: one per culprit commit,
		 * once every other regression it may have caused is bisected too.
		 */
		save(c, "done", "culprit", culprit_id, prob, posterior_json(c, m, range, "culprit"),
		     AFTER_NOTHING);
		return;
	}
	if (r.verdict == BISECT_WITHDRAWN) {
		c->withdrawals++;
		open_probes(c, &round);
		c->confirm_from = round;
		if (c->withdrawals >= MAX_WITHDRAWALS) {
			log_event(
			    c,
			    "culprit %.12s withdrawn: fresh seeds fail %u/%u there and %u/%u at its parent;"
			    " %lld withdrawn, nobody is blamed",
			    jstr(cc, "sha"), cf, ct, pf, pt, c->withdrawals);
			save(c, "done", "withdrawn", culprit_id, prob,
			     posterior_json(c, m, range, "withdrawn"), AFTER_MAIL_WITHDRAWN);
			return;
		}
		/* The confirmation's fresh seeds are evidence too: search on with them. */
		log_event(c,
			  "culprit %.12s withdrawn: fresh seeds fail %u/%u there and %u/%u at its parent;"
			  " searching on",
			  jstr(cc, "sha"), cf, ct, pf, pt);
		save(c, "running", NULL, 0, prob, posterior_json(c, m, range, "running"), AFTER_STEP);
		return;
	}
	if (open_probes(c, &round) > 0)
		return;
	/* The slots shared between the two commits (all to one when the other is decided): sooner. */
	slots = c->b->d->nslots ? c->b->d->nslots : 1;
	if (r.more_culprit)
		queue_parts(c, cc, r.more_culprit, r.more_parent ? (slots + 1) / 2 : slots, false, round + 1,
			    "confirm");
	if (r.more_parent)
		queue_parts(c, pc, r.more_parent, r.more_culprit ? (slots > 1 ? slots / 2 : 1) : slots, false,
			    round + 1, "confirm");
	log_event(c, "confirming %.12s: %u fresh seeds there, %u at its parent %.12s", jstr(cc, "sha"),
		  r.more_culprit, r.more_parent, jstr(pc, "sha"));
	save(c, "confirming", NULL, 0, prob, posterior_json(c, m, range, "confirming"), AFTER_KICK);
}

static void on_loaded(PGresult *res, const char *error, void *data)
{
	struct bisector *b = data;
	struct ctx c = {.b = b};
	struct bisect m = {0};
	bool unbuilt = false;
	json_t *range;

	if (error || PQntuples(res) != 1) {
		if (error)
			log_warn("bisect: %s", error);
		next_bisection(b);
		return;
	}
	c.doc = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	c.withdrawals = jint(c.doc, "withdrawals", 0);
	c.confirm_from = jint(c.doc, "confirm_from", 0);
	c.log = json_array();
	c.probes = json_array();
	if (!c.doc || !c.log || !c.probes)
		goto out;
	range = json_object_get(c.doc, "range");
	/* Its regression was a provisional verdict's, judged again and gone: nothing to find. */
	if (strcmp(jstr(c.doc, "regression_state"), "withdrawn") == 0) {
		log_event(&c, "its regression was withdrawn (the verdict that raised it was judged again): "
			      "nobody is blamed");
		save(&c, "done", "no_culprit", 0, NAN, json_object(), AFTER_NOTHING);
		goto out;
	}
	if (json_array_size(range) == 0) {
		log_event(&c, "empty range: nobody is blamed");
		save(&c, "done", "no_culprit", 0, NAN, json_object(), AFTER_NOTHING);
		goto out;
	}
	if (build_model(&c, &m, &unbuilt) < 0)
		goto out;
	if (unbuilt) {
		/* Probes need binaries: build the range first. */
		size_t cap = 2 + json_array_size(range) * 22, len = 0, i;
		char *ids = malloc(cap);
		json_t *commit;

		if (ids) {
			ids[len++] = '{';
			json_array_foreach(range, i, commit) len += (size_t)snprintf(
			    ids + len, cap - len, "%s%lld", i ? "," : "", jint(commit, "id", 0));
			ids[len++] = '}';
			ids[len] = '\0';
			/* Not queued (a full queue): the next step asks again. */
			if (db_query(b->d->db, hurry_builds_sql, 1, (const char *const[]){ids}, on_query,
				     NULL) < 0)
				log_warn("bisect %lld: cannot queue the builds of its range yet",
					 jint(c.doc, "id", 0));
			free(ids);
		}
		goto out;
	}
	if (strcmp(jstr(c.doc, "state"), "confirming") == 0)
		confirm(&c, &m, range);
	else
		search(&c, &m, range);
out:
	bisect_release(&m);
	json_decref(c.doc);
	json_decref(c.log);
	json_decref(c.probes);
	next_bisection(b);
}

static void next_bisection(struct bisector *b)
{
	char id[24];
	const char *params[1] = {id};
	int rc;

	if (b->next >= b->nids || b->stopped) {
		step_done(b);
		return;
	}
	snprintf(id, sizeof(id), "%lld", b->ids[b->next++]);
	rc = db_query(b->d->db, load_sql, 1, params, on_loaded, b);
	/* The step ends here (busy cleared): the next tick tries again. */
	if (rc < 0) {
		log_warn("bisect %s: cannot load it: %s", id, strerror(-rc));
		step_done(b);
	}
}

static void on_running(PGresult *res, const char *error, void *data)
{
	struct bisector *b = data;

	b->nids = b->next = 0;
	if (error) {
		log_warn("bisect: %s", error);
		step_done(b);
		return;
	}
	for (int i = 0; i < PQntuples(res) && b->nids < BATCH; i++)
		b->ids[b->nids++] = db_get_ll(res, i, 0, 0);
	next_bisection(b);
}

static void on_queued(PGresult *res, const char *error, void *data)
{
	struct bisector *b = data;
	char repo[16];
	const char *params[1] = {repo};

	if (error)
		log_warn("bisect: queueing bisections failed: %s", error);
	else
		for (int i = 0; i < PQntuples(res); i++)
			log_info("bisect %s: queued for a new regression", PQgetvalue(res, i, 0));
	snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
	if (db_query(b->d->db, running_sql, 1, params, on_running, b) < 0)
		on_running(NULL, "cannot queue the query", b);
}

static void step(struct bisector *b)
{
	char repo[16];
	const char *params[1] = {repo};
	int rc;

	if (b->busy) {
		b->again = true;
		return;
	}
	if (b->stopped || b->d->draining)
		return;
	b->busy = true;
	snprintf(repo, sizeof(repo), "%d", b->d->repo_id);
	/* [bisect] automatic = false: only bisections started by hand run. */
	if (!b->d->cfg.bisect_automatic)
		rc = db_query(b->d->db, running_sql, 1, params, on_running, b);
	else
		rc = db_query(b->d->db, queue_sql, 1, params, on_queued, b);
	/* Not busy any more: the next tick tries again. */
	if (rc < 0) {
		log_warn("bisect: cannot look for bisections to step: %s", strerror(-rc));
		step_done(b);
	}
}

static void on_tick(uv_timer_t *t)
{
	step(t->data);
}

void bisector_kick(struct bisector *b)
{
	step(b);
}

int bisector_start(struct nwd *d, struct bisector **out)
{
	struct bisector *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->d = d;
	uv_timer_init(d->loop, &b->timer);
	b->timer.data = b;
	uv_timer_start(&b->timer, on_tick, TICK_MS, TICK_MS);
	*out = b;
	return 0;
}

void bisector_stop(struct bisector *b)
{
	b->stopped = true;
	uv_timer_stop(&b->timer);
}
