SELECT json_build_object(
'repository', (SELECT name FROM repositories WHERE id = $1),
'total', (SELECT count(*) FROM commits WHERE repo_id = $1 AND reachable),
'limit', $2::int, 'offset', $3::int,
'checks', (SELECT coalesce(json_agg(json_build_object('check', name, 'dtypes', dtypes,
	'deterministic', deterministic) ORDER BY name), '[]') FROM checks WHERE repo_id = $1),
'commits', coalesce((SELECT json_agg(x ORDER BY x.position DESC) FROM (
	SELECT c.sha, c.title, c.author, c.email, c.committed_at, c.position, b.status AS build,
	commit_verdict(c.id) AS verdict,
	(SELECT coalesce(json_object_agg(k.name || '/' || s.dtype, s.verdict), '{}')
	FROM stats s JOIN checks k ON k.id = s.check_id WHERE s.commit_id = c.id) AS verdicts,
	api_commit_regressions(c.id) AS regressions, api_commit_details(c.id) AS details
	FROM commits c LEFT JOIN builds b ON b.commit_id = c.id
	WHERE c.repo_id = $1 AND c.reachable ORDER BY c.position DESC LIMIT $2 OFFSET $3) x), '[]'))::text
