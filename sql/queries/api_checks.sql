SELECT json_build_object('checks', coalesce(json_agg(json_build_object(
	'check', k.name, 'op', k.op, 'pass', k.pass, 'dtypes', k.dtypes, 'families', k.families,
	'deterministic', k.deterministic,
	'muted', (SELECT coalesce(json_agg(json_build_object('dtype', m.dtype, 'until', m.until,
	'reason', m.reason)), '[]') FROM mutes m WHERE m.check_id = k.id AND m.until > now()),
	'latest', (SELECT coalesce(json_object_agg(s.dtype, s.verdict), '{}') FROM stats s
	WHERE s.check_id = k.id AND s.commit_id = (SELECT c.id FROM commits c JOIN stats s2
	ON s2.commit_id = c.id AND s2.check_id = k.id WHERE c.reachable ORDER BY c.position DESC LIMIT 1))
) ORDER BY k.name), '[]'))::text FROM checks k WHERE k.repo_id = $1
