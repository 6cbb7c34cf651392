-- Trials run under NVIDIA compute-sanitizer on a schedule: a 'sanitize' job
-- runs a commit's seeds under one tool on a GPU slot; each trial records the
-- tool and what it found (a report fails the trial; a refusal is 'skipped').
ALTER TABLE jobs DROP CONSTRAINT jobs_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_check CHECK (kind IN ('build', 'trials', 'probe', 'sanitize'));
ALTER TABLE jobs ADD COLUMN tool text;
DROP INDEX jobs_one_per_target;
CREATE UNIQUE INDEX jobs_one_per_target ON jobs (kind, commit_id, coalesce(check_id, 0), coalesce(dtype, ''),
	coalesce(tool, '')) WHERE kind <> 'probe';
ALTER TABLE trials ADD COLUMN sanitizer text;
ALTER TABLE trials ADD COLUMN sanitizer_status text CHECK (sanitizer_status IN ('clean', 'report', 'skipped'));
