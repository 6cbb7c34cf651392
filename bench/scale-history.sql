-- bench/scale-history.sql: a long judged history written straight into
-- PostgreSQL (issue 13, "Scale"), with set-based SQL (generate_series), for
-- tests/integration/scale_history.sh and bench/scale.sh.
--
-- Reads on psql's standard input the first-parent history of the git
-- repository that bench/scale-repo.py wrote (`scale-repo.py log DIR`: position,
-- sha, parent, author, email, time, title, tab-separated), and writes for its
-- first :commits commits what numwatchd would have written judging them with
-- tests/integration/fake-runner (the same failures: the fake runner's hflaky
-- modes draw from sha256("VERSION:SEED"), reproduced here, as are its case
-- digests): the commits, their builds (runner hashes, the checks declared),
-- the checks, every plan trial (seeds 0..:per_commit-1, then a rerun of each
-- failing seed), one stats row per commit x check x dtype
-- with the verdict the new model gives (sql/007: baseline_id, regression_id,
-- regression_new, the evidence's keys), the regressions, the done build and
-- trials jobs, and for the fixed regression its bisection, probes and mail.
-- Passing trials carry no tensors (the daemon stores them; 300 bytes a trial
-- is not what this measures).
--
-- psql variables (psql -v): repo_name, repo_url (the daemon's [repository]
-- name and url), commits, per_commit, and the scenario's positions from
-- `scale-repo.py vars COMMITS`: fwd_bad, extra_from, fwd_fix, race_f32,
-- race_f16 (scale-repo.py says what happens where). The schema must exist
-- (numwatchd --migrate).
--
-- The open regressions (fake.bwd f32 from race_f32, fake.bwd f16 from
-- race_f16) have no bisection yet: the daemon's first queue_bisections() must
-- queue them, after thousands of clean trials (issue 13's underflow).
\set ON_ERROR_STOP on
BEGIN;
-- A bulk load whose references hold by construction: no foreign-key trigger per
-- row (five times faster on two cores). Needs a superuser, as the test clusters' is.
SET LOCAL session_replication_role = replica;

CREATE TEMP TABLE scale_log (position int PRIMARY KEY, sha text, parent text, author text, email text, at bigint,
	title text) ON COMMIT DROP;
\copy scale_log FROM pstdin
DELETE FROM scale_log WHERE position >= :commits;
SELECT count(*) = :commits AS complete FROM scale_log \gset
\if :complete
\else
\warn 'scale-history: the repository has fewer commits than asked for'
SELECT 1 / 0;
\endif

INSERT INTO repositories (name, url, branch) VALUES (:'repo_name', :'repo_url', 'main')
	ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url;
SELECT id AS repo FROM repositories WHERE name = :'repo_name' \gset

INSERT INTO commits (repo_id, sha, parent_sha, position, author, email, title, committed_at, found_at)
SELECT :repo, sha, parent, position, author, email, title, to_timestamp(at), to_timestamp(at) + interval '1 minute'
FROM scale_log ORDER BY position;

-- Each build with the checks its runner declared (sorted, as the builder stores them).
INSERT INTO builds (commit_id, status, log, runner_hash, started_at, duration_ms, host, checks)
SELECT c.id, 'ok', 'r=$NUMWATCH_BUILD_DIR/numwatch-runner-host && cp ... (scale-history)',
	encode(sha256(convert_to('scale-runner-' || c.position, 'UTF8')), 'hex'),
	c.found_at + interval '10 seconds', 900 + c.position % 300, 'scale-gen',
	CASE WHEN c.position >= :extra_from THEN '{fake.bwd,fake.extra,fake.fwd}'::text[]
	     ELSE '{fake.bwd,fake.fwd}' END
FROM commits c WHERE c.repo_id = :repo;

-- The checks as the tip's runner declares them (the builder's upsert keeps their ids).
INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic) VALUES
	(:repo, 'fake.fwd', 'fake', 'fwd', '{f32}', '{aligned,tail}', true),
	(:repo, 'fake.extra', 'fake', 'fwd', '{f32}', '{aligned,tail}', true),
	(:repo, 'fake.bwd', 'fake', 'bwd', '{f32,f16}', '{aligned}', false)
	ON CONFLICT (repo_id, name) DO NOTHING;

