#!/usr/bin/env bash
# Requests ahead (issue 18): a runner that declares "pipeline": 2 has the next seed's request in
# its pipe while it runs the current one. One history, judged twice on fresh databases: by the
# fake runner as a version-1 runner (one request at a time: it exits loudly, leaving
# 'pipeline-violation', if it ever finds a request waiting while it has one to answer), and
# declaring a pipeline of 2 (the same check: never more than two outstanding). Its commits: good,
# a crash at seed 5, deterministic failures, a fatal error answer at seed 5, a hang at seed 5 (a
# timeout), good. With the pipeline, seed 0's runner waits until seed 1's request is in its pipe
# (the daemon sends ahead), and seed 5's until seed 6's is (two in flight when it fails). Both runs
# must store the same trials (seed, attempt, outcome at each commit) and reach the same verdicts;
# with the pipeline, at each failure seed 5's trial is recorded as ever, and seed 6, whose request
# the failed runner had read, has one trial, run on a later runner: nothing lost, nothing twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-pipeline.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
modes=(good crashonce failing fatalonce hangonce good)
git init -q -b main "$repo"
for i in "${!modes[@]}"; do
	echo "${modes[$i]}" >"$repo/mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
per_commit=16

settled() {
	nw_all_final && [[ $(pg_psql "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')") == 0 ]]
}
# Every stored trial, in a fixed order: what both runs must agree on.
trials() {
	pg_psql "SELECT c.position || ' ' || t.seed || ' ' || t.attempt || ' ' || t.outcome
		FROM trials t JOIN commits c ON c.id = t.commit_id ORDER BY c.position, t.seed, t.attempt"
}
# Builds by position: the fake runner's files are in their build directories.
build_dir() {
	echo "$work/state/builds/$(git -C "$repo" rev-list --reverse HEAD | sed -n "$(($1 + 1))p")"
}
violations() {
	cat "$work"/state/builds/*/pipeline-violation 2>/dev/null || true
}

run() { # run NAME: judges the history on a fresh database and state directory
	pg_psql "DROP SCHEMA public CASCADE; CREATE SCHEMA public" >/dev/null 2>&1
	rm -rf "$work/state"
	nw_mode_conf "$work/nw.conf" pipeline "$repo" $per_commit $per_commit \
		"[trials]\ntimeout = 3\n[bisect]\nautomatic = false"
	nw_daemon_start "$work/nw.conf" "$work/daemon-$1.log"
	nw_wait 600 "every commit judged ($1)" settled
	nw_api /metrics >"$work/metrics-$1"
	_nw_kill_daemon || true # (wait reports the SIGKILL)
	NW_DAEMON_PID=
	trials >"$work/trials-$1"
	nw_outcome >"$work/outcome-$1"
	why=$(nw_no_duplicates) || fail "$1: $why"
	v=$(violations)
	[[ -z $v ]] || fail "$1: the runner found more requests outstanding than its hello declared: $v"
}

# 1. A version-1 runner: one request at a time.
unset NW_FAKE_PIPELINE NW_FAKE_HOLD
run plain
[[ ! -e $(build_dir 0)/held && ! -e $(build_dir 0)/requests ]] || fail "the plain runner declared a pipeline"
grep -q '^numwatch_slot_ahead_seconds_total 0.000$' "$work/metrics-plain" ||
	fail "a request was sent ahead to a runner without a pipeline: $(grep ahead "$work/metrics-plain")"
echo "ok: a runner without a pipeline never had a second request outstanding ($(wc -l <"$work/trials-plain") trials)"

# 2. The same history with a pipeline of 2.
export NW_FAKE_PIPELINE=2 NW_FAKE_HOLD=0,5
run pipelined
for i in "${!modes[@]}"; do
	held=$(cat "$(build_dir "$i")/held" 2>/dev/null || true)
	[[ $held == *"0 ahead 1"* ]] || fail "commit $i: seed 1's request was not sent while seed 0 ran (held: '$held')"
done
echo "ok: seed 1's request was in the runner's pipe while seed 0 ran, at every commit"

diff -u "$work/trials-plain" "$work/trials-pipelined" >&2 ||
	fail "the pipelined run stored other trials than the plain one (diff above)"
diff -u "$work/outcome-plain" "$work/outcome-pipelined" >&2 ||
	fail "the pipelined run reached other verdicts than the plain one (diff above)"
echo "ok: the same $(wc -l <"$work/trials-plain") trials and the same verdicts with and without the pipeline:"
sed 's/^/  /' "$work/outcome-pipelined" | grep -E '^  (verdict|commit)' | head -n 12

# 3. Each failure with seed 6's request behind seed 5's.
expect=([1]=crash [3]=crash [4]=timeout)
for i in 1 3 4; do
	dir=$(build_dir "$i")
	grep -qx '5 ahead 6' "$dir/held" ||
		fail "commit $i: seed 6's request was not behind seed 5's when it failed: $(cat "$dir/held")"
	got=$(pg_psql "SELECT string_agg(t.attempt || ':' || t.outcome, ' ' ORDER BY t.attempt) FROM trials t
		JOIN commits c ON c.id = t.commit_id WHERE c.position = $i AND t.seed = 5")
	[[ $got == "0:${expect[$i]} 1:pass" ]] || fail "commit $i: seed 5's trials are '$got', expected '0:${expect[$i]} 1:pass'"
	got=$(pg_psql "SELECT string_agg(t.attempt || ':' || t.outcome, ' ') FROM trials t
		JOIN commits c ON c.id = t.commit_id WHERE c.position = $i AND t.seed = 6")
	[[ $got == "0:pass" ]] || fail "commit $i: seed 6's trials are '$got', expected one, '0:pass'"
	# The runner that failed had seed 6's request in its pipe; one later runner read and ran it.
	# (The one that failed may have read it too before it was stopped: a runner that answers a
	# fatal error goes on reading, and on a loaded machine it gets there first. Its answer, if
	# any, is not stored: seed 6 has one trial, above.)
	failed_pid=$(awk '$2 == 5 { print $1; exit }' "$dir/requests")
	readers=$(awk '$2 == 6 { print $1 }' "$dir/requests" | tr '\n' ' ')
	others=$(awk -v failed="$failed_pid" '$2 == 6 && $1 != failed { print $1 }' "$dir/requests" | tr '\n' ' ')
	[[ $(wc -w <<<"$others") == 1 ]] ||
		fail "commit $i: seed 6's request was read by '$readers'; expected one runner other than $failed_pid, which failed"
	echo "ok: commit $i (${modes[$i]}): seed 5 stored as ${expect[$i]} with seed 6's request behind it; seed 6 ran once, on runner ${others% }"
done
resent=$(sed -n 's/^numwatch_trials_resent_total //p' "$work/metrics-pipelined")
[[ $resent == 3 ]] || fail "numwatch_trials_resent_total is '$resent', expected 3 (one a failure)"
echo "ok: /metrics counts 3 requests sent again"

# 4. A runner that declares a pipeline but throws away the request waiting behind its trial (one
# that reads a line per read()): its answer to the next request is not the head's, recorded as
# the runner's fault (infra_error, a strike), never as a failure of the commit, and that commit's
# runners get one request at a time from then on: the same verdicts, the same trials but that one.
export NW_FAKE_DROP_AHEAD=1
unset NW_FAKE_HOLD
run dropping
for i in "${!modes[@]}"; do
	[[ $(cat "$(build_dir "$i")/dropped" 2>/dev/null) == 1 ]] ||
		fail "commit $i: the runner did not drop a request sent ahead: '$(cat "$(build_dir "$i")/dropped" 2>/dev/null)'"
done
infra=$(pg_psql "SELECT count(*) FROM trials WHERE outcome = 'infra_error'")
[[ $infra == "${#modes[@]}" ]] || fail "expected one infra_error trial a commit, got $infra"
grep -q "did not answer the first request sent ahead; this commit's runners get one request at a time" \
	"$work/daemon-dropping.log" || fail "no log line for the runner that drops requests sent ahead"
diff -u "$work/outcome-plain" "$work/outcome-dropping" >&2 ||
	fail "with a runner that drops requests sent ahead, other verdicts than the plain run's (diff above)"
# Seed, outcome at each commit, the runner's infra_error rows aside (they shift a seed's attempts).
seeds() { awk '$4 != "infra_error" { print $1, $2, $4 }' "$1"; }
diff -u <(seeds "$work/trials-plain") <(seeds "$work/trials-dropping") >&2 ||
	fail "with a runner that drops requests sent ahead, other trials than the plain run's (diff above)"
echo "ok: a runner that drops what waits in its pipe: one infra_error a commit, then one request at a time; the same verdicts and trials"
