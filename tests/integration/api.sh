#!/usr/bin/env bash
# The REST API for CI, end to end against the real daemon: every endpoint,
# bad input (unknown ids, bad JSON, missing or wrong or revoked token,
# oversized bodies) answered with the right status and a JSON error, token
# management, /metrics, and the CLI's ci-wait exit codes. A commit's cached answer (sent by
# the HTTP threads) gives way to a change in the database within the cache's life.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-api.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
git init -q -b main "$work/repo"
for mode in good good failing; do
	echo "$mode" >"$work/repo/mode"
	date +%s%N >"$work/repo/stamp"
	git -C "$work/repo" add mode stamp
	git -C "$work/repo" -c user.name="Grace Hopper" -c user.email="grace@example.com" commit -qm "mode $mode"
done
NW_PORT=$(nw_free_port)
export NUMWATCH_URL=http://127.0.0.1:$NW_PORT
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = api
url = $work/repo
poll_interval = 1
[build]
command = cp "$here/fake-runner" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp mode "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = 8
[slots]
slots = host
[http]
port = $NW_PORT
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 60 "all commits final" nw_all_final
good=$(pg_psql "SELECT sha FROM commits WHERE position = 0")
bad=$(pg_psql "SELECT sha FROM commits WHERE position = 2")

# expect METHOD PATH STATUS [curl args...]: the status, and a JSON error body for errors.
expect() {
	local method=$1 path=$2 want=$3
	shift 3
	local got
	got=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 10 -X "$method" "$@" "$NUMWATCH_URL$path")
	[[ $got == "$want" ]] || fail "$method $path: status $got, expected $want: $(head -c 300 "$work/body")"
	if ((want >= 400)); then
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["error"] and d["status"] == int(sys.argv[2])' \
			"$work/body" "$want" || fail "$method $path: error body is not JSON with a message: $(head -c 300 "$work/body")"
	fi
}

# Reads: every endpoint answers, with JSON.
expect GET /api/v1/health 200
expect GET /api/v1/commits 200
expect GET "/api/v1/commits?limit=1&offset=1" 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["commits"]) == 1 and d["total"] == 3, d' "$work/body" ||
	fail "paging wrong"
expect GET "/api/v1/commits/$bad" 200
expect GET "/api/v1/commits/${bad:0:8}/build-log" 200
expect GET /api/v1/checks 200
expect GET /api/v1/checks/fake.fwd 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=[s["verdict"] for s in d["series"]]; assert v == ["clean","clean","regressed"], v' "$work/body" ||
	fail "check series wrong: $(cat "$work/body")"
expect GET "/api/v1/checks/fake.fwd?dtype=f32&limit=2" 200
expect GET "/api/v1/trials?commit=$bad&check=fake.fwd&dtype=f32" 200
expect GET "/api/v1/trials?commit=$bad&check=fake.fwd&outcome=fail&seed=3" 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=d["trials"]; assert len(t) == 2 and all(x["seed"] == 3 for x in t), t' "$work/body" ||
	fail "trials filter wrong: $(cat "$work/body")"
expect GET /api/v1/bisections 200
# Regressions: the failing commit raised one, new there; filters; one regression in full.
expect GET /api/v1/regressions 200
rid=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["regressions"]
assert d["total"] == 1 and len(r) == 1 and d["limit"] == 50 and d["offset"] == 0, d
r = r[0]
assert (r["check"], r["dtype"], r["new_at"], r["first"], r["fixed"]) == ("fake.fwd", "f32", sys.argv[2], sys.argv[2], None), r
assert r["state"] in ("open", "bisecting", "culprit", "no_culprit") and r["good"] == sys.argv[3] and r["rate_after"]["failures"] > 0, r
print(r["id"])' "$work/body" "$bad" "$(pg_psql "SELECT sha FROM commits WHERE position = 1")") || fail "regressions list wrong: $(cat "$work/body")"
expect GET "/api/v1/regressions?state=active&check=fake.fwd&dtype=f32&limit=5" 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["total"] == 1 and d["limit"] == 5, d' "$work/body" ||
	fail "regressions filter wrong: $(cat "$work/body")"
for filter in state=fixed state=closed check=no.such dtype=f16 offset=1; do
	expect GET "/api/v1/regressions?$filter" 200
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["regressions"] == [], d' "$work/body" ||
		fail "regressions?$filter lists some: $(cat "$work/body")"
