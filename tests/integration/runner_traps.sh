#!/usr/bin/env bash
# The traps of watching a library whose runner is a wrapper script (issue 15),
# through the real daemon, a private PostgreSQL and real git repositories.
# The runner (tests/integration/traps-runner) is byte-identical at every commit
# and runs the commit's lib/kern.py.
#
# Repository A, no identity declared: every build has one identity although
# the five commits' trees differ: the daemon says so in its log and on
# /api/v1/health. [build] env reaches the build only, [slots] env the runner
# only (its import needs [slots] env's PYTHONPATH); both set and pass through.
# The API's repro command runs the configured runner (runner/pyrunner).
#
# Repository B, [build] identity = lib/*.py and a build that writes
# $NUMWATCH_IDENTITY_FILE: a commit that changes neither shares its parent's
# identity, one that changes either does not; no warning. The runner declares
# its command line (hello's repro) and the API fills it in. numwatch repro
# reads the runner's answer to bye before it closes the pipe.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
start=$SECONDS
work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-traps.XXXXXX")
nw_atexit rm -rf "$work"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch

mkdir "$work/pylib"
echo "# found through [slots] env PYTHONPATH" >"$work/pylib/nwtraps_helper.py"

# kern.py: 'good' passes every seed, 'bad' fails the seeds 3 mod 8.
kern() {
	mkdir -p "$1/lib"
	printf 'MODE = "%s"\n\ndef ratio(seed):\n    return 3.5 if MODE == "bad" and seed %% 8 == 3 else 0.25\n' "$2" >"$1/lib/kern.py"
}
# history REPO: good; docs; the bug; a build option (opts); docs again. Every tree differs.
history() {
	local r=$1
	git init -q -b main "$r"
	# NAME keeps the two repositories' commits apart (same content, same second: same shas).
	kern "$r" good && echo 1 >"$r/README" && echo O1 >"$r/opts" && basename "$r" >"$r/NAME" && nw_commit "$r" 1
	echo 2 >"$r/README" && nw_commit "$r" 2
	kern "$r" bad && nw_commit "$r" 3
	echo O2 >"$r/opts" && nw_commit "$r" 4
	echo 3 >"$r/README" && nw_commit "$r" 5
}
history "$work/repoA"
history "$work/repoB"

pg_start

# conf NAME PORT EXTRA_BUILD EXTRA_SLOTS: repository NAME in $work/NAME.
conf() {
	cat >"$work/$1.conf" <<CONF
[daemon]
state_dir = $work/state-$1
database = $NW_DATABASE
[repository]
name = $1
url = $work/$1
poll_interval = 1
[build]
command = B="\$NUMWATCH_BUILD_DIR" && mkdir "\$B/runner" && cp "$here/traps-runner" "\$B/runner/pyrunner" && cp -R lib "\$B/" && env >"\$B/build.env"$3
runner_host = runner/pyrunner
env = NW_BUILD_SET="a b" NW_PASS_BUILD PATH=/nw-build-bin:\${PATH}
timeout = 60
[trials]
per_commit = 8
timeout = 20
hello_timeout = 20
[slots]
slots = host
env = PYTHONPATH=$work/pylib NW_SLOT_SET=1 NW_PASS_SLOT$4
[http]
port = $2
CONF
}