-- One row per commit x check x dtype that ran, with what the runner did there:
-- fwd 'failing' (seeds 3 mod 8 fail, twice) or a hflaky rate in percent.
CREATE TEMP TABLE scale_cell ON COMMIT DROP AS
SELECT c.id AS commit_id, c.position, c.sha, k.id AS check_id, k.name, k.deterministic, x.pair, x.dtype,
	CASE x.pair WHEN 'fwd' THEN c.position >= :fwd_bad AND c.position < :fwd_fix ELSE false END AS seed_bound,
	CASE x.pair WHEN 'bwd32' THEN CASE WHEN c.position >= :race_f32 THEN 7 ELSE 2 END
	            WHEN 'bwd16' THEN CASE WHEN c.position >= :race_f16 THEN 5 ELSE 0 END ELSE 0 END AS pct
FROM commits c
JOIN (VALUES ('fwd', 'fake.fwd', 'f32', 0), ('fwd', 'fake.extra', 'f32', :extra_from),
             ('bwd32', 'fake.bwd', 'f32', 0), ('bwd16', 'fake.bwd', 'f16', 0)) x(pair, name, dtype, from_pos)
	ON c.position >= x.from_pos
JOIN checks k ON k.repo_id = :repo AND k.name = x.name
WHERE c.repo_id = :repo;
ALTER TABLE scale_cell ADD PRIMARY KEY (commit_id, check_id, dtype);

-- Attempt 0 of every plan seed, then attempt 1 of each that failed (the fake
-- runner's failures are a function of the build and the seed: the rerun fails too).
CREATE TEMP TABLE scale_first ON COMMIT DROP AS
SELECT x.commit_id, x.position, x.check_id, x.name, x.dtype, x.pair, s.seed,
	CASE WHEN x.pair = 'fwd' THEN x.seed_bound AND s.seed % 8 = 3
	     ELSE x.pct > 0 AND (get_byte(h.h, 0)::bigint + get_byte(h.h, 1)::bigint * 256
	          + get_byte(h.h, 2)::bigint * 65536 + get_byte(h.h, 3)::bigint * 16777216) % 10000 < 100 * x.pct
	END AS failed
FROM scale_cell x CROSS JOIN generate_series(0, :per_commit - 1) s(seed)
CROSS JOIN LATERAL (SELECT CASE WHEN x.pct > 0 THEN sha256(convert_to(x.position || ':' || s.seed, 'UTF8')) END
	AS h) h;

-- The case as the fake runner reports it: family, shape, gen 1, and its digest, the first 16
-- hex digits of sha256("CHECK:SEED:FAMILY:[A, B]"), the same at every commit.
INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, case_digest,
	tensors, digest, digests_differ, kernel_us, slot, host, finished_at)
SELECT f.commit_id, f.check_id, f.dtype, f.seed, a.attempt, CASE WHEN f.failed THEN 'fail' ELSE 'pass' END,
	CASE WHEN f.pair = 'fwd' THEN CASE WHEN f.failed THEN 3.5 ELSE 0.25 END
	     ELSE CASE WHEN f.failed THEN 2.0 ELSE 0.3 END END,
	k.family, k.shape, 1,
	left(encode(sha256(convert_to(f.name || ':' || f.seed || ':' || k.family || ':[' || k.shape[1] || ', '
		|| k.shape[2] || ']', 'UTF8')), 'hex'), 16),
	CASE WHEN f.failed THEN jsonb_build_array(jsonb_build_object('name', CASE WHEN f.pair = 'fwd' THEN 'y'
		ELSE 'dvalue' END, 'ratio', CASE WHEN f.pair = 'fwd' THEN 3.5 ELSE 2.0 END, 'max_abs', 0.01,
		'max_rel', 0.1, 'max_ulp', NULL, 'nonfinite', 0, 'ref_nonfinite', 0, 'unwritten', 0, 'canary', 0,
		'excluded', 0, 'worst', jsonb_build_array(0, 1), 'tail', false)) ELSE '[]' END,
	CASE WHEN f.pair = 'fwd' THEN lpad(to_hex(f.seed), 16, '0') ELSE md5(f.position || ':' || f.seed || ':' || a.attempt)::text END,
	0, 1.5, 'host' || (f.seed % 2), 'scale-gen', c.found_at + interval '1 minute'
