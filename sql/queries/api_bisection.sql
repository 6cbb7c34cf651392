WITH b AS (SELECT * FROM bisections WHERE repo_id = $1 AND id = $2::bigint)
SELECT (SELECT count(*) FROM b), (SELECT json_build_object('id', b.id, 'check', k.name, 'dtype',
b.dtype,
	'good', g.sha, 'bad', bd.sha, 'state', b.state, 'outcome', b.outcome, 'culprit', cu.sha,
	'culprit_title', cu.title, 'culprit_author', cu.author, 'confidence', b.confidence,
	'failing_seeds', b.failing_seeds, 'requested_by', b.requested_by, 'created_at', b.created_at,
	'finished_at', b.finished_at, 'posterior', b.posterior, 'log', b.log, 'regression', b.regression_id,
	'range', (SELECT coalesce(json_agg(json_build_object('sha', c.sha, 'title', c.title, 'author',
c.author,
	'position', c.position, 'build', bu.status, 'runner_hash', bu.runner_hash) ORDER BY c.position),
'[]')
	FROM commits c LEFT JOIN builds bu ON bu.commit_id = c.id WHERE c.repo_id = b.repo_id AND
c.reachable
	AND c.position > g.position AND c.position <= bd.position),
	'probes', (SELECT coalesce(json_agg(json_build_object('id', p.id, 'commit', pc.sha, 'round', p.round,
	'purpose', p.purpose, 'seeds', cardinality(p.seeds), 'trials', p.trials, 'failures', p.failures,
	'created_at', p.created_at, 'finished_at', p.finished_at) ORDER BY p.id), '[]')
	FROM probes p JOIN commits pc ON pc.id = p.commit_id WHERE p.bisection_id = b.id)
)::text FROM b JOIN checks k ON k.id = b.check_id JOIN commits g ON g.id = b.good_commit_id
JOIN commits bd ON bd.id = b.bad_commit_id LEFT JOIN commits cu ON cu.id = b.culprit_id)
