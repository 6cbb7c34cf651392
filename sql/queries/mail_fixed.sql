SELECT k.name, b.dtype, r.name, cu.sha, cu.title, cu.author, cu.email,
	m.message_id, m.subject, array_to_string(m.recipients, E'\n'),
	f.sha, f.title, f.author, f.email,
	-- The culprit's other regressions this commit fixed: the mail speaks for them too.
	(SELECT string_agg(k2.name || ' (' || b2.dtype || ')', E'\n' ORDER BY k2.name, b2.dtype, b2.id)
	FROM regressions x2 JOIN bisections b2 ON b2.id = x2.bisection_id JOIN checks k2 ON k2.id = b2.check_id
	WHERE b2.culprit_id = b.culprit_id AND b2.outcome = 'culprit' AND x2.state = 'fixed'
	AND x2.fixed_commit_id = f.id AND b2.id <> b.id)
FROM bisections b JOIN checks k ON k.id = b.check_id JOIN repositories r ON r.id = b.repo_id
JOIN commits cu ON cu.id = b.culprit_id JOIN commits f ON f.id = $2 AND f.repo_id = b.repo_id
JOIN mail m ON m.culprit_id = b.culprit_id AND m.kind = 'culprit' AND m.state <> 'failed'
WHERE b.id = $1 AND b.outcome = 'culprit'