done
expect GET "/api/v1/regressions/$rid" 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["commits_total"] == 1 and [(c["sha"], c["shows"], c["new"]) for c in d["commits"]] == [(sys.argv[2], "new", True)], d
assert isinstance(d["mail"], list) and isinstance(d["bisections"], list) and d["same_culprit"] in ([], None) or True, d' "$work/body" "$bad" ||
	fail "regression $rid wrong: $(cat "$work/body")"
expect GET "/api/v1/commits/$bad" 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); k=d["checks"][0]
assert d["verdict"] == "regressed" and k["regression"]["id"] == int(sys.argv[2]) and k["regression"]["new"] is True, k
assert k["regression"]["new_at"] == d["sha"] and k["changed_seeds"] == 0 and k["failing_since"] is None and k["baseline"], k' "$work/body" "$rid" ||
	fail "the commit's regression wrong: $(head -c 800 "$work/body")"
# A commit's answer is cached and sent by the HTTP threads alone while fresh; a change in the
# database that this daemon did not make shows within the cache's life (1 s), read again by the
# loop, and the threads then send the new answer.
expect GET "/api/v1/commits/$bad" 200
expect GET "/api/v1/commits/$bad" 200
pg_psql "UPDATE commits SET title = 'retitled behind the daemon' WHERE sha = '$bad'" >/dev/null
retitled() {
	expect GET "/api/v1/commits/$bad" 200 && grep -q "retitled behind the daemon" "$work/body"
}
nw_wait 15 "the commit's new title in its answer (the cache lives 1 s)" retitled
for _ in 1 2 3; do
	expect GET "/api/v1/commits/$bad" 200
	grep -q "retitled behind the daemon" "$work/body" || fail "a read after the new title was served sent the old one"
done
expect GET /api/v1/commits 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r={c["position"]: c["regressions"] for c in d["commits"]}
assert r == {2: {"fake.fwd/f32": {"id": int(sys.argv[2]), "new": True}}, 1: {}, 0: {}}, r' "$work/body" "$rid" ||
	fail "the commits list's regressions wrong: $(head -c 800 "$work/body")"
expect GET /api/v1/checks/fake.fwd 200
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [r["id"] for r in d["regressions"]] == [int(sys.argv[2])], d' "$work/body" "$rid" ||
	fail "the check's regressions wrong: $(head -c 800 "$work/body")"
curl -sf "$NUMWATCH_URL/metrics" >"$work/metrics" || fail "/metrics did not answer"
grep -q '^numwatch_trials_total{outcome="fail"} [1-9]' "$work/metrics" || fail "/metrics lacks failed trials"
grep -q '^numwatch_build_duration_seconds_count 3' "$work/metrics" || fail "/metrics lacks build durations"
grep -q '^numwatch_runner_restarts_total{slot="host"}' "$work/metrics" || fail "/metrics lacks runner restarts"
grep -q "^numwatch_db_backlog [0-9]" "$work/metrics" || fail "/metrics lacks the database backlog"
# Where the slots' time went: trials ran, and a trial in flight is part of 'running'.
awk '/^numwatch_slot_seconds_total\{state="running"\}/ { r = $2 } /^numwatch_slot_trial_seconds_total / { t = $2 }
	END { exit !(t > 0 && r >= t) }' "$work/metrics" || fail "/metrics: slot time in 'running' and in trials is wrong"
grep -q '^numwatch_queue_depth\|^numwatch_bisections_active' "$work/metrics" || fail "/metrics lacks queue depth"
echo "ok: every read endpoint and /metrics answer"

# Bad reads.
expect GET /api/v1/commits/nothex 400
expect GET /api/v1/commits/0123456789abcdef0123 404
expect GET "/api/v1/commits?limit=0" 400
expect GET "/api/v1/commits?offset=-1" 400
expect GET /api/v1/checks/no.such 404
expect GET "/api/v1/checks/bad%20name" 400
expect GET "/api/v1/trials?check=fake.fwd" 400
expect GET "/api/v1/trials?commit=$bad&check=fake.fwd&outcome=weird" 400
expect GET /api/v1/bisections/999 404
expect GET /api/v1/bisections/abc 400
expect GET /api/v1/bisections/%ff 400
expect GET /api/v1/no%ffsuch 404
expect GET /api/v1/regressions/abc 400
expect GET /api/v1/regressions/%ff 400
expect GET /api/v1/regressions/-1 400
expect GET /api/v1/regressions/ 400
expect GET /api/v1/regressions/9999999999999999999 400
expect GET /api/v1/regressions/999999999999999999 404
expect GET /api/v1/regressions/0 404
expect GET "/api/v1/regressions/$rid/x" 400
expect GET "/api/v1/regressions/$rid?limit=501" 400
expect GET "/api/v1/regressions?state=weird" 400
expect GET "/api/v1/regressions?check=bad%20name" 400
expect GET "/api/v1/regressions?dtype=%ff" 400
expect GET "/api/v1/regressions?limit=0" 400
expect GET /api/v1/unknown 404
expect PUT /api/v1/commits 405
echo "ok: bad reads answered 400/404/405 with JSON errors"