export NW_PASS_BUILD=build-passed NW_PASS_SLOT=slot-passed NW_NOT_PASSED=x
sha() { git -C "$work/$1" rev-parse "HEAD~$((5 - $2))"; }
q() { pg_psql "$1"; }
hashes() { # REPO: the runner hash of each commit, oldest first
	q "SELECT string_agg(coalesce(b.runner_hash, '-'), ' ' ORDER BY c.position) FROM commits c
		JOIN repositories r ON r.id = c.repo_id LEFT JOIN builds b ON b.commit_id = c.id WHERE r.name = '$1'"
}
judged() { # REPO: all five commits have a final verdict
	[[ $(q "SELECT count(*) FILTER (WHERE commit_verdict(c.id) NOT IN ('pending')) FROM commits c
		JOIN repositories r ON r.id = c.repo_id WHERE r.name = '$1'") == 5 ]]
}
failing_repro() { # PORT SHA: the repro of the first failing seed the API shows
	curl -sS --max-time 10 "http://127.0.0.1:$1/api/v1/commits/$2" | python3 -c '
import json, sys
c = json.load(sys.stdin)
print([s for k in c["checks"] for s in k["failing_seeds"]][0]["repro"])'
}

# ---- Repository A: one identity for five trees.
PORT_A=$(nw_free_port)
NW_PORT=$PORT_A
conf repoA "$PORT_A" "" ""
"$NUMWATCHD" --config "$work/repoA.conf" --check-config >/dev/null || fail "repoA.conf was refused"
nw_daemon_start "$work/repoA.conf" "$work/daemon-a.log"
nw_wait 180 "repository A's five commits judged" judged repoA
read -r -a ha <<<"$(hashes repoA)"
[[ ${#ha[@]} == 5 && ${ha[0]} != - && ${ha[0]} == "${ha[1]}" && ${ha[0]} == "${ha[4]}" ]] ||
	fail "repository A: the wrapper's builds should share one identity: ${ha[*]}"
warned() { grep -q "builds of repoA: all 5 builds share one identity (runner hash ${ha[0]:0:12}) although their commits have 5 different trees" "$work/daemon-a.log"; }
nw_wait 30 "the identity warning in the log" warned
health=$(nw_api /api/v1/health)
python3 -c 'import json, sys; w = json.loads(sys.argv[1])["identity_warning"]; assert w and "[build] identity" in w, w' "$health" ||
	fail "/api/v1/health has no identity warning: $health"
echo "ok: one identity for five trees: warned in the log and on /api/v1/health"

# The environments: [build] env for the build, [slots] env for the runner, nothing else added.
bdir=$work/state-repoA/builds/$(sha repoA 3)
python3 - "$bdir/build.env" "$bdir/runner.env" <<'PY' || fail "the environments are wrong: $(cat "$bdir/build.env" "$bdir/runner.env")"
import json, sys
build = dict(l.split("=", 1) for l in open(sys.argv[1]).read().splitlines() if "=" in l)
runner = json.load(open(sys.argv[2]))
assert build["NW_BUILD_SET"] == "a b" and build["NW_PASS_BUILD"] == "build-passed", build
assert build["PATH"].startswith("/nw-build-bin:") and len(build["PATH"]) > len("/nw-build-bin:"), build["PATH"]
assert build["NUMWATCH_IDENTITY_FILE"].endswith("/numwatch-identity"), build
assert not {"NW_SLOT_SET", "NW_PASS_SLOT", "PYTHONPATH", "NW_NOT_PASSED"} & set(build), build
assert runner["NW_SLOT_SET"] == "1" and runner["NW_PASS_SLOT"] == "slot-passed", runner
assert runner["PYTHONPATH"].endswith("/pylib") and runner["NUMWATCH_PROTOCOL"] == "1", runner
assert runner["CUDA_VISIBLE_DEVICES"] == "", runner
assert not {"NW_BUILD_SET", "NW_PASS_BUILD", "NW_NOT_PASSED"} & set(runner), runner
PY
echo "ok: [build] env reaches the build, [slots] env the runner (set and passed through), nothing else"

[[ $(q "SELECT commit_verdict(id) FROM commits WHERE sha = '$(sha repoA 3)'") == regressed ]] ||
	fail "repository A's bug commit is not regressed"
repro=$(failing_repro "$PORT_A" "$(sha repoA 3)")
[[ $repro == "./runner/pyrunner --check traps.fwd --dtype f32 --seed 3" ]] || fail "repository A's repro: '$repro'"
echo "ok: without a template the repro runs the configured runner: $repro"
kill -9 "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" 2>/dev/null || true

# ---- Repository B: the identity follows lib/*.py and the file the build writes.
PORT_B=$(nw_free_port)
NW_PORT=$PORT_B
template='python3 -m traps --check {check} --dtype {dtype} --seed {seed} --runs {runs}'
conf repoB "$PORT_B" ' && cp opts "$NUMWATCH_IDENTITY_FILE"
identity = lib/*.py' " NW_TRAPS_REPRO=\"$template\""
nw_daemon_start "$work/repoB.conf" "$work/daemon-b.log"
nw_wait 180 "repository B's five commits judged" judged repoB
read -r -a hb <<<"$(hashes repoB)"
[[ ${#hb[@]} == 5 && ${hb[0]} == "${hb[1]}" && ${hb[2]} != "${hb[1]}" && ${hb[3]} != "${hb[2]}" && ${hb[4]} == "${hb[3]}" ]] ||
	fail "repository B's identities do not follow lib/*.py and opts: ${hb[*]}"
[[ ${hb[0]} =~ ^[0-9a-f]{64}\+[0-9a-f]{64}\+[0-9a-f]{64}$ ]] || fail "repository B's identity: ${hb[0]}"
blog=$(q "SELECT log FROM builds WHERE commit_id = (SELECT id FROM commits WHERE sha = '$(sha repoB 1)')")
[[ $blog == *"numwatch: build identity ${hb[0]:0:16}... (the runner files, [build] identity, numwatch-identity)"* ]] ||
	fail "the build log does not say what the identity is made of: $blog"
[[ $(q "SELECT count(DISTINCT tree) FROM builds b JOIN commits c ON c.id = b.commit_id
	JOIN repositories r ON r.id = c.repo_id WHERE r.name = 'repoB'") == 5 ]] || fail "builds.tree is not the commits' trees"
python3 -c 'import json, sys; w = json.loads(sys.argv[1])["identity_warning"]; assert w is None, w' "$(nw_api /api/v1/health)" ||
	fail "repository B has an identity warning"
! grep -q "share one identity" "$work/daemon-b.log" || fail "repository B's daemon warned about identities"
echo "ok: [build] identity globs and \$NUMWATCH_IDENTITY_FILE: docs commits share their parent's identity, the others not; no warning"

repro=$(failing_repro "$PORT_B" "$(sha repoB 3)")
[[ $repro == "python3 -m traps --check traps.fwd --dtype f32 --seed 3 --runs 1" ]] || fail "repository B's repro: '$repro'"
echo "ok: the runner's repro template, filled in: $repro"

# numwatch repro waits for the answer to bye: a runner that answers late is not cut off.
bdir=$work/state-repoB/builds/$(sha repoB 3)
rm -f "$bdir/bye.ok" "$bdir/bye.broken" # the daemon's runners answered their byes too
rc=0
NW_TRAPS_BYE_DELAY=1 "$NUMWATCH" repro --commit "$(sha repoB 3)" --check traps.fwd --dtype f32 --seed 3 \
	--config "$work/repoB.conf" >"$work/repro.out" 2>"$work/repro.err" || rc=$?
[[ $rc == 1 ]] && grep -q '"verdict":"fail"' "$work/repro.out" || fail "numwatch repro: exit $rc, $(cat "$work/repro.out" "$work/repro.err")"
[[ -e $bdir/bye.ok && ! -e $bdir/bye.broken ]] || fail "the runner could not answer bye: $(ls "$bdir") $(cat "$work/repro.err")"
echo "ok: numwatch repro exits 1 on the failing seed and lets the runner answer bye"
echo "ok: runner_traps done in $((SECONDS - start)) s"
