#!/usr/bin/env bash
# Every caller of the database survives a refusal (issue 14, fault 3): the
# same history runs twice, undisturbed and then with one query or
# transaction in 4 of the scheduler's connection refused as a full queue
# would refuse it (NUMWATCH_DB_REFUSE_EVERY=4, the test setting of db.c). No
# service stalls (the bisector's busy flag used to stay set): the second run
# settles with the same verdicts, regression, bisection and culprit mail as
# the first, and runs no seed twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-refusals.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
nw_mode_history "$repo" 10 6 good failing
pg_start
base=$NW_DATABASE

# run NAME [ENV...]: the history through a fresh database NAME; prints what it concluded.
run() {
	local name=$1
	shift
	pg_psql "CREATE DATABASE $name"
	NW_DATABASE="$base dbname=$name"
	# shellcheck disable=SC2034 # read by daemon.sh's helpers
	NW_PORT=$(nw_free_port)
	mkdir -p "$work/$name"
	nw_mode_conf "$work/$name/nw.conf" refusals "$repo" 16 64 \
		"$(nw_mbox_conf "$work/$name/mbox")\n[daemon]\nlease = 10"
	env "$@" "$NUMWATCHD" --config "$work/$name/nw.conf" >>"$work/$name/daemon.log" 2>&1 &
	# shellcheck disable=SC2034 # read by daemon.sh's helpers
	NW_DAEMON_PID=$! NW_DAEMON_LOG=$work/$name/daemon.log
	nw_wait 900 "the history settled ($name)" nw_settled
	nw_outcome >"$work/$name/outcome"
	dup=$(nw_no_duplicates) || fail "$name: $dup"
	kill -TERM "$NW_DAEMON_PID"
	wait "$NW_DAEMON_PID" || fail "$name: numwatchd exited with status $? after SIGTERM"
	NW_DAEMON_PID=
}

nw_atexit _nw_kill_daemon
run plain
grep -q "^bisection .* culprit@6" "$work/plain/outcome" || fail "the undisturbed run blamed nobody: $(cat "$work/plain/outcome")"
run refused NUMWATCH_DB_REFUSE_EVERY=4
refusals=$(grep -ac "cannot queue\|cannot look for\|cannot load\|cannot give\|cannot record\|cannot finish" \
	"$work/refused/daemon.log" || true)
((refusals > 0)) || fail "no refusal reached a caller"
diff -u "$work/plain/outcome" "$work/refused/outcome" ||
	fail "refused queries changed what the daemon concluded"
echo "PASS: db_refusals ($refusals refusals logged; $(wc -l <"$work/plain/outcome") facts equal)"
