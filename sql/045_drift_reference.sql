-- Precision drift is measured from a reference that a slow creep cannot
-- carry along. The nearest clean commit moved with every commit of a creep
-- (1.3x a commit, never 2x from one to the next): it was never caught. The
-- reference is now the oldest of the last 8 clean commits up to the nearest
-- one, none before the last change of state there (an improvement or fix,
-- changed inputs, a new regression): a creep is caught once it has grown
-- past [verdict] drift_factor within 8 commits, and a commit after a real
-- change is measured from that change, not from before it.
CREATE OR REPLACE FUNCTION judge_clean_state(cid bigint, chk int, dt text) RETURNS bigint LANGUAGE sql STABLE AS $$
	WITH near AS (SELECT c.id, c.repo_id, c.position FROM commits c JOIN stats s ON s.commit_id = c.id
		WHERE c.repo_id = (SELECT repo_id FROM commits WHERE id = cid)
		AND c.position < (SELECT position FROM commits WHERE id = cid)
		AND s.check_id = chk AND s.dtype = dt AND c.reachable AND s.verdict IN ('clean', 'flaky', 'improved')
		AND (s.regression_id IS NULL OR s.verdict = 'improved')
		ORDER BY c.position DESC LIMIT 1),
	since AS (SELECT coalesce((SELECT max(c2.position) FROM stats s2 JOIN commits c2 ON c2.id = s2.commit_id, near
		WHERE s2.check_id = chk AND s2.dtype = dt AND c2.repo_id = near.repo_id AND c2.reachable
		AND c2.position <= near.position
		AND (s2.verdict IN ('improved', 'check_changed') OR s2.regression_new)), 0) AS position)
	SELECT w.id FROM (SELECT c.id, c.position FROM commits c JOIN stats s ON s.commit_id = c.id, near, since
		WHERE c.repo_id = near.repo_id AND c.position <= near.position AND c.position >= since.position
		AND s.check_id = chk AND s.dtype = dt AND c.reachable AND s.verdict IN ('clean', 'flaky', 'improved')
		AND (s.regression_id IS NULL OR s.verdict = 'improved')
		ORDER BY c.position DESC LIMIT 8) w
	ORDER BY w.position LIMIT 1
$$;
