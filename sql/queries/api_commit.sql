WITH c AS (SELECT * FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%' ORDER BY reachable DESC
LIMIT 2)
SELECT pg_current_snapshot()::text, (SELECT count(*) FROM c), (SELECT json_build_object(
	'sha', c.sha, 'parent', c.parent_sha, 'title', c.title, 'author', c.author, 'email', c.email,
	'committed_at', c.committed_at, 'position', c.position, 'reachable', c.reachable,
	'verdict', commit_verdict(c.id),
	'build', (SELECT json_build_object('status', b.status, 'duration_ms', b.duration_ms,
	'runner_hash', b.runner_hash, 'host', b.host, 'started_at', b.started_at,
	'log', '/api/v1/commits/' || c.sha || '/build-log') FROM builds b WHERE b.commit_id = c.id),
	'checks', coalesce((SELECT json_agg(json_build_object('check', k.name, 'dtype', s.dtype,
	'deterministic', k.deterministic, 'trials', s.trials, 'failures', s.failures,
	'infra_errors', s.infra_errors, 'worst_ratio', s.worst_ratio, 'verdict', s.verdict,
	'evidence', s.evidence, 'regression', api_stats_regression(s.regression_id, s.regression_new),
	'changed_seeds', s.changed_seeds, 'failing_since', s.evidence ->> 'failing_since',
	'baseline', (SELECT bc.sha FROM commits bc WHERE bc.id = s.baseline_id),
	'failing_seeds', (SELECT coalesce(json_agg(json_build_object('seed', t.seed, 'attempt', t.attempt,
	'outcome', t.outcome, 'ratio', t.ratio, 'family', t.family, 'shape', t.shape,
	'case_digest', t.case_digest, 'error', t.error,
	'tensors', t.tensors, 'repro', repro_command(bu.repro, CASE WHEN t.slot LIKE 'gpu%'
	THEN coalesce(bu.runner_cuda, 'numwatch-runner-cuda') ELSE coalesce(bu.runner_host,
	'numwatch-runner-host') END, k.name, t.dtype, t.seed, 1))
	ORDER BY t.seed, t.attempt), '[]') FROM (SELECT * FROM trials t WHERE t.commit_id = c.id
	AND t.check_id = k.id AND t.dtype = s.dtype AND t.seed = ANY (s.failing_seeds)
	AND t.outcome <> 'pass' ORDER BY t.seed, t.attempt LIMIT 100) t
	LEFT JOIN builds bu ON bu.commit_id = t.commit_id)
	) ORDER BY k.name, s.dtype) FROM stats s JOIN checks k ON k.id = s.check_id
	WHERE s.commit_id = c.id), '[]')
)::text FROM c ORDER BY c.reachable DESC LIMIT 1)
