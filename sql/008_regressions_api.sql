-- The API's answers about regressions (docs/api.md): GET /api/v1/regressions
-- and /regressions/{id}, and what the commit, commits and check answers say
-- of them. Each function builds JSON; daemon/api.c passes it through.

-- The stats rows of one regression: the commits that show it, fix it or raised it.
CREATE INDEX stats_by_regression ON stats (regression_id) WHERE regression_id IS NOT NULL;

-- One regression as the list, the check page and its own page show it: the
-- check x dtype, its state, the commit it is new at (regression_start: its
-- culprit once confirmed, else the first commit judged to show it), the first
-- commit judged to show it, the state just before (good), the culprit, the
-- commit that fixed it, the rates before and after (trials, failures, rate,
-- wilson95 as the statistics wrote them), its bisection and its times.
CREATE FUNCTION api_regression_summary(r regressions) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT json_build_object('id', r.id, 'check', k.name, 'dtype', r.dtype, 'state', r.state,
		'new_at', n.sha, 'new_at_title', n.title, 'new_at_position', n.position,
		'first', f.sha, 'good', g.sha, 'culprit', cu.sha, 'culprit_title', cu.title,
		'fixed', fx.sha, 'fixed_title', fx.title,
		'rate_before', r.rate_before, 'rate_after', r.rate_after, 'changed_seeds', r.changed_seeds,
		'bisection', r.bisection_id, 'created_at', r.created_at, 'updated_at', r.updated_at,
		'closed_at', r.closed_at)
	FROM checks k, commits n, commits f
	LEFT JOIN commits g ON g.id = r.good_commit_id
	LEFT JOIN commits cu ON cu.id = r.culprit_id
	LEFT JOIN commits fx ON fx.id = r.fixed_commit_id
	WHERE k.id = r.check_id AND n.id = regression_start(r) AND f.id = r.first_commit_id
$$;

-- Whether a regression's state matches the list's ?state= filter: '' any,
-- 'active' not closed (open, bisecting, culprit, no_culprit: later commits may
-- still show it), 'closed' the others, else that one state.
CREATE FUNCTION api_regression_state_matches(state text, wanted text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE wanted WHEN '' THEN true
		WHEN 'active' THEN state IN ('open', 'bisecting', 'culprit', 'no_culprit')
		WHEN 'closed' THEN state IN ('check_changed', 'fixed', 'withdrawn')
		ELSE state = wanted END
$$;

-- GET /api/v1/regressions: the repository's regressions, newest first, with
-- the filters ('' for none) and the page.
CREATE FUNCTION api_regressions(repo int, want_state text, chk text, dt text, lim int, off int)
	RETURNS json LANGUAGE sql STABLE AS $$
	WITH x AS (SELECT r.* FROM regressions r JOIN checks k ON k.id = r.check_id
	           WHERE r.repo_id = repo AND api_regression_state_matches(r.state, want_state)
	           AND (chk = '' OR k.name = chk) AND (dt = '' OR r.dtype = dt))
	SELECT json_build_object('total', (SELECT count(*) FROM x), 'limit', lim, 'offset', off,
		'regressions', coalesce((SELECT json_agg(api_regression_summary(p) ORDER BY p.id DESC)
			FROM (SELECT * FROM x ORDER BY x.id DESC LIMIT lim OFFSET off) p), '[]'))
$$;

-- The culprit mail's thread of a regression: every mail whose thread_root is
-- the Message-ID of its culprit commit's culprit mail (one per culprit
-- commit, shared by the regressions it caused; a cancelled one only where
-- there is no other), oldest first. Empty without a culprit or a mail.
CREATE FUNCTION api_regression_mail(r regressions) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT coalesce(json_agg(json_build_object('id', m.id, 'kind', m.kind, 'subject', m.subject,
		'state', m.state, 'created_at', m.created_at, 'sent_at', m.sent_at,
		'recipients', cardinality(m.recipients), 'bisection', m.bisection_id, 'message_id', m.message_id,
		'in_reply_to', CASE WHEN m.message_id <> m.thread_root THEN m.thread_root END,
		'attempts', m.attempts, 'last_error', m.last_error) ORDER BY m.id), '[]')
	FROM mail m
	WHERE m.thread_root = (SELECT m0.message_id FROM mail m0 WHERE m0.culprit_id = r.culprit_id
		AND m0.kind = 'culprit' ORDER BY m0.state <> 'failed' DESC, m0.id DESC LIMIT 1)
$$;

