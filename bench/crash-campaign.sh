#!/usr/bin/env bash
# bench/crash-campaign.sh [--kills N] [--restarts M] [--commits C] [--build DIR] [--seed S]
# (issue 14): an operator's bad day, then the checks. A history of C commits
# (default 40, two checks; a deterministic failure of both planted at two
# thirds of it, so there are trials, regressions, their bisections and a
# culprit mail) runs twice on
# one private PostgreSQL: undisturbed, then while numwatchd is SIGKILLed N
# times (default 50) and PostgreSQL restarted M times (default 5, fast and
# immediate in turn), at random moments (bash's RANDOM, seeded with S: the
# same S replays the same schedule) spread over the run: the gaps between
# events average the undisturbed run's duration over the number of events. After each kill the
# daemon is started again; every event waits for the daemon to answer first.
# Then the checks:
#   - no trial stored before a kill is lost or changed at the end
#   - no seed ran twice, no probe of a bisection repeated another's seeds
#   - nothing stuck: the run settles (every commit judged, no job queued or
#     running, no bisection running, no mail pending)
#   - no bisection restarted from scratch (one per regression)
#   - no orphan: within 30 s of each kill no process of the killed daemon is
#     left (runners, builds), nor any after the last stop
#   - verdicts, regressions, bisections and mails equal to the undisturbed run
# Prints one line per event and a summary; exit status 0 when every check
# holds. The short version runs in ctest (tests/integration/crash_campaign.sh);
# docs/benchmarks.md records a long one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kills=50 restarts=5 commits=40 build=$root/build seed=$$
while (($#)); do
	case $1 in
	--kills) kills=$2 ;;
	--restarts) restarts=$2 ;;
	--commits) commits=$2 ;;
	--build) build=$2 ;;
	--seed) seed=$2 ;;
	*)
		sed -n '2,4s/^# \{0,1\}//p' "$0" >&2
		exit 2
		;;
	esac
	shift 2
done
export NW_BUILD_DIR=$build NW_SOURCE_DIR=$root
[[ -x $NW_BUILD_DIR/daemon/numwatchd ]] || {
	echo "crash-campaign.sh: no numwatchd in '$NW_BUILD_DIR'" >&2
	exit 2
}
. "$root/tests/lib/pg.sh"
. "$root/tests/lib/daemon.sh"
RANDOM=$seed
echo "crash campaign: $kills kills, $restarts PostgreSQL restarts, $commits commits, seed $seed"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-crash.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
culprit=$((commits * 2 / 3))
git init -q -b main "$repo"
# Trials take a little time (0.1 s), so that kills land in the middle of jobs; a second check
# (fake.x1) doubles the work, and the culprit breaks both.
echo 0.1 >"$repo/delay"
echo fake.x1 >"$repo/extra_checks"
for ((i = 0; i < commits; i++)); do
	if ((i >= culprit)); then echo failing; else echo good; fi >"$repo/mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
base=$NW_DATABASE
nw_atexit _nw_kill_daemon

