-- bench/api-seed.sql: a realistic database for bench/api.sh, built with
-- generate_series. psql variables (psql -v):
--   repo_name, repo_url   the repository row the daemon will find (its config's name and url)
--   commits               first-parent history length (10000)
--   checks                checks in the suite (50), each with 3 dtypes (f32, f16, bf16)
--   per_commit            trials per commit x check x dtype recorded in stats (64)
-- Every commit has a build and a stats row per check x dtype (with the evidence
-- object the daemon writes), and its done build and trials jobs. Every 7th
-- commit has a flaky check; the newest commit (the one bench/api.sh asks for)
-- has 4 regressed and 2 flaky check x dtype rows, whose failing trials (two
-- attempts of each failing seed, with tensors) are listed by the commit detail.
-- The newest 20 commits also keep their passing trials. The regressions' bisections are done.
\set ON_ERROR_STOP on
BEGIN;

INSERT INTO repositories (name, url, branch) VALUES (:'repo_name', :'repo_url', 'main')
	ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url;
SELECT id AS repo FROM repositories WHERE name = :'repo_name' \gset

INSERT INTO commits (repo_id, sha, parent_sha, position, author, email, title, committed_at)
SELECT :repo, substr(encode(sha256(convert_to('bench-' || i, 'UTF8')), 'hex'), 1, 40),
	CASE WHEN i > 0 THEN substr(encode(sha256(convert_to('bench-' || (i - 1), 'UTF8')), 'hex'), 1, 40) END,
	i, 'Author ' || (i % 37), 'author' || (i % 37) || '@example.com',
	'kernels: change number ' || i || ' to the attention path (tile sizes, masking)',
	timestamptz '2026-01-01 00:00:00+00' + i * interval '17 minutes'
FROM generate_series(0, :commits - 1) i;

INSERT INTO builds (commit_id, status, log, runner_hash, started_at, duration_ms, host)
SELECT c.id, 'ok', 'cmake --build build -j 16' || E'\n' || repeat('[ 50%] Building CUDA object x.cu.o' || E'\n', 40),
	substr(encode(sha256(convert_to('runner-' || c.position, 'UTF8')), 'hex'), 1, 64),
	c.committed_at + interval '2 minutes', 90000 + c.position % 5000, 'gpu-box-1'
FROM commits c WHERE c.repo_id = :repo;

INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic)
SELECT :repo, format('op%s.%s', k / 2, CASE WHEN k % 2 = 0 THEN 'fwd' ELSE 'bwd' END), 'op' || (k / 2),
	CASE WHEN k % 2 = 0 THEN 'fwd' ELSE 'bwd' END, '{f32,f16,bf16}', '{aligned,tail,large}', k % 2 = 0
FROM generate_series(0, :checks - 1) k;

-- The verdict of each commit x check x dtype: 'regressed' (newest commit, 4 rows), 'flaky'
-- (newest commit, 2 rows; every 7th commit, 1 row), else 'clean'.
CREATE TEMP TABLE plan AS
SELECT c.id AS commit_id, c.position, k.id AS check_id, k.name, d.dtype, d.n AS dn, k.id % 97 AS kk,
	CASE WHEN c.position = :commits - 1 AND k.id % 10 = 1 AND d.n <= 2 AND k.id < 21 THEN 'regressed'
	     WHEN c.position = :commits - 1 AND k.id % 10 = 5 AND k.id < 20 AND d.n = 1 THEN 'flaky'
	     WHEN c.position % 7 = 3 AND k.id = 1 + c.position % :checks AND d.n = 2 THEN 'flaky'
	     ELSE 'clean' END AS verdict
FROM commits c CROSS JOIN checks k CROSS JOIN (VALUES (1, 'f32'), (2, 'f16'), (3, 'bf16')) d(n, dtype)
WHERE c.repo_id = :repo AND k.repo_id = :repo;

INSERT INTO stats (commit_id, check_id, dtype, trials, failures, infra_errors, worst_ratio, verdict,
	failing_seeds, evidence)
