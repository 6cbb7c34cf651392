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
#                                NW_FAKE_PIPELINE (and NW_FAKE_HOLD), where the test's
#                                environment sets it, goes to the runners ([slots] env):
#                                a fake runner that declares a pipeline (fake-runner)
#   nw_fleet_start DIR NAME...   several daemons on one database: starts numwatchd (or
#                                $NUMWATCHD) on DIR/NAME/nw.conf for each NAME, logging to
#                                DIR/NAME/daemon.log (pids in NW_FLEET_PID[NAME]); each is
#                                SIGKILLed when the test exits, and nw_wait fails when one dies
#   nw_fleet_kill NAME           SIGKILLs one of them and waits for it
#   nw_mbox_conf MBOX            config lines (for nw_mode_conf's EXTRA): culprit mail to MBOX
#   nw_settled                   nothing left to do: every commit judged, no job queued or running,
#                                no bisection running, no regression waiting for one, no mail
#                                pending or still to be queued by the mailer's sweep
#   nw_outcome                   what the run concluded, one line per fact, in a fixed order:
#                                per commit x check x dtype verdicts (* where a regression is
#                                new), regressions (start, state, fix, culprit), bisections of
#                                regressions (outcome, culprit) and mail (kind, culprit,
#                                subject, state): two runs of one history must print the same
#   nw_no_duplicates             every seed of every check x dtype of every commit ran as the
#                                plan says (once, and once more only after a failure), and no
#                                probe of a bisection ran a seed another probe of it ran at the
#                                same commit (prints what is wrong; false then)
#
# NW_BUILD_DIR (set by CMake) holds the built binaries.

NW_BUILD_DIR=${NW_BUILD_DIR:?NW_BUILD_DIR must point at the build tree}
NW_FAKE_RUNNER=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)/fake-runner
NUMWATCHD=$NW_BUILD_DIR/daemon/numwatchd
NW_DAEMON_PID=
NW_DAEMON_LOG=
NW_FLEET_DIR=
declare -gA NW_FLEET_PID=()

