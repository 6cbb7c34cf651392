-- bench/ingest.sh SCHEMA=075: the trials table as sql/075 left it (before
-- sql/080), for the before-and-after figures on one build: tensors jsonb
-- (pglz), the two foreign keys checked a row, no statement triggers.
DROP TRIGGER trials_parents_insert ON trials;
DROP TRIGGER trials_parents_update ON trials;
DROP TRIGGER trials_commit_kept ON commits;
DROP TRIGGER trials_check_kept ON checks;
ALTER TABLE trials ALTER COLUMN tensors DROP DEFAULT;
ALTER TABLE trials ALTER COLUMN tensors TYPE jsonb USING tensors::jsonb;
ALTER TABLE trials ALTER COLUMN tensors SET DEFAULT '[]';
ALTER TABLE trials ALTER COLUMN tensors SET COMPRESSION pglz;
ALTER TABLE trials ADD CONSTRAINT trials_commit_id_fkey FOREIGN KEY (commit_id) REFERENCES commits (id);
ALTER TABLE trials ADD CONSTRAINT trials_check_id_fkey FOREIGN KEY (check_id) REFERENCES checks (id);
