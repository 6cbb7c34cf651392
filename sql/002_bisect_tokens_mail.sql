-- Bisection queue and probes, API tokens, muted checks, and pending mail.

-- A probe is a job too: seeds to run at one commit for a bisection. A job
-- with no seed list runs the commit's plan (seeds 0..per_commit-1, reruns of
-- failures); one with a list runs those seeds once each, reusing any result
-- already stored for a seed at that commit.
ALTER TABLE jobs DROP CONSTRAINT jobs_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_check CHECK (kind IN ('build', 'trials', 'probe'));
ALTER TABLE jobs ADD COLUMN seeds bigint[];
ALTER TABLE jobs ADD COLUMN bisection_id bigint;
DROP INDEX jobs_one_per_target;
CREATE UNIQUE INDEX jobs_one_per_target ON jobs (kind, commit_id, coalesce(check_id, 0), coalesce(dtype, ''))
	WHERE kind <> 'probe';

CREATE TABLE bisections (
	id             bigserial PRIMARY KEY,
	repo_id        int NOT NULL REFERENCES repositories (id),
	check_id       int NOT NULL REFERENCES checks (id),
	dtype          text NOT NULL,
	good_commit_id bigint NOT NULL REFERENCES commits (id),
	bad_commit_id  bigint NOT NULL REFERENCES commits (id),
	state          text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'confirming', 'done')),
	outcome        text CHECK (outcome IN ('culprit', 'no_culprit', 'withdrawn', 'error')),
	culprit_id     bigint REFERENCES commits (id),
	confidence     double precision,
	failing_seeds  bigint[] NOT NULL DEFAULT '{}',
	posterior      jsonb NOT NULL DEFAULT '{}',
	log            jsonb NOT NULL DEFAULT '[]',
	requested_by   text NOT NULL DEFAULT 'auto',
	created_at     timestamptz NOT NULL DEFAULT now(),
	updated_at     timestamptz NOT NULL DEFAULT now(),
	finished_at    timestamptz
);
-- One automatic bisection per regression (its last clean commit and check x dtype).
CREATE UNIQUE INDEX bisections_one_auto ON bisections (check_id, dtype, good_commit_id)
	WHERE requested_by = 'auto';
ALTER TABLE jobs ADD CONSTRAINT jobs_bisection_fk FOREIGN KEY (bisection_id) REFERENCES bisections (id);

-- Every probe result of a bisection; the posterior is replayed from these,
-- so a restarted daemon resumes where it stood.
CREATE TABLE probes (
	id           bigserial PRIMARY KEY,
	bisection_id bigint NOT NULL REFERENCES bisections (id),
	commit_id    bigint NOT NULL REFERENCES commits (id),
	round        int NOT NULL,
	purpose      text NOT NULL DEFAULT 'search' CHECK (purpose IN ('search', 'confirm')),
	seeds        bigint[] NOT NULL,
	job_id       bigint REFERENCES jobs (id),
	trials       int,
	failures     int,
	created_at   timestamptz NOT NULL DEFAULT now(),
	finished_at  timestamptz
);
CREATE INDEX probes_by_bisection ON probes (bisection_id, round);

-- API tokens for writes: only a SHA-256 of the secret is stored.
CREATE TABLE tokens (
	id         serial PRIMARY KEY,
	name       text NOT NULL,
	hash       bytea NOT NULL UNIQUE,
	created_at timestamptz NOT NULL DEFAULT now(),
	last_used  timestamptz,
	revoked_at timestamptz
);

-- A muted check x dtype raises no bisection and no mail until the date.
CREATE TABLE mutes (
	check_id   int NOT NULL REFERENCES checks (id),
	dtype      text NOT NULL DEFAULT '*',
	until      timestamptz NOT NULL,
	reason     text NOT NULL DEFAULT '',
	created_by text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (check_id, dtype)
);

-- Mail waiting to be sent (or sent): never lost, never sent twice. 'thread'
-- groups a culprit's messages (first message's Message-ID is the thread root).
CREATE TABLE mail (
	id          bigserial PRIMARY KEY,
	kind        text NOT NULL CHECK (kind IN ('culprit', 'withdrawn', 'fixed')),
	bisection_id bigint NOT NULL REFERENCES bisections (id),
	message_id  text NOT NULL UNIQUE,
	thread_root text NOT NULL,
	recipients  text[] NOT NULL,
	subject     text NOT NULL,
	body        text NOT NULL,
	state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
	attempts    int NOT NULL DEFAULT 0,
	next_try    timestamptz NOT NULL DEFAULT now(),
	last_error  text,
	created_at  timestamptz NOT NULL DEFAULT now(),
	sent_at     timestamptz,
	UNIQUE (bisection_id, kind)
);
