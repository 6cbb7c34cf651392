-- For tests/integration/claim_batch.sh: job_claim_batch() (sql/070) against job_claim() called
-- once per request, one after the other, on the same random queues. Test-only functions, in the
-- test's own database.

-- A random queue for 'repo': 1 to 5 commits (some not reachable), built or not for a GPU and for
-- the host, checks that need a GPU, the host or either, and up to 24 jobs a commit of every kind,
-- priority and state (running: some leases out, others not; some not before an hour from now).
CREATE FUNCTION nw_queue(repo int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	chk int[];
BEGIN
	FOR k IN 1 .. 6 LOOP
		INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic, needs)
		VALUES (repo, 'c' || k, 'op', 'fwd', '{f32}', '{a}', false,
			(ARRAY[NULL, NULL, 'gpu', 'host'])[1 + floor(random() * 4)::int]);
	END LOOP;
	chk := ARRAY(SELECT id FROM checks WHERE repo_id = repo ORDER BY id);
	FOR c IN 1 .. 1 + floor(random() * 5)::int LOOP
		INSERT INTO commits (repo_id, sha, position, reachable, author, email, title, committed_at)
		VALUES (repo, md5(repo || '/' || c) || '01234567', floor(random() * 1000)::int, random() < 0.9,
			'a', 'a@b', 't', now());
	END LOOP;
	INSERT INTO host_builds (commit_id, host, status, host_ok, cuda_ok)
	SELECT id, 'me', 'ok', random() < 0.8, random() < 0.8 FROM commits WHERE repo_id = repo AND random() < 0.9;
	INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, state, owner, lease_until, not_before, seeds,
		strikes, stop_on_failure, tool)
	SELECT x.kind, x.commit_id, CASE WHEN x.kind <> 'build' THEN x.check_id END, 'd' || x.n, x.priority, x.state,
		CASE WHEN x.state = 'running' THEN 'other' END,
		CASE WHEN x.state <> 'running' THEN NULL WHEN random() < 0.5 THEN now() - interval '1 minute'
			ELSE now() + interval '1 minute' END,
		CASE WHEN random() < 0.1 THEN now() + interval '1 hour' ELSE now() - interval '1 second' END,
		CASE WHEN x.kind = 'probe' THEN ARRAY[x.n + 1, x.n, x.n] END, floor(random() * 3)::int,
		x.kind = 'probe' AND random() < 0.5, CASE WHEN x.kind = 'sanitize' THEN 'memcheck' END
	FROM (SELECT c.id AS commit_id, g AS n,
		(ARRAY['trials', 'trials', 'probe', 'probe', 'sanitize', 'build'])[1 + floor(random() * 6)::int] AS kind,
		chk[1 + floor(random() * 6)::int] AS check_id,
		(ARRAY[10, 50, 100, 100, 100, 100])[1 + floor(random() * 6)::int] AS priority,
		(ARRAY['queued', 'queued', 'queued', 'queued', 'running', 'done'])[1 + floor(random() * 6)::int] AS state
		FROM commits c, generate_series(1, floor(random() * 25)::int) g WHERE c.repo_id = repo) x
	ON CONFLICT DO NOTHING;
END
$$;

-- 1 to 24 requests, as a daemon's slots make them: GPU or host slots, with or without sanitizer
-- runs, now and then a build's; most prefer one of the first two commits (a runner's), some none.
CREATE FUNCTION nw_requests(repo int, OUT ks text[], OUT pf bigint[], OUT gp boolean[]) LANGUAGE plpgsql AS $$
DECLARE
	n int := 1 + floor(random() * 24)::int;
	cids bigint[] := ARRAY(SELECT id FROM commits WHERE repo_id = repo ORDER BY id);
BEGIN
	ks := ARRAY(SELECT (ARRAY['trials,probe', 'trials,probe', 'trials,probe,sanitize', 'build'])[
		1 + floor(random() * (CASE WHEN random() < 0.1 THEN 4 ELSE 3 END))::int] FROM generate_series(1, n));
	pf := ARRAY(SELECT CASE WHEN random() < 0.2 THEN 0 ELSE cids[1 + floor(random() * least(cardinality(cids), 2))::int] END
		FROM generate_series(1, n));
	gp := ARRAY(SELECT random() < 0.6 FROM generate_series(1, n));
END
$$;

-- Every job of the repository: its id, state, owner and the daemon it was taken from.
CREATE FUNCTION nw_jobs_now(repo int) RETURNS text LANGUAGE sql AS $$
	SELECT string_agg(format('%s %s %s %s', j.id, j.state, j.owner, j.taken_from), ', ' ORDER BY j.id)
	FROM jobs j JOIN commits c ON c.id = j.commit_id WHERE c.repo_id = repo
$$;

-- The batch's answers (every column) and the jobs' states after it, and the same for job_claim()
-- once per request; both rolled back.
CREATE FUNCTION nw_compare(repo int, ks text[], pf bigint[], gp boolean[], OUT same boolean, OUT picked int,
	OUT batch text, OUT one_by_one text) LANGUAGE plpgsql AS $$
DECLARE
	r record;
BEGIN
	BEGIN
		SELECT string_agg(format('%s:%s', x.req, (x.id, x.commit_id, x.check_id, x.dtype, x.strikes, x.sha, x.check_name,
			x.deterministic, x.seeds, x.bisection_id, x.stop_on_failure, x.tool, x.round)), ' ' ORDER BY x.req), count(*)
		INTO batch, picked FROM job_claim_batch(ks, 'me', 60, pf, repo, gp) x;
		batch := format('%s | %s', batch, nw_jobs_now(repo));
		RAISE EXCEPTION 'rollback';
	EXCEPTION WHEN raise_exception THEN
	END;
	BEGIN
		FOR i IN 1 .. cardinality(ks) LOOP
			FOR r IN SELECT * FROM job_claim(ks[i], 'me', 60, pf[i], repo, gp[i]) LOOP
				one_by_one := concat_ws(' ', one_by_one, format('%s:%s', i, r));
			END LOOP;
		END LOOP;
		one_by_one := format('%s | %s', one_by_one, nw_jobs_now(repo));
		RAISE EXCEPTION 'rollback';
	EXCEPTION WHEN raise_exception THEN
	END;
	same := batch IS NOT DISTINCT FROM one_by_one;
END
$$;

CREATE TABLE nw_outcome (part text, repo int, requests int, picked int, same boolean, batch text, one_by_one text);
