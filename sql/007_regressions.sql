-- Regressions as tracked events (PRODUCT.md "Regressions are events, not
-- colours"), case identity, and the judging of verdicts in SQL functions.

-- The inputs a runner generated for a seed (PROTOCOL.md: case.digest). A
-- seed is paired across commits only while its case is the same.
ALTER TABLE trials ADD COLUMN case_digest text;

-- The checks a commit's runner declared in its hello: a check no earlier
-- commit declared is introduced at this one (NULL: built before this column).
ALTER TABLE builds ADD COLUMN checks text[];

-- A regression: one check x dtype getting worse at one point of the history,
-- from the commit where it was first seen until the commit that fixes it.
-- Later commits that still show it point at it; they are not new ones.
--   open -> bisecting -> culprit | no_culprit, then fixed (at fixed_commit_id)
--   check_changed: the failures came with inputs the check did not have
--                  before (case digests changed); nobody is blamed
--   withdrawn: the verdict that raised it was judged again and is gone
CREATE TABLE regressions (
	id              bigserial PRIMARY KEY,
	repo_id         int NOT NULL REFERENCES repositories (id),
	check_id        int NOT NULL REFERENCES checks (id),
	dtype           text NOT NULL,
	state           text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'bisecting', 'culprit', 'no_culprit',
	                                                               'check_changed', 'fixed', 'withdrawn')),
	first_commit_id bigint NOT NULL REFERENCES commits (id), -- first judged to show it
	good_commit_id  bigint REFERENCES commits (id),          -- the state just before: its baseline
	culprit_id      bigint REFERENCES commits (id),
	fixed_commit_id bigint REFERENCES commits (id),
	bisection_id    bigint REFERENCES bisections (id),
	-- {trials, failures} before (the pooled rate it was judged against) and at first_commit.
	rate_before     jsonb NOT NULL DEFAULT '{}',
	rate_after      jsonb NOT NULL DEFAULT '{}',
	changed_seeds   int NOT NULL DEFAULT 0,
	created_at      timestamptz NOT NULL DEFAULT now(),
	updated_at      timestamptz NOT NULL DEFAULT now(),
	closed_at       timestamptz
);
CREATE INDEX regressions_by_check ON regressions (check_id, dtype, state);
CREATE INDEX regressions_by_repo ON regressions (repo_id, id DESC);

ALTER TABLE stats DROP CONSTRAINT stats_verdict_check;
ALTER TABLE stats ADD CONSTRAINT stats_verdict_check CHECK (verdict IN ('pending', 'clean', 'regressed',
	'improved', 'flaky', 'build_failed', 'infra_error', 'check_changed'));
