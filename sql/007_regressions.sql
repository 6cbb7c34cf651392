-- Regressions as tracked events (PRODUCT.md "Regressions are events, not
-- colours"), case identity, and the judging of verdicts in SQL functions.

-- The inputs a runner generated for a seed (PROTOCOL.md: case.digest). A
-- seed is paired across commits only while its case is the same.
ALTER TABLE trials ADD COLUMN case_digest text;

-- A regression: one check x dtype getting worse at one point of the history,
-- from the commit where it was first seen until the commit that fixes it.
-- Later commits that still show it point at it; they are not new ones.
--   open -> bisecting -> culprit | no_culprit, then fixed (at fixed_commit_id)
--   check_changed: the failures came with inputs the check did not have
--                  before (case digests changed); nobody is blamed
--   withdrawn: the verdict that raised it was judged again and is gone
CREATE TABLE regressions (
	id              bigserial PRIMARY KEY,
	repo_id         int NOT NULL REFERENCES repositories (id),
	check_id        int NOT NULL REFERENCES checks (id),
	dtype           text NOT NULL,
	state           text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'bisecting', 'culprit', 'no_culprit',
	                                                               'check_changed', 'fixed', 'withdrawn')),
	first_commit_id bigint NOT NULL REFERENCES commits (id), -- first judged to show it
	good_commit_id  bigint REFERENCES commits (id),          -- the state just before: its baseline
	culprit_id      bigint REFERENCES commits (id),
	fixed_commit_id bigint REFERENCES commits (id),
	bisection_id    bigint REFERENCES bisections (id),
	-- {trials, failures} before (the pooled rate it was judged against) and at first_commit.
	rate_before     jsonb NOT NULL DEFAULT '{}',
	rate_after      jsonb NOT NULL DEFAULT '{}',
	changed_seeds   int NOT NULL DEFAULT 0,
	created_at      timestamptz NOT NULL DEFAULT now(),
	updated_at      timestamptz NOT NULL DEFAULT now(),
	closed_at       timestamptz
);
CREATE INDEX regressions_by_check ON regressions (check_id, dtype, state);
CREATE INDEX regressions_by_repo ON regressions (repo_id, id DESC);

ALTER TABLE stats DROP CONSTRAINT stats_verdict_check;
ALTER TABLE stats ADD CONSTRAINT stats_verdict_check CHECK (verdict IN ('pending', 'clean', 'regressed',
	'improved', 'flaky', 'build_failed', 'infra_error', 'check_changed'));
-- The regression this commit shows (regressed), fixes (improved) or raised
-- (check_changed); regression_new: it is new at this commit.
ALTER TABLE stats ADD COLUMN regression_id bigint REFERENCES regressions (id);
ALTER TABLE stats ADD COLUMN regression_new boolean NOT NULL DEFAULT false;
-- The commit this verdict was judged against (NULL: none, the start of the check's history).
ALTER TABLE stats ADD COLUMN baseline_id bigint REFERENCES commits (id);
ALTER TABLE stats ADD COLUMN changed_seeds int NOT NULL DEFAULT 0;
CREATE INDEX stats_by_check ON stats (check_id, dtype, commit_id);

-- An automatic bisection belongs to one regression; one at a time.
ALTER TABLE bisections ADD COLUMN regression_id bigint REFERENCES regressions (id);
DROP INDEX bisections_one_auto;
CREATE UNIQUE INDEX bisections_one_per_regression ON bisections (regression_id) WHERE regression_id IS NOT NULL;

-- Culprit mail is per culprit commit: the regressions it caused share one thread.
ALTER TABLE mail ADD COLUMN culprit_id bigint REFERENCES commits (id);
CREATE UNIQUE INDEX mail_one_per_culprit ON mail (culprit_id) WHERE kind = 'culprit' AND state <> 'failed';
