SELECT k.name, b.dtype, b.confidence, array_to_string(b.failing_seeds, ', '),
	cu.sha, cu.title, cu.author, cu.email, g.sha, g.title, g.author, g.email, r.name,
	t.seed, t.outcome, t.family, '[' || array_to_string(t.shape, ', ') || ']', t.ratio, t.error,
	w.e ->> 'name', w.e ->> 'max_abs', w.e ->> 'max_rel',
	CASE WHEN jsonb_typeof(w.e -> 'nonfinite') = 'number' THEN (w.e ->> 'nonfinite')::float8 END,
	b.failing_seeds[1], b.posterior ->> 'seeds',
	CASE WHEN jsonb_typeof(b.posterior -> 'culprit_rate') = 'number'
	THEN (b.posterior ->> 'culprit_rate')::float8 END,
	(SELECT string_agg(k2.name || ' ' || b2.dtype || ' (bisection ' || b2.id || ')', E'\n' ORDER BY
k2.name, b2.dtype, b2.id)
	FROM bisections b2 JOIN checks k2 ON k2.id = b2.check_id
	WHERE b2.culprit_id = b.culprit_id AND b2.outcome = 'culprit' AND b2.id <> b.id), b.id,
	bu.repro, CASE WHEN t.slot LIKE 'gpu%' THEN coalesce(bu.runner_cuda, 'numwatch-runner-cuda')
	ELSE coalesce(bu.runner_host, 'numwatch-runner-host') END
FROM bisections b JOIN checks k ON k.id = b.check_id JOIN commits cu ON cu.id = b.culprit_id
JOIN repositories r ON r.id = b.repo_id LEFT JOIN commits g ON g.id = b.good_commit_id
LEFT JOIN builds bu ON bu.commit_id = b.culprit_id
LEFT JOIN LATERAL (SELECT t.seed, t.outcome, t.family, t.shape, t.ratio, t.error, t.tensors, t.slot
FROM
trials t
	WHERE t.commit_id = b.culprit_id AND t.check_id = b.check_id AND t.dtype = b.dtype
	AND t.outcome NOT IN ('pass', 'infra_error')
	ORDER BY t.seed = ANY (b.failing_seeds) DESC, t.outcome = 'fail' DESC, t.ratio DESC NULLS FIRST,
	t.seed, t.attempt LIMIT 1) t ON true
LEFT JOIN LATERAL (SELECT e FROM jsonb_array_elements(
	CASE WHEN jsonb_typeof(t.tensors::jsonb) = 'array' THEN t.tensors::jsonb ELSE '[]' END) e
	ORDER BY CASE WHEN jsonb_typeof(e -> 'nonfinite') = 'number' THEN (e ->> 'nonfinite')::float8 END
	DESC NULLS LAST,
	CASE WHEN jsonb_typeof(e -> 'ratio') = 'number' THEN (e ->> 'ratio')::float8 END DESC NULLS LAST
	LIMIT 1) w ON true
-- The culprit commit's mail is its first check's bisection's (mail_sweep.sql).
WHERE b.id = (SELECT b2.id FROM bisections b2 JOIN checks k2 ON k2.id = b2.check_id
	WHERE b2.outcome = 'culprit'
	AND b2.culprit_id = (SELECT b3.culprit_id FROM bisections b3 WHERE b3.id = $1)
	ORDER BY k2.name, b2.dtype, b2.id LIMIT 1)
	AND NOT EXISTS (SELECT 1 FROM mutes u WHERE u.check_id = b.check_id AND u.dtype IN (b.dtype, '*')
	AND u.until > now())
