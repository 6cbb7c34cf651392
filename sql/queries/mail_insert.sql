WITH ins AS (INSERT INTO mail (kind, bisection_id, message_id, thread_root, recipients, subject, body,
	culprit_id, fixed_commit_id) SELECT $1::text, $2::bigint, $3::text, $4::text, string_to_array($5::text, E'\n'),
$6::text,
	$7::text, b.culprit_id, nullif($8::bigint, 0)
	FROM bisections b WHERE b.id = $2::bigint ON CONFLICT DO NOTHING RETURNING id)
SELECT 0, count(*) FROM ins