FROM scale_first f JOIN commits c ON c.id = f.commit_id
CROSS JOIN LATERAL (SELECT CASE WHEN f.pair <> 'fwd' THEN 'aligned' WHEN f.seed % 2 = 1 THEN 'tail' ELSE 'aligned' END
	AS family, CASE WHEN f.pair = 'fwd' THEN ARRAY[2, 1000 + f.seed] ELSE ARRAY[4, 64]::bigint[] END AS shape) k
CROSS JOIN LATERAL (SELECT 0 AS attempt UNION ALL SELECT 1 WHERE f.failed) a
ORDER BY f.commit_id, f.check_id, f.dtype, f.seed, a.attempt;

-- Per cell: the figures and the verdict (what the new model says; sql/007's judge_record).
CREATE TEMP TABLE scale_figures ON COMMIT DROP AS
SELECT f.commit_id, f.check_id, f.dtype, count(*) FILTER (WHERE f.failed) AS failures,
	coalesce(array_agg(f.seed ORDER BY f.seed) FILTER (WHERE f.failed), '{}') AS failing
FROM scale_first f GROUP BY 1, 2, 3;
CREATE TEMP TABLE scale_verdict ON COMMIT DROP AS
SELECT x.*, y.failures, y.failing,
	lag(x.commit_id) OVER w AS baseline_id,
	lag(x.sha) OVER w AS base_sha,
	lag(y.failures) OVER w AS base_failures,
	first_value(x.sha) OVER w AS first_sha,
	CASE
		WHEN x.pair = 'fwd' AND x.dtype = 'f32' THEN
			CASE WHEN x.position < :fwd_bad THEN 'clean' WHEN x.position = :fwd_bad THEN 'regressed_new'
			     WHEN x.position < :fwd_fix THEN 'regressed' WHEN x.position = :fwd_fix THEN 'fixed'
			     ELSE 'clean' END
		WHEN x.pair = 'fwd' THEN
			CASE WHEN x.seed_bound THEN 'flaky'
			     WHEN x.position = :fwd_fix AND :extra_from < :fwd_fix AND :extra_from >= :fwd_bad THEN 'improved'
			     ELSE 'clean' END
		WHEN x.pair = 'bwd32' THEN
			CASE WHEN x.position < :race_f32 THEN CASE WHEN y.failures > 0 THEN 'flaky' ELSE 'clean' END
			     WHEN x.position = :race_f32 THEN 'regressed_new' ELSE 'regressed' END
		ELSE
			CASE WHEN x.position < :race_f16 THEN CASE WHEN y.failures > 0 THEN 'flaky' ELSE 'clean' END
			     WHEN x.position = :race_f16 THEN 'regressed_new' ELSE 'regressed' END
	END AS kind
FROM scale_cell x JOIN scale_figures y USING (commit_id, check_id, dtype)
WINDOW w AS (PARTITION BY x.check_id, x.dtype ORDER BY x.position);
-- A flake from the check's first commit on is reported as failing since it was introduced, until a clean commit.
CREATE TEMP TABLE scale_since ON COMMIT DROP AS
SELECT commit_id, check_id, dtype, count(*) FILTER (WHERE kind <> 'flaky')
	OVER (PARTITION BY check_id, dtype ORDER BY position) = 0 AS since_introduced
FROM scale_verdict;

-- The regressions: fake.fwd f32 bisected, mailed and fixed; the two races open, not yet bisected.
CREATE TEMP TABLE scale_regression ON COMMIT DROP AS
SELECT v.check_id, v.dtype, v.pair, v.commit_id AS first_commit_id, v.baseline_id AS good_commit_id, v.failures,
	(SELECT o.commit_id FROM scale_verdict o WHERE o.check_id = v.check_id AND o.dtype = v.dtype
	 AND o.kind = 'fixed') AS fixed_commit_id,
	NULL::bigint AS id
FROM scale_verdict v WHERE v.kind = 'regressed_new';
WITH r AS (
	INSERT INTO regressions (repo_id, check_id, dtype, state, first_commit_id, good_commit_id, culprit_id,
		fixed_commit_id, rate_before, rate_after, created_at, closed_at)
	SELECT :repo, x.check_id, x.dtype, CASE WHEN x.fixed_commit_id IS NULL THEN 'open' ELSE 'fixed' END,
		x.first_commit_id, x.good_commit_id, CASE WHEN x.fixed_commit_id IS NOT NULL THEN x.first_commit_id END,
		x.fixed_commit_id, jsonb_build_object('trials', :per_commit, 'failures', 0),
		jsonb_build_object('trials', :per_commit, 'failures', x.failures), c.found_at + interval '5 minutes',
		(SELECT found_at FROM commits WHERE id = x.fixed_commit_id)
	FROM scale_regression x JOIN commits c ON c.id = x.first_commit_id
	RETURNING id, check_id, dtype)
UPDATE scale_regression x SET id = r.id FROM r WHERE r.check_id = x.check_id AND r.dtype = x.dtype;

-- Wilson 95% of failures in trials.
CREATE FUNCTION pg_temp.wilson(k bigint, n bigint, z float8 DEFAULT 1.959963984540054) RETURNS float8[]
	LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN n = 0 THEN ARRAY[0, 1]::float8[] ELSE ARRAY[
		CASE WHEN k = 0 THEN 0 ELSE greatest(0, (k::float8 / n + z * z / (2 * n) - z * sqrt(k::float8 / n
			* (1 - k::float8 / n) / n + z * z / (4.0 * n * n))) / (1 + z * z / n)) END,
		CASE WHEN k = n THEN 1 ELSE least(1, (k::float8 / n + z * z / (2 * n) + z * sqrt(k::float8 / n
			* (1 - k::float8 / n) / n + z * z / (4.0 * n * n))) / (1 + z * z / n)) END] END
$$;
CREATE FUNCTION pg_temp.side(k bigint, n bigint) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
	SELECT jsonb_build_object('trials', n, 'failures', k, 'rate', CASE WHEN n > 0 THEN k::float8 / n ELSE 0 END,
		'wilson95', to_jsonb(pg_temp.wilson(k, n)))
$$;

INSERT INTO stats (commit_id, check_id, dtype, trials, failures, infra_errors, worst_ratio, verdict, failing_seeds,
	evidence, updated_at, regression_id, regression_new, baseline_id, changed_seeds)
SELECT v.commit_id, v.check_id, v.dtype, :per_commit, v.failures, 0,
	CASE WHEN v.failures > 0 THEN CASE WHEN v.pair = 'fwd' THEN 3.5 ELSE 2.0 END
	     ELSE CASE WHEN v.pair = 'fwd' THEN 0.25 ELSE 0.3 END END,
	e.verdict, v.failing,
	jsonb_build_object('verdict', e.rel, 'test', CASE WHEN v.deterministic THEN 'paired' ELSE 'sprt' END,
		'reason', e.reason, 'needs_trials', 0, 'needs_baseline', 0,
		'candidate', pg_temp.side(v.failures, :per_commit),
		'baseline_rate', pg_temp.side(coalesce(v.base_failures, 0), CASE WHEN v.baseline_id IS NULL THEN 0
			ELSE :per_commit END),
		'seeds', to_jsonb(v.failing[1:32]), 'seeds_total', cardinality(v.failing), 'baseline', v.base_sha,
		'planned', :per_commit, 'strikes', 0)
	|| CASE WHEN v.deterministic THEN jsonb_build_object('paired', jsonb_build_object(
		'regressed', CASE WHEN v.kind = 'regressed_new' THEN v.failures ELSE 0 END,
		'improved', CASE WHEN v.kind IN ('fixed', 'improved') THEN coalesce(v.base_failures, 0) ELSE 0 END,
		'both_fail', CASE WHEN v.kind IN ('regressed', 'flaky') THEN v.failures ELSE 0 END, 'nondeterministic', 0))
	   ELSE jsonb_build_object('sprt', jsonb_build_object('p0', 0.02, 'p1', 0.06, 'alpha', 0.01, 'beta', 0.05,
		'decision', CASE WHEN e.rel = 'regressed' THEN 'accept_h1' ELSE 'accept_h0' END),
		'mcnemar', jsonb_build_object('b', 0, 'c', 0, 'p_two_sided', 1, 'p_worse', 1, 'p_better', 1)) END
	|| CASE WHEN si.since_introduced THEN jsonb_build_object('since_introduced', true, 'failing_since', v.first_sha)
	   ELSE '{}' END
	|| CASE WHEN r.id IS NOT NULL THEN jsonb_build_object('regression', r.id, 'regression_new',
		v.kind = 'regressed_new') ELSE '{}' END,
	c.found_at + interval '2 minutes', r.id, v.kind = 'regressed_new', v.baseline_id, 0
FROM scale_verdict v JOIN commits c ON c.id = v.commit_id JOIN scale_since si USING (commit_id, check_id, dtype)
LEFT JOIN scale_regression r ON r.check_id = v.check_id AND r.dtype = v.dtype
	AND v.kind IN ('regressed_new', 'regressed', 'fixed')
CROSS JOIN LATERAL (SELECT
	CASE v.kind WHEN 'regressed_new' THEN 'regressed' WHEN 'fixed' THEN 'improved' ELSE v.kind END AS verdict,
	-- What the statistics said against the baseline (a commit still showing an open regression: as before it).
	CASE v.kind WHEN 'regressed_new' THEN 'regressed' WHEN 'fixed' THEN 'improved'
	            WHEN 'regressed' THEN 'flaky' ELSE v.kind END AS rel,
	CASE v.kind WHEN 'regressed_new' THEN format('%s seed(s) fail here (new)', v.failures)
	            WHEN 'regressed' THEN format('fails as at its baseline: %s/%s', v.failures, :per_commit)
	            WHEN 'fixed' THEN 'all baseline failure(s) pass here' WHEN 'improved' THEN 'all baseline failure(s) pass here'
	            WHEN 'flaky' THEN format('fails at a low rate: %s/%s', v.failures, :per_commit)
	            ELSE format('no failure in %s trials', :per_commit) END AS reason) e;

-- The done jobs of every commit: its build, one trials job per check x dtype.
INSERT INTO jobs (kind, commit_id, state, created_at, finished_at)
SELECT 'build', c.id, 'done', c.found_at, c.found_at + interval '30 seconds' FROM commits c WHERE c.repo_id = :repo
	AND c.position < :commits;
INSERT INTO jobs (kind, commit_id, check_id, dtype, state, created_at, finished_at)
SELECT 'trials', v.commit_id, v.check_id, v.dtype, 'done', c.found_at + interval '30 seconds',
	c.found_at + interval '2 minutes'
FROM scale_verdict v JOIN commits c ON c.id = v.commit_id;

-- The fixed regression's bisection (done: its culprit confirmed), its probes and its mail thread.
INSERT INTO bisections (repo_id, check_id, dtype, good_commit_id, bad_commit_id, state, outcome, culprit_id, confidence,
	failing_seeds, posterior, log, requested_by, created_at, updated_at, finished_at, regression_id)
SELECT :repo, x.check_id, x.dtype, x.good_commit_id, x.first_commit_id, 'done', 'culprit', x.first_commit_id, 0.9995,
	v.failing, jsonb_build_object('commits', jsonb_build_array(jsonb_build_object('sha', v.sha, 'p', 0.9995,
		'flags', 0)), 'none', 0.0005, 'status', 'culprit', 'trials', 40, 'withdrawals', 0, 'confirm_from', 0,
		'replayed', to_jsonb(v.failing), 'replayed_reruns', cardinality(v.failing), 'flake_rate', 0.001,
		'seeds', 'seed_bound', 'culprit_rate', 0.125),
	jsonb_build_array(jsonb_build_object('msg', 'round 1: probe ' || left(v.sha, 12) || ' with 2 failing seeds',
		'at', extract(epoch FROM c.found_at)::bigint + 400),
		jsonb_build_object('msg', 'culprit ' || left(v.sha, 12) || ' confirmed', 'at',
		extract(epoch FROM c.found_at)::bigint + 900)),
	'auto', c.found_at + interval '5 minutes', c.found_at + interval '15 minutes', c.found_at + interval '15 minutes',
	x.id
FROM scale_regression x JOIN scale_verdict v ON v.commit_id = x.first_commit_id AND v.check_id = x.check_id
	AND v.dtype = x.dtype JOIN commits c ON c.id = x.first_commit_id
WHERE x.fixed_commit_id IS NOT NULL;
UPDATE regressions r SET bisection_id = b.id FROM bisections b WHERE b.regression_id = r.id;
WITH p AS (
	SELECT b.id AS bisection_id, pc.commit_id, pc.round, pc.purpose, pc.seeds, pc.failures, b.dtype, b.check_id,
		b.finished_at
	FROM bisections b CROSS JOIN LATERAL (VALUES
		(b.bad_commit_id, 1, 'search', b.failing_seeds[1:2], 2),
		(b.culprit_id, 2, 'confirm', ARRAY(SELECT generate_series(:per_commit, :per_commit + 39)::bigint), 5),
		(b.good_commit_id, 2, 'confirm', ARRAY(SELECT generate_series(:per_commit, :per_commit + 39)::bigint), 0))
		pc(commit_id, round, purpose, seeds, failures)
	WHERE b.repo_id = :repo),
j AS (INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds, bisection_id, state, created_at, finished_at)
	SELECT 'probe', p.commit_id, p.check_id, p.dtype, 10, p.seeds, p.bisection_id, 'done', p.finished_at,
		p.finished_at FROM p RETURNING id, commit_id, bisection_id, seeds)
