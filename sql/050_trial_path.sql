-- The trial path of issue 17: how trials are stored, and what judging a
-- commit reads back.

-- Trial rows go to the database with COPY (daemon/store.c): a batch is copied
-- straight into trials. A batch that meets rows already stored (sent again
-- after its answer was lost, or written by a daemon that lost the job's lease
-- to another) fails whole on the unique key and is sent again through this
-- session's staging table, from which only its new rows are inserted (ON
-- CONFLICT DO NOTHING): so every trial is stored exactly once either way.

-- The session's staging table, created on first use; emptied at every commit.
-- Its columns are the COPY's, in the order store.c writes them.
CREATE FUNCTION trial_stage_begin() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	IF to_regclass('pg_temp.trial_stage') IS NULL THEN
		CREATE TEMP TABLE trial_stage (
			commit_id bigint, check_id int, dtype text, seed bigint, attempt smallint,
			outcome text, ratio double precision, family text, shape bigint[], gen int,
			case_digest text, tensors jsonb, digest text, digests_differ int,
			kernel_us double precision, error text, slot text, host text, sanitizer text,
			sanitizer_status text) ON COMMIT DELETE ROWS;
	END IF;
END
$$;

-- Inserts the staged rows not stored yet; returns how many.
CREATE FUNCTION trial_stage_insert() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen,
		case_digest, tensors, digest, digests_differ, kernel_us, error, slot, host, sanitizer,
		sanitizer_status)
	SELECT commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, case_digest,
		tensors, digest, digests_differ, kernel_us, error, slot, host, sanitizer, sanitizer_status
	FROM pg_temp.trial_stage
	ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

-- What judging a commit needs (as 007's judge_input): one pass over the
-- candidate's, the baseline's and the clean state's trials, grouped by seed,
-- instead of three per-seed sets joined. The join's plan rested on row
-- estimates that new commits' trials are always beyond (the planner saw one
-- row): it then ran the clean state's scan once per candidate seed, about
-- 80 ms a verdict of 1000 seeds with every commit's trials (bench/daemon-ceiling);
-- a single scan has no such plan to fall into.
CREATE OR REPLACE FUNCTION judge_input(cid bigint, chk int, dt text, planned int)
	RETURNS TABLE (base_id bigint, base_sha text, seed bigint, cand_case text, base_first text,
	               base_rerun text, base_ratio float8, base_case text, pool_trials bigint,
	               pool_failures bigint, clean_ratio float8)
	LANGUAGE sql STABLE AS $$
	WITH base AS MATERIALIZED (SELECT c.id, c.sha, c.position, c.repo_id FROM commits c
	              WHERE c.id = judge_baseline(cid, chk, dt)),
	clean AS MATERIALIZED (SELECT judge_clean_state(cid, chk, dt) AS id),
	pool AS (SELECT r.* FROM base, library_rate(base.repo_id, chk, dt, base.position, 8) r),
	seeds AS (
		SELECT t.seed,
		       (array_agg(t.kase ORDER BY t.attempt) FILTER (WHERE t.commit_id = cid AND t.kase IS NOT NULL))[1]
		           AS cand_case,
		       array_agg(t.outcome ORDER BY t.attempt) FILTER (WHERE t.commit_id = t.base_id) AS o,
		       (array_agg(t.ratio ORDER BY t.attempt) FILTER (WHERE t.commit_id = t.base_id))[1] AS base_ratio,
		       (array_agg(t.kase ORDER BY t.attempt) FILTER (WHERE t.commit_id = t.base_id AND t.kase IS NOT NULL))[1]
		           AS base_case,
		       (array_agg(t.ratio ORDER BY t.attempt) FILTER (WHERE t.commit_id = t.clean_id))[1] AS clean_ratio
		FROM (SELECT t.seed, t.attempt, t.commit_id, t.outcome, t.ratio, trial_case(t) AS kase, b.id AS base_id,
		             k.id AS clean_id
		      FROM (SELECT (SELECT id FROM base) AS id) b CROSS JOIN clean k
		      JOIN trials t ON t.commit_id = ANY (ARRAY[cid, b.id, k.id])
		      WHERE t.check_id = chk AND t.dtype = dt AND t.seed < planned AND t.outcome <> 'infra_error'
		      AND t.sanitizer IS NULL) t
		GROUP BY t.seed
		HAVING bool_or(t.commit_id = cid))
	SELECT base.id, base.sha, s.seed, s.cand_case, s.o[1], s.o[2], s.base_ratio, s.base_case,
	       pool.trials, pool.failures, s.clean_ratio
	FROM (SELECT 1) one LEFT JOIN base ON true LEFT JOIN pool ON true LEFT JOIN seeds s ON true
	ORDER BY s.seed
$$;
