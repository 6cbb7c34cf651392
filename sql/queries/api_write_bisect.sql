WITH k AS (SELECT id FROM checks WHERE repo_id = $1 AND name = $4 AND $5 = ANY (dtypes)),
g AS (SELECT id, position FROM commits WHERE repo_id = $1 AND reachable AND sha LIKE $2 || '%'),
b AS (SELECT id, position FROM commits WHERE repo_id = $1 AND reachable AND sha LIKE $3 || '%'),
ins AS (INSERT INTO bisections (repo_id, check_id, dtype, good_commit_id, bad_commit_id, requested_by,
	failing_seeds) SELECT $1, k.id, $5, g.id, b.id, $6, coalesce((SELECT s.failing_seeds FROM stats s
	WHERE s.commit_id = b.id AND s.check_id = k.id AND s.dtype = $5), '{}') FROM k, g, b
	WHERE (SELECT count(*) FROM g) = 1 AND (SELECT count(*) FROM b) = 1 AND g.position < b.position
	RETURNING id)
SELECT (SELECT count(*) FROM k), (SELECT count(*) FROM g), (SELECT count(*) FROM b), (SELECT id FROM
ins)
