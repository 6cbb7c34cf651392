-- A job's stored trials, read when a slot takes the job (daemon/slot.c load_ahead): each seed's
-- attempts and the runs that count. $4, $5: the seeds' range ($5 NULL: every seed from $4); $6:
-- the job, whose rerun flag and grown plan (sql/085) come with every row, and alone (the trial's
-- columns NULL) where none is stored yet.
SELECT t.seed, t.attempt, t.outcome, t.ratio, coalesce(t.sanitizer, ''), j.reruns, j.planned
FROM jobs j LEFT JOIN trials t ON t.commit_id = $1 AND t.check_id = $2 AND t.dtype = $3 AND t.seed >= $4
	AND ($5::bigint IS NULL OR t.seed <= $5)
WHERE j.id = $6
ORDER BY t.seed, t.attempt
