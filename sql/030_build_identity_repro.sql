-- What a build is, and how to run one of its trials by hand.
--
-- builds.tree: the commit's tree (git rev-parse HEAD^{tree}), so that commits
-- whose sources differ can be told from commits whose builds merely share a
-- runner identity (builds.runner_hash).
-- builds.repro: the runner's own command line for one trial, from its hello
-- ("repro", with {check}, {dtype}, {seed} and {runs}); NULL when it declares none.
-- builds.runner_host, runner_cuda: the runners' paths inside the build
-- directory as configured when it was built ([build] runner_host, runner_cuda).
ALTER TABLE builds ADD COLUMN tree text;
ALTER TABLE builds ADD COLUMN repro text;
ALTER TABLE builds ADD COLUMN runner_host text;
ALTER TABLE builds ADD COLUMN runner_cuda text;

-- The command that runs one trial with a build's runner: the runner's template
-- filled in, or else the configured runner (a path inside the build directory)
-- with the options every numwatch runner takes. Check and dtype names need no
-- quoting (docs/protocol.md: names).
CREATE FUNCTION repro_command(template text, runner text, check_name text, dtype text, seed bigint,
	runs int) RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN coalesce(template, '') = '' THEN
		'./' || runner || ' --check ' || check_name || ' --dtype ' || dtype || ' --seed ' || seed::text
	ELSE
		replace(replace(replace(replace(template, '{check}', check_name), '{dtype}', dtype),
			'{seed}', seed::text), '{runs}', greatest(runs, 1)::text)
	END
$$;

-- A warning when every build of the repository has one identity although
-- their commits' trees differ (five trees or more): the runner is most likely
-- a wrapper that is byte-identical at every commit, and no bisection can ever
-- blame a commit (a commit whose build equals its parent's is never blamed).
-- NULL when there is nothing to say.
CREATE FUNCTION identity_warning(repo int) RETURNS text LANGUAGE sql STABLE AS $$
	SELECT format('all %s builds share one identity (runner hash %s) although their commits have %s'
		' different trees: no bisection can blame any of them; declare what the runner is built from'
		' with [build] identity globs, or have the build write $NUMWATCH_BUILD_DIR/numwatch-identity'
		' (docs/configuration.md)', count(*), left(min(b.runner_hash), 12), count(DISTINCT b.tree))
	FROM builds b JOIN commits c ON c.id = b.commit_id
	WHERE c.repo_id = repo AND b.status = 'ok' AND b.runner_hash IS NOT NULL
	HAVING count(DISTINCT b.runner_hash) = 1 AND count(DISTINCT b.tree) >= 5
$$;
