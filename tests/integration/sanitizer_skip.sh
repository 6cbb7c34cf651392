#!/usr/bin/env bash
# compute-sanitizer runs are scheduled on GPU slots; where the tool cannot run
# (here: no GPU and no compute-sanitizer, as in CI) each scheduled run is
# stored as skipped (an infra_error, never a pass), the job ends, and the
# commit's verdict is decided by its plan alone. On a GPU host the same path
# stores the tool's reports (bench/gpu-suite.sh). GPU 0 has two slots (0*2):
# both run the runner with CUDA_VISIBLE_DEVICES=0, and only the first (gpu0)
# takes sanitizer jobs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-san.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
git init -q -b main "$work/repo"
echo good >"$work/repo/mode"
git -C "$work/repo" add mode
git -C "$work/repo" -c user.name=A -c user.email=a@example.com commit -qm "one"
NW_PORT=$(nw_free_port)
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
url = $work/repo
poll_interval = 1
[build]
command = cp "$here/fake-runner" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp mode "\$NUMWATCH_BUILD_DIR/"
# One runner for either kind of slot: the GPU slots' runner is the host runner's file.
runner_cuda = numwatch-runner-host
[trials]
per_commit = 8
[sanitizer]
tools = memcheck, racecheck
every = 4
path = $work/no-such-compute-sanitizer
[slots]
slots = 0*2
gpus = 1
[http]
port = $NW_PORT
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
done_all() { [[ $(pg_psql "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')") == 0 &&
	$(pg_psql "SELECT count(*) FROM jobs WHERE kind = 'sanitize'") == 2 ]]; }
nw_wait 60 "the plan and both sanitizer jobs done" done_all
rows=$(pg_psql "SELECT string_agg(sanitizer || ':' || outcome || ':' || sanitizer_status, ',' ORDER BY sanitizer)
	FROM trials WHERE sanitizer IS NOT NULL")
[[ $rows == "memcheck:infra_error:skipped,racecheck:infra_error:skipped" ]] || fail "sanitizer runs stored as '$rows'"
[[ $(pg_psql "SELECT count(*) FROM trials WHERE sanitizer IS NOT NULL AND outcome = 'pass'") == 0 ]] ||
	fail "a sanitizer run that could not happen was stored as a pass"
[[ $(pg_psql "SELECT commit_verdict(id) FROM commits") == clean ]] || fail "the plan's verdict changed"
san_slots=$(pg_psql "SELECT string_agg(DISTINCT slot, ',') FROM trials WHERE sanitizer IS NOT NULL")
[[ $san_slots == gpu0 ]] || fail "sanitizer runs on slots '$san_slots', not on gpu0 alone"
all_slots=$(pg_psql "SELECT string_agg(DISTINCT slot, ',' ORDER BY slot) FROM trials")
[[ $all_slots == gpu0 || $all_slots == gpu0,gpu0.1 || $all_slots == gpu0.1 ]] || fail "trials on slots '$all_slots'"
health=$(nw_api /api/v1/health)
for name in gpu0 gpu0.1; do
	python3 -c 'import json, sys; s = {x["name"]: x["gpu"] for x in json.load(sys.stdin)["slots"]}; sys.exit(s.get(sys.argv[1]) != 0)' \
		"$name" <<<"$health" || fail "health: no slot $name on GPU 0: $health"
done
echo "ok: sanitizer runs that cannot happen are stored as skipped ($rows), never as passes; on gpu0 only (trials on $all_slots)"
