#!/usr/bin/env bash
# Children die with the daemon (issue 14, fault 5). A runner that leaves an
# orphaned child of its own and a build that runs commands in the background
# are running when numwatchd is SIGKILLed:
#   1. its reaper kills every child's whole process group: nothing of it is
#      left (within a deadline);
#   2. with the reaper SIGKILLed too, the runner and the build die of their
#      death signal (PR_SET_PDEATHSIG), and the daemon started next kills
#      what they left (the groups recorded in state_dir/procs, whose records
#      of earlier daemons, free ones too, it removes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-orphans.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
git init -q -b main "$work/repo"
echo good >"$work/repo/mode"
nw_commit "$work/repo" 0
NW_PORT=$(nw_free_port)
# The runner is a wrapper that leaves a child of its own (re-parented away from it, in its group),
# then becomes the fake runner, whose trials take a while. A commit with a file 'slow' builds for
# ever, with a command in the background.
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = orphans
url = $work/repo
poll_interval = 1
[build]
command = if test -e slow; then sleep 1000 </dev/null >/dev/null 2>&1 & sleep 1001 </dev/null >/dev/null 2>&1; fi; r="\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && printf '#!/bin/sh\n(sleep 1002 </dev/null >/dev/null 2>&1 &)\nexec python3 %s\n' "$NW_FAKE_RUNNER" >"\$r" && chmod +x "\$r" && cp mode "\$NUMWATCH_BUILD_DIR/" && echo 0.2 >"\$NUMWATCH_BUILD_DIR/delay"
[trials]
per_commit = 2000
max = 2000
[slots]
slots = host
[http]
port = $NW_PORT
CONF

# procs: "pid pgid ppid comm" of each live process whose working directory is in the state directory.
procs() {
	local p cwd stat rest state ppid pgrp
	for p in /proc/[0-9]*; do
		cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
		[[ $cwd == "$work/state/"* ]] || continue
		stat=$(cat "$p/stat" 2>/dev/null) || continue
		rest=${stat##*) }
		read -r state ppid pgrp _ <<<"$rest"
		[[ $state != Z ]] || continue
		echo "${p#/proc/} $pgrp $ppid $(cat "$p/comm" 2>/dev/null)"
	done
}
# Running: the runner (python3) and its orphaned sleep, the slow build's shell and its two sleeps.
busy() {
	local list
	list=$(procs)
	grep -q ' python3$' <<<"$list" && [[ $(grep -c ' sleep$' <<<"$list") -ge 3 ]]
}
alive() { kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
none_alive() {
	local pid
	for pid in "$@"; do
		! alive "$pid" || return 1
	done
}
# A failed run must not leave its processes behind either (registered before the daemon's SIGKILL,
# so run after it).
kill_left() {
	local pid
	for pid in $(procs | awk '{print $1}'); do
		kill -9 "$pid" 2>/dev/null || true
	done
}
nw_atexit kill_left
slow_commit() {
	touch "$work/repo/slow"
	nw_commit "$work/repo" 1
}

nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 120 "the runner running trials" bash -c "ps -o comm= --ppid $NW_DAEMON_PID | grep -qx python3"
slow_commit
nw_wait 120 "the runner, its orphaned child and the slow build running" busy
before=$(procs)
printf 'running before the SIGKILL (pid pgid ppid name):\n%s\n' "$before"
mapfile -t pids < <(awk '{print $1}' <<<"$before")

# 1. SIGKILL: the reaper kills every group: nothing is left.
kill -9 "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" 2>/dev/null || true
NW_DAEMON_PID=
end=$((SECONDS + 30))
until none_alive "${pids[@]}" && [[ -z $(procs) ]]; do
	((SECONDS < end)) || fail "30 s after SIGKILL of numwatchd, its children are still running:
$(procs)"
	sleep 0.2
done
echo "ok: SIGKILL of numwatchd: its ${#pids[@]} runner and build processes were gone within $((SECONDS - end + 30)) s"

# 2. The daemon and its reaper SIGKILLed at once.
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 120 "the runner, its orphaned child and the slow build running again" busy
reaper=$(pgrep -P "$NW_DAEMON_PID" -x numwatchd-reap) || fail "no reaper process (numwatchd-reap) under numwatchd"
before=$(procs)
mapfile -t direct < <(awk -v d="$NW_DAEMON_PID" '$3 == d {print $1}' <<<"$before")
mapfile -t left < <(awk -v d="$NW_DAEMON_PID" '$3 != d {print $1}' <<<"$before")
((${#direct[@]} >= 2)) || fail "expected the runner and the build as the daemon's children: $before"
((${#left[@]} >= 3)) || fail "expected the orphaned sleeps of the runner and the build: $before"
# The reaper is stopped first: SIGKILLed together, a loaded machine can run the reaper between the
# two signals, and it would do its job before its own SIGKILL arrives.
kill -STOP "$reaper"
kill -9 "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" 2>/dev/null || true
NW_DAEMON_PID=
kill -9 "$reaper"
nw_wait 30 "the runner and the build dying with numwatchd (death signal)" none_alive "${direct[@]}"
echo "ok: without the reaper, the runner and the build died with numwatchd (PR_SET_PDEATHSIG)"
none_alive "${left[@]}" && fail "the children's own children died without the reaper: nothing left to check"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 60 "the next numwatchd killing what the previous one left" none_alive "${left[@]}"
grep -q "that a previous numwatchd left running" "$work/daemon.log" || fail "no log line for the processes killed at start-up"
echo "ok: the next numwatchd killed the ${#left[@]} processes left: $(grep -o 'killed [0-9]* processes in [0-9]* process groups' "$work/daemon.log" | tail -1)"
# The records are files each daemon reuses (DAEMONPID-N, a child's group written into a free one):
# the start-up removed every record of the daemons before, the free ones too, and what is there now
# is this daemon's.
for f in "$work/state/procs"/*; do
	[[ -e $f ]] || continue
	[[ $(basename "$f") == "$NW_DAEMON_PID-"* ]] || fail "a record of an earlier numwatchd was left in state/procs: $(basename "$f"): $(cat "$f")"
done
echo "ok: state/procs holds only this numwatchd's records: $(ls "$work/state/procs" | tr '\n' ' ')"
