-- What a stored trial row costs the server (issue 18). With rows shaped like a
-- GPU runner's answers (1 to 3 tensors, 250-750 bytes of tensors JSON), a
-- COPY into trials took 17 us of server CPU a row (docs/benchmarks.md, "The
-- store's row"): 5.5 us the two foreign keys (a row trigger each, one SPI
-- query and one FOR KEY SHARE row lock a row), 5 us parsing tensors into
-- jsonb, 2 us the two indexes, 4.5 us the rest. A row is never compressed
-- (TOAST starts near 2 kB), so its compression was not the cost.

-- 1. tensors is kept as the JSON text the daemon writes (json, checked but
-- not parsed into a tree), not as jsonb. The same document, encoded as text:
-- the runner's own key order and number spelling come back, and the column is
-- a third smaller than jsonb's binary form (542 against 844 bytes on
-- average). Readers that need jsonb's functions cast it (mail_culprit.sql).
-- lz4 instead of pglz where a long row (many tensors) is compressed: four to
-- five times cheaper to compress, where the server has it.
ALTER TABLE trials ALTER COLUMN tensors DROP DEFAULT;
ALTER TABLE trials ALTER COLUMN tensors TYPE json USING tensors::json;
ALTER TABLE trials ALTER COLUMN tensors SET DEFAULT '[]';
DO $$
BEGIN
	ALTER TABLE trials ALTER COLUMN tensors SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
	RAISE NOTICE 'this PostgreSQL has no lz4: long tensors stay compressed with pglz';
END
$$;

-- 2. The foreign keys of trials (commit_id, check_id) are checked once a
-- statement instead of once a row: a batch of 2048 rows has one commit and a
-- few checks, each looked up and locked FOR KEY SHARE (what the foreign key's
-- row trigger did for every row) once. A missing one fails the statement with
-- the foreign key's SQLSTATE (23503). Deleting a commit or check that trials
-- name (or changing its id) fails as before; nothing deletes either.
ALTER TABLE trials DROP CONSTRAINT trials_commit_id_fkey;
ALTER TABLE trials DROP CONSTRAINT trials_check_id_fkey;

CREATE FUNCTION trials_parents_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	missing bigint;
BEGIN
	-- The lock, as the foreign key's: a commit or check cannot go while a
	-- transaction that stores trials of it is open (and one that went first
	-- is missing here).
	SELECT n.commit_id INTO missing FROM (SELECT DISTINCT commit_id FROM new_trials) n
	LEFT JOIN LATERAL (SELECT c.id FROM commits c WHERE c.id = n.commit_id FOR KEY SHARE) c ON true
	WHERE c.id IS NULL LIMIT 1;
	IF FOUND THEN
		RAISE foreign_key_violation USING
			MESSAGE = format('insert or update on table "trials" violates its commit_id reference: commit %s does not exist', missing);
	END IF;
	SELECT n.check_id INTO missing FROM (SELECT DISTINCT check_id FROM new_trials) n
	LEFT JOIN LATERAL (SELECT k.id FROM checks k WHERE k.id = n.check_id FOR KEY SHARE) k ON true
	WHERE k.id IS NULL LIMIT 1;
	IF FOUND THEN
		RAISE foreign_key_violation USING
			MESSAGE = format('insert or update on table "trials" violates its check_id reference: check %s does not exist', missing);
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER trials_parents_insert AFTER INSERT ON trials REFERENCING NEW TABLE AS new_trials
	FOR EACH STATEMENT EXECUTE FUNCTION trials_parents_check();
CREATE TRIGGER trials_parents_update AFTER UPDATE ON trials REFERENCING NEW TABLE AS new_trials
	FOR EACH STATEMENT EXECUTE FUNCTION trials_parents_check();

-- A commit or check that trials name stays. An AFTER trigger: it looks once
-- the row is deleted (or locked, for a new id), so trials stored by a
-- transaction that held the row's lock meanwhile are seen.
CREATE FUNCTION trials_parent_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
		RETURN NULL;
	END IF;
	IF TG_TABLE_NAME = 'commits' AND EXISTS (SELECT 1 FROM trials t WHERE t.commit_id = OLD.id) THEN
		RAISE foreign_key_violation USING
			MESSAGE = format('commit %s is still referenced from table "trials"', OLD.id);
	END IF;
	IF TG_TABLE_NAME = 'checks' AND EXISTS (SELECT 1 FROM trials t WHERE t.check_id = OLD.id) THEN
		RAISE foreign_key_violation USING
			MESSAGE = format('check %s is still referenced from table "trials"', OLD.id);
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER trials_commit_kept AFTER DELETE OR UPDATE OF id ON commits
	FOR EACH ROW EXECUTE FUNCTION trials_parent_kept();
CREATE TRIGGER trials_check_kept AFTER DELETE OR UPDATE OF id ON checks
	FOR EACH ROW EXECUTE FUNCTION trials_parent_kept();

-- 3. The staging table of a batch that met stored rows (050) has the new
-- column type; a session's table made before this migration is cast.
CREATE OR REPLACE FUNCTION trial_stage_begin() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	IF to_regclass('pg_temp.trial_stage') IS NULL THEN
		CREATE TEMP TABLE trial_stage (
			commit_id bigint, check_id int, dtype text, seed bigint, attempt smallint,
			outcome text, ratio double precision, family text, shape bigint[], gen int,
			case_digest text, tensors json, digest text, digests_differ int,
			kernel_us double precision, error text, slot text, host text, sanitizer text,
			sanitizer_status text) ON COMMIT DELETE ROWS;
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION trial_stage_insert() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	INSERT INTO trials (commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen,
		case_digest, tensors, digest, digests_differ, kernel_us, error, slot, host, sanitizer,
		sanitizer_status)
	SELECT commit_id, check_id, dtype, seed, attempt, outcome, ratio, family, shape, gen, case_digest,
		tensors::json, digest, digests_differ, kernel_us, error, slot, host, sanitizer, sanitizer_status
	FROM pg_temp.trial_stage
	ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;
