SELECT json_build_object('total', (SELECT count(*) FROM bisections WHERE repo_id = $1),
'limit', $2::int, 'offset', $3::int,
'bisections', coalesce((SELECT json_agg(x ORDER BY x.id DESC) FROM (
	SELECT b.id, k.name AS check, b.dtype, g.sha AS good, bd.sha AS bad, b.state, b.outcome,
	cu.sha AS culprit, cu.title AS culprit_title, b.confidence, b.requested_by, b.created_at,
	b.finished_at, (SELECT count(*) FROM probes p WHERE p.bisection_id = b.id) AS probes,
	b.regression_id AS regression
	FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits g ON g.id = b.good_commit_id
	JOIN commits bd ON bd.id = b.bad_commit_id LEFT JOIN commits cu ON cu.id = b.culprit_id
	WHERE b.repo_id = $1 ORDER BY b.id DESC LIMIT $2 OFFSET $3) x), '[]'))::text
