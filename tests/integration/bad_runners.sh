#!/usr/bin/env bash
# Bad runners a real library will have (issue 14), through the real daemon, a
# private PostgreSQL and a real git repository: each misbehaviour of
# tests/integration/fake-runner's bad modes is one commit, and the test checks
# what the daemon recorded for it (trials rows and their reasons, the log, the
# verdict), that the runner was restarted where it had to be and not where it
# need not, that the slot went on (the commit's other seeds, the next commits)
# and that nothing waited past its deadline. docs/protocol.md ("What the daemon
# does with a misbehaving runner") is the table this test checks.
#
# Phase 1: a history of one commit per misbehaviour. Phase 2: a runner that
# ignores SIGTERM and floods stderr: killed at its deadline, the next runner
# started only once it is gone, and nothing of it left once the daemon has
# stopped on SIGTERM.
#
# Every case is checked and reported; the test fails at the end if any failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
start=$SECONDS
work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-badrunners.XXXXXX")
nw_atexit rm -rf "$work"
failed=()

# check DESC CMD...: runs CMD; records DESC as failed (and goes on) when it fails.
check() {
	local desc=$1
	shift
	if "$@"; then
		echo "ok: $desc"
	else
		echo "FAIL: $desc" >&2
		failed+=("$desc")
	fi
}

