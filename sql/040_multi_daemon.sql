-- Several daemons on one database (issue 16): per-host builds, jobs that say
-- what they need, one writer per bisection step, and the daemons themselves.

-- Per-host builds. A host runs only runners it built itself, in its own
-- state_dir: a trials, probe or sanitize job is claimed only by a host whose
-- own build of the commit holds the runner its slot needs, byte-identical
-- (by hash) to the runner the commit was first built with. builds stays the
-- commit's build as its first builder found it (status, log, checks,
-- runner_hash); host_builds says which hosts have a runner for it.
ALTER TABLE builds ADD COLUMN host_hash text; -- sha256 of the host runner as first built (NULL: none yet)
ALTER TABLE builds ADD COLUMN cuda_hash text; -- sha256 of the CUDA runner as first built
CREATE TABLE host_builds (
	commit_id   bigint NOT NULL REFERENCES commits (id),
	host        text NOT NULL,
	status      text NOT NULL CHECK (status IN ('ok', 'failed', 'timeout', 'no_runner')),
	host_hash   text,
	cuda_hash   text,
	-- The runner is here and identical to the commit's first build's: host slots
	-- (host_ok) or GPU slots (cuda_ok) of this host may run the commit's jobs.
	host_ok     boolean NOT NULL DEFAULT false,
	cuda_ok     boolean NOT NULL DEFAULT false,
	built_at    timestamptz NOT NULL DEFAULT now(),
	duration_ms int NOT NULL DEFAULT 0,
	error       text,
	PRIMARY KEY (commit_id, host)
);

-- What a check needs: NULL any slot; 'gpu' only the CUDA runner declares it
-- (a host with only host slots never claims it); 'host' only the host runner
-- does. Sanitize jobs need a GPU slot whatever the check.
ALTER TABLE checks ADD COLUMN needs text CHECK (needs IN ('gpu', 'host'));

-- When a job was last claimed, and from whom it was taken over when that
-- claim took it from a daemon whose lease had run out (its host died).
ALTER TABLE jobs ADD COLUMN claimed_at timestamptz;
ALTER TABLE jobs ADD COLUMN taken_from text;
ALTER TABLE jobs ADD COLUMN taken_over_at timestamptz;

-- Records a host's build of a commit ($1 commit, $2 host, $3 status, $4 and
-- $5 the hashes of the host and CUDA runners it holds, NULL where it has
-- none). The commit's runner identities are the first ones seen: a runner
-- kind its first builder did not build is set by the first host that builds
-- it. Returns whether this host's host and CUDA runners are the commit's.
CREATE FUNCTION host_build_record(cid bigint, me text, st text, hh text, ch text, ms int, err text,
	OUT host_ok boolean, OUT cuda_ok boolean) LANGUAGE plpgsql AS $$
BEGIN
	IF st = 'ok' THEN
		UPDATE builds SET host_hash = coalesce(host_hash, hh), cuda_hash = coalesce(cuda_hash, ch)
			WHERE commit_id = cid AND status = 'ok';
	END IF;
	SELECT st = 'ok' AND hh IS NOT NULL AND hh = b.host_hash, st = 'ok' AND ch IS NOT NULL AND ch = b.cuda_hash
		INTO host_ok, cuda_ok FROM builds b WHERE b.commit_id = cid;
	host_ok := coalesce(host_ok, false);
	cuda_ok := coalesce(cuda_ok, false);
	INSERT INTO host_builds AS x (commit_id, host, status, host_hash, cuda_hash, host_ok, cuda_ok, built_at,
		duration_ms, error)
	VALUES (cid, me, st, hh, ch, host_ok, cuda_ok, now(), ms, err)
	ON CONFLICT (commit_id, host) DO UPDATE SET status = EXCLUDED.status, host_hash = EXCLUDED.host_hash,
		cuda_hash = EXCLUDED.cuda_hash, host_ok = EXCLUDED.host_ok, cuda_ok = EXCLUDED.cuda_ok,
		built_at = EXCLUDED.built_at, duration_ms = EXCLUDED.duration_ms, error = EXCLUDED.error;
END
$$;

