WITH input AS (SELECT * FROM json_to_recordset($2::json) AS t(sha text, parent text, position int,
	author text, email text, title text, at bigint)),
up AS (INSERT INTO commits (repo_id, sha, parent_sha, position, author, email, title, committed_at)
	SELECT $1, sha, parent, position, author, email, title, to_timestamp(at) FROM input ORDER BY position
	ON CONFLICT (repo_id, sha) DO UPDATE SET position = EXCLUDED.position, reachable = true,
	parent_sha = EXCLUDED.parent_sha
	RETURNING id, position, (xmax = 0) AS inserted),
-- Dropped by a force-push: a commit within the history read that is not in it. Not one past its
-- newest: another daemon, whose mirror was fetched later, may have imported it already.
gone AS (UPDATE commits SET reachable = false WHERE repo_id = $1 AND reachable
	AND sha NOT IN (SELECT sha FROM input) AND position >= (SELECT min(position) FROM input)
	AND position <= (SELECT max(position) FROM input)
	RETURNING id),
queued AS (INSERT INTO jobs (kind, commit_id) SELECT 'build', id FROM up WHERE inserted ORDER BY
position
	ON CONFLICT DO NOTHING RETURNING id)
SELECT (SELECT count(*) FROM up WHERE inserted), (SELECT count(*) FROM gone),
(SELECT count(*) FROM queued)
