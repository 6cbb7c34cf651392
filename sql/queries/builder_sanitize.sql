INSERT INTO jobs (kind, commit_id, check_id, dtype, tool, seeds, priority)
SELECT 'sanitize', $1, k.id, d, t, ARRAY(SELECT generate_series(0, $3::int - 1, $4::int)::bigint), 150
FROM checks k, unnest(k.dtypes) AS d,
	(SELECT t FROM regexp_split_to_table($2, '[ ,]+') AS t WHERE t <> '') AS tools
WHERE k.repo_id = $5 AND EXISTS (SELECT 1 FROM jobs j WHERE j.kind = 'trials' AND j.commit_id = $1
	AND j.check_id = k.id AND j.dtype = d)
	AND (SELECT position FROM commits WHERE id = $1) % $6::int = 0
ON CONFLICT DO NOTHING