-- The commit this host should build for itself next ($1 repository, $2 host,
-- $3 it has GPU slots, $4 it has host slots, $5 one of its slots waits for
-- work): the one of the most urgent job it could claim but for its own build
-- (built elsewhere, not here yet). While its slots are busy, only urgent
-- work counts: a bisection's probe (priority below the plan's 100), or a job
-- whose daemon died (its lease ran out; of one priority, first), which this
-- host takes over sooner by building its commit now. A build here that failed is tried again after
-- an hour.
CREATE FUNCTION host_build_next(repo int, me text, has_gpu boolean, has_host boolean, hungry boolean)
	RETURNS TABLE (commit_id bigint, sha text) LANGUAGE sql STABLE AS $$
	SELECT c.id, c.sha FROM jobs j JOIN commits c ON c.id = j.commit_id JOIN builds b ON b.commit_id = c.id
	LEFT JOIN checks k ON k.id = j.check_id
	WHERE c.repo_id = repo AND c.reachable AND b.status = 'ok' AND j.not_before <= now()
	AND j.kind IN ('trials', 'probe', 'sanitize') AND (j.kind <> 'sanitize' OR has_gpu)
	AND (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < now()))
	AND (hungry OR j.priority < 100 OR j.state = 'running')
	AND (k.needs IS NULL OR (k.needs = 'gpu' AND has_gpu) OR (k.needs = 'host' AND has_host))
	AND NOT EXISTS (SELECT 1 FROM host_builds h WHERE h.commit_id = c.id AND h.host = me
		AND (h.status = 'ok' OR h.built_at > now() - interval '1 hour'))
	ORDER BY j.priority, j.state = 'running' DESC, c.position, j.id LIMIT 1
$$;

-- One writer per bisection step, whichever daemon steps it. A step reads the
-- bisection (daemon/bisector.c), decides, and saves its probes and new state
-- in one statement, bisection_save(): under the bisection's row lock, and
-- only if no other step was saved since it read the bisection ('step' counts
-- the saved steps). A step another daemon saved first wins; the late one
-- writes nothing and the bisection is looked at again. So each round's
-- probes, the confirmation and the outcome (hence the culprit mail) happen
-- once.
ALTER TABLE bisections ADD COLUMN step int NOT NULL DEFAULT 0;

-- $1 bisection, $2 the step it read, then the new state, outcome, culprit,
-- confidence, posterior, log entries to append, and the probes to queue
-- ([{commit, seeds, stop, round, purpose, failing}]). Returns whether it saved.
CREATE FUNCTION bisection_save(bid bigint, seen int, new_state text, new_outcome text, culprit bigint,
	conf float8, post jsonb, entries jsonb, new_probes jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	b bisections;
	p jsonb;
	jid bigint;
	seeds bigint[];
BEGIN
	SELECT * INTO b FROM bisections x WHERE x.id = bid AND x.step = seen FOR UPDATE;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	FOR p IN SELECT e FROM jsonb_array_elements(new_probes) e LOOP
		seeds := ARRAY(SELECT s::bigint FROM jsonb_array_elements_text(p -> 'seeds') s);
		INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds, bisection_id, stop_on_failure)
		VALUES ('probe', (p ->> 'commit')::bigint, b.check_id, b.dtype, 10, seeds, bid, (p ->> 'stop')::boolean)
		RETURNING id INTO jid;
		INSERT INTO probes (bisection_id, commit_id, round, purpose, seeds, job_id, failing_seeds)
		VALUES (bid, (p ->> 'commit')::bigint, (p ->> 'round')::int, p ->> 'purpose', seeds, jid,
			(p ->> 'failing')::boolean);
	END LOOP;
	UPDATE bisections x SET step = x.step + 1, state = new_state, outcome = new_outcome, culprit_id = culprit,
		confidence = conf, posterior = post, log = x.log || entries, updated_at = now(),
		finished_at = CASE WHEN new_state = 'done' THEN now() END
		WHERE x.id = bid;
	RETURN true;
END
$$;

-- The baseline's missing seeds are probed once, whichever daemons judge at
-- the same time: under the judge's lock of the check x dtype (judge_record).
CREATE OR REPLACE FUNCTION judge_wait_for_baseline(job bigint, chk int, dt text, base bigint, missing bigint[])
	RETURNS void LANGUAGE sql AS $$
	SELECT pg_advisory_xact_lock(chk, hashtext(dt));
	INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds)
		SELECT 'probe', base, chk, dt, 20, missing WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE kind = 'probe'
		AND commit_id = base AND check_id = chk AND dtype = dt AND bisection_id IS NULL
		AND state IN ('queued', 'running'));
	UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL,
		not_before = now() + interval '5 seconds' WHERE id = job;
$$;

