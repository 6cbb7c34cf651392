-- The claims of several slots in one statement (issue 18).
--
-- Each slot's claim was one statement of job_claim() on its daemon's one scheduler connection,
-- whose statements run one at a time: with 64 slots whose jobs end every few tens of
-- milliseconds, a claim waited behind the claims of the other slots (with 64 slots of parts of
-- 64 seeds, 61 statements queued before it, 95 ms from its send to its answer) and the slots spent
-- a quarter to a half of their time claiming. The daemon now sends the claims that wait while one
-- batch is in flight as the next batch, and job_claim_batch() answers them.
--
-- It takes the requests in the order they came (request i: kinds[i], prefer[i], gpu[i]) and
-- answers each as job_claim() would have answered it then, one after the other (each request
-- sees the jobs the batch's earlier ones took as running): the same priorities, a job whose
-- daemon died first, then the commit the slot's runner has, position, id; SKIP LOCKED against
-- other daemons. A row's 'req' says which request it answers, in no particular order; a request
-- that no job was left for has no row.
--
-- It does so with one read of the candidates for each kind of request (its kinds, a GPU or a host
-- slot), not one job_claim() each: for every commit this host has built, the first n claimable
-- jobs (n: the batch's size; a batch takes at most n), and of those the n best in job_claim()'s
-- order, plus every one of the commits the requests prefer. The best job left for request i is
-- then among them: the best left overall (at most i - 1 were taken before it) or the best left of
-- its preferred commit, which wins only at the same priority and expiry. Each pick is locked (FOR
-- UPDATE SKIP LOCKED) as job_claim() locks its own; the picks are marked running together. Where
-- another daemon holds or took a candidate (several daemons claiming at once), the candidates may
-- no longer hold the best job, and that request and the later ones of its kind go through
-- job_claim() itself, after the picks so far are marked; so do builds, and a request whose
-- candidates ran out (job_claim() then looks past them). Once a kind of request found nothing,
-- its later requests are not asked again: nothing is queued since, in this statement.

CREATE FUNCTION job_claim_batch(kinds text[], me text, lease int, prefer bigint[], repo int, gpu boolean[])
	RETURNS TABLE (req int, id bigint, commit_id bigint, check_id int, dtype text, strikes int, sha text,
	               check_name text, deterministic boolean, seeds text, bisection_id bigint,
	               stop_on_failure boolean, tool text, round int)
	-- One plan for every batch: the custom plans a LIMIT n and arrays of parameters would get
	-- were made again at every call (1 ms a batch, more than the claims themselves).
	LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
	n int := coalesce(cardinality(kinds), 0);
	prefs bigint[] := ARRAY(SELECT DISTINCT p FROM unnest(prefer) p WHERE p <> 0);
	key text;
	dry text[] := '{}';       -- kinds of request that found nothing
	exact text[] := '{}';     -- kinds of request that go through job_claim() (contended)
	grp text[] := '{}';       -- kinds of request whose candidates are read: grp_lo[g] .. grp_hi[g]
	grp_lo int[] := '{}';
	grp_hi int[] := '{}';
	g int;
	-- the candidates, each kind's in job_claim()'s order less the preference
	c_id bigint[] := '{}';
	c_prio int[] := '{}';
	c_exp boolean[] := '{}';
	c_commit bigint[] := '{}';
	add_id bigint[];
	add_prio int[];
	add_exp boolean[];
	add_commit bigint[];
	taken bigint[] := '{}';   -- jobs the batch took
	-- picks locked, not yet marked running
	p_req int[] := '{}';
	p_id bigint[] := '{}';
	p_was text[] := '{}';
	p_owner text[] := '{}';
	w int;
	was text;
	was_owner text;
	ks text[];
	mine text;
BEGIN
	FOR i IN 1 .. n LOOP
		key := kinds[i] || '/' || gpu[i];
		CONTINUE WHEN key = ANY (dry);
		ks := string_to_array(kinds[i], ',');
		mine := CASE WHEN gpu[i] THEN 'gpu' ELSE 'host' END;
		w := NULL;
		IF NOT ('build' = ANY (ks) OR key = ANY (exact)) THEN
			g := array_position(grp, key);
			IF g IS NULL THEN
				SELECT array_agg(x.id ORDER BY x.priority, x.expired DESC, x.position, x.id),
					array_agg(x.priority ORDER BY x.priority, x.expired DESC, x.position, x.id),
					array_agg(x.expired ORDER BY x.priority, x.expired DESC, x.position, x.id),
					array_agg(x.commit_id ORDER BY x.priority, x.expired DESC, x.position, x.id)
				INTO add_id, add_prio, add_exp, add_commit
				FROM (
					SELECT y.*, row_number() OVER (ORDER BY y.priority, y.expired DESC, y.position, y.id) AS rank
					FROM (
						SELECT j.id, j.priority, true AS expired, j.commit_id, c.position
						FROM jobs j JOIN commits c ON c.id = j.commit_id LEFT JOIN checks k ON k.id = j.check_id
						WHERE j.state = 'running' AND j.lease_until < now() AND j.kind = ANY (ks)
						AND j.not_before <= now() AND c.repo_id = repo AND c.reachable
						AND (k.needs IS NULL OR k.needs = mine)
						AND EXISTS (SELECT 1 FROM host_builds h WHERE h.commit_id = j.commit_id AND h.host = me
							AND CASE WHEN gpu[i] THEN h.cuda_ok ELSE h.host_ok END)
						UNION ALL
						SELECT q.id, q.priority, false, c.id, c.position
						FROM commits c JOIN host_builds h ON h.commit_id = c.id AND h.host = me
							AND CASE WHEN gpu[i] THEN h.cuda_ok ELSE h.host_ok END
						CROSS JOIN LATERAL (SELECT j.id, j.priority FROM jobs j LEFT JOIN checks k ON k.id = j.check_id
							WHERE j.commit_id = c.id AND j.state = 'queued' AND j.kind = ANY (ks)
							AND j.not_before <= now() AND (k.needs IS NULL OR k.needs = mine)
							ORDER BY j.priority, j.id LIMIT n) q
						WHERE c.repo_id = repo AND c.reachable) y) x
				WHERE x.rank <= n OR x.commit_id = ANY (prefs);
				grp := grp || key;
				grp_lo := grp_lo || (cardinality(c_id) + 1);
				c_id := c_id || coalesce(add_id, '{}');
				c_prio := c_prio || coalesce(add_prio, '{}');
				c_exp := c_exp || coalesce(add_exp, '{}');
				c_commit := c_commit || coalesce(add_commit, '{}');
				grp_hi := grp_hi || cardinality(c_id);
				g := cardinality(grp);
			END IF;
			-- The best left: overall, or of the preferred commit at the same priority and expiry.
			FOR k IN grp_lo[g] .. grp_hi[g] LOOP
				IF NOT c_id[k] = ANY (taken) THEN
					w := k;
					EXIT;
				END IF;
			END LOOP;
			IF w IS NOT NULL AND c_commit[w] <> prefer[i] AND prefer[i] = ANY (prefs) THEN
				FOR k IN w + 1 .. grp_hi[g] LOOP
					EXIT WHEN c_prio[k] <> c_prio[w] OR c_exp[k] <> c_exp[w];
					IF c_commit[k] = prefer[i] AND NOT c_id[k] = ANY (taken) THEN
						w := k;
						EXIT;
					END IF;
				END LOOP;
			END IF;
			IF w IS NOT NULL THEN
				SELECT l.was, l.was_owner INTO was, was_owner FROM job_claim_lock(c_id[w]) l;
				IF was IS NOT NULL THEN
					taken := taken || c_id[w];
					p_req := p_req || i;
					p_id := p_id || c_id[w];
					p_was := p_was || was;
					p_owner := p_owner || was_owner;
					CONTINUE;
				END IF;
				-- Another daemon holds it or took it: this kind goes through job_claim() from now on.
				exact := exact || key;
			END IF;
		END IF;
		-- job_claim() itself, once the picks so far are marked running (it sees them as taken).
		IF cardinality(p_id) > 0 THEN
			RETURN QUERY SELECT * FROM job_claim_mark(p_req, p_id, p_was, p_owner, me, lease);
			p_req := '{}';
			p_id := '{}';
			p_was := '{}';
			p_owner := '{}';
		END IF;
		FOR req, id, commit_id, check_id, dtype, strikes, sha, check_name, deterministic, seeds, bisection_id,
			stop_on_failure, tool, round IN SELECT i, c.* FROM job_claim(kinds[i], me, lease, prefer[i], repo, gpu[i]) c
		LOOP
			taken := taken || id;
			RETURN NEXT;
		END LOOP;
		IF NOT FOUND THEN
			dry := dry || key;
		END IF;
	END LOOP;
	IF cardinality(p_id) > 0 THEN
		RETURN QUERY SELECT * FROM job_claim_mark(p_req, p_id, p_was, p_owner, me, lease);
	END IF;
END
$$;

-- Locks a job job_claim_batch() picked, as job_claim() locks its pick: unless another claim holds
-- it, and only while it is still queued or its lease is out; says what it was (NULL: not locked).
-- This and job_claim_mark() find jobs by their primary key only: their plans are made once a
-- session (at its first claim, when the table may have been small) and must not scan the table
-- (a plan that did took 1.4 ms a batch once 4000 jobs were there).
CREATE FUNCTION job_claim_lock(pick bigint, OUT was text, OUT was_owner text)
	LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
BEGIN
	SELECT j.state, j.owner INTO was, was_owner FROM jobs j
	WHERE j.id = pick AND (j.state = 'queued' OR (j.state = 'running' AND j.lease_until < now()))
	FOR UPDATE SKIP LOCKED;
END
$$;

-- The jobs job_claim_batch() picked and locked, marked running (as job_claim() marks its own),
-- each answered with its request's number and job_claim()'s columns.
CREATE FUNCTION job_claim_mark(reqs int[], ids bigint[], was text[], was_owner text[], me text, lease int)
	RETURNS TABLE (req int, id bigint, commit_id bigint, check_id int, dtype text, strikes int, sha text,
	               check_name text, deterministic boolean, seeds text, bisection_id bigint,
	               stop_on_failure boolean, tool text, round int)
	LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
BEGIN
	-- plpgsql, not sql: its statement's plan is kept for the session, not made again at each call.
	RETURN QUERY WITH p AS (SELECT * FROM unnest(reqs, ids, was, was_owner) AS p(req, id, was, was_owner)),
	claimed AS (
		UPDATE jobs SET state = 'running', owner = me, lease_until = now() + lease * interval '1 second',
			claimed_at = now(),
			taken_from = CASE WHEN p.was = 'running' AND p.was_owner <> me THEN p.was_owner ELSE jobs.taken_from END,
			taken_over_at = CASE WHEN p.was = 'running' AND p.was_owner <> me THEN now() ELSE jobs.taken_over_at END
		FROM p WHERE jobs.id = ANY (ids) AND jobs.id = p.id RETURNING p.req AS r, jobs.*)
	SELECT claimed.r, claimed.id, claimed.commit_id, coalesce(claimed.check_id, 0), coalesce(claimed.dtype, ''),
		claimed.strikes, c.sha, coalesce(k.name, ''), coalesce(k.deterministic, true),
		(SELECT array_agg(DISTINCT x ORDER BY x) FROM unnest(claimed.seeds) AS x)::text,
		coalesce(claimed.bisection_id, 0), claimed.stop_on_failure, coalesce(claimed.tool, ''),
		coalesce((SELECT pr.round FROM probes pr WHERE pr.job_id = claimed.id LIMIT 1), -1)
	FROM claimed JOIN commits c ON c.id = claimed.commit_id LEFT JOIN checks k ON k.id = claimed.check_id;
END
$$;