-- The regression this commit shows (regressed), fixes (improved) or raised
-- (check_changed); regression_new: it is new at this commit.
ALTER TABLE stats ADD COLUMN regression_id bigint REFERENCES regressions (id);
ALTER TABLE stats ADD COLUMN regression_new boolean NOT NULL DEFAULT false;
-- The commit this verdict was judged against (NULL: none, the start of the check's history).
ALTER TABLE stats ADD COLUMN baseline_id bigint REFERENCES commits (id);
ALTER TABLE stats ADD COLUMN changed_seeds int NOT NULL DEFAULT 0;
CREATE INDEX stats_by_check ON stats (check_id, dtype, commit_id);

-- An automatic bisection belongs to one regression; one at a time.
ALTER TABLE bisections ADD COLUMN regression_id bigint REFERENCES regressions (id);
DROP INDEX bisections_one_auto;
CREATE UNIQUE INDEX bisections_one_per_regression ON bisections (regression_id) WHERE regression_id IS NOT NULL;

-- Culprit mail is per culprit commit: the regressions it caused share one thread.
ALTER TABLE mail ADD COLUMN culprit_id bigint REFERENCES commits (id);
CREATE UNIQUE INDEX mail_one_per_culprit ON mail (culprit_id) WHERE kind = 'culprit' AND state <> 'failed';

-- The library's recent failure rate for one check x dtype: the trials and
-- failures of the last 'commits' judged commits up to position 'upto', none
-- before the last change of state there (a new regression, an improvement
-- or fix, changed inputs): within one state, whether a clean one or an open
-- regression, every commit fails at the same rate. Verdicts take it as the
-- baseline's rate (the last 8 before the candidate); bisections as their
-- flake rate (the last 16 up to the good commit).
CREATE OR REPLACE FUNCTION library_rate(repo int, chk int, dt text, upto int, commits int,
	OUT trials bigint, OUT failures bigint) LANGUAGE sql STABLE AS $$
	SELECT coalesce(sum(x.trials), 0), coalesce(sum(x.failures), 0) FROM (
		SELECT s.trials, s.failures FROM stats s JOIN commits c ON c.id = s.commit_id
		WHERE s.check_id = chk AND s.dtype = dt AND c.repo_id = repo AND c.reachable
		AND c.position <= upto AND s.verdict IN ('clean', 'flaky', 'improved', 'regressed', 'check_changed')
		AND c.position >= coalesce((SELECT max(c2.position) FROM stats s2 JOIN commits c2
			ON c2.id = s2.commit_id WHERE s2.check_id = chk AND s2.dtype = dt AND c2.repo_id = repo
			AND c2.reachable AND c2.position <= upto
			AND (s2.verdict IN ('improved', 'check_changed') OR s2.regression_new)), 0)
		ORDER BY c.position DESC LIMIT commits) x
$$;

-- The commit a regression is new at: its culprit once one is confirmed, else
-- the first commit judged to show it.
CREATE FUNCTION regression_start(r regressions) RETURNS bigint LANGUAGE sql STABLE AS $$
	SELECT coalesce(r.culprit_id, r.first_commit_id)
$$;

-- The regression of a check x dtype still open at a position of the history:
-- started at or before it, not fixed at or before it, not withdrawn (and not
-- a change of inputs, which is no open failure of the library).
CREATE FUNCTION regression_open_at(chk int, dt text, pos int) RETURNS bigint LANGUAGE sql STABLE AS $$
	SELECT r.id FROM regressions r JOIN commits s ON s.id = regression_start(r)
	LEFT JOIN commits f ON f.id = r.fixed_commit_id
	WHERE r.check_id = chk AND r.dtype = dt AND r.state NOT IN ('withdrawn', 'check_changed')
	AND s.reachable AND s.position <= pos AND (f.id IS NULL OR f.position > pos)
	ORDER BY s.position DESC, r.id DESC LIMIT 1
$$;

-- The state just before a commit, for one check x dtype: the nearest earlier
-- commit with a final verdict (a failed build or infrastructure fault says
-- nothing of the check). NULL: the check's history starts here.
-- (The candidate's repository and position are scalar subqueries, so that the
-- planner walks the position index backwards from it instead of sorting the
-- whole history: flat at any history length.)
CREATE FUNCTION judge_baseline(cid bigint, chk int, dt text) RETURNS bigint LANGUAGE sql STABLE AS $$
	SELECT c.id FROM commits c JOIN stats s ON s.commit_id = c.id
	WHERE c.repo_id = (SELECT repo_id FROM commits WHERE id = cid)
	AND c.position < (SELECT position FROM commits WHERE id = cid)
	AND s.check_id = chk AND s.dtype = dt AND c.reachable
	AND s.verdict IN ('clean', 'flaky', 'improved', 'regressed', 'check_changed')
	ORDER BY c.position DESC LIMIT 1
$$;

-- A seed's case at a commit, as its first real run reported it: family,
-- shape and generator version, then the runner's case digest where it sent
-- one ("f:family:shape:gen|d:digest"); NULL where the trial reported no case
-- (a crash, a timeout). Two cases are the same when their digests are, or
-- where either has none, their family, shape and generator.
CREATE FUNCTION trial_case(t trials) RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN t.family IS NOT NULL OR t.case_digest IS NOT NULL THEN
		'f:' || coalesce(t.family, '') || ':' || coalesce(array_to_string(t.shape, 'x'), '') || ':'
		|| coalesce(t.gen::text, '') || coalesce('|d:' || t.case_digest, '') END
$$;

-- The last clean state before a commit: the nearest earlier commit that
-- showed no open regression. Precision drift is measured from there, so that
-- a slow creep over many commits is still caught.
CREATE FUNCTION judge_clean_state(cid bigint, chk int, dt text) RETURNS bigint LANGUAGE sql STABLE AS $$
	SELECT c.id FROM commits c JOIN stats s ON s.commit_id = c.id
	WHERE c.repo_id = (SELECT repo_id FROM commits WHERE id = cid)
	AND c.position < (SELECT position FROM commits WHERE id = cid)
	AND s.check_id = chk AND s.dtype = dt AND c.reachable AND s.verdict IN ('clean', 'flaky', 'improved')
	AND (s.regression_id IS NULL OR s.verdict = 'improved')
	ORDER BY c.position DESC LIMIT 1
$$;

-- What judging a commit needs besides its own results: the baseline
-- (judge_baseline) with its results for every seed the candidate ran below
-- 'planned' (first and second real run, first ratio, case), the candidate's
-- case per seed, the first ratio of each at the last clean state
-- (judge_clean_state), and the library's recent rate up to the baseline.
CREATE FUNCTION judge_input(cid bigint, chk int, dt text, planned int)
	RETURNS TABLE (base_id bigint, base_sha text, seed bigint, cand_case text, base_first text,
	               base_rerun text, base_ratio float8, base_case text, pool_trials bigint,
	               pool_failures bigint, clean_ratio float8)
	LANGUAGE sql STABLE AS $$
	WITH base AS (SELECT c.id, c.sha, c.position, c.repo_id FROM commits c
	              WHERE c.id = judge_baseline(cid, chk, dt)),
	clean AS (SELECT t.seed, (array_agg(t.ratio ORDER BY t.attempt))[1] AS ratio FROM trials t
	          WHERE t.commit_id = judge_clean_state(cid, chk, dt) AND t.check_id = chk AND t.dtype = dt
	          AND t.seed < planned AND t.outcome <> 'infra_error' AND t.sanitizer IS NULL GROUP BY t.seed),
	pool AS (SELECT r.* FROM base, library_rate(base.repo_id, chk, dt, base.position, 8) r),
	cand AS (SELECT t.seed, (array_agg(trial_case(t) ORDER BY t.attempt) FILTER (WHERE trial_case(t) IS NOT NULL))[1]
	                AS kase FROM trials t
	         WHERE t.commit_id = cid AND t.check_id = chk AND t.dtype = dt AND t.seed < planned
	         AND t.outcome <> 'infra_error' AND t.sanitizer IS NULL GROUP BY t.seed),
	bt AS (SELECT t.seed, array_agg(t.outcome ORDER BY t.attempt) AS o,
	              (array_agg(t.ratio ORDER BY t.attempt))[1] AS ratio,
	              (array_agg(trial_case(t) ORDER BY t.attempt) FILTER (WHERE trial_case(t) IS NOT NULL))[1] AS kase
	       FROM base JOIN trials t ON t.commit_id = base.id
	       WHERE t.check_id = chk AND t.dtype = dt AND t.seed < planned AND t.outcome <> 'infra_error'
	       AND t.sanitizer IS NULL GROUP BY t.seed)
	-- One row at least (seed NULL where the candidate has no result at all, every trial an
	-- infrastructure fault): the baseline is still known.
	SELECT base.id, base.sha, cand.seed, cand.kase, bt.o[1], bt.o[2], bt.ratio, bt.kase,
	       pool.trials, pool.failures, clean.ratio
	FROM (SELECT 1) one LEFT JOIN base ON true LEFT JOIN pool ON true LEFT JOIN cand ON true
	LEFT JOIN bt ON bt.seed = cand.seed LEFT JOIN clean ON clean.seed = cand.seed
	ORDER BY cand.seed
$$;

-- Records a commit's verdict for one check x dtype and what it means for the
-- regressions, in one transaction with the job's end. 'rel' is what the
-- statistics say of the commit against its baseline (judge_baseline); the
-- stored verdict says what the commit changed:
--   * the confirmed culprit of a regression: regressed, new here;
--   * worse than the baseline: regressed, new here (a regression already
--     raised at a later commit whose range holds this one becomes new here:
--     the later commit was judged first), unless the baseline still shows an
--     open regression: then it is that one (one open regression at a time);
--     with no baseline at all the check fails since it was introduced:
--     flaky, with its rate, never a regression;
--   * its inputs changed (changed > 0): check_changed, and where the changed
--     seeds fail, a regression nobody is blamed for;
--   * better than a baseline showing an open regression: improved, and the
--     regression is fixed here;
--   * the same as a baseline showing an open regression: regressed, open
--     since the commit it is new at.
-- A later commit judged against another baseline, or against this one before
-- its verdict changed, is judged again (its trials job is queued; nothing
-- runs again), so that the verdicts do not depend on the order work finished
-- in. done is false, with nothing written, while any planned seed has no
-- stored result (trials are written in batches) or the baseline changed
-- since judge_input read it.
CREATE FUNCTION judge_record(cid bigint, chk int, dt text, n_trials int, n_failures int, worst float8,
	rel text, failing bigint[], evidence jsonb, base bigint, changed int, changed_failures int,
	job bigint, planned int, job_state text,
	OUT done boolean, OUT verdict text, OUT regression bigint, OUT is_new boolean)
	LANGUAGE plpgsql AS $$
DECLARE
	cand commits;
	old stats;
	inherited bigint;
	found_id bigint;
	next_id bigint;
	next_base bigint;
	ev jsonb := evidence;
BEGIN
	done := false;
	is_new := false;
	-- One judgement of a check x dtype at a time (on every daemon): two commits judged at once
	-- would each miss the other's verdict. One whose baseline changed since it was read is
	-- judged again from judge_input (done is false).
	PERFORM pg_advisory_xact_lock(chk, hashtext(dt));
	IF judge_baseline(cid, chk, dt) IS DISTINCT FROM base THEN
		RETURN;
	END IF;
	IF job_state <> 'failed' AND (SELECT count(DISTINCT t.seed) FROM trials t WHERE t.commit_id = cid
	    AND t.check_id = chk AND t.dtype = dt AND t.outcome <> 'infra_error' AND t.seed < planned) < planned THEN
		RETURN;
	END IF;
	SELECT * INTO cand FROM commits WHERE id = cid;
	SELECT * INTO old FROM stats s WHERE s.commit_id = cid AND s.check_id = chk AND s.dtype = dt;
	IF base IS NOT NULL THEN
		inherited := regression_open_at(chk, dt, (SELECT position FROM commits WHERE id = base));
	END IF;
	verdict := rel;
	SELECT r.id INTO found_id FROM regressions r WHERE r.culprit_id = cid AND r.check_id = chk
		AND r.dtype = dt AND r.state NOT IN ('withdrawn', 'check_changed') ORDER BY r.id LIMIT 1;
	IF found_id IS NOT NULL THEN
		verdict := 'regressed';
		regression := found_id;
		is_new := true;
	ELSIF rel = 'regressed' AND inherited IS NOT NULL THEN
		regression := inherited;
	ELSIF rel = 'regressed' AND base IS NULL AND NOT EXISTS (SELECT 1 FROM builds b JOIN commits c ON c.id = b.commit_id
	    WHERE c.repo_id = cand.repo_id AND c.reachable AND c.position < cand.position
	    AND (SELECT k.name FROM checks k WHERE k.id = chk) = ANY (b.checks)) THEN
		-- No earlier commit declared the check: it fails since it was introduced, a property of
		-- the new feature. (One that earlier commits declared but never ran is judged against a
		-- library that passes, below.)
		verdict := 'flaky';
		ev := ev || jsonb_build_object('since_introduced', true, 'failing_since', cand.sha);
	ELSIF rel = 'regressed' THEN
		-- The regression this commit raised when it was judged before, or one raised at a later
		-- commit judged first whose range holds this one (it may be fixed already: the fix was
		-- judged before this commit too).
		SELECT r.id INTO found_id FROM regressions r JOIN commits f ON f.id = r.first_commit_id
			LEFT JOIN commits g ON g.id = r.good_commit_id
			LEFT JOIN commits x ON x.id = r.fixed_commit_id
			WHERE r.check_id = chk AND r.dtype = dt AND r.state NOT IN ('withdrawn', 'check_changed')
			AND (r.first_commit_id = cid OR (r.culprit_id IS NULL AND f.position > cand.position
				AND coalesce(x.position, cand.position + 1) > cand.position
				AND coalesce(g.position, -1) < cand.position AND f.reachable))
			ORDER BY r.first_commit_id = cid DESC, f.position LIMIT 1;
		IF found_id IS NOT NULL THEN
			UPDATE regressions r SET first_commit_id = cid, good_commit_id = base,
				rate_before = coalesce(evidence -> 'baseline_pool', evidence -> 'baseline_rate', '{}'), rate_after = coalesce(evidence -> 'candidate', '{}'),
				updated_at = now() WHERE r.id = found_id;
			UPDATE stats s SET regression_new = false WHERE s.regression_id = found_id AND s.commit_id <> cid;
		ELSE
			INSERT INTO regressions (repo_id, check_id, dtype, first_commit_id, good_commit_id, rate_before,
				rate_after)
			VALUES (cand.repo_id, chk, dt, cid, base, coalesce(evidence -> 'baseline_pool', evidence -> 'baseline_rate', '{}'),
				coalesce(evidence -> 'candidate', '{}'))
			RETURNING id INTO found_id;
		END IF;
		regression := found_id;
		is_new := true;
	ELSIF changed > 0 THEN
		verdict := 'check_changed';
		IF changed_failures > 0 THEN
			SELECT r.id INTO found_id FROM regressions r WHERE r.first_commit_id = cid AND r.check_id = chk
				AND r.dtype = dt AND r.state = 'check_changed';
			IF found_id IS NULL THEN
				INSERT INTO regressions (repo_id, check_id, dtype, state, first_commit_id, good_commit_id,
					rate_before, rate_after, changed_seeds, closed_at)
				VALUES (cand.repo_id, chk, dt, 'check_changed', cid, base,
					coalesce(evidence -> 'baseline_pool', evidence -> 'baseline_rate', '{}'), coalesce(evidence -> 'candidate', '{}'), changed,
					now())
				RETURNING id INTO found_id;
			END IF;
			regression := found_id;
		END IF;
	ELSIF rel = 'improved' AND inherited IS NOT NULL THEN
		regression := inherited;
		UPDATE regressions r SET state = 'fixed', fixed_commit_id = cid, closed_at = now(), updated_at = now()
			WHERE r.id = inherited;
	ELSIF rel IN ('clean', 'flaky') AND inherited IS NOT NULL THEN
		verdict := 'regressed';
		regression := inherited;
	END IF;
	-- A check failing since it was introduced says so at every commit until that changes.
	IF verdict = 'flaky' AND NOT ev ? 'failing_since' AND base IS NOT NULL THEN
		ev := ev || coalesce((SELECT jsonb_build_object('since_introduced', true, 'failing_since',
			s.evidence ->> 'failing_since') FROM stats s WHERE s.commit_id = base AND s.check_id = chk
			AND s.dtype = dt AND s.verdict = 'flaky' AND s.evidence ? 'failing_since'), '{}');
	END IF;
	IF regression IS NOT NULL THEN
		ev := ev || jsonb_build_object('regression', regression, 'regression_new', is_new);
	END IF;
	-- A regression this commit raised before and no longer does was a provisional verdict's: withdrawn.
	IF old.regression_new AND old.regression_id IS DISTINCT FROM regression THEN
		UPDATE regressions r SET state = 'withdrawn', closed_at = now(), updated_at = now()
			WHERE r.id = old.regression_id AND r.first_commit_id = cid AND r.culprit_id IS NULL
			AND r.state IN ('open', 'bisecting', 'check_changed');
	END IF;
	-- So is a fix this commit no longer makes.
	IF old.verdict = 'improved' AND old.regression_id IS NOT NULL
	    AND (verdict <> 'improved' OR regression IS DISTINCT FROM old.regression_id) THEN
		UPDATE regressions r SET state = CASE WHEN r.culprit_id IS NOT NULL THEN 'culprit'
			WHEN r.bisection_id IS NOT NULL THEN 'bisecting' ELSE 'open' END,
			fixed_commit_id = NULL, closed_at = NULL, updated_at = now()
			WHERE r.id = old.regression_id AND r.fixed_commit_id = cid;
	END IF;
	INSERT INTO stats AS s (commit_id, check_id, dtype, trials, failures, infra_errors, worst_ratio, verdict,
		failing_seeds, evidence, updated_at, regression_id, regression_new, baseline_id, changed_seeds)
	VALUES (cid, chk, dt, n_trials, n_failures,
		(SELECT count(*) FROM trials t WHERE t.commit_id = cid AND t.check_id = chk AND t.dtype = dt
		 AND t.outcome = 'infra_error'),
		worst, verdict, failing, ev, now(), regression, is_new, base, changed)
	ON CONFLICT (commit_id, check_id, dtype) DO UPDATE SET trials = EXCLUDED.trials,
		failures = EXCLUDED.failures, infra_errors = EXCLUDED.infra_errors,
		worst_ratio = EXCLUDED.worst_ratio, verdict = EXCLUDED.verdict,
		failing_seeds = EXCLUDED.failing_seeds, evidence = EXCLUDED.evidence, updated_at = now(),
		regression_id = EXCLUDED.regression_id, regression_new = EXCLUDED.regression_new,
		baseline_id = EXCLUDED.baseline_id, changed_seeds = EXCLUDED.changed_seeds;
	-- The next judged commit was judged against another baseline, or against what this one was.
	SELECT s.commit_id, s.baseline_id INTO next_id, next_base FROM stats s JOIN commits c ON c.id = s.commit_id
		WHERE s.check_id = chk AND s.dtype = dt AND c.repo_id = cand.repo_id AND c.reachable
		AND c.position > cand.position
		AND s.verdict IN ('clean', 'flaky', 'improved', 'regressed', 'check_changed')
		ORDER BY c.position LIMIT 1;
	IF next_id IS NOT NULL AND (next_base IS DISTINCT FROM cid OR old.commit_id IS NULL
	    OR old.verdict IS DISTINCT FROM verdict OR old.regression_id IS DISTINCT FROM regression
	    OR old.regression_new IS DISTINCT FROM is_new) THEN
		UPDATE jobs j SET state = 'queued', owner = NULL, lease_until = NULL, finished_at = NULL,
			not_before = now()
			WHERE j.kind = 'trials' AND j.commit_id = next_id AND j.check_id = chk AND j.dtype = dt
			AND j.state = 'done';
	END IF;
	UPDATE jobs j SET state = job_state, finished_at = now(), owner = NULL, lease_until = NULL WHERE j.id = job;
	done := true;
END
$$;

-- The baseline lacks some of the candidate's seeds: a probe runs them there
-- (once), and the candidate's job is looked at again a little later.
CREATE FUNCTION judge_wait_for_baseline(job bigint, chk int, dt text, base bigint, missing bigint[])
	RETURNS void LANGUAGE sql AS $$
	INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds)
		SELECT 'probe', base, chk, dt, 20, missing WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE kind = 'probe'
		AND commit_id = base AND check_id = chk AND dtype = dt AND bisection_id IS NULL
		AND state IN ('queued', 'running'));
	UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL,
		not_before = now() + interval '5 seconds' WHERE id = job;