-- Every daemon sharing the database, with its heartbeat (daemon/fleet.c):
-- what it runs (version, the newest migration it knows, its slots) and a
-- digest of the settings every daemon must share for their verdicts to agree
-- (config_shared: the settings themselves, "section.key=value" lines).
CREATE TABLE daemons (
	name           text PRIMARY KEY,
	repo_id        int REFERENCES repositories (id),
	version        text NOT NULL,
	schema_version int NOT NULL,
	config_digest  text NOT NULL,
	config_shared  text NOT NULL DEFAULT '',
	host_slots     int NOT NULL DEFAULT 0,
	gpu_slots      int NOT NULL DEFAULT 0,
	slots          text NOT NULL DEFAULT '',
	url            text NOT NULL DEFAULT '',
	pid            int,
	heartbeat_s    int NOT NULL,
	-- running; draining (SIGTERM); stopped (drained); refused (the schema is newer than it knows:
	-- it writes nothing more)
	state          text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'draining', 'stopped', 'refused')),
	note           text NOT NULL DEFAULT '',
	started_at     timestamptz NOT NULL DEFAULT now(),
	last_seen      timestamptz NOT NULL DEFAULT now()
);

-- A daemon is alive while its heartbeat is at most three beats old.
CREATE FUNCTION daemon_alive(x daemons) RETURNS boolean LANGUAGE sql STABLE AS $$
	SELECT x.state IN ('running', 'draining') AND x.last_seen > now() - 3 * x.heartbeat_s * interval '1 second'
$$;

-- A daemon's heartbeat: its row, upserted. Returns the other live daemons
-- of its repository whose shared settings or schema version differ from its
-- own, and (clash) whether another live daemon wrote its row under the same
-- name since its last beat (node_name must be unique).
CREATE FUNCTION daemon_heartbeat(me text, repo int, ver text, schema_ver int, digest text, shared text,
	n_host int, n_gpu int, slot_names text, link text, proc int, beat int, st text, started float8)
	RETURNS TABLE (name text, version text, schema_version int, config_shared text, clash boolean)
	LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
	old daemons;
BEGIN
	SELECT * INTO old FROM daemons x WHERE x.name = me FOR UPDATE;
	INSERT INTO daemons AS x (name, repo_id, version, schema_version, config_digest, config_shared, host_slots,
		gpu_slots, slots, url, pid, heartbeat_s, state, note, started_at, last_seen)
	VALUES (me, repo, ver, schema_ver, digest, shared, n_host, n_gpu, slot_names, link, proc, beat, st, '',
		to_timestamp(started), now())
	ON CONFLICT ON CONSTRAINT daemons_pkey DO UPDATE SET repo_id = EXCLUDED.repo_id, version = EXCLUDED.version,
		schema_version = EXCLUDED.schema_version, config_digest = EXCLUDED.config_digest,
		config_shared = EXCLUDED.config_shared, host_slots = EXCLUDED.host_slots,
		gpu_slots = EXCLUDED.gpu_slots, slots = EXCLUDED.slots, url = EXCLUDED.url, pid = EXCLUDED.pid,
		heartbeat_s = EXCLUDED.heartbeat_s, state = EXCLUDED.state, note = '',
		started_at = EXCLUDED.started_at, last_seen = now();
	-- Written by another process since this one started, and that one is alive: two daemons, one name.
	IF old.name IS NOT NULL AND daemon_alive(old) AND old.started_at <> to_timestamp(started)
	    AND old.last_seen > to_timestamp(started) THEN
		RETURN QUERY SELECT me, old.version, old.schema_version, old.config_shared, true;
	END IF;
	RETURN QUERY SELECT x.name, x.version, x.schema_version, x.config_shared, false FROM daemons x
		WHERE x.repo_id = repo AND x.name <> me AND daemon_alive(x)
		AND (x.config_digest <> digest OR x.schema_version <> schema_ver) ORDER BY x.name;
END
$$;

