WITH input AS (SELECT * FROM json_to_recordset($2::json) AS t(name text, op text, pass text,
	dtypes text[], families text[], deterministic boolean, needs text)),
up AS (INSERT INTO checks (repo_id, name, op, pass, dtypes, families, deterministic, needs)
	SELECT $1, name, op, pass, dtypes, coalesce(families, '{}'), deterministic, needs FROM input
	ON CONFLICT (repo_id, name) DO UPDATE SET op = EXCLUDED.op, pass = EXCLUDED.pass,
	dtypes = EXCLUDED.dtypes, families = EXCLUDED.families, deterministic = EXCLUDED.deterministic,
	needs = EXCLUDED.needs
	RETURNING id, name, dtypes),
-- What this commit declares: a check no earlier commit declared is introduced here.
declared AS (UPDATE builds SET checks = (SELECT array_agg(name ORDER BY name) FROM input)
	WHERE commit_id = $3)
INSERT INTO jobs (kind, commit_id, check_id, dtype)
SELECT 'trials', $3, up.id, d FROM up, unnest(up.dtypes) AS d
WHERE $4 = '' OR up.name LIKE ANY (SELECT replace(p, '*', '%') FROM regexp_split_to_table($4, '[ ,]+')
AS p
	WHERE p <> '')
ON CONFLICT DO NOTHING