INSERT INTO probes (bisection_id, commit_id, round, purpose, seeds, job_id, trials, failures, created_at,
	finished_at, failing_seeds)
SELECT p.bisection_id, p.commit_id, p.round, p.purpose, p.seeds, j.id, cardinality(p.seeds), p.failures,
	p.finished_at, p.finished_at, p.purpose = 'search'
FROM p JOIN j ON j.commit_id = p.commit_id AND j.bisection_id = p.bisection_id AND j.seeds = p.seeds;
INSERT INTO mail (kind, bisection_id, message_id, thread_root, recipients, subject, body, state, attempts, created_at,
	sent_at, culprit_id)
SELECT m.kind, b.id, format('<numwatch.bisect-%s.%s@scale.example>', b.id, m.kind),
	format('<numwatch.bisect-%s.culprit@scale.example>', b.id), ARRAY[cu.email],
	format('[numwatch] %s%s %s: %s', CASE WHEN m.kind = 'fixed' THEN 'Re: ' ELSE '' END, k.name, b.dtype, cu.title),
	'(generated by bench/scale-history.sql)', 'sent', 1, b.finished_at + m.later, b.finished_at + m.later,
	CASE WHEN m.kind = 'culprit' THEN b.culprit_id END
FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits cu ON cu.id = b.culprit_id
CROSS JOIN (VALUES ('culprit', interval '1 minute'), ('fixed', interval '30 days')) m(kind, later)
WHERE b.repo_id = :repo;

COMMIT;
ANALYZE;
