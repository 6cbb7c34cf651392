SELECT json_build_object(
'queue', (SELECT coalesce(json_object_agg(kind || '_' || state, n), '{}') FROM
	(SELECT kind, state, count(*) AS n FROM jobs WHERE state IN ('queued', 'running')
	GROUP BY kind, state) q),
'commits', (SELECT count(*) FROM commits WHERE repo_id = $1),
'polled_at', (SELECT polled_at FROM repositories WHERE id = $1),
'poll_error', (SELECT poll_error FROM repositories WHERE id = $1),
'identity_warning', identity_warning($1),
-- Every daemon sharing the database (fleet_json(), sql/040).
'daemons', fleet_json($1, $2))::text