# Processes this test leaves must not outlive it: the children forkpipe leaves in their own session.
_kill_left() {
	local f pids
	for f in "$work"/state/builds/*/forkpipe.pids; do
		[[ -f $f ]] || continue
		read -ra pids <"$f"
		kill -9 "${pids[@]}" 2>/dev/null || true
	done
	return 0
}
nw_atexit _kill_left

modes=(good stray ids bigline forkpipe flood hellobad1 hellobad2 exit0 partial nonutf8 nochecks good nan good patient)
git init -q -b main "$work/repo"
commit_mode() { # INDEX MODE
	echo "$2" >"$work/repo/mode"
	echo "$1" >"$work/repo/version"
	git -C "$work/repo" add mode version
	git -C "$work/repo" -c user.name="Dev $1" -c user.email="dev$1@example.com" commit -qm "runner $1 $2"
}
for i in "${!modes[@]}"; do commit_mode "$i" "${modes[$i]}"; done

pg_start
NW_PORT=$(nw_free_port)
# The trial deadline: long beside what a fake trial takes on a loaded machine, and beside the 1 s the
# daemon gives pipes held open after a runner's exit (forkpipe must end before it, not at it).
TRIAL_S=5
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = badrunners
url = $work/repo
poll_interval = 1
[build]
command = r="\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp "$NW_FAKE_RUNNER" "\$r" && printf '# version %s\\n' "\$(cat version)" >>"\$r" && cp mode "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = 8
timeout = $TRIAL_S
hello_timeout = 20
[slots]
slots = host*2
[http]
port = $NW_PORT
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"

q() { pg_psql "$1"; }
cid() { q "SELECT id FROM commits WHERE title = 'runner $1'"; } # "INDEX MODE"
at() {                                                         # MODE: "INDEX MODE" of its first commit
	local i
	for i in "${!modes[@]}"; do [[ ${modes[$i]} == "$1" ]] && echo "$i $1" && return; done
}
verdict() { q "SELECT commit_verdict($(cid "$1"))"; }
outcomes() { # of the commit's plan, seeds 0 to 7 (a bisection may add others)
	q "SELECT coalesce(string_agg(outcome || '=' || n, ',' ORDER BY outcome), '-') FROM (SELECT outcome, count(*) AS n
		FROM trials WHERE commit_id = $(cid "$1") AND seed < 8 GROUP BY 1) x"
}
errors() { q "SELECT string_agg(seed || '/' || attempt || ' ' || outcome || ': ' || coalesce(error, '(none)'), E'\n' ORDER BY seed, attempt)
	FROM trials WHERE commit_id = $(cid "$1") AND (error IS NOT NULL OR outcome <> 'pass')"; }
# Runner pids that answered the commit's trials (the fake runner's tensor field 'pid').
pids() { q "SELECT count(DISTINCT tensors->0->>'pid') FROM trials WHERE commit_id = $(cid "$1") AND tensors::jsonb->0 ? 'pid'"; }
bdir() { echo "$work/state/builds/$(q "SELECT sha FROM commits WHERE id = $(cid "$1")")"; }
gone() { ! kill -0 "$1" 2>/dev/null; }
vmhwm() { awk '/^VmHWM/ { print $2 }' "/proc/$NW_DAEMON_PID/status"; }
# What a case recorded, shown with its checks.
show() { echo "--- $1: verdict $(verdict "$1"), trials $(outcomes "$1")"; errors "$1" | head -c 4000; }

# Every commit judged, or built with nothing to judge it on (a build whose runners declare no checks
# must fail instead: checked below, and waiting for it would wait for ever where it does not).
judged() {
	[[ $(q "SELECT count(*) FILTER (WHERE commit_verdict(c.id) <> 'pending' OR (EXISTS (SELECT 1 FROM builds b
		WHERE b.commit_id = c.id) AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.commit_id = c.id AND j.kind = 'trials'))) FROM commits c") \
		== "${#modes[@]}" ]]
}
nw_wait 900 "every commit judged" judged
echo "phase 1 judged in $((SECONDS - start)) s"

m="$(at good)"
check "a good runner: clean" [ "$(verdict "$m")" == clean ]

m="$(at stray)"
show "$m"
check "stray stdout lines (a banner before hello, debug lines around answers): the build took its hello" \
	[ "$(q "SELECT status FROM builds WHERE commit_id = $(cid "$m")")" == ok ]
check "stray stdout lines: no trial lost, all pass, clean" \
	[ "$(outcomes "$m")" == pass=8 -a "$(verdict "$m")" == clean ]
check "stray stdout lines: the runner was not restarted (one pid answered all)" [ "$(pids "$m")" == 1 ]
check "stray stdout lines: the log says so, once per runner, quoting the line" \
	grep -q "the runner wrote a line to stdout that is not protocol; left out .*: '\(mylib 1.0 loaded (debug build)\|debug: seed [0-9]\)'" "$work/daemon.log"
rc=0
"$NW_BUILD_DIR/daemon/numwatch" repro --commit "$(q "SELECT sha FROM commits WHERE id = $(cid "$m")")" --check fake.fwd \
	--dtype f32 --seed 3 --config "$work/nw.conf" >"$work/repro.out" 2>"$work/repro.err" || rc=$?
check "stray stdout lines: numwatch repro passes the seed, and shows the lines on stderr" \
	[ "$rc" == 0 -a "$(grep -c '"verdict": "pass"' "$work/repro.out")" == 1 -a "$(grep -c '^debug: seed 3$' "$work/repro.err")" == 1 ]

m="$(at ids)"
show "$m"
check "answers with a stale and a wrong id: each an infra_error saying so, seeds run again, clean" \
	[ "$(outcomes "$m")" == infra_error=2,pass=8 -a "$(verdict "$m")" == clean ]
check "answers with a stale and a wrong id: the reasons" \
	[ "$(errors "$m" | grep -c "infra_error: protocol_error: id [0-9]* does not match request [0-9]*: '{\"op\": \"trial\"")" == 2 ]
check "answers with a stale and a wrong id: the runner restarted" [ "$(pids "$m")" -ge 2 ]

m="$(at bigline)"
show "$m"
check "a 2 MiB answer line: infra_error saying so, the seed run again, clean" \
	[ "$(outcomes "$m")" == infra_error=1,pass=8 -a "$(verdict "$m")" == clean ]
check "a 2 MiB answer line: the reason" \
	grep -q "^2/0 infra_error: protocol_error: a line longer than 1048576 bytes$" <<<"$(errors "$m")"
check "a 2 MiB answer line: the runner restarted" [ "$(pids "$m")" -ge 2 ]

m="$(at forkpipe)"
show "$m"
read -r kid_group kid_session <"$(bdir "$m")/forkpipe.pids"
check "a runner exiting with children holding its pipe: infra_error (status 0), not a timeout, clean" \
	[ "$(outcomes "$m")" == infra_error=1,pass=8 -a "$(verdict "$m")" == clean ]
check "a runner exiting with children holding its pipe: the reason" \
	grep -q "^3/0 infra_error: runner exited with status 0 without answering" <<<"$(errors "$m")"
check "a runner exiting with children holding its pipe: the child in its process group is killed" gone "$kid_group"
echo "note: the child that left the group (setsid, pid $kid_session) is beyond the group kill"

m="$(at flood)"
show "$m"
check "2 GiB on stderr before hello: hello taken, all pass, clean" \
	[ "$(outcomes "$m")" == pass=8 -a "$(verdict "$m")" == clean ]
hwm=$(vmhwm)
echo "daemon peak resident memory after the flood and the 2 MiB line: $((hwm / 1024)) MiB"
check "2 GiB on stderr, a 2 MiB line: the daemon's peak memory stays under 128 MiB ($((hwm / 1024)) MiB)" \
	[ "$hwm" -lt $((128 * 1024)) ]

m="$(at hellobad1)"
show "$m"
check "a hello refused with an error, then half a hello line: two infra_error, then clean" \
	[ "$(outcomes "$m")" == infra_error=2,pass=8 -a "$(verdict "$m")" == clean ]
check "a hello refused with an error: the runner's reason" \
	grep -q "infra_error: protocol_error: runner refused hello: 'no usable device'" <<<"$(errors "$m")"
check "half a hello line: not json" \
	grep -q "infra_error: protocol_error: not json: .*: '{\"op\":\"hello\",\"protocol\":1,'" <<<"$(errors "$m")"

m="$(at hellobad2)"
show "$m"
check "a hello with no checks, then a print and no hello: two infra_error, then clean" \
	[ "$(outcomes "$m")" == infra_error=2,pass=8 -a "$(verdict "$m")" == clean ]
check "a hello with no checks: the reason" \
	grep -q "infra_error: the runner's hello does not declare check 'fake.fwd' at dtype 'f32' (it declares 0 checks)" <<<"$(errors "$m")"
check "a print and no hello: a hello timeout that quotes the line" \
	grep -q "infra_error: protocol_error: no hello within 20 s, only 1 line on stdout that is not protocol .*: 'loading kernels...'" <<<"$(errors "$m")"

m="$(at exit0)"
show "$m"
check "a runner exiting 0 mid-run: infra_error, not a crash; the seed run again, clean" \
	[ "$(outcomes "$m")" == infra_error=1,pass=8 -a "$(verdict "$m")" == clean ]
check "a runner exiting 0 mid-run: the reason, with its stderr" \
	grep -q "^4/0 infra_error: runner exited with status 0 without answering (a runner exits only after bye); stderr: exit0: leaving mid-run" <<<"$(errors "$m")"

m="$(at partial)"
show "$m"
check "half an answer, then a hang: infra_error at the deadline, not a timeout; clean" \
	[ "$(outcomes "$m")" == infra_error=1,pass=8 -a "$(verdict "$m")" == clean ]
check "half an answer, then a hang: the reason quotes it" \
	grep -q "^4/0 infra_error: protocol_error: no complete answer within $TRIAL_S s, only [0-9]* bytes of a line without its newline .*: '{\"op\":\"trial\",\"id\":[0-9]*,\"verdict\":\"pa'" <<<"$(errors "$m")"
check "half an answer, then a hang: that runner is gone" gone "$(cat "$(bdir "$m")/partial.pid")"

m="$(at nonutf8)"
show "$m"
check "bytes that are not UTF-8 on stdout and stderr: two infra_error, then clean" \
	[ "$(outcomes "$m")" == infra_error=2,pass=8 -a "$(verdict "$m")" == clean ]
check "an answer that is not UTF-8: a protocol error, the bytes replaced" \
	grep -q "^2/0 infra_error: protocol_error: not json: .*'{\"op\":\"trial\".*\"name\":\"y?\"" <<<"$(errors "$m")"
e6=$(q "SELECT coalesce(error, '(none)') FROM trials WHERE commit_id = $(cid "$m") AND seed = 6 AND attempt = 0")
e6_kept() { [[ $e6 == "runner exited with status 0 without answering"*"; stderr: ?é"*$'x\n??raw\nexiting: é ü' ]]; }
check "stderr that is not UTF-8, cut inside a character: the reason is stored, its text kept where it is text" e6_kept
check "the daemon's log stays valid UTF-8" iconv -f UTF-8 -t UTF-8 "$work/daemon.log" -o /dev/null

m="$(at nochecks)"
check "runners that declare no checks: the build fails and says why" \
	[ "$(verdict "$m")" == build_failed ]
check "runners that declare no checks: the build log" \
	grep -q "declares no checks" <<<"$(q "SELECT log FROM builds WHERE commit_id = $(cid "$m")")"
check "the good commit after it: clean" [ "$(verdict "12 good")" == clean ]

m="$(at nan)"
show "$m"
check "NaN and Infinity from json.dumps: the trials with such a ratio fail, the others pass; regressed" \
	[ "$(outcomes "$m")" == fail=4,pass=6 -a "$(verdict "$m")" == regressed ]
check "a ratio of NaN: the reason" \
	[ "$(errors "$m" | grep -c "^3/[01] fail: 'ratio' was NaN: a trial whose ratio is not finite fails")" == 2 ]
check "a passing verdict with a ratio of Infinity: failed, and why" \
	[ "$(errors "$m" | grep -c "^5/[01] fail: 'ratio' was Infinity: ")" == 2 ]
check "NaN elsewhere (kernel_us) and Infinity (max_rel): no value, the trial passes" \
	[ "$(q "SELECT outcome || ' ' || coalesce(kernel_us::text, 'null') || ' ' || coalesce(tensors->0->>'max_rel', 'null')
		FROM trials WHERE commit_id = $(cid "$m") AND seed = 1")" == "pass null null" ]
check "the commit after it: judged" [ "$(verdict "14 good")" != pending ]
m="$(at patient)"
show "$m"
# The slot's deadline timer is not restarted at every trial (issue 18): each trial still has its own.
check "three answers 2 s late in a row (6 s, each within the 5 s deadline): no timeout, one runner, clean" \
	[ "$(outcomes "$m")" == pass=8 -a "$(pids "$m")" == 1 -a "$(verdict "$m")" == clean ]
check "no trial of phase 1 is a crash or a timeout" \
	[ "$(q "SELECT count(*) FROM trials WHERE outcome IN ('crash', 'timeout')")" == 0 ]

# ---- Phase 2: a runner that ignores SIGTERM, and floods stderr instead of answering seed 4.
commit_mode 16 stubborn
modes+=(stubborn)
m="16 stubborn"
nw_wait 300 "the stubborn commit judged" judged
show "$m"
sdir=$(bdir "$m")
check "a runner ignoring SIGTERM and flooding stderr: a timeout at its deadline" \
	grep -q "^4/0 timeout: no answer within $TRIAL_S s$" <<<"$(errors "$m")"
check "a runner ignoring SIGTERM: killed (SIGKILL after the grace)" gone "$(cat "$sdir/stubborn.pid")"
check "a runner ignoring SIGTERM: the next runner started only once it was gone" \
	[ ! -e "$sdir/overlap" ]
[[ ! -e $sdir/overlap ]] || cat "$sdir/overlap"
hwm=$(vmhwm)
check "flooding stderr until killed: the daemon's peak memory stays under 128 MiB ($((hwm / 1024)) MiB)" \
	[ "$hwm" -lt $((128 * 1024)) ]
runners() { # the stubborn commit's runner processes still there
	local pid
	while read -r pid; do
		grep -qs numwatch-runner-host "/proc/$pid/cmdline" && ! grep -qs '^[^)]*) Z' "/proc/$pid/stat" && echo "$pid"
	done <"$sdir/pids"
	return 0
}
echo "runners of the stubborn commit alive before SIGTERM: $(runners | xargs)"
kill -TERM "$NW_DAEMON_PID"
stopped() { ! kill -0 "$NW_DAEMON_PID" 2>/dev/null; }
end=$((SECONDS + 90))
until stopped || ((SECONDS > end)); do sleep 0.5; done
if stopped; then
	rc=0
	wait "$NW_DAEMON_PID" || rc=$?
	NW_DAEMON_PID=
	check "SIGTERM: the daemon drained and exited 0" [ "$rc" == 0 ]
	check "SIGTERM: no runner ignoring SIGTERM outlives the daemon" [ -z "$(runners)" ]
else
	check "SIGTERM: the daemon exited within 90 s" false
fi
for pid in $(runners); do kill -9 "$pid"; done

echo "bad_runners: $((SECONDS - start)) s"
if ((${#failed[@]})); then
	printf 'failed: %s\n' "${failed[@]}" >&2
	fail "${#failed[@]} case(s) failed"
fi
echo "ok: bad_runners done"
