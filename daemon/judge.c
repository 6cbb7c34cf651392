/* judge: verdicts against the state just before, regressions kept in PostgreSQL (sql/007). */
#include "judge.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "jobs.h"
#include "log.h"
#include "nwd.h"
#include "verdict.h"

struct judging {
	struct nwd *d;
	struct job job; /* its seeds pointer is not used */
	const struct stats_seed *seeds;
	unsigned planned;
	double worst;
	bool infra_failed;
	judge_cb cb;
	void *data;
	struct stats_evidence ev;
	unsigned ran, failed;
	char base_sha[41]; /* the baseline's, "" for none */
};

static void finish(struct judging *j, enum judge_result r, unsigned more)
{
	j->cb(j->data, r, more);
	free(j);
}

/* The statistics as configured ([verdict], and [trials] max). */
static void verdict_params(const struct config *cfg, struct stats_verdict_params *par)
{
	stats_verdict_params_default(par);
	par->p0_floor = cfg->verdict_p0_floor;
	par->p1 = cfg->verdict_p1;
	par->p1_factor = cfg->verdict_p1_factor;
	par->alpha = cfg->verdict_alpha;
	par->beta = cfg->verdict_beta;
	par->min_trials = cfg->verdict_min_trials;
	par->max_trials = cfg->trials_max;
	par->mcnemar_alpha = cfg->verdict_mcnemar_alpha;
	par->drift_factor = cfg->verdict_drift_factor;
	par->drift_alpha = cfg->verdict_drift_alpha;
	if (par->min_trials > par->max_trials)
		par->min_trials = par->max_trials;
}

static int cmp_stats_seed(const void *a, const void *b)
{
	int64_t x = ((const struct stats_seed *)a)->seed, y = ((const struct stats_seed *)b)->seed;

	return x < y ? -1 : x > y;
}

/* "{1,5,9}" of the seeds for which 'pick' holds; NULL when out of memory. */
static char *seed_array(const struct stats_seed *ss, unsigned n, const bool *pick)
{
	size_t cap = 3 + (size_t)n * 22, len = 0;
	char *out = malloc(cap);

	if (!out)
		return NULL;
	out[len++] = '{';
	for (unsigned i = 0; i < n; i++)
		if (pick[i])
			len += (size_t)snprintf(out + len, cap - len, "%s%lld", len > 1 ? "," : "",
						(long long)ss[i].seed);
	out[len++] = '}';
	out[len] = '\0';
	return out;
}

/*
 * trial_case() (sql/007) is "f:family:shape:gen", then "|d:digest" where the
 * runner sent one: digests decide where both sides have one (a runner that
 * starts sending them changes no case), else family, shape and generator.
 */
static bool same_case(const char *a, const char *b)
{
	const char *da = strchr(a, '|'), *db = strchr(b, '|');

	if (da && db)
		return strcmp(da, db) == 0;
	return (da ? (size_t)(da - a) : strlen(a)) == (db ? (size_t)(db - b) : strlen(b)) &&
	       strncmp(a, b, da ? (size_t)(da - a) : strlen(a)) == 0;
}

static void on_recorded(PGresult *res, const char *error, void *data)
{
	struct judging *j = data;
	const char *verdict, *regression;

	if (error) {
		log_warn("verdict %.12s %s %s: cannot record: %s", j->job.sha, j->job.check, j->job.dtype,
			 error);
		finish(j, JUDGE_NOT_STORED, 0);
		return;
	}
	if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
		finish(j, JUDGE_NOT_STORED, 0);
		return;
	}
	verdict = PQgetvalue(res, 0, 1);
	regression = db_get(res, 0, 2);
	if (regression)
		log_info("verdict %.12s %s %s: %s, regression %s %s (%u trials, %u failing; %s%s%s)",
			 j->job.sha, j->job.check, j->job.dtype, verdict, regression,
			 strcmp(PQgetvalue(res, 0, 3), "t") == 0 ? "new here" : "still open", j->ran,
			 j->failed, stats_test_name(j->ev.test), j->ev.reason[0] ? ": " : "", j->ev.reason);
	else
		log_info("verdict %.12s %s %s: %s (%u trials, %u failing, worst ratio %.3g; %s%s%s)",
			 j->job.sha, j->job.check, j->job.dtype, verdict, j->ran, j->failed, j->worst,
			 stats_test_name(j->ev.test), j->ev.reason[0] ? ": " : "", j->ev.reason);
	finish(j, JUDGE_DONE, 0);
}

static void on_requeued(PGresult *res, const char *error, void *data)
{
	struct judging *j = data;

	(void)res;
	if (error) {
		log_warn("verdict %.12s %s %s: cannot wait for the baseline: %s", j->job.sha, j->job.check,
			 j->job.dtype, error);
		finish(j, JUDGE_FAILED, 0);
		return;
	}
	finish(j, JUDGE_REQUEUED, 0);
}

