-- The library's recent failure rate for one check x dtype: the trials and
-- failures of the last 'commits' commits up to position 'upto' whose verdict
-- is not a regression, none before the last 'improved' one (a fix changed the
-- rate there). Verdicts take it as the baseline's rate (daemon/slot.c, the
-- last 8 commits before the candidate); bisections as their flake rate
-- (daemon/bisector.c, the last 16 up to the good commit).
CREATE FUNCTION library_rate(repo int, chk int, dt text, upto int, commits int,
	OUT trials bigint, OUT failures bigint) LANGUAGE sql STABLE AS $$
	SELECT coalesce(sum(x.trials), 0), coalesce(sum(x.failures), 0) FROM (
		SELECT s.trials, s.failures FROM stats s JOIN commits c ON c.id = s.commit_id
		WHERE s.check_id = chk AND s.dtype = dt AND c.repo_id = repo AND c.reachable
		AND c.position <= upto AND s.verdict IN ('clean', 'flaky', 'improved')
		AND c.position >= coalesce((SELECT max(c2.position) FROM stats s2 JOIN commits c2
			ON c2.id = s2.commit_id WHERE s2.check_id = chk AND s2.dtype = dt AND c2.repo_id = repo
			AND c2.reachable AND s2.verdict = 'improved' AND c2.position <= upto), 0)
		ORDER BY c.position DESC LIMIT commits) x
$$;