# start NAME: numwatchd on database NAME (NW_DATABASE, NW_PORT set by use).
start() {
	"$NUMWATCHD" --config "$work/$1/nw.conf" >>"$work/$1/daemon.log" 2>&1 &
	NW_DAEMON_PID=$!
	NW_DAEMON_LOG=$work/$1/daemon.log
}
setup() {
	pg_psql "CREATE DATABASE $1"
	NW_DATABASE="$base dbname=$1"
	NW_PORT=$(nw_free_port)
	mkdir -p "$work/$1"
	nw_mode_conf "$work/$1/nw.conf" crash "$repo" 32 128 "$(nw_mbox_conf "$work/$1/mbox")\n[daemon]\nlease = 10"
}
answers() { curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$NW_PORT/api/v1/health"; }
# Processes of a daemon on STATE: runners and builds (by command line or working directory).
procs_of() {
	local p
	for p in /proc/[0-9]*; do
		[[ ${p#/proc/} != "$$" ]] || continue
		if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF "$1/" ||
			[[ $(readlink "$p/cwd" 2>/dev/null) == "$1"/* ]]; then
			echo "${p#/proc/} $(tr '\0' ' ' 2>/dev/null <"$p/cmdline" | cut -c1-120)"
		fi
	done
}
# Waits up to 30 s for the killed or stopped daemon's processes to be gone; fails with those left.
wait_orphans() {
	local end=$((SECONDS + 30)) left
	while left=$(procs_of "$work/campaign/state") && [[ -n $left ]]; do
		((SECONDS < end)) || fail "processes of the daemon left 30 s after $1: $left"
		sleep 0.5
	done
}
snapshot() {
	pg_psql "COPY (SELECT commit_id, check_id, dtype, seed, attempt, outcome, ratio, digest, error
		FROM trials) TO STDOUT" | LC_ALL=C sort >"$1"
}
phase() {
	pg_psql "SELECT concat_ws('+',
		CASE WHEN EXISTS (SELECT 1 FROM jobs WHERE kind = 'build' AND state = 'running') THEN 'build' END,
		CASE WHEN EXISTS (SELECT 1 FROM jobs WHERE kind = 'trials' AND state = 'running') THEN 'trials' END,
		CASE WHEN EXISTS (SELECT 1 FROM bisections WHERE state <> 'done') THEN 'bisection' END,
		CASE WHEN EXISTS (SELECT 1 FROM mail WHERE state = 'pending') THEN 'mail' END)"
}

echo "--- undisturbed run"
setup plain
start plain
t0=$SECONDS
nw_wait 3600 "the undisturbed run settled" nw_settled
nw_outcome >"$work/plain.outcome"
plain_s=$((SECONDS - t0))
kill -TERM "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" || true
echo "undisturbed: settled in ${plain_s}s; $(grep -c '^verdict' "$work/plain.outcome") verdicts, $(grep '^bisection' "$work/plain.outcome" | tr '\n' ' ')"

echo "--- campaign run"
setup campaign
start campaign
t0=$SECONDS
# The events, restarts spread among the kills.
events=()
for ((i = 0; i < kills + restarts; i++)); do events+=(kill); done
for ((i = 0; i < restarts; i++)); do
	mode=fast
	((i % 2 == 0)) || mode=immediate
	events[(i + 1) * (kills + restarts) / (restarts + 1)]=$mode
done
gap_ms=$((plain_s * 1000 / (kills + restarts)))
declare -A during=()
n=0 nkill=0 nrestart=0
for ev in "${events[@]}"; do
	n=$((n + 1))
	nw_wait 120 "the daemon answering before event $n" answers
	# A quarter to 1.75 times the mean gap (at least 0.5 s) into the daemon's life (or the server's).
	ms=$((gap_ms / 4 + RANDOM % (gap_ms * 3 / 2 + 1)))
	((ms >= 500)) || ms=500
	sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
	ph=$(phase || echo "?")
	ph=${ph:-idle}
	during[$ph]=$((${during[$ph]:-0} + 1))
	if [[ $ev == kill ]]; then
		nkill=$((nkill + 1))
		snapshot "$work/snap.$nkill" || fail "cannot read the trials before kill $nkill"
		kill -KILL "$NW_DAEMON_PID"
		wait "$NW_DAEMON_PID" 2>/dev/null || true
		NW_DAEMON_PID=
		wait_orphans "kill $nkill"
		echo "event $n: kill $nkill during $ph ($(wc -l <"$work/snap.$nkill") trials stored)"
		start campaign
	else
		nrestart=$((nrestart + 1))
		pg_restart "$ev" || fail "pg_ctl restart -m $ev failed"
		echo "event $n: PostgreSQL restart ($ev) during $ph"
	fi
done
nw_wait 3600 "the campaign run settled" nw_settled
campaign_s=$((SECONDS - t0))
nw_outcome >"$work/campaign.outcome"
snapshot "$work/final"
kill -TERM "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" || fail "numwatchd exited with status $? after SIGTERM"
NW_DAEMON_PID=

echo "--- checks"
lost=0
for ((i = 1; i <= nkill; i++)); do
	lost=$((lost + $(LC_ALL=C comm -23 "$work/snap.$i" "$work/final" | wc -l)))
done
((lost == 0)) || fail "$lost trials stored before a kill were lost or changed"
echo "ok: no stored trial lost or changed ($nkill snapshots, $(wc -l <"$work/final") trials at the end)"
dup=$(nw_no_duplicates) || fail "$dup"
echo "ok: no seed ran twice, no probe repeated"
echo "ok: nothing stuck (settled ${campaign_s}s after the start, undisturbed ${plain_s}s)"
again=$(pg_psql "SELECT count(*) FROM (SELECT regression_id FROM bisections GROUP BY 1 HAVING count(*) > 1) x")
((again == 0)) || fail "$again regressions were bisected more than once"
echo "ok: one bisection per regression"
wait_orphans "the last stop"
echo "ok: no orphan process"
diff -u "$work/plain.outcome" "$work/campaign.outcome" || fail "the campaign changed what the daemon concluded"
echo "ok: $(wc -l <"$work/plain.outcome") facts equal to the undisturbed run"
if grep -aq "AddressSanitizer\|runtime error:" "$work/campaign/daemon.log"; then
	fail "sanitizer report in the daemon log"
fi
summary=""
for ph in "${!during[@]}"; do summary+=" $ph:${during[$ph]}"; done
echo "PASS: $nkill kills, $nrestart PostgreSQL restarts; events during:$summary"
