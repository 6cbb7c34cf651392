#!/usr/bin/env bash
# A slot claims its next job while its job runs (issue 18). A run by hand of 4 parts on a daemon
# with 2 slots whose trials take a little time: the daemon holds more jobs than it has slots, and
# renews the lease of a job it holds ahead while it waits (its lease runs on past the first one);
# SIGTERM gives every job back, the held ones too; restarted, it holds jobs ahead again and is
# killed (SIGKILL): a second daemon takes every job it held over once their leases run out, and
# finishes the run. Every part ends done (their ends written together), every seed of the run has
# exactly one result, and nothing ran twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

NUMWATCH=$NW_BUILD_DIR/daemon/numwatch
work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-ahead.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
lease=10 per_commit=8 parts=4 part=64
seeds=$((parts * part))
git init -q -b main "$repo"
echo good >"$repo/mode"
echo 0 >"$repo/version"
# 0.1 s a trial: a part of 64 seeds runs 6.4 s, longer than a third of the lease (a renewal).
echo 0.1 >"$repo/delay"
nw_commit "$repo" 0
pg_start
for d in a b; do
	mkdir -p "$work/$d"
	NW_PORT=$(nw_free_port) nw_mode_conf "$work/$d/nw.conf" ahead "$repo" $per_commit $per_commit \
		"[daemon]\nnode_name = $d\nlease = $lease"
done
port_a=$(sed -n 's/^port = //p' "$work/a/nw.conf")

nw_fleet_start "$work" a
nw_wait 300 "the commit's plan to be judged" nw_all_final
token=$("$NUMWATCH" token create ahead-test --config "$work/a/nw.conf" 2>/dev/null)
sha=$(git -C "$repo" rev-parse HEAD)
answer=$(curl -sS --max-time 30 -X POST -H "Authorization: Bearer $token" \
	-d '{"commit":"'"$sha"'","check":"fake.fwd","dtype":"f32","trials":'$seeds'}' \
	"http://127.0.0.1:$port_a/api/v1/runs")
[[ $(pg_psql "SELECT count(*) FROM jobs WHERE kind = 'probe' AND bisection_id IS NULL") == "$parts" ]] ||
	fail "the run of $seeds seeds was not queued as $parts parts: $answer"

# Jobs a holds that have not started: running, owned by a, no trial of theirs stored since the claim.
held_sql="FROM jobs j WHERE j.owner = 'a' AND j.state = 'running' AND NOT EXISTS (SELECT 1 FROM trials t
	WHERE t.commit_id = j.commit_id AND t.check_id = j.check_id AND t.dtype = j.dtype
	AND t.seed = ANY (j.seeds) AND t.finished_at >= j.claimed_at)"
# More jobs than slots (2), and one held ahead whose lease was renewed while it waited.
holds_ahead_renewed() {
	[[ $(pg_psql "SELECT count(*) > 2 FROM jobs WHERE owner = 'a' AND state = 'running'") == t &&
		$(pg_psql "SELECT count(*) > 0 $held_sql AND j.lease_until > j.claimed_at + interval '$((lease + 1)) s'") == t ]]
}
nw_wait 120 "a to hold a job ahead of its 2 slots, its lease renewed" holds_ahead_renewed
echo "ok: a holds $(pg_psql "SELECT count(*) FROM jobs WHERE owner = 'a' AND state = 'running'") jobs on 2 slots;" \
	"one held ahead renewed to $(pg_psql "SELECT max(round(extract(epoch FROM lease_until - claimed_at))) $held_sql") s"

# SIGTERM: the trials in flight finish, and every job goes back, those held ahead too.
kill -TERM "${NW_FLEET_PID[a]}"
wait "${NW_FLEET_PID[a]}" || fail "numwatchd exited with status $? on SIGTERM"
unset "NW_FLEET_PID[a]"
running=$(pg_psql "SELECT count(*) FROM jobs WHERE state = 'running'")
[[ $running == 0 ]] || fail "$running jobs still running after a drained: the jobs held ahead were not given back"
why=$(nw_no_duplicates) || fail "$why"
left=$(pg_psql "SELECT count(*) FROM jobs WHERE kind = 'probe' AND state = 'queued'")
((left > 0)) || fail "the run ended before SIGTERM: nothing to test"
echo "ok: SIGTERM gave every job back ($left parts queued)"

# Restarted, a holds jobs ahead again; SIGKILL; b takes over every job a held, and finishes.
nw_fleet_start "$work" a
holds_ahead() {
	[[ $(pg_psql "SELECT count(*) > 0 $held_sql") == t ]]
}
nw_wait 120 "a to hold a job ahead again" holds_ahead
nw_fleet_kill a
held=$(pg_psql "SELECT count(*) FROM jobs WHERE owner = 'a' AND state = 'running'")
nw_fleet_start "$work" b
all_done() {
	[[ $(pg_psql "SELECT count(*) FROM jobs WHERE state <> 'done'") == 0 ]]
}
nw_wait 300 "b to finish the run" all_done
taken=$(pg_psql "SELECT count(*) FROM jobs WHERE taken_from = 'a' AND kind = 'probe'")
((taken >= held)) || fail "a held $held jobs when it was killed; b took over $taken"
why=$(nw_no_duplicates) || fail "$why"
got=$(pg_psql "SELECT count(*) || ' ' || count(DISTINCT seed) || ' ' || count(*) FILTER (WHERE outcome <> 'pass')
	FROM trials t JOIN checks k ON k.id = t.check_id WHERE k.name = 'fake.fwd' AND t.dtype = 'f32'")
[[ $got == "$seeds $seeds 0" ]] ||
	fail "the run's $seeds seeds do not have one passing result each (trials, seeds, not passing: $got)"
echo "ok: killed holding $held jobs, b took $taken over and finished: $seeds seeds, one result each"