$$;

-- Bisections for open regressions, one per regression ($1: repository),
-- muted checks left alone. Each runs from a clean commit (or a flaky one,
-- failing at the library's own rate) before the regression to the commit it
-- was first seen at. Only a decisive clean counts
-- as the good end: a clean verdict whose test ran out of trials undecided may
-- sit after a rare culprit. And when the failures are not bound to their
-- seeds (a non-deterministic check, or a deterministic one whose seeds failed
-- then passed or whose repeats differed: a race), a few clean commits in a
-- row can sit after the culprit by chance: the good end is then the newest
-- clean commit g such that, were the culprit at or before g, every clean
-- pass from g up to the regression would have come by chance with
-- probability (1 - q)^n <= 1% (q: the lower end of the 95% Wilson interval
-- of the regressed commit's failure rate, since a commit judged regressed
-- tends to have failed more than its rate; n: those trials), or the oldest
-- clean commit when none is. That probability is compared in log space
-- (n log(1 - q) <= log 0.01): after thousands of clean trials (1 - q)^n is
-- below what a double holds. A seed-bound regression (q = 1 for its failing
-- seeds, which every commit runs) takes the newest clean commit. A
-- regression with no clean commit before it waits for one.
CREATE FUNCTION queue_bisections(repo int) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
	r record;
	good bigint;
	lq float8;
	bid bigint;
BEGIN
	FOR r IN SELECT x.id, x.check_id, x.dtype, x.first_commit_id, c.position, s.failing_seeds,
			CASE WHEN NOT k.deterministic OR s.evidence ? 'nondeterministic_seeds'
				OR coalesce((s.evidence -> 'paired' ->> 'nondeterministic')::int, 0) > 0
				OR EXISTS (SELECT 1 FROM trials t WHERE t.commit_id = c.id AND t.check_id = x.check_id
					AND t.dtype = x.dtype AND t.digests_differ > 0)
			THEN coalesce((s.evidence -> 'candidate' -> 'wilson95' ->> 0)::float8, 0.0) ELSE 1.0 END AS q
		FROM regressions x JOIN commits c ON c.id = x.first_commit_id JOIN checks k ON k.id = x.check_id
		JOIN stats s ON s.commit_id = x.first_commit_id AND s.check_id = x.check_id AND s.dtype = x.dtype
		-- (A regression fixed before its bisection was queued is bisected all the same.)
		WHERE x.repo_id = repo AND x.state IN ('open', 'fixed') AND x.culprit_id IS NULL AND c.reachable
		AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.check_id = x.check_id AND m.dtype IN (x.dtype, '*')
			AND m.until > now())
		AND NOT EXISTS (SELECT 1 FROM bisections b WHERE b.regression_id = x.id)
		ORDER BY x.id FOR UPDATE OF x SKIP LOCKED
	LOOP
		-- log(1 - q), finite: q is at most 1 - 1e-12.
		lq := ln(1.0 - least(greatest(r.q, 0.0), 1.0 - 1e-12));
		SELECT w.id INTO good FROM (SELECT c2.id, c2.position, s2.verdict, s2.evidence, s2.regression_id,
				sum(CASE WHEN s2.verdict IN ('clean', 'flaky') AND s2.regression_id IS NULL
					THEN s2.trials - s2.failures ELSE 0 END) OVER (ORDER BY c2.position DESC) AS passed
			FROM commits c2 JOIN stats s2 ON s2.commit_id = c2.id AND s2.check_id = r.check_id
				AND s2.dtype = r.dtype
			WHERE c2.repo_id = repo AND c2.reachable AND c2.position < r.position) w
		-- A flaky commit is a good end too (its failures are the library's flake, which the
		-- bisection's model takes): with a flake of a few percent hardly any commit is clean.
		WHERE w.verdict IN ('clean', 'flaky') AND w.regression_id IS NULL
			AND coalesce(w.evidence ->> 'test', '') <> 'truncated'
		ORDER BY w.passed * lq <= ln(0.01) DESC,
			CASE WHEN w.passed * lq <= ln(0.01) THEN -w.position ELSE w.position END
		LIMIT 1;
		CONTINUE WHEN good IS NULL;
		INSERT INTO bisections (repo_id, check_id, dtype, good_commit_id, bad_commit_id, failing_seeds,
			regression_id)
		VALUES (repo, r.check_id, r.dtype, good, r.first_commit_id, r.failing_seeds, r.id)
		ON CONFLICT DO NOTHING RETURNING id INTO bid;
		CONTINUE WHEN bid IS NULL;
		UPDATE regressions SET state = CASE WHEN state = 'open' THEN 'bisecting' ELSE state END,
			bisection_id = bid, updated_at = now() WHERE id = r.id;
		RETURN NEXT bid;
	END LOOP;
END
$$;

-- A regression's bisection ended: culprit or nobody blamed. A confirmed
-- culprit before the commit the regression was first seen at makes the
-- regression new at the culprit: the commits from it up to there (clean by
-- chance, for a failure that does not show every time) show it too, so that
-- the history says where it came in and the next verdicts stay right.
CREATE FUNCTION bisection_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	x regressions;
	lo int;
	hi int;
BEGIN
	IF NEW.regression_id IS NULL OR NEW.state <> 'done' OR OLD.state = 'done' THEN
		RETURN NEW;
	END IF;
	-- Under the judge's lock of the check x dtype (judge_record): the same rows, in the same order.
	PERFORM pg_advisory_xact_lock(NEW.check_id, hashtext(NEW.dtype));
	SELECT * INTO x FROM regressions WHERE id = NEW.regression_id FOR UPDATE;
	IF NEW.outcome <> 'culprit' OR NEW.culprit_id IS NULL THEN
		UPDATE regressions SET state = 'no_culprit', updated_at = now() WHERE id = x.id AND state = 'bisecting';
		RETURN NEW;
	END IF;
	UPDATE regressions SET culprit_id = NEW.culprit_id, updated_at = now(),
		state = CASE WHEN state = 'bisecting' THEN 'culprit' ELSE state END WHERE id = x.id;
	SELECT position INTO lo FROM commits WHERE id = NEW.culprit_id;
	SELECT position INTO hi FROM commits WHERE id = x.first_commit_id;
	IF lo < hi THEN
		UPDATE stats s SET verdict = 'regressed', regression_id = x.id, regression_new = (s.commit_id = NEW.culprit_id),
			evidence = s.evidence || jsonb_build_object('regression', x.id, 'regression_new',
				s.commit_id = NEW.culprit_id, 'shown_by_bisection', NEW.id)
		FROM commits c WHERE c.id = s.commit_id AND s.check_id = x.check_id AND s.dtype = x.dtype
			AND c.repo_id = x.repo_id AND c.reachable AND c.position >= lo AND c.position < hi
			AND s.verdict IN ('clean', 'flaky') AND s.regression_id IS NULL;
		UPDATE stats s SET regression_new = false,
			evidence = s.evidence || jsonb_build_object('regression_new', false)
			WHERE s.commit_id = x.first_commit_id AND s.check_id = x.check_id AND s.dtype = x.dtype;
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER bisection_ended AFTER UPDATE OF state ON bisections
	FOR EACH ROW EXECUTE FUNCTION bisection_ended();

-- A commit's verdict as a whole, from its build and its per-check verdicts:
-- a failed build first, then a regression new at this commit (known early,
-- wanted by CI at once), then anything still running, then a regression an
-- earlier commit brought in and this one still shows (open_regression).
CREATE OR REPLACE FUNCTION commit_verdict(cid bigint) RETURNS text LANGUAGE sql STABLE AS $$
	SELECT CASE
		WHEN b.status IS NULL THEN 'pending'
		WHEN b.status <> 'ok' THEN 'build_failed'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'regressed'
		             AND s.regression_new) THEN 'regressed'
		WHEN EXISTS (SELECT 1 FROM jobs j WHERE j.commit_id = cid AND j.kind = 'trials'
		             AND j.state IN ('queued', 'running'))
		  OR NOT EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid)
		  OR EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'pending') THEN 'pending'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'regressed') THEN 'open_regression'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'infra_error') THEN 'infra_error'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'check_changed') THEN 'check_changed'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'flaky') THEN 'flaky'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'improved') THEN 'improved'
		ELSE 'clean'
	END
	FROM (SELECT cid AS id) x LEFT JOIN builds b ON b.commit_id = x.id
$$;
