#!/usr/bin/env bash
# The slots' claims go to the database together (issue 18): one statement, job_claim_batch()
# (sql/070), for every claim that waits while the one before is in flight.
#
# 1. On 300 random queues (commits built or not for a GPU or the host, checks that need either,
#    jobs of every kind, priority and state, leases run out, jobs not before an hour from now)
#    and 1 to 24 requests each (GPU and host slots, with and without sanitizer runs, a build's
#    now and then, each preferring a commit or none), the batch answers exactly what job_claim()
#    answers called once per request, one after the other: the same job for each request and the
#    same jobs' states after (owner, taken over from whom).
# 2. The same on 60 queues of which another session holds a third of the queued jobs locked (as
#    another daemon's claim does): both skip them, and still agree.
# 3. Two daemons of 24 slots each (48 slots on one database; instant runners paced at 2 ms a
#    trial) judge 4 commits of 8 checks and a run by hand of 4 x 4096 seeds in 64 parts: every job
#    ends done, every seed of every plan and of the run has exactly one result (nothing lost,
#    nothing run twice), both daemons ran parts, and each daemon's /metrics says that its slots'
#    claims went several to a statement (at start-up every slot claims at once: one statement
#    goes, the other 23 claims wait for it and go together). Each daemon reads its verdicts on
#    six connections (one per 4 slots).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-claim-batch.XXXXXX")
nw_atexit rm -rf "$work"
pg_start

# The schema in a database of its own, each migration in one transaction (as migrate.c applies them).
pg_psql "CREATE DATABASE eq"
eq_db="$NW_DATABASE dbname=eq"
eq() { NW_DATABASE=$eq_db pg_psql "$@"; }
for f in "$NW_SOURCE_DIR"/sql/[0-9][0-9][0-9]_*.sql; do
	timeout 60 psql -XAtq -v ON_ERROR_STOP=1 -1 -d "$eq_db" -f "$f" >/dev/null || fail "migration $(basename "$f") did not apply"
done
timeout 60 psql -XAtq -v ON_ERROR_STOP=1 -d "$eq_db" -f "$here/claim_batch.sql" >/dev/null || fail "tests/integration/claim_batch.sql did not load"

