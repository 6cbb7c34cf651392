-- numwatch schema, version 1. Applied in one transaction by numwatchd at
-- start-up (or `numwatchd --migrate`) and recorded in schema_migrations.

CREATE TABLE repositories (
	id         serial PRIMARY KEY,
	name       text NOT NULL UNIQUE,
	url        text NOT NULL,
	branch     text NOT NULL,
	polled_at  timestamptz,
	poll_error text
);

-- One row per commit ever seen on the watched branch. 'position' orders the
-- first-parent history (0 = oldest imported); a force-push that drops a commit
-- clears 'reachable' but keeps its results.
CREATE TABLE commits (
	id           bigserial PRIMARY KEY,
	repo_id      int NOT NULL REFERENCES repositories (id),
	sha          text NOT NULL CHECK (sha ~ '^[0-9a-f]{40}$'),
	parent_sha   text,
	position     int NOT NULL,
	reachable    boolean NOT NULL DEFAULT true,
	author       text NOT NULL,
	email        text NOT NULL,
	title        text NOT NULL,
	committed_at timestamptz NOT NULL,
	found_at     timestamptz NOT NULL DEFAULT now(),
	UNIQUE (repo_id, sha)
);
CREATE INDEX commits_by_position ON commits (repo_id, position DESC) WHERE reachable;

CREATE TABLE builds (
	commit_id   bigint PRIMARY KEY REFERENCES commits (id),
	status      text NOT NULL CHECK (status IN ('ok', 'failed', 'timeout', 'no_runner')),
	log         text NOT NULL DEFAULT '',
	runner_hash text,
	started_at  timestamptz NOT NULL,
	duration_ms int NOT NULL,
	host        text NOT NULL
);

-- The suite's checks, as the runners declare them in their hello.
CREATE TABLE checks (
	id            serial PRIMARY KEY,
	repo_id       int NOT NULL REFERENCES repositories (id),
	name          text NOT NULL,
	op            text NOT NULL,
	pass          text NOT NULL,
	dtypes        text[] NOT NULL,
	families      text[] NOT NULL,
	deterministic boolean NOT NULL,
	UNIQUE (repo_id, name)
);

-- Every trial the daemon sent, with its outcome (PROTOCOL.md: a trial never
-- disappears). 'attempt' numbers the runs of one seed on one commit: 0 is the
-- plan's run, later ones are reruns or retries after an infrastructure fault.
-- The unique key is what makes a restart after kill -9 duplicate nothing.
CREATE TABLE trials (
	id             bigserial PRIMARY KEY,
	commit_id      bigint NOT NULL REFERENCES commits (id),
	check_id       int NOT NULL REFERENCES checks (id),
	dtype          text NOT NULL,
	seed           bigint NOT NULL,
	attempt        smallint NOT NULL,
	outcome        text NOT NULL CHECK (outcome IN ('pass', 'fail', 'crash', 'timeout', 'error', 'infra_error')),
	ratio          double precision,
	family         text,
	shape          bigint[],
	gen            int,
	tensors        jsonb NOT NULL DEFAULT '[]',
	digest         text,
	digests_differ int NOT NULL DEFAULT 0,
	kernel_us      double precision,
	error          text,
	slot           text NOT NULL,
	host           text NOT NULL,
	finished_at    timestamptz NOT NULL DEFAULT now(),
	UNIQUE (commit_id, check_id, dtype, seed, attempt)
);

-- Per commit x check x dtype: the verdict and the figures it rests on.
CREATE TABLE stats (
	commit_id     bigint NOT NULL REFERENCES commits (id),
	check_id      int NOT NULL REFERENCES checks (id),
	dtype         text NOT NULL,
	trials        int NOT NULL,
	failures      int NOT NULL,
	infra_errors  int NOT NULL,
	worst_ratio   double precision,
	verdict       text NOT NULL CHECK (verdict IN ('pending', 'clean', 'regressed', 'improved', 'flaky',
	                                               'build_failed', 'infra_error')),
	failing_seeds bigint[] NOT NULL DEFAULT '{}',
	evidence      jsonb NOT NULL DEFAULT '{}',
	updated_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (commit_id, check_id, dtype)
);

-- Work to do, shared by every daemon using this database. A daemon claims a
-- job with FOR UPDATE SKIP LOCKED and holds it under a lease; a job whose lease
-- expired (its host died) is claimed again by anyone.
CREATE TABLE jobs (
	id          bigserial PRIMARY KEY,
	kind        text NOT NULL CHECK (kind IN ('build', 'trials')),
	commit_id   bigint NOT NULL REFERENCES commits (id),
	check_id    int REFERENCES checks (id),
	dtype       text,
	priority    int NOT NULL DEFAULT 100,
	state       text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed')),
	strikes     int NOT NULL DEFAULT 0,
	owner       text,
	lease_until timestamptz,
	not_before  timestamptz NOT NULL DEFAULT now(),
	created_at  timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz,
	error       text
);
CREATE UNIQUE INDEX jobs_one_per_target ON jobs (kind, commit_id, coalesce(check_id, 0), coalesce(dtype, ''));
CREATE INDEX jobs_claimable ON jobs (kind, priority, id) WHERE state IN ('queued', 'running');

-- The verdict of a whole commit, from its build and its per-check verdicts:
-- a failed build first, then a regression (known early, wanted by CI at once),
-- then anything still running.
CREATE FUNCTION commit_verdict(cid bigint) RETURNS text LANGUAGE sql STABLE AS $$
	SELECT CASE
		WHEN b.status IS NULL THEN 'pending'
		WHEN b.status <> 'ok' THEN 'build_failed'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'regressed') THEN 'regressed'
		WHEN EXISTS (SELECT 1 FROM jobs j WHERE j.commit_id = cid AND j.kind = 'trials'
		             AND j.state IN ('queued', 'running'))
		  OR NOT EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid)
		  OR EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'pending') THEN 'pending'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'infra_error') THEN 'infra_error'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'flaky') THEN 'flaky'
		WHEN EXISTS (SELECT 1 FROM stats s WHERE s.commit_id = cid AND s.verdict = 'improved') THEN 'improved'
		ELSE 'clean'
	END
	FROM (SELECT cid AS id) x LEFT JOIN builds b ON b.commit_id = x.id
$$;
