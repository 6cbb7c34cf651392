SELECT 'culprit', b.id, NULL::bigint FROM bisections b JOIN commits cu ON cu.id = b.culprit_id
WHERE b.repo_id = $1 AND b.outcome = 'culprit'
-- A culprit found long ago (mail just turned on, say) is not worth a mail now.
	AND coalesce(b.finished_at, b.updated_at) > now() - interval '7 days'
-- By check, not by which bisection came first: that follows the order the verdicts happened to be
-- stored in, and one history must give one mail however its work was spread over slots and daemons.
	AND b.id = (SELECT b2.id FROM bisections b2 JOIN checks k2 ON k2.id = b2.check_id
	WHERE b2.culprit_id = b.culprit_id AND b2.outcome = 'culprit' ORDER BY k2.name, b2.dtype, b2.id LIMIT 1)
	AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit')
	AND NOT EXISTS (SELECT 1 FROM mutes u WHERE u.check_id = b.check_id AND u.dtype IN (b.dtype, '*')
	AND u.until > now())
	AND (b.finished_at < now() - interval '6 hours' OR NOT EXISTS (SELECT 1 FROM regressions x
	JOIN commits f ON f.id = x.first_commit_id LEFT JOIN bisections xb ON xb.id = x.bisection_id
	LEFT JOIN commits g ON g.id = coalesce(xb.good_commit_id, x.good_commit_id)
	WHERE x.repo_id = b.repo_id AND (x.state = 'bisecting' OR (x.state = 'open' AND $3::boolean))
	AND coalesce(g.position, -1) < cu.position AND f.position >= cu.position))
UNION ALL
SELECT 'withdrawn', b.id, NULL FROM bisections b
WHERE b.repo_id = $1 AND b.outcome = 'withdrawn'
	AND EXISTS (SELECT 1 FROM mail m WHERE m.bisection_id = b.id AND m.kind = 'culprit' AND m.state <>
'failed')
	AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.bisection_id = b.id AND m.kind = 'withdrawn')
UNION ALL
-- Regressions fixed: one follow-up in their culprit's thread for each fixing commit, sent by the
-- first of them by check and dtype once that commit is judged for every check x dtype the culprit
-- still has open (so that the commit's other fixes are in it, not in replies of their own), or an
-- hour after the fix (a check the commit no longer runs is never judged there).
SELECT 'fixed', b.id, x.fixed_commit_id FROM regressions x JOIN bisections b ON b.id = x.bisection_id
WHERE x.repo_id = $1 AND x.state = 'fixed' AND b.outcome = 'culprit'
	AND EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit'
	AND m.state = 'sent')
	AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.kind = 'fixed' AND (m.bisection_id = b.id
	OR (m.culprit_id = b.culprit_id AND m.fixed_commit_id = x.fixed_commit_id)))
	AND b.id = (SELECT b2.id FROM regressions x2 JOIN bisections b2 ON b2.id = x2.bisection_id
	JOIN checks k2 ON k2.id = b2.check_id WHERE b2.culprit_id = b.culprit_id AND x2.state = 'fixed'
	AND x2.fixed_commit_id = x.fixed_commit_id AND b2.outcome = 'culprit' ORDER BY k2.name, b2.dtype, b2.id LIMIT 1)
	AND (x.closed_at < now() - interval '1 hour' OR NOT EXISTS (SELECT 1 FROM regressions x3
	WHERE x3.culprit_id = b.culprit_id AND x3.state = 'culprit' AND NOT EXISTS (SELECT 1 FROM stats s
	WHERE s.commit_id = x.fixed_commit_id AND s.check_id = x3.check_id AND s.dtype = x3.dtype
	AND s.verdict <> 'pending')))
UNION ALL
-- A bisection by hand is clean again at the first commit after both the culprit and its bad commit
-- (commits in between may be clean by chance when the failure is rare) whose verdict for the check
-- x dtype is clean.
SELECT 'fixed', b.id, f.id FROM bisections b
JOIN commits cu ON cu.id = b.culprit_id JOIN commits bad ON bad.id = b.bad_commit_id
CROSS JOIN LATERAL (SELECT c.id FROM commits c JOIN stats s ON s.commit_id = c.id
	AND s.check_id = b.check_id AND s.dtype = b.dtype
	WHERE c.repo_id = b.repo_id AND c.reachable AND c.position > greatest(cu.position, bad.position)
	AND s.verdict IN ('clean', 'improved')
	ORDER BY c.position LIMIT 1) f
WHERE b.repo_id = $1 AND b.outcome = 'culprit' AND b.regression_id IS NULL
	AND EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit'
	AND m.state = 'sent')
	AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.bisection_id = b.id AND m.kind = 'fixed')
LIMIT $2