/* Stores the verdict (judge_record) or asks the baseline for the seeds it lacks. */
static int record(struct judging *j, const struct stats_seed *ss, long long base_id, unsigned changed,
		  unsigned changed_failures, const bool *missing, unsigned nmissing, const bool *failing)
{
	char commit[24], check[16], trials[16], failures[16], worst[32], base[24], nchanged[16], nchfail[16],
	    id[24], planned[16];
	char *seeds = NULL, *evidence = NULL;
	json_t *ev_json = NULL;
	int rc = -ENOMEM;

	snprintf(commit, sizeof(commit), "%lld", j->job.commit_id);
	snprintf(check, sizeof(check), "%d", j->job.check_id);
	snprintf(id, sizeof(id), "%lld", j->job.id);
	snprintf(base, sizeof(base), "%lld", base_id);
	if (j->ev.verdict == VERDICT_PENDING && j->ev.needs_baseline > 0 && nmissing > 0) {
		const char *params[5] = {id, check, j->job.dtype, base, NULL};

		seeds = seed_array(ss, j->planned, missing);
		if (!seeds)
			goto out;
		params[4] = seeds;
		rc = db_query(j->d->db, "SELECT judge_wait_for_baseline($1, $2, $3, $4, $5::bigint[])", 5,
			      params, on_requeued, j);
		goto out;
	}
	ev_json = stats_evidence_json(&j->ev);
	if (!ev_json)
		goto out;
	json_object_set_new(ev_json, "baseline", j->base_sha[0] ? json_string(j->base_sha) : json_null());
	json_object_set_new(ev_json, "planned", json_integer(j->planned));
	json_object_set_new(ev_json, "strikes", json_integer(j->job.strikes));
	if (changed)
		json_object_set_new(ev_json, "changed_seeds", json_integer(changed));
	evidence = json_dumps(ev_json, JSON_COMPACT);
	seeds = seed_array(ss, j->planned, failing);
	if (!evidence || !seeds)
		goto out;
	snprintf(trials, sizeof(trials), "%u", j->ran);
	snprintf(failures, sizeof(failures), "%u", j->failed);
	snprintf(worst, sizeof(worst), "%.17g", j->worst);
	snprintf(nchanged, sizeof(nchanged), "%u", changed);
	snprintf(nchfail, sizeof(nchfail), "%u", changed_failures);
	snprintf(planned, sizeof(planned), "%u", j->planned);
	{
		const char *params[15] = {commit,
					  check,
					  j->job.dtype,
					  trials,
					  failures,
					  isnan(j->worst) ? NULL : worst,
					  verdict_name(j->ev.verdict),
					  seeds,
					  evidence,
					  base_id ? base : NULL,
					  nchanged,
					  nchfail,
					  id,
					  planned,
					  j->infra_failed ? "failed" : "done"};

		rc = db_query(
		    j->d->db,
		    "SELECT * FROM judge_record($1, $2, $3, $4, $5, $6, $7, $8::bigint[], $9::jsonb, $10,"
		    " $11, $12, $13, $14, $15)",
		    15, params, on_recorded, j);
	}
out:
	json_decref(ev_json);
	free(evidence);
	free(seeds);
	return rc;
}

