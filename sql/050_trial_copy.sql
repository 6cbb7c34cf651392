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
