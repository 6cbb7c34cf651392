WITH k AS (SELECT * FROM checks WHERE repo_id = $1 AND name = $2)
SELECT (SELECT count(*) FROM k), (SELECT json_build_object('check', k.name, 'op', k.op, 'pass', k.pass,
	'dtypes', k.dtypes, 'families', k.families, 'deterministic', k.deterministic,
	'total', (SELECT count(*) FROM commits c WHERE c.repo_id = $1 AND c.reachable),
	'limit', $4::int, 'offset', $5::int,
	'series', coalesce((SELECT json_agg(x ORDER BY x.position, x.dtype) FROM (
	SELECT c.sha, c.title, c.position, c.committed_at, s.dtype, s.verdict,
	s.regression_id AS regression, s.regression_new, s.trials, s.failures,
	s.worst_ratio, CASE WHEN s.trials > 0 THEN s.failures::float8 / s.trials END AS failure_rate,
	(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY t.ratio) FROM trials t WHERE t.commit_id = c.id
	AND t.check_id = k.id AND t.dtype = s.dtype AND t.attempt = 0) AS median_ratio
	FROM (SELECT * FROM commits WHERE repo_id = $1 AND reachable ORDER BY position DESC
	LIMIT $4 OFFSET $5) c JOIN stats s ON s.commit_id = c.id AND s.check_id = k.id
	WHERE $3 = '' OR s.dtype = $3) x), '[]'),
	'bisections', coalesce((SELECT json_agg(json_build_object('id', b.id, 'dtype', b.dtype,
	'bad', bd.sha, 'culprit', cu.sha, 'outcome', b.outcome, 'state', b.state, 'confidence',
b.confidence, 'regression', b.regression_id)
	ORDER BY b.id) FROM bisections b JOIN commits bd ON bd.id = b.bad_commit_id
	LEFT JOIN commits cu ON cu.id = b.culprit_id WHERE b.check_id = k.id), '[]'),
	'regressions', api_check_regressions(k.id, $3, $6)
)::text FROM k)
