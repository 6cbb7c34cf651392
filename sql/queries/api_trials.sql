WITH c AS (SELECT id FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%' ORDER BY reachable DESC
LIMIT 2)
SELECT (SELECT count(*) FROM c), (SELECT json_build_object('trials', coalesce(json_agg(x ORDER BY
	x.dtype, x.seed, x.attempt), '[]'))::text FROM (SELECT t.dtype, t.seed, t.attempt, t.outcome, t.ratio,
	t.family, t.shape, t.gen, t.case_digest, t.tensors, t.digest, t.digests_differ, t.kernel_us, t.error,
	t.slot, t.host,
	t.finished_at FROM trials t JOIN checks k ON k.id = t.check_id
	WHERE t.commit_id = (SELECT id FROM c LIMIT 1) AND k.name = $3 AND ($4 = '' OR t.dtype = $4)
	AND ($5 = '' OR t.seed = $5::bigint) AND ($6 = '' OR t.outcome = $6)
	ORDER BY t.dtype, t.seed, t.attempt LIMIT $7 OFFSET $8) x)
