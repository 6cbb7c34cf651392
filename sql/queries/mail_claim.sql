WITH next AS (SELECT m.id FROM mail m JOIN bisections b ON b.id = m.bisection_id
	WHERE b.repo_id = $1 AND m.state = 'pending' AND m.next_try <= now()
	AND (m.kind = 'culprit' OR EXISTS (SELECT 1 FROM mail r WHERE r.message_id = m.thread_root
	AND r.state = 'sent'))
	ORDER BY m.id LIMIT 1 FOR UPDATE OF m SKIP LOCKED)
UPDATE mail SET attempts = mail.attempts + 1, next_try = now() + $2 * interval '1 second'
FROM next WHERE mail.id = next.id
RETURNING mail.id, mail.kind, mail.bisection_id, mail.message_id, mail.thread_root,
	array_to_string(mail.recipients, E'\n'), mail.subject, mail.body,
	extract(epoch FROM mail.created_at)::bigint, mail.attempts
