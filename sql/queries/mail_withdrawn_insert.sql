WITH cancel AS (UPDATE mail SET state = 'failed',
	last_error = 'not sent: the culprit was withdrawn before the mail was tried'
	WHERE bisection_id = $2::bigint AND kind = 'culprit' AND state = 'pending' AND attempts = 0 RETURNING
id),
cancel_rest AS (UPDATE mail SET state = 'failed',
	last_error = 'not sent: the culprit was withdrawn before its first mail was tried'
	WHERE bisection_id = $2::bigint AND kind <> 'culprit' AND state = 'pending'
	AND EXISTS (SELECT 1 FROM cancel) RETURNING id),
ins AS (INSERT INTO mail (kind, bisection_id, message_id, thread_root, recipients, subject, body)
	SELECT $1::text, $2::bigint, $3::text, $4::text, string_to_array($5::text, E'\n'), $6::text, $7::text
	WHERE NOT EXISTS (SELECT 1 FROM cancel) ON CONFLICT DO NOTHING RETURNING id)
SELECT (SELECT count(*) FROM cancel), (SELECT count(*) FROM ins)