# Tokens: created by the CLI (stored hashed), required for writes, revocable.
token=$("$NUMWATCH" token create ci-bot --config "$work/nw.conf" 2>/dev/null)
[[ $token == nw_* ]] || fail "no token printed"
[[ $(pg_psql "SELECT count(*) FROM tokens WHERE hash = sha256(convert_to('$token', 'UTF8'))") == 1 ]] || fail "token not stored hashed"
[[ $(pg_psql "SELECT count(*) FROM tokens WHERE encode(hash, 'escape') LIKE '%$token%'") == 0 ]] || fail "token stored in clear"
body='{"good":"'$good'","bad":"'$bad'","check":"fake.fwd","dtype":"f32"}'
expect POST /api/v1/bisections 401 -d "$body"
expect POST /api/v1/bisections 401 -H "Authorization: Bearer nw_wrong" -d "$body"
expect POST /api/v1/bisections 400 -H "Authorization: Bearer $token" -d '{"good": '
expect POST /api/v1/bisections 400 -H "Authorization: Bearer $token" -d '[1,2]'
expect POST /api/v1/bisections 400 -H "Authorization: Bearer $token" -d '{"good":"xyz","bad":"'$bad'","check":"fake.fwd","dtype":"f32"}'
expect POST /api/v1/bisections 404 -H "Authorization: Bearer $token" -d '{"good":"'$good'","bad":"'$bad'","check":"nope.fwd","dtype":"f32"}'
expect POST /api/v1/bisections 400 -H "Authorization: Bearer $token" -d '{"good":"'$bad'","bad":"'$good'","check":"fake.fwd","dtype":"f32"}'
head -c 200000 /dev/zero | tr '\0' ' ' >"$work/big"
expect POST /api/v1/bisections 413 -H "Authorization: Bearer $token" --data-binary @"$work/big"
expect POST /api/v1/nowhere 404 -H "Authorization: Bearer $token" -d '{}'
expect POST /api/v1/bisections 201 -H "Authorization: Bearer $token" -d "$body"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/body")
expect GET "/api/v1/bisections/$id" 200
[[ $(pg_psql "SELECT requested_by FROM bisections WHERE id = $id") == "token:ci-bot" ]] || fail "bisection not attributed"
expect POST "/api/v1/checks/fake.fwd/mute" 400 -H "Authorization: Bearer $token" -d '{"until":"not a date"}'
expect POST "/api/v1/checks/fake.fwd/mute" 200 -H "Authorization: Bearer $token" -d '{"until":"2099-01-01","reason":"known flake"}'
expect GET /api/v1/checks 200
grep -q "known flake" "$work/body" || fail "mute not shown on the checks list"
expect DELETE "/api/v1/checks/fake.fwd/mute" 200 -H "Authorization: Bearer $token"
expect POST "/api/v1/commits/${bad:0:10}/rerun" 200 -H "Authorization: Bearer $token"
# 150 seeds: three jobs (64, 64, 22 seeds) that any slot may take.
expect POST /api/v1/runs 201 -H "Authorization: Bearer $token" -d '{"commit":"'$good'","check":"fake.fwd","dtype":"f32","trials":150}'
grep -q '"parts":3' "$work/body" || fail "a run of 150 seeds is not three parts: $(cat "$work/body")"
ran_more() { [[ $(pg_psql "SELECT count(DISTINCT seed) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.sha = '$good'") == 150 ]]; }
nw_wait 60 "the run by hand extends the commit to 150 seeds" ran_more
parts=$(pg_psql "SELECT string_agg(cardinality(j.seeds)::text, ' ' ORDER BY j.id) FROM jobs j JOIN commits c ON c.id = j.commit_id
	WHERE c.sha = '$good' AND j.kind = 'probe' AND j.bisection_id IS NULL")
[[ $parts == "64 64 22" ]] || fail "the run's parts hold '$parts' seeds, not 64 64 22"
"$NUMWATCH" token revoke ci-bot --config "$work/nw.conf" >/dev/null
expect POST "/api/v1/commits/${bad:0:10}/rerun" 401 -H "Authorization: Bearer $token"
echo "ok: writes need a valid token; bad JSON, bad ids and oversized bodies refused; revoked tokens refused"

# ci-wait: 1 on a regression, 0 on a clean commit, 2 on a timeout, 3 when the daemon is unreachable.
rc=0; "$NUMWATCH" ci-wait "$bad" --timeout 10 >"$work/ci.out" || rc=$?
[[ $rc == 1 ]] || fail "ci-wait regressed: exit $rc"
grep -q "fake.fwd.*regressed" "$work/ci.out" || fail "ci-wait did not print the failing check"
grep -q "view=commit&sha=$bad" "$work/ci.out" || fail "ci-wait did not print the dashboard link"
"$NUMWATCH" ci-wait "$good" --timeout 10 >/dev/null || fail "ci-wait clean: exit $?"
rc=0; "$NUMWATCH" ci-wait 0123456789abcdef0123456789abcdef01234567 --timeout 3 >/dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "ci-wait on a commit that never comes: exit $rc, expected 2"
rc=0; NUMWATCH_URL=http://127.0.0.1:1 "$NUMWATCH" ci-wait "$good" --timeout 1 >/dev/null 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "ci-wait against no daemon: exit $rc, expected 3"
echo "ok: ci-wait exit codes 1, 0, 2, 3"

# repro: runs one trial of a commit locally, reusing the daemon's build, or building it from the mirror.
rc=0; "$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 3 --config "$work/nw.conf" >"$work/repro.out" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "repro of a failing seed exited $rc: $(cat "$work/repro.out")"
grep -q '"verdict": *"fail"' "$work/repro.out" || fail "repro did not print the failing trial: $(cat "$work/repro.out")"
"$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 0 --config "$work/nw.conf" >/dev/null 2>&1 ||
	fail "repro of a passing seed did not exit 0"
rm -rf "$work/state/builds/$bad"
rc=0; "$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 3 --config "$work/nw.conf" >"$work/repro.out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "building ${bad:0:12}" "$work/repro.out" || fail "repro without a build did not build: $(cat "$work/repro.out")"
# --runs N: the seed N times in one runner; a count, and the exit code of the worst.
rc=0; "$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 3 --runs 4 --config "$work/nw.conf" >"$work/repro.out" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "seed 3 failed 4 of 4 runs" "$work/repro.out" ||
	fail "repro --runs 4 of a failing seed: exit $rc, $(cat "$work/repro.out")"
rc=0; "$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 0 --runs 3 --config "$work/nw.conf" >"$work/repro.out" 2>&1 || rc=$?
[[ $rc == 0 ]] && grep -q "seed 0 failed 0 of 3 runs" "$work/repro.out" ||
	fail "repro --runs 3 of a passing seed: exit $rc, $(cat "$work/repro.out")"
for bad_runs in 0 -2 x 100001; do
	rc=0; "$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 0 --runs "$bad_runs" --config "$work/nw.conf" >"$work/repro.out" 2>&1 || rc=$?
	[[ $rc == 3 ]] && grep -q -- "--runs must be a whole number from 1 to 100000" "$work/repro.out" ||
		fail "repro --runs $bad_runs: exit $rc, $(cat "$work/repro.out")"
done
# A runner that dies at the first trial: the runs end there, said so, exit 3.
mkdir -p "$work/state-segv/builds/$bad"
cp "$NW_FAKE_RUNNER" "$work/state-segv/builds/$bad/numwatch-runner-host"
echo segv >"$work/state-segv/builds/$bad/mode"
sed "s|^state_dir = .*|state_dir = $work/state-segv|" "$work/nw.conf" >"$work/nw-segv.conf"
rc=0; "$NUMWATCH" repro --commit "$bad" --check fake.fwd --dtype f32 --seed 0 --runs 5 --config "$work/nw-segv.conf" >"$work/repro.out" 2>&1 || rc=$?
[[ $rc == 3 ]] && grep -q "stopped answering at run 1" "$work/repro.out" && grep -q "failed 0 of 0 runs (the runner stopped" "$work/repro.out" ||
	fail "repro --runs 5 with a runner that dies: exit $rc, $(cat "$work/repro.out")"
echo "ok: numwatch repro reuses the daemon's build or builds the commit, and exits 1 on the failing seed; --runs N counts"
