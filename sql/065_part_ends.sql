-- The ends of many parts in one statement (issue 18).
--
-- A part of a run by hand, a probe or a sanitizer run ends with one statement that marks its job
-- done once every seed it ran has a stored result, and gives its probe the counts. With 8 slots
-- on each of 4 GPUs those ends, one statement each, took a quarter of the slots' time on the
-- daemon's one scheduler connection. Slots now go on to their next job at once, and the ends
-- that are ready go together: part_ends() takes them as one JSON array of objects
--   {"id", "commit_id", "check_id", "dtype", "seeds" ('{1,2,3}': the seeds that ran),
--    "trials", "failures", "failed" (infrastructure: the job fails whatever is stored),
--    "lo", "hi" (the seeds' range: an index range however stale the table's statistics)}
-- and answers, for each, whether its job is now marked (done or failed). A job whose seeds are
-- not all stored yet is left as it is, to be tried again.

CREATE FUNCTION part_ends(ends jsonb) RETURNS TABLE (job_id bigint, marked boolean)
	LANGUAGE plpgsql AS $$
DECLARE
	e record;
	ran bigint[]; -- the seeds that ran
	n int;
BEGIN
	FOR e IN SELECT * FROM jsonb_to_recordset(ends) AS x(id bigint, commit_id bigint, check_id int,
		dtype text, seeds text, trials int, failures int, failed boolean, lo bigint, hi bigint)
	LOOP
		ran := e.seeds::bigint[];
		UPDATE jobs j SET state = CASE WHEN e.failed THEN 'failed' ELSE 'done' END, finished_at = now(),
			owner = NULL, lease_until = NULL
		WHERE j.id = e.id AND (e.failed OR (SELECT count(DISTINCT t.seed) FROM trials t
			WHERE t.commit_id = e.commit_id AND t.check_id = e.check_id AND t.dtype = e.dtype
			AND t.seed BETWEEN e.lo AND e.hi AND t.outcome <> 'infra_error'
			AND t.seed = ANY (ran)) >= cardinality(ran));
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n > 0 THEN
			UPDATE probes p SET trials = e.trials, failures = e.failures, seeds = ran,
				finished_at = now()
			WHERE p.job_id = e.id;
		END IF;
		job_id := e.id;
		marked := n > 0;
		RETURN NEXT;
	END LOOP;
END
$$;
