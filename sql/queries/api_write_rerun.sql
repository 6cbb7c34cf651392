WITH c AS (SELECT id FROM commits WHERE repo_id = $1 AND sha LIKE $2 || '%'),
j AS (UPDATE jobs SET state = 'queued', strikes = 0, owner = NULL, lease_until = NULL, priority = 50,
	not_before = now(), error = NULL WHERE (SELECT count(*) FROM c) = 1 AND commit_id = (SELECT id FROM c)
	AND state IN ('done', 'failed') AND (kind = 'trials' OR (kind = 'build' AND NOT EXISTS
	(SELECT 1 FROM builds WHERE commit_id = jobs.commit_id AND status = 'ok'))) RETURNING id)
SELECT (SELECT count(*) FROM c), 1, 1, (SELECT count(*) FROM j)
