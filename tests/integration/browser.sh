#!/usr/bin/env bash
# The dashboard in a real browser, on the demo history: Debian's Chromium,
# driven by playwright-core (web/node_modules, installed by `npm ci` in web/,
# which scripts/test runs), against the real daemon after it has judged every
# commit of scripts/make-demo-repo's history (real host runners) and finished
# the bisection it queued by itself for the softmax regression.
# browser_test.mjs then clicks its way from the grid to the regressed commit
# (failing seed, repro command), to the bisection (culprit), to a check page
# (uPlot chart), and saves screenshots under $NW_BUILD_DIR/artefacts/browser/.
#
# A missing Chromium, node or web/node_modules is a failure, not a skip.
# NW_BROWSER_KEEP=1 leaves the daemon running at the end until Ctrl-C.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
src=$NW_SOURCE_DIR
web=$src/web
per_commit=${NW_BROWSER_TRIALS:-32}
chromium=${CHROMIUM:-/usr/bin/chromium}
artefacts=${NW_ARTEFACTS_DIR:-$NW_BUILD_DIR/artefacts/browser}
t0=$SECONDS

# ---- prerequisites: fail loudly (scripts/deps installs chromium and nodejs,
# scripts/test runs npm ci in web/)
[[ -x $chromium ]] || fail "no Chromium at $chromium: install Debian's chromium (scripts/deps does)"
command -v node >/dev/null || fail "node not found: install Debian's nodejs (scripts/deps does)"
for m in playwright-core/package.json uplot/dist/uPlot.esm.js uplot/dist/uPlot.min.css; do
	[[ -f $web/node_modules/$m ]] ||
		fail "web/node_modules/$m is missing: run 'npm ci' in $web (scripts/test and scripts/demo do)"
done

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-browser.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
"$src/scripts/make-demo-repo" "$work/repo" >/dev/null

NW_PORT=$(nw_free_port)
# Two to four host slots and build jobs, as the machine has cores.
ncpu=$(nproc)
((ncpu < 2)) && ncpu=2
((ncpu > 4)) && ncpu=4
slots=$(printf 'host, %.0s' $(seq "$ncpu"))
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = demo
url = $work/repo
poll_interval = 2
[build]
command = cmake -S "$src/kernels" -B "\$NUMWATCH_BUILD_DIR" -DNW_LIBRARY_DIR="\$NUMWATCH_WORKTREE" -DNW_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "\$NUMWATCH_BUILD_DIR" -j$ncpu
timeout = 600
[trials]
per_commit = $per_commit
checks = softmax.*
timeout = 30
[slots]
slots = ${slots%, }
[http]
port = $NW_PORT
web_root = $web
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 600 "every commit has a final verdict" nw_all_final
echo "ok: all $(pg_psql "SELECT count(*) FROM commits") commits final after $((SECONDS - t0)) s"

# The daemon queues a bisection by itself for each new regression; wait until
# those of the softmax regression (one per check x dtype) are there and done.
# (Bisections of the history's other regressions may still run: the test does
# not need them.)
softmax_bisected() {
	[[ $(pg_psql "SELECT count(*) > 0 AND bool_and(b.state = 'done') FROM bisections b
		JOIN checks k ON k.id = b.check_id WHERE k.name LIKE 'softmax.%'") == t ]]
}
nw_wait 300 "the automatic bisection of the softmax regression is done" softmax_bisected
nw_all_final || fail "a commit is pending again after the bisection"
pg_psql "SELECT b.id, k.name, b.dtype, b.state, b.outcome, round(b.confidence::numeric, 4)
	FROM bisections b JOIN checks k ON k.id = b.check_id ORDER BY b.id" | sed 's/^/bisection: /'
echo "ok: bisections done after $((SECONDS - t0)) s"

bug=$(pg_psql "SELECT sha FROM commits WHERE title LIKE 'softmax: vectorised%'")
[[ -n $bug ]] || fail "no 'softmax: vectorised' commit in the demo history"
[[ $(pg_psql "SELECT commit_verdict(id) FROM commits WHERE sha = '$bug'") == regressed ]] ||
	fail "the softmax-breaking commit is not regressed"

rm -rf "$artefacts"
mkdir -p "$artefacts"
base=http://127.0.0.1:$NW_PORT
rc=0
NW_WEB_DIR=$web CHROMIUM=$chromium timeout 150 node "$here/browser_test.mjs" "$base" "$bug" "$artefacts" || rc=$?
echo "screenshots:"
find "$artefacts" -name '*.png' -printf '  %p\n' | sort
((rc == 0)) || fail "browser checks failed (exit $rc)"
echo "ok: browser test passed in $((SECONDS - t0)) s"

if [[ ${NW_BROWSER_KEEP:-} == 1 ]]; then
	echo "dashboard: $base  (Ctrl-C to stop)"
	wait "$NW_DAEMON_PID" || true
fi
