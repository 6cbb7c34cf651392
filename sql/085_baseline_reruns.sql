-- A baseline probe confirms its failures (issue: a verdict left pending in a
-- fleet). A deterministic check's paired verdict needs a seed that fails at
-- the candidate confirmed at the baseline too (failed twice there, or failed
-- then passed): a seed the baseline ran once and failed is no answer. The
-- probe the judge queues at the baseline (judge_wait_for_baseline) ran each
-- seed once, as a bisection's probe does, so such a seed stayed unconfirmed,
-- and the candidate's verdict was stored pending with nothing left to run.
-- Its probe now reruns the seeds that fail there, as a plan does (reruns),
-- and is asked for the seeds the baseline ran once and failed as well.
ALTER TABLE jobs ADD COLUMN reruns boolean NOT NULL DEFAULT false;

-- The plan a trials job grew to (adaptive trials), NULL while it has not
-- grown: a job looked at again (its baseline changed) or taken over keeps its
-- extra seeds. It was read from the highest seed stored at the commit, which
-- counted a bisection's fresh seeds there as the plan's: a commit probed by a
-- bisection before it was judged again grew its plan by the probe's seeds,
-- and so was judged on other seeds than where the bisection came later.
ALTER TABLE jobs ADD COLUMN planned int;

CREATE OR REPLACE FUNCTION judge_wait_for_baseline(job bigint, chk int, dt text, base bigint, missing bigint[])
	RETURNS void LANGUAGE sql AS $$
	SELECT pg_advisory_xact_lock(chk, hashtext(dt));
	INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds, reruns)
		SELECT 'probe', base, chk, dt, 20, missing, true WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE kind = 'probe'
		AND commit_id = base AND check_id = chk AND dtype = dt AND bisection_id IS NULL
		AND state IN ('queued', 'running'));
	UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL,
		not_before = now() + interval '5 seconds' WHERE id = job;
$$;
