SELECT k.name, b.dtype, r.name, cu.sha, cu.title, cu.author, cu.email,
	m.message_id, m.subject, array_to_string(m.recipients, E'\n'),
	f.sha, f.title, f.author, f.email
FROM bisections b JOIN checks k ON k.id = b.check_id JOIN repositories r ON r.id = b.repo_id
JOIN commits cu ON cu.id = b.culprit_id JOIN commits f ON f.id = $2 AND f.repo_id = b.repo_id
JOIN mail m ON m.culprit_id = b.culprit_id AND m.kind = 'culprit' AND m.state <> 'failed'
WHERE b.id = $1 AND b.outcome = 'culprit'