-- GET /api/v1/regressions/{id}: the summary, its bisections, its mail
-- thread, the other regressions its culprit caused (they share the thread),
-- and a page (lim, off) of the commits whose verdicts point at it, oldest
-- first: new (it is new there), open (still shows it), fixed (improved: the
-- fix) or check_changed (it came with changed inputs). NULL: no such
-- regression in the repository.
CREATE FUNCTION api_regression(repo int, rid bigint, lim int, off int) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT (api_regression_summary(r)::jsonb || jsonb_build_object(
		'bisections', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', b.id, 'state', b.state,
			'outcome', b.outcome, 'culprit', cu.sha, 'confidence', b.confidence, 'good', g.sha,
			'bad', bd.sha, 'created_at', b.created_at, 'finished_at', b.finished_at) ORDER BY b.id), '[]')
			FROM bisections b JOIN commits g ON g.id = b.good_commit_id
			JOIN commits bd ON bd.id = b.bad_commit_id LEFT JOIN commits cu ON cu.id = b.culprit_id
			WHERE b.regression_id = r.id OR b.id = r.bisection_id),
		'mail', api_regression_mail(r),
		'same_culprit', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', o.id, 'check', k.name,
			'dtype', o.dtype, 'state', o.state) ORDER BY o.id), '[]')
			FROM regressions o JOIN checks k ON k.id = o.check_id
			WHERE o.culprit_id = r.culprit_id AND o.id <> r.id),
		'commits_total', (SELECT count(*) FROM stats s WHERE s.regression_id = r.id),
		'commits', (SELECT coalesce(jsonb_agg(jsonb_build_object('sha', x.sha, 'title', x.title,
			'position', x.position, 'verdict', x.verdict, 'new', x.regression_new,
			'shows', CASE WHEN x.verdict = 'improved' THEN 'fixed'
				WHEN x.verdict = 'check_changed' THEN 'check_changed'
				WHEN x.regression_new THEN 'new' ELSE 'open' END) ORDER BY x.position), '[]')
			FROM (SELECT c.sha, c.title, c.position, s.verdict, s.regression_new FROM stats s
				JOIN commits c ON c.id = s.commit_id WHERE s.regression_id = r.id
				ORDER BY c.position LIMIT lim OFFSET off) x),
		'limit', lim, 'offset', off))::json
	FROM regressions r WHERE r.repo_id = repo AND r.id = rid
$$;

-- A check x dtype result's regression, for GET /commits/{sha}: the one it
-- shows (new here or still open), fixes or raised, with its state and the
-- commit it is new at; NULL when none.
CREATE FUNCTION api_stats_regression(rid bigint, is_new boolean) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT json_build_object('id', r.id, 'new', is_new, 'state', r.state, 'new_at', n.sha)
	FROM regressions r JOIN commits n ON n.id = regression_start(r) WHERE r.id = rid
$$;

-- For GET /commits: per "CHECK/DTYPE" of one commit, the regression its
-- result points at ({id, new}), so that the grid tells a regression new at
-- this commit from one it still shows; {} when none.
CREATE FUNCTION api_commit_regressions(cid bigint) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT coalesce(json_object_agg(k.name || '/' || s.dtype, json_build_object('id', s.regression_id,
		'new', s.regression_new)), '{}')
	FROM stats s JOIN checks k ON k.id = s.check_id WHERE s.commit_id = cid AND s.regression_id IS NOT NULL
$$;

-- For GET /commits: per "CHECK/DTYPE" of one commit whose verdict is flaky or
-- check_changed, what a grid cell's tooltip says: its trials and failures,
-- the commit it has failed since (a check failing since it was introduced),
-- and how many seeds changed their inputs; {} when none.
CREATE FUNCTION api_commit_details(cid bigint) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT coalesce(json_object_agg(k.name || '/' || s.dtype, json_build_object('trials', s.trials,
		'failures', s.failures, 'failing_since', s.evidence ->> 'failing_since',
		'changed_seeds', s.changed_seeds)), '{}')
	FROM stats s JOIN checks k ON k.id = s.check_id
	WHERE s.commit_id = cid AND s.verdict IN ('flaky', 'check_changed')
$$;

-- For GET /checks/{name}: the check's regressions (of one dtype, or all for
-- ''), newest first, at most 'lim'.
CREATE FUNCTION api_check_regressions(chk int, dt text, lim int) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT coalesce(json_agg(api_regression_summary(p) ORDER BY p.id DESC), '[]')
	FROM (SELECT r.* FROM regressions r WHERE r.check_id = chk AND (dt = '' OR r.dtype = dt)
	      ORDER BY r.id DESC LIMIT lim) p
$$;
