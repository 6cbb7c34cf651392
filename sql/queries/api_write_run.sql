WITH c AS (SELECT id FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%'),
k AS (SELECT id FROM checks WHERE repo_id = $1 AND name = $3 AND $4 = ANY (dtypes)),
ins AS (INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds)
	SELECT 'probe', c.id, k.id, $4, 50,
	ARRAY(SELECT generate_series(p * $6::int, least(p * $6::int + $6::int, $5::int) - 1)::bigint)
	FROM c, k, generate_series(0, ($5::int - 1) / $6::int) p WHERE (SELECT count(*) FROM c) = 1
	ORDER BY p RETURNING id)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM k), 1,
	(SELECT min(id) || ',"parts":' || count(*) FROM ins)
