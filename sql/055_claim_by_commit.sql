-- A claim that does not grow with the queue (issue 18).
--
-- job_claim() of 040 filtered and sorted every claimable job to take one: 15 ms
-- with 3768 queued (10000 seeds of 24 checks asked for by hand, 64 seeds a
-- part), and every slot's claim runs on its daemon's one scheduler connection,
-- so one daemon could not hand out more than about 60 jobs a second however
-- many GPUs it had. Trials jobs are now found commit by commit: for each
-- commit this host has built, the first queued job by (priority, id) straight
-- from an index, then the best of those (and of the few jobs whose lease ran
-- out) by the order of before: priority, a job whose daemon died, the commit
-- the slot's runner has, position, id. Builds (one job a commit) keep the scan.

CREATE INDEX jobs_queued_by_commit ON jobs (commit_id, priority, id) WHERE state = 'queued';
CREATE INDEX jobs_running_lease ON jobs (lease_until) WHERE state = 'running';

-- The scan of 040, for builds.
ALTER FUNCTION job_claim(text, text, int, bigint, int, boolean) RENAME TO job_claim_scan;

CREATE FUNCTION job_claim(kinds text, me text, lease int, prefer bigint, repo int, gpu boolean)
	RETURNS TABLE (id bigint, commit_id bigint, check_id int, dtype text, strikes int, sha text, check_name text,
	               deterministic boolean, seeds text, bisection_id bigint, stop_on_failure boolean, tool text,
	               round int)
	LANGUAGE plpgsql AS $$
DECLARE
	ks text[] := string_to_array(kinds, ',');
	mine text := CASE WHEN gpu THEN 'gpu' ELSE 'host' END;
	skip bigint[] := '{}'; -- picks another claim holds: the next best is taken instead
	pick bigint;
	was text;
	was_owner text;
BEGIN
	IF 'build' = ANY (ks) THEN
		RETURN QUERY SELECT * FROM job_claim_scan(kinds, me, lease, prefer, repo, gpu);
		RETURN;
	END IF;
	LOOP
		SELECT x.id INTO pick FROM (
			SELECT j.id, j.priority, true AS expired, j.commit_id = prefer AS preferred, c.position
			FROM jobs j JOIN commits c ON c.id = j.commit_id LEFT JOIN checks k ON k.id = j.check_id
			WHERE j.state = 'running' AND j.lease_until < now() AND j.kind = ANY (ks) AND j.id <> ALL (skip)
			AND j.not_before <= now() AND c.repo_id = repo AND c.reachable AND (k.needs IS NULL OR k.needs = mine)
			AND EXISTS (SELECT 1 FROM host_builds h WHERE h.commit_id = j.commit_id AND h.host = me
				AND CASE WHEN gpu THEN h.cuda_ok ELSE h.host_ok END)
			UNION ALL
			SELECT q.id, q.priority, false, c.id = prefer, c.position
			FROM commits c JOIN host_builds h ON h.commit_id = c.id AND h.host = me
				AND CASE WHEN gpu THEN h.cuda_ok ELSE h.host_ok END
			CROSS JOIN LATERAL (SELECT j.id, j.priority FROM jobs j LEFT JOIN checks k ON k.id = j.check_id
				WHERE j.commit_id = c.id AND j.state = 'queued' AND j.kind = ANY (ks) AND j.id <> ALL (skip)
				AND j.not_before <= now() AND (k.needs IS NULL OR k.needs = mine)
				ORDER BY j.priority, j.id LIMIT 1) q
			WHERE c.repo_id = repo AND c.reachable) x
		ORDER BY x.priority, x.expired DESC, x.preferred DESC, x.position, x.id LIMIT 1;
		IF pick IS NULL THEN
			RETURN;
		END IF;
		SELECT j.state, j.owner INTO was, was_owner FROM jobs j
		WHERE j.id = pick AND (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < now()))
		FOR UPDATE SKIP LOCKED;
		EXIT WHEN FOUND;
		skip := skip || pick;
		pick := NULL;
	END LOOP;
	RETURN QUERY WITH claimed AS (
		UPDATE jobs SET state = 'running', owner = me, lease_until = now() + lease * interval '1 second',
			claimed_at = now(),
			taken_from = CASE WHEN was = 'running' AND was_owner <> me THEN was_owner ELSE jobs.taken_from END,
			taken_over_at = CASE WHEN was = 'running' AND was_owner <> me THEN now() ELSE jobs.taken_over_at END
		WHERE jobs.id = pick RETURNING jobs.*)
	SELECT claimed.id, claimed.commit_id, coalesce(claimed.check_id, 0), coalesce(claimed.dtype, ''),
		claimed.strikes, c.sha, coalesce(k.name, ''), coalesce(k.deterministic, true),
		(SELECT array_agg(DISTINCT x ORDER BY x) FROM unnest(claimed.seeds) AS x)::text,
		coalesce(claimed.bisection_id, 0), claimed.stop_on_failure, coalesce(claimed.tool, ''),
		coalesce((SELECT p.round FROM probes p WHERE p.job_id = claimed.id LIMIT 1), -1)
	FROM claimed JOIN commits c ON c.id = claimed.commit_id LEFT JOIN checks k ON k.id = claimed.check_id;
END
$$;

-- A claim and a probe's end look a job's probe up: with weeks of bisections, not by a scan.
CREATE INDEX probes_by_job ON probes (job_id);
