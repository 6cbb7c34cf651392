-- Probes that stop at their first failure (a bisection's search probes), and
-- whether a probe reran the seeds that failed at the bad commit.
ALTER TABLE jobs ADD COLUMN stop_on_failure boolean NOT NULL DEFAULT false;
ALTER TABLE probes ADD COLUMN failing_seeds boolean NOT NULL DEFAULT false;