static void on_input(PGresult *res, const char *error, void *data)
{
	struct judging *j = data;
	struct stats_seed *ss = NULL;
	struct stats_verdict_input in = {
	    .deterministic = j->job.deterministic, .infra_failed = j->infra_failed, .drift_from_clean = true};
	struct stats_verdict_params par;
	bool *missing = NULL, *failing = NULL;
	long long base_id = 0;
	unsigned n = j->planned, changed = 0, changed_failures = 0, nmissing = 0;
	int rc;

	if (error) {
		log_warn("verdict %.12s %s %s: cannot read the baseline: %s", j->job.sha, j->job.check,
			 j->job.dtype, error);
		finish(j, JUDGE_NOT_STORED, 0);
		return;
	}
	ss = calloc(n ? n : 1, sizeof(*ss));
	missing = calloc(n ? n : 1, sizeof(*missing));
	failing = calloc(n ? n : 1, sizeof(*failing));
	if (!ss || !missing || !failing)
		goto fail;
	memcpy(ss, j->seeds, n * sizeof(*ss));
	for (unsigned i = 0; i < n; i++) {
		ss[i].base_first = ss[i].base_rerun = OUTCOME_NONE;
		ss[i].base_ratio = ss[i].clean_ratio = NAN;
	}
	if (PQntuples(res) > 0) {
		base_id = db_get_ll(res, 0, 0, 0);
		snprintf(j->base_sha, sizeof(j->base_sha), "%s", db_get(res, 0, 1) ? db_get(res, 0, 1) : "");
		in.pool_trials = (unsigned)db_get_ll(res, 0, 8, 0);
		in.pool_failures = (unsigned)db_get_ll(res, 0, 9, 0);
	}
	/* Rows come by seed; the seeds are sorted, so a binary search places each. */
	for (int row = 0; row < PQntuples(res); row++) {
		struct stats_seed key, *hit;
		const char *cand_case = db_get(res, row, 3), *base_case = db_get(res, row, 7);

		key.seed = db_get_ll(res, row, 2, -1);
		hit = bsearch(&key, ss, n, sizeof(*ss), cmp_stats_seed);
		if (!hit)
			continue;
		hit->clean_ratio = db_get_double(res, row, 10, NAN);
		if (!db_get(res, row, 4)) {
			/* The baseline never ran this seed: a probe runs it there first. */
			if (base_id && hit->cand_first != OUTCOME_NONE) {
				missing[hit - ss] = true;
				nmissing++;
			}
			continue;
		}
		/* Another case under the same seed: another input, not comparable. */
		if (cand_case && base_case && !same_case(cand_case, base_case)) {
			changed++;
			changed_failures += outcome_is_failure(hit->cand_first);
			hit->clean_ratio = NAN;
			continue;
		}
		hit->base_first = outcome_parse(PQgetvalue(res, row, 4));
		hit->base_rerun = db_get(res, row, 5) ? outcome_parse(PQgetvalue(res, row, 5)) : OUTCOME_NONE;
		hit->base_ratio = db_get_double(res, row, 6, NAN);
		/*
		 * A deterministic check's failure at the baseline counts once it is
		 * confirmed there (stats.c classify()): a seed the baseline ran once
		 * and failed (a probe's seed) runs again there, by the same probe.
		 * Left out, the verdict waited for a rerun nothing would run.
		 */
		if (j->job.deterministic && hit->cand_first != OUTCOME_NONE &&
		    verdict_seed_needs_rerun(
			&(struct verdict_seed){.first = hit->base_first, .second = hit->base_rerun})) {
			missing[hit - ss] = true;
			nmissing++;
		}
	}
	/*
	 * No earlier commit to compare with (the start of the check's history):
	 * the reference is a library that passes; judge_record() reports what
	 * fails there as failing since the check was introduced.
	 */
	for (unsigned i = 0; !base_id && i < n; i++)
		if (ss[i].cand_first != OUTCOME_NONE)
			ss[i].base_first = OUTCOME_PASS;
	in.seeds = ss;
	in.nseeds = n;
	verdict_params(&j->d->cfg, &par);
	rc = stats_verdict(&in, &par, &j->ev);
	if (rc < 0) {
		log_error("verdict %.12s %s %s: cannot decide: %s", j->job.sha, j->job.check, j->job.dtype,
			  strerror(-rc));
		goto fail;
	}
	if (j->ev.verdict == VERDICT_PENDING && j->ev.needs_trials > 0 && !j->infra_failed &&
	    j->planned < j->d->cfg.trials_max) {
		unsigned more = j->ev.needs_trials;

		free(ss);
		free(missing);
		free(failing);
		finish(j, JUDGE_MORE, more);
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		j->ran += ss[i].cand_first != OUTCOME_NONE;
		failing[i] = outcome_is_failure(ss[i].cand_first);
		j->failed += failing[i];
	}
	rc = record(j, ss, base_id, changed, changed_failures, missing, nmissing, failing);
	free(ss);
	free(missing);
	free(failing);
	if (rc < 0) {
		log_warn("verdict %.12s %s %s: cannot record: %s", j->job.sha, j->job.check, j->job.dtype,
			 strerror(-rc));
		finish(j, JUDGE_FAILED, 0);
	}
	return;
fail:
	free(ss);
	free(missing);
	free(failing);
	finish(j, JUDGE_FAILED, 0);
}

int judge_verdict(struct nwd *d, const struct job *job, const struct stats_seed *seeds, unsigned planned,
		  double worst, bool infra_failed, judge_cb cb, void *data)
{
	struct judging *j = calloc(1, sizeof(*j));
	char commit[24], check[16], n[16];
	const char *params[4] = {commit, check, job->dtype, n};
	int rc;

	if (!j)
		return -ENOMEM;
	j->d = d;
	j->job = *job;
	j->job.seeds = NULL;
	j->seeds = seeds;
	j->planned = planned;
	j->worst = worst;
	j->infra_failed = infra_failed;
	j->cb = cb;
	j->data = data;
	snprintf(commit, sizeof(commit), "%lld", job->commit_id);
	snprintf(check, sizeof(check), "%d", job->check_id);
	snprintf(n, sizeof(n), "%u", planned);
	/*
	 * On the judge's own connections, so that jobs ending together are read
	 * at once and the claims and verdicts on the write connection never wait
	 * behind a read. judge_record() checks that the baseline read is still
	 * the baseline before it writes anything.
	 */
	rc = db_query(d->db_judge, "SELECT * FROM judge_input($1, $2, $3, $4)", 4, params, on_input, j);
	if (rc < 0)
		free(j);
	return rc;
}