SELECT p.commit_id, p.check_id, p.dtype,
	:per_commit + CASE WHEN p.verdict = 'clean' THEN 0 ELSE 2 END,
	CASE p.verdict WHEN 'regressed' THEN 4 WHEN 'flaky' THEN 1 ELSE 0 END, 0,
	CASE p.verdict WHEN 'regressed' THEN 3.75 WHEN 'flaky' THEN 1.6 ELSE 0.2 + (p.kk % 13) / 20.0 END,
	p.verdict,
	CASE p.verdict WHEN 'regressed' THEN '{3,11}'::bigint[] WHEN 'flaky' THEN '{5}' ELSE '{}' END,
	jsonb_build_object('verdict', p.verdict,
		'test', CASE WHEN p.verdict = 'clean' THEN 'paired' ELSE 'sprt' END,
		'reason', CASE p.verdict WHEN 'regressed' THEN '2 seed(s) failed twice'
			WHEN 'flaky' THEN '1 seed(s) failed, then passed on a rerun' ELSE 'no failure' END,
		'needs_trials', 0, 'needs_baseline', 0,
		'candidate', jsonb_build_object('trials', :per_commit, 'failures',
			CASE p.verdict WHEN 'regressed' THEN 4 WHEN 'flaky' THEN 1 ELSE 0 END,
			'rate', CASE p.verdict WHEN 'regressed' THEN 0.0625 WHEN 'flaky' THEN 0.015625 ELSE 0 END,
			'wilson95', jsonb_build_array(0, 0.0571)),
		'baseline', jsonb_build_object('trials', :per_commit, 'failures', 0, 'rate', 0,
			'wilson95', jsonb_build_array(0, 0.0571)),
		'paired', jsonb_build_object('regressed', CASE WHEN p.verdict = 'regressed' THEN 2 ELSE 0 END,
			'improved', 0, 'both_fail', 0, 'nondeterministic', 0),
		'drift', jsonb_build_object('pairs', :per_commit, 'median_log_ratio', -0.0021 * p.kk,
			'p_greater', 0.41, 'p_two_sided', 0.82, 'exact', false, 'drift', false, 'improved', false),
		'seeds', CASE p.verdict WHEN 'regressed' THEN '[3, 11]'::jsonb WHEN 'flaky' THEN '[5]' ELSE '[]' END,
		'seeds_total', :per_commit,
		'baseline_commit', substr(encode(sha256(convert_to('bench-' || greatest(p.position - 1, 0), 'UTF8')),
			'hex'), 1, 40))
FROM plan p;

-- Failing trials of the regressed and flaky rows (attempts 0 and 1 of each failing seed; a flaky
-- seed's rerun passed), and the passing trials of the newest 20 commits.
INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, tensors,
	digest, kernel_us, error, slot, host)
SELECT p.commit_id, p.check_id, p.dtype, s.seed, a.attempt,
	CASE WHEN p.verdict = 'flaky' AND a.attempt = 1 THEN 'pass' ELSE 'fail' END,
	CASE WHEN p.verdict = 'flaky' AND a.attempt = 1 THEN 0.4 ELSE 3.75 END,
	'tail', ARRAY[8, 4, 1024 + s.seed, 64]::bigint[], 1,
	jsonb_build_array(jsonb_build_object('name', 'output', 'ratio', 3.75, 'max_abs', 0.0123, 'max_rel', 0.391,
		'max_ulp', 5211, 'nonfinite', 0, 'ref_nonfinite', 0, 'unwritten', 0, 'canary', 0, 'excluded', 0),
		jsonb_build_object('name', 'lse', 'ratio', 0.21, 'max_abs', 0.0004, 'max_rel', 0.002,
		'max_ulp', 12, 'nonfinite', 0, 'ref_nonfinite', 0, 'unwritten', 0, 'canary', 0, 'excluded', 0)),
	md5(p.commit_id || '/' || s.seed), 812.5 + s.seed,
	CASE WHEN p.verdict = 'flaky' AND a.attempt = 1 THEN NULL
	     ELSE 'output: error ratio 3.75 > 1 at [3, 1, 1031, 17]' END,
	'gpu0', 'gpu-box-1'
FROM plan p
CROSS JOIN LATERAL unnest(CASE p.verdict WHEN 'regressed' THEN '{3,11}'::bigint[] ELSE '{5}' END) s(seed)
CROSS JOIN (VALUES (0), (1)) a(attempt)
WHERE p.verdict <> 'clean';

INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, tensors,
	digest, kernel_us, slot, host)
SELECT p.commit_id, p.check_id, p.dtype, s.seed, 0, 'pass', 0.2 + (s.seed % 7) / 10.0,
	CASE WHEN s.seed % 3 = 0 THEN 'tail' ELSE 'aligned' END, ARRAY[8, 4, 1024 + s.seed, 64]::bigint[], 1,
	'[]', md5(p.commit_id || '/' || s.seed), 800 + s.seed, 'gpu0', 'gpu-box-1'
FROM plan p CROSS JOIN generate_series(0, :per_commit - 1) s(seed)
WHERE p.position >= :commits - 20
ON CONFLICT DO NOTHING;

-- The regressions were bisected already (the daemon would queue a bisection for each, and its
-- probes would write while the benchmark runs): culprit found, the newest commit itself.
INSERT INTO bisections (repo_id, check_id, dtype, good_commit_id, bad_commit_id, state, outcome, culprit_id,
	confidence, failing_seeds, finished_at)
SELECT :repo, p.check_id, p.dtype, g.id, p.commit_id, 'done', 'culprit', p.commit_id, 0.9993, '{3,11}', now()
FROM plan p JOIN commits g ON g.repo_id = :repo AND g.position = p.position - 1
WHERE p.verdict = 'regressed';

-- The jobs that produced it all, done.
INSERT INTO jobs (kind, commit_id, state, owner, finished_at)
SELECT 'build', c.id, 'done', 'gpu-box-1', c.committed_at + interval '4 minutes'
FROM commits c WHERE c.repo_id = :repo;
INSERT INTO jobs (kind, commit_id, check_id, dtype, state, owner, finished_at)
SELECT 'trials', p.commit_id, p.check_id, p.dtype, 'done', 'gpu-box-1', now()
FROM plan p;

COMMIT;
-- Steady state before measuring: no autovacuum or checkpoint of the seed while wrk runs.
VACUUM (ANALYZE);
CHECKPOINT;