-- The daemons of a repository for /api/v1/health and /metrics ($2: the
-- daemon asking): each with whether it is alive, and which live daemons'
-- shared settings or schema version differ from its own.
CREATE FUNCTION fleet_json(repo int, me text) RETURNS json LANGUAGE sql STABLE AS $$
	SELECT coalesce(json_agg(json_build_object('name', x.name, 'self', x.name = me, 'version', x.version,
		'schema_version', x.schema_version, 'config_digest', x.config_digest, 'host_slots', x.host_slots,
		'gpu_slots', x.gpu_slots, 'slots', x.slots, 'url', x.url, 'state', x.state, 'note', x.note,
		'alive', daemon_alive(x), 'started_at', x.started_at, 'last_seen', x.last_seen,
		'seen_s_ago', round(extract(epoch FROM now() - x.last_seen)::numeric, 1),
		'config_differs_from', (SELECT coalesce(json_agg(y.name ORDER BY y.name), '[]') FROM daemons y
			WHERE y.repo_id = x.repo_id AND y.name <> x.name AND daemon_alive(y)
			AND y.config_digest <> x.config_digest),
		'schema_differs_from', (SELECT coalesce(json_agg(y.name ORDER BY y.name), '[]') FROM daemons y
			WHERE y.repo_id = x.repo_id AND y.name <> x.name AND daemon_alive(y)
			AND y.schema_version <> x.schema_version),
		'jobs_running', (SELECT count(*) FROM jobs j WHERE j.owner = x.name AND j.state = 'running'))
		ORDER BY x.name), '[]')
	FROM daemons x WHERE x.repo_id = repo
$$;

-- Claims the next job ($1 the kinds, "build" or "trials,probe"; $2 this
-- daemon; $3 the lease in seconds; $4 the commit whose runner the slot has;
-- $5 repository; $6 the slot is a GPU slot) with FOR UPDATE SKIP LOCKED: a
-- queued job, or one whose lease ran out (its daemon died: taken over, and
-- recorded as such: of one priority, those are claimed first). A trials,
-- probe or sanitize job goes only to a slot
-- whose host built the commit's runner for it (host_builds) and whose kind
-- the check needs. A commit's first build goes to a host with GPU slots
-- while one is alive: only such a host asks the CUDA runner which checks it
-- has (checks.needs).
CREATE FUNCTION job_claim(kinds text, me text, lease int, prefer bigint, repo int, gpu boolean)
	RETURNS TABLE (id bigint, commit_id bigint, check_id int, dtype text, strikes int, sha text, check_name text,
	               deterministic boolean, seeds text, bisection_id bigint, stop_on_failure boolean, tool text,
	               round int)
	LANGUAGE sql AS $$
	WITH next AS (
		SELECT j.id, j.state AS was, j.owner AS was_owner FROM jobs j JOIN commits c ON c.id = j.commit_id
		LEFT JOIN checks k ON k.id = j.check_id
		WHERE j.kind = ANY (string_to_array(kinds, ',')) AND c.repo_id = repo AND c.reachable
		AND j.not_before <= now() AND (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < now()))
		AND CASE WHEN j.kind = 'build' THEN gpu OR NOT EXISTS (SELECT 1 FROM daemons x WHERE x.repo_id = repo
				AND x.gpu_slots > 0 AND x.state = 'running' AND daemon_alive(x))
			ELSE (k.needs IS NULL OR k.needs = CASE WHEN gpu THEN 'gpu' ELSE 'host' END)
				AND EXISTS (SELECT 1 FROM host_builds h WHERE h.commit_id = j.commit_id AND h.host = me
					AND CASE WHEN gpu THEN h.cuda_ok ELSE h.host_ok END) END
		ORDER BY j.priority, j.state = 'running' DESC, (j.commit_id = prefer) DESC, c.position, j.id
		LIMIT 1 FOR UPDATE OF j SKIP LOCKED),
	claimed AS (
		UPDATE jobs SET state = 'running', owner = me, lease_until = now() + lease * interval '1 second',
			claimed_at = now(),
			taken_from = CASE WHEN next.was = 'running' AND next.was_owner <> me THEN next.was_owner
				ELSE jobs.taken_from END,
			taken_over_at = CASE WHEN next.was = 'running' AND next.was_owner <> me THEN now()
				ELSE jobs.taken_over_at END
		FROM next WHERE jobs.id = next.id RETURNING jobs.*)
	SELECT claimed.id, claimed.commit_id, coalesce(claimed.check_id, 0), coalesce(claimed.dtype, ''),
		claimed.strikes, c.sha, coalesce(k.name, ''), coalesce(k.deterministic, true),
		(SELECT array_agg(DISTINCT x ORDER BY x) FROM unnest(claimed.seeds) AS x)::text,
		coalesce(claimed.bisection_id, 0), claimed.stop_on_failure, coalesce(claimed.tool, ''),
		coalesce((SELECT p.round FROM probes p WHERE p.job_id = claimed.id LIMIT 1), -1)
	FROM claimed JOIN commits c ON c.id = claimed.commit_id LEFT JOIN checks k ON k.id = claimed.check_id
$$;
