-- A job's stored trials, read when a slot takes the job (daemon/slot.c load_ahead): each seed's
-- attempts and the runs that count. $4, $5: the seeds' range ($5 NULL: every seed from $4).
SELECT seed, attempt, outcome, ratio, coalesce(sanitizer, '') FROM trials
WHERE commit_id = $1 AND check_id = $2 AND dtype = $3 AND seed >= $4 AND ($5::bigint IS NULL OR seed <= $5)
ORDER BY seed, attempt