# report PART: fails with the first differing queues' answers.
report() {
	local summary
	summary=$(eq "SELECT count(*) || ' queues, ' || sum(requests) || ' requests, ' || sum(picked) || ' jobs claimed, '
		|| count(*) FILTER (WHERE NOT same) || ' answered otherwise' FROM nw_outcome WHERE part = '$1'")
	echo "$1: $summary"
	[[ $(eq "SELECT count(*) FROM nw_outcome WHERE part = '$1' AND NOT same") == 0 ]] ||
		fail "$1: job_claim_batch() answered otherwise than job_claim() one request after the other:
$(eq "SELECT 'queue ' || repo || E':\n  batch:      ' || batch || E'\n  one by one: ' || one_by_one
		FROM nw_outcome WHERE part = '$1' AND NOT same ORDER BY repo LIMIT 2")"
	(($(eq "SELECT sum(picked) FROM nw_outcome WHERE part = '$1'") > 0)) || fail "$1: no job claimed: nothing tested"
}

echo "--- 1. the batch answers as job_claim() once per request, one after the other"
eq "DO \$\$
DECLARE
	repo int;
	q record;
	o record;
BEGIN
	PERFORM setseed(0.18);
	FOR s IN 1 .. 300 LOOP
		-- Each queue is rolled back once compared: every one starts from an empty table.
		BEGIN
			INSERT INTO repositories (name, url, branch) VALUES ('r' || s, '/r', 'main') RETURNING id INTO repo;
			PERFORM nw_queue(repo);
			SELECT * INTO q FROM nw_requests(repo);
			SELECT * INTO o FROM nw_compare(repo, q.ks, q.pf, q.gp);
			RAISE EXCEPTION 'rollback';
		EXCEPTION WHEN raise_exception THEN
		END;
		INSERT INTO nw_outcome VALUES ('alone', s, cardinality(q.ks), o.picked, o.same, o.batch, o.one_by_one);
	END LOOP;
END
\$\$"
report alone

echo "--- 2. the same with a third of the queued jobs locked by another session"
eq "DO \$\$
DECLARE
	repo int;
BEGIN
	PERFORM setseed(0.61);
	FOR s IN 1 .. 60 LOOP
		INSERT INTO repositories (name, url, branch) VALUES ('l' || s, '/r', 'main') RETURNING id INTO repo;
		PERFORM nw_queue(repo);
	END LOOP;
END
\$\$"
locked=$(eq "SELECT count(*) FROM jobs WHERE state = 'queued' AND id % 3 = 0")
# The holder keeps its locks until it is killed (its session ends, its transaction rolls back).
PGAPPNAME=nw_test_holder psql -XAtq -d "$eq_db" -c "BEGIN" -c "SELECT count(*) FROM (SELECT id FROM jobs WHERE state = 'queued' AND id % 3 = 0 FOR UPDATE) x" \
	-c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
holder=$!
stop_holder() { kill "$holder" 2>/dev/null || true; }
nw_atexit stop_holder
holds() {
	[[ $(eq "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'nw_test_holder'
		AND query LIKE '%pg_sleep%' AND state = 'active'") == 1 ]]
}
nw_wait 60 "the other session to hold $locked queued jobs locked" holds
eq "DO \$\$
DECLARE
	r record;
	q record;
	o record;
BEGIN
	PERFORM setseed(0.33);
	FOR r IN SELECT id FROM repositories WHERE name LIKE 'l%' ORDER BY id LOOP
		SELECT * INTO q FROM nw_requests(r.id);
		SELECT * INTO o FROM nw_compare(r.id, q.ks, q.pf, q.gp);
		INSERT INTO nw_outcome VALUES ('locked', r.id, cardinality(q.ks), o.picked, o.same, o.batch, o.one_by_one);
	END LOOP;
END
\$\$"
report locked
# Neither claimed a locked job (both rolled back; the locked ones are still queued, and held).
stop_holder
wait "$holder" 2>/dev/null || true

echo "--- 3. two daemons of 24 slots each: a history and a run by hand, every seed once"
repo=$work/repo
git init -q -b main "$repo"
for ((i = 0; i < 4; i++)); do
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
checks=8 per_commit=64 run_checks=4 run_seeds=4096
for d in a b; do
	mkdir -p "$work/$d"
	cat >"$work/$d/nw.conf" <<CONF
[daemon]
state_dir = $work/$d/state
database = $NW_DATABASE
node_name = $d
[repository]
name = batch
url = $repo
poll_interval = 60
[build]
command = cp "$NW_BUILD_DIR/bench/instant-runner" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && echo "\$NUMWATCH_COMMIT" >"\$NUMWATCH_BUILD_DIR/numwatch-identity"
[trials]
per_commit = $per_commit
max = $per_commit
[bisect]
automatic = false
[slots]
slots = host*24
env = NW_INSTANT_CHECKS=$checks NW_INSTANT_US=2000
[http]
port = $(nw_free_port)
CONF
done
nw_fleet_start "$work" a
nw_fleet_start "$work" b
nw_wait 300 "the 4 commits' plans to be judged" nw_all_final
# The judge's reads grow with the slots: 24 slots, one connection per 4, on each of the two daemons.
judges=$(pg_psql "SELECT string_agg(application_name, ',' ORDER BY application_name) FROM pg_stat_activity
	WHERE application_name LIKE 'numwatchd judge%'")
want=$(for i in 0 1 2 3 4 5; do printf 'numwatchd judge%s,numwatchd judge%s,' "$i" "$i"; done)
[[ $judges == "${want%,}" ]] || fail "the judge's connections of two daemons of 24 slots: $judges (expected judge0 to judge5 each)"
sha=$(git -C "$repo" rev-parse HEAD)
port_a=$(sed -n 's/^port = //p' "$work/a/nw.conf")
port_b=$(sed -n 's/^port = //p' "$work/b/nw.conf")
token=$("$NW_BUILD_DIR/daemon/numwatch" token create batch-test --config "$work/a/nw.conf" 2>/dev/null)
for ((k = 0; k < run_checks; k++)); do
	answer=$(curl -sS --max-time 30 -X POST -H "Authorization: Bearer $token" \
		-d "{\"commit\":\"$sha\",\"check\":\"bench.c0$k\",\"dtype\":\"f32\",\"trials\":$run_seeds}" \
		"http://127.0.0.1:$port_a/api/v1/runs")
	[[ $answer == *'"parts":64'* ]] || fail "the run of bench.c0$k was not queued as 64 parts: $answer"
done
all_done() {
	[[ $(pg_psql "SELECT count(*) FROM jobs WHERE state <> 'done'") == 0 ]]
}
nw_wait 600 "every part of the run to be done" all_done
why=$(nw_no_duplicates) || fail "$why"
# The plans: 64 seeds of each check at each commit; the run: seeds 0 to 2047 of 4 checks at the
# newest commit, whose first 64 its plan ran already.
want=$((4 * checks * per_commit + run_checks * (run_seeds - per_commit)))
got=$(pg_psql "SELECT count(*) || ' ' || count(DISTINCT (commit_id, check_id, dtype, seed)) || ' '
	|| count(*) FILTER (WHERE outcome <> 'pass') FROM trials")
[[ $got == "$want $want 0" ]] ||
	fail "the plans and the run do not have one passing result for each of their $want seeds (results, seeds, not passing: $got)"
got=$(pg_psql "SELECT count(DISTINCT (t.check_id, t.seed)) FROM trials t JOIN commits c ON c.id = t.commit_id
	JOIN checks k ON k.id = t.check_id WHERE c.sha = '$sha' AND k.name < 'bench.c0$run_checks' AND t.seed < $run_seeds")
[[ $got == $((run_checks * run_seeds)) ]] || fail "the run's $((run_checks * run_seeds)) seeds: $got have a result"
parts=$(pg_psql "SELECT string_agg(t.host || ' ' || t.n, ', ' ORDER BY t.host) FROM (SELECT x.host, count(*) AS n
	FROM (SELECT DISTINCT ON (j.id) j.id, t.host FROM jobs j JOIN trials t ON t.commit_id = j.commit_id
		AND t.check_id = j.check_id AND t.seed = ANY (j.seeds) WHERE j.kind = 'probe' ORDER BY j.id, t.host) x
	GROUP BY x.host) t")
[[ $parts == *,* ]] || fail "one daemon ran every part of the run ($parts): nothing shared"
echo "ok: 4 x $checks plans and $run_checks x $run_seeds seeds in 64 parts each, every seed once; parts by host: $parts"
for d in a b; do
	port=$(sed -n 's/^port = //p' "$work/$d/nw.conf")
	metrics=$(curl -sS --max-time 10 "http://127.0.0.1:$port/metrics")
	claims=$(awk '$1 == "numwatch_claims_total" {print $2}' <<<"$metrics")
	batches=$(awk '$1 == "numwatch_claim_batches_total" {print $2}' <<<"$metrics")
	[[ -n $claims && -n $batches ]] || fail "$d: no numwatch_claims_total or numwatch_claim_batches_total in /metrics"
	((batches > 0 && claims >= batches + 22)) ||
		fail "$d: $claims claims in $batches statements: the 24 slots' first claims did not go together"
	echo "ok: $d: $claims claims in $batches statements"
done
