SELECT extract(epoch FROM n.t)::float8, extract(epoch FROM s.sent_at)::float8, n.due
FROM (SELECT now() AS t, EXISTS (SELECT 1 FROM mail m JOIN bisections b ON b.id = m.bisection_id
	WHERE b.repo_id = $2 AND m.state = 'pending' AND m.next_try <= now()
	AND (m.kind = 'culprit' OR EXISTS (SELECT 1 FROM mail r WHERE r.message_id = m.thread_root
	AND r.state = 'sent'))) AS due) n
LEFT JOIN LATERAL (SELECT m.sent_at FROM mail m JOIN bisections b ON b.id = m.bisection_id
	WHERE b.repo_id = $2 AND m.sent_at > n.t - $3 * interval '1 second'
	ORDER BY m.sent_at DESC LIMIT $1) s ON true
ORDER BY s.sent_at DESC NULLS LAST
