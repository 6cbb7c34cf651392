WITH k AS (SELECT id FROM checks WHERE repo_id = $1 AND name = $2),
ins AS (INSERT INTO mutes (check_id, dtype, until, reason, created_by)
	SELECT k.id, $3, $4::timestamptz, $5, $6 FROM k
	ON CONFLICT (check_id, dtype) DO UPDATE SET until = EXCLUDED.until, reason = EXCLUDED.reason,
	created_by = EXCLUDED.created_by, created_at = now() RETURNING until)
SELECT (SELECT count(*) FROM k), 1, 1, (SELECT until FROM ins)