nw_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fail() {
	local log
	echo "FAIL: $*" >&2
	if [[ -n $NW_DAEMON_LOG && -f $NW_DAEMON_LOG ]]; then
		echo "--- daemon log (last 40 lines) ---" >&2
		tail -n 40 "$NW_DAEMON_LOG" >&2
	fi
	if [[ -n $NW_FLEET_DIR ]]; then
		for log in "$NW_FLEET_DIR"/*/daemon.log; do
			[[ -f $log ]] || continue
			echo "--- $log (last 15 lines) ---" >&2
			tail -n 15 "$log" >&2
		done
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
	local timeout=$1 desc=$2 name
	shift 2
	local end=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || fail "timed out after ${timeout}s waiting for: $desc"
		if [[ -n $NW_DAEMON_PID ]] && ! kill -0 "$NW_DAEMON_PID" 2>/dev/null; then
			fail "numwatchd died while waiting for: $desc"
		fi
		for name in "${!NW_FLEET_PID[@]}"; do
			kill -0 "${NW_FLEET_PID[$name]}" 2>/dev/null || fail "numwatchd '$name' died while waiting for: $desc"
		done
		sleep 0.5
	done
}

_nw_fleet_kill_all() {
	local name
	for name in "${!NW_FLEET_PID[@]}"; do
		kill -9 "${NW_FLEET_PID[$name]}" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	return 0
}

nw_fleet_start() {
	local dir=$1 name
	shift
	if [[ -z $NW_FLEET_DIR ]]; then
		nw_atexit _nw_fleet_kill_all
	fi
	NW_FLEET_DIR=$dir
	for name in "$@"; do
		"$NUMWATCHD" --config "$dir/$name/nw.conf" >>"$dir/$name/daemon.log" 2>&1 &
		NW_FLEET_PID[$name]=$!
	done
}

nw_fleet_kill() {
	local pid=${NW_FLEET_PID[$1]:?no daemon named $1}
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	unset "NW_FLEET_PID[$1]"
}

nw_mbox_conf() {
	printf '%s\n' "public_url = http://numwatch.test:8080/" "[mail]" "from = numwatch <numwatch@example.org>" \
		"to = dev@example.org" "send_to_author = false" "mbox = $1"
}

nw_settled() {
	nw_all_final || return 1
	[[ $(pg_psql "SELECT (SELECT count(*) FROM jobs WHERE state IN ('queued', 'running'))
		+ (SELECT count(*) FROM bisections WHERE state <> 'done')
		+ (SELECT count(*) FROM regressions WHERE state IN ('open', 'bisecting'))
		+ (SELECT count(*) FROM mail WHERE state = 'pending')
		+ (SELECT count(DISTINCT b.culprit_id) FROM bisections b WHERE b.outcome = 'culprit'
			AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit'))
		+ (SELECT count(*) FROM regressions x JOIN bisections b ON b.id = x.bisection_id
			WHERE x.state = 'fixed' AND b.outcome = 'culprit'
			AND EXISTS (SELECT 1 FROM mail m WHERE m.culprit_id = b.culprit_id AND m.kind = 'culprit')
			AND NOT EXISTS (SELECT 1 FROM mail m WHERE m.kind = 'fixed' AND (m.bisection_id = b.id
				OR (m.culprit_id = b.culprit_id AND m.fixed_commit_id = x.fixed_commit_id))))") == 0 ]]
}

nw_outcome() {
	pg_psql "SELECT 'verdict ' || c.position || ' ' || k.name || ' ' || s.dtype || ' ' || s.verdict
		|| CASE WHEN s.regression_new THEN '*' ELSE '' END
		FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
		WHERE c.reachable ORDER BY c.position, k.name, s.dtype"
	pg_psql "SELECT 'commit ' || position || ' ' || commit_verdict(id) FROM commits WHERE reachable ORDER BY position"
	pg_psql "SELECT 'regression ' || k.name || ' ' || r.dtype || ' new@' || st.position || ' ' || r.state
		|| ' fixed@' || coalesce(f.position::text, '-') || ' culprit@' || coalesce(cu.position::text, '-')
		FROM regressions r JOIN checks k ON k.id = r.check_id JOIN commits st ON st.id = regression_start(r)
		LEFT JOIN commits f ON f.id = r.fixed_commit_id LEFT JOIN commits cu ON cu.id = r.culprit_id
		WHERE r.state <> 'withdrawn' ORDER BY k.name, r.dtype, st.position"
	pg_psql "SELECT DISTINCT 'bisection ' || k.name || ' ' || b.dtype || ' ' || b.state || ' '
		|| coalesce(b.outcome, '-') || ' culprit@' || coalesce(cu.position::text, '-')
		FROM bisections b JOIN checks k ON k.id = b.check_id JOIN regressions r ON r.id = b.regression_id
		LEFT JOIN commits cu ON cu.id = b.culprit_id WHERE r.state <> 'withdrawn' ORDER BY 1"
	pg_psql "SELECT 'mail ' || m.kind || ' culprit@' || coalesce(cu.position::text, '-') || ' ' || m.state
		|| ' ' || regexp_replace(m.subject, '#[0-9]+', '#N', 'g')
		FROM mail m LEFT JOIN bisections b ON b.id = m.bisection_id LEFT JOIN commits cu ON cu.id = b.culprit_id
		ORDER BY m.kind, cu.position, m.subject"
}

nw_no_duplicates() {
	local bad
	bad=$(pg_psql "SELECT count(*) FROM (SELECT commit_id, check_id, dtype, seed,
		array_agg(outcome ORDER BY attempt) FILTER (WHERE outcome <> 'infra_error') AS o
		FROM trials WHERE sanitizer IS NULL GROUP BY 1, 2, 3, 4) s
		WHERE cardinality(o) > 2 OR (cardinality(o) = 2 AND o[1] = 'pass')")
	if [[ $bad != 0 ]]; then
		echo "$bad seeds ran more often than the plan says (duplicated trials)"
		return 1
	fi
	bad=$(pg_psql "SELECT count(*) FROM probes p JOIN probes q ON q.bisection_id = p.bisection_id
		AND q.commit_id = p.commit_id AND q.id > p.id AND q.seeds && p.seeds")
	if [[ $bad != 0 ]]; then
		echo "$bad probes ran seeds another probe of their bisection ran at the same commit (duplicated probes)"
		return 1
	fi
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
command = test ! -e broken && r="\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp "$NW_FAKE_RUNNER" "\$r" && printf '# version %s\\n' "\$(cat version)" >>"\$r" && cp mode "\$NUMWATCH_BUILD_DIR/" && for f in bwd_mode extra_checks gate delay cuda_checks ratio_scale; do test ! -e \$f || cp \$f "\$NUMWATCH_BUILD_DIR/" || exit 1; done && { test ! -e case_shift || printf '# case_shift %s\\n' "\$(tr '\\n' ' ' <case_shift)" >>"\$r"; } && { test ! -e cuda_checks || cp "\$r" "\$NUMWATCH_BUILD_DIR/numwatch-runner-cuda"; }
[trials]
per_commit = $4
max = $5
[slots]
slots = host, host${NW_FAKE_PIPELINE:+
env = NW_FAKE_PIPELINE=$NW_FAKE_PIPELINE${NW_FAKE_HOLD:+ NW_FAKE_HOLD=$NW_FAKE_HOLD}${NW_FAKE_DROP_AHEAD:+ NW_FAKE_DROP_AHEAD=$NW_FAKE_DROP_AHEAD}}
[http]
port = $NW_PORT
CONF
	[[ -z ${6:-} ]] || printf '%b\n' "$6" >>"$1"
}
