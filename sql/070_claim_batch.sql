-- The claims of several slots in one statement (issue 18).
--
-- Each slot's claim was one statement of job_claim() on its daemon's one scheduler connection,
-- whose statements run one at a time: with 32 to 64 slots whose jobs end every few tens of
-- milliseconds, a claim waited behind the claims of the other slots (with 64 slots of parts of
-- 64 seeds, about 60 statements queued before it, 95 ms from its send to its answer) and the
-- slots spent a quarter to a third of their time claiming. The daemon now sends the claims that
-- wait while one batch is in flight as the next batch: job_claim_batch() takes them in the order
-- they came (request i: kinds[i], prefer[i], gpu[i]) and answers each as job_claim() would have
-- answered it then, one after the other (each claim sees the jobs the batch's earlier claims
-- took as running): the same priorities, the same job whose daemon died first, the same commit
-- the slot's runner has, the same SKIP LOCKED against other daemons. 'req' says which request a
-- row answers; a request that no job was left for has no row. Once a request of some kinds for a
-- GPU or a host slot found nothing, the later ones of the same kinds and slot in the batch are
-- not asked again (nothing was queued since, in this statement).

CREATE FUNCTION job_claim_batch(kinds text[], me text, lease int, prefer bigint[], repo int, gpu boolean[])
	RETURNS TABLE (req int, id bigint, commit_id bigint, check_id int, dtype text, strikes int, sha text,
	               check_name text, deterministic boolean, seeds text, bisection_id bigint,
	               stop_on_failure boolean, tool text, round int)
	LANGUAGE plpgsql AS $$
DECLARE
	dry text[] := '{}'; -- the kinds and slot kind ('trials,probe/t') whose claim found nothing
BEGIN
	FOR i IN 1 .. coalesce(cardinality(kinds), 0) LOOP
		CONTINUE WHEN kinds[i] || '/' || gpu[i] = ANY (dry);
		RETURN QUERY SELECT i, c.* FROM job_claim(kinds[i], me, lease, prefer[i], repo, gpu[i]) c;
		IF NOT FOUND THEN
			dry := dry || (kinds[i] || '/' || gpu[i]);
		END IF;
	END LOOP;
END
$$;
