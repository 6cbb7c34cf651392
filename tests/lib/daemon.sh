# shellcheck shell=bash
# Helpers for integration tests that run the real numwatchd. Source after pg.sh.
#
#   nw_free_port                 prints a free TCP port on 127.0.0.1
#   nw_daemon_start CONF LOG     starts numwatchd in the background (NW_DAEMON_PID);
#                                it is SIGKILLed when the test exits
#   nw_wait TIMEOUT DESC CMD...  runs CMD every 0.5 s until it succeeds; fails the
#                                test with DESC after TIMEOUT seconds
#   nw_api PATH                  GET http://127.0.0.1:$NW_PORT$PATH (body on stdout)
#   fail MSG                     prints MSG and the daemon log tail, exits 1
#   nw_commit REPO N             commits all of REPO as "change N" by "Dev N"
#   nw_mode_history REPO N CULPRIT BEFORE AFTER
#                                a repo of N commits for the fake runner: its 'mode'
#                                is BEFORE below position CULPRIT and AFTER from it on;
#                                each commit has its own 'version' (its own binary)
#   nw_mode_conf FILE NAME REPO PER_COMMIT MAX [EXTRA]
#                                a daemon config on two host slots that builds the
#                                fake runner of REPO's 'mode' (and 'bwd_mode', where a
#                                commit has one: fake.bwd; 'extra_checks': more checks;
#                                'gate': see fake-runner; and 'case_shift', where it has
#                                one: odd seeds' inputs change, see fake-runner), port
#                                $NW_PORT; EXTRA (lines of config, e.g.
#                                "[verdict]\nalpha = 0.005") is appended
#
# NW_BUILD_DIR (set by CMake) holds the built binaries.

NW_BUILD_DIR=${NW_BUILD_DIR:?NW_BUILD_DIR must point at the build tree}
NW_FAKE_RUNNER=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)/fake-runner
NUMWATCHD=$NW_BUILD_DIR/daemon/numwatchd
NW_DAEMON_PID=
NW_DAEMON_LOG=

nw_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fail() {
	echo "FAIL: $*" >&2
	if [[ -n $NW_DAEMON_LOG && -f $NW_DAEMON_LOG ]]; then
		echo "--- daemon log (last 40 lines) ---" >&2
		tail -n 40 "$NW_DAEMON_LOG" >&2
	fi
	exit 1
}

_nw_kill_daemon() {
	if [[ -n $NW_DAEMON_PID ]]; then
		{
			kill -9 "$NW_DAEMON_PID"
			wait "$NW_DAEMON_PID"
		} 2>/dev/null
	fi
	return 0
}

nw_daemon_start() {
	NW_DAEMON_LOG=$2
	"$NUMWATCHD" --config "$1" >>"$2" 2>&1 &
	NW_DAEMON_PID=$!
	nw_atexit _nw_kill_daemon
}

nw_wait() {
	local timeout=$1 desc=$2
	shift 2
	local end=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || fail "timed out after ${timeout}s waiting for: $desc"
		if [[ -n $NW_DAEMON_PID ]] && ! kill -0 "$NW_DAEMON_PID" 2>/dev/null; then
			fail "numwatchd died while waiting for: $desc"
		fi
		sleep 0.5
	done
}

nw_api() {
	curl -sS --max-time 10 "http://127.0.0.1:$NW_PORT$1"
}

# Every commit of the repository has a final verdict (nothing pending or queued).
nw_all_final() {
	[[ $(pg_psql "SELECT count(*) > 0 AND count(*) FILTER (WHERE commit_verdict(id) = 'pending') = 0
		FROM commits WHERE reachable") == t ]]
}

nw_commit() {
	git -C "$1" add -A
	git -C "$1" -c user.name="Dev $2" -c user.email="dev$2@example.com" commit -qm "change $2"
}

nw_mode_history() {
	local repo=$1 n=$2 culprit=$3 before=$4 after=$5 i
	git init -q -b main "$repo"
	for ((i = 0; i < n; i++)); do
		if ((i >= culprit)); then echo "$after"; else echo "$before"; fi >"$repo/mode"
		echo "$i" >"$repo/version"
		nw_commit "$repo" "$i"
	done
}

nw_mode_conf() {
	cat >"$1" <<CONF
[daemon]
state_dir = $(dirname "$1")/state
database = $NW_DATABASE
[repository]
name = $2
url = $3
poll_interval = 2
[build]
command = r="\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp "$NW_FAKE_RUNNER" "\$r" && printf '# version %s\\n' "\$(cat version)" >>"\$r" && cp mode "\$NUMWATCH_BUILD_DIR/" && for f in bwd_mode extra_checks gate; do test ! -e \$f || cp \$f "\$NUMWATCH_BUILD_DIR/" || exit 1; done && { test ! -e case_shift || printf '# case_shift %s\\n' "\$(tr '\\n' ' ' <case_shift)" >>"\$r"; }
[trials]
per_commit = $4
max = $5
[slots]
slots = host, host
[http]
port = $NW_PORT
CONF
	[[ -z ${6:-} ]] || printf '%b\n' "$6" >>"$1"
}
