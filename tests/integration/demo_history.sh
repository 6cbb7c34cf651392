#!/usr/bin/env bash
# The whole path on the demo library's history, with the real daemon, the real
# runners (host build) and a private PostgreSQL: the softmax-breaking commit is
# regressed with failing seeds whose shapes all have C > 1024 and C % 4 != 0,
# the commit that does not compile is build_failed, the fix is clean. Midway the
# daemon is killed with SIGKILL and restarted; it finishes with no stored trial
# lost and none run twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
src=$NW_SOURCE_DIR
per_commit=${NW_DEMO_TRIALS:-32}

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-demo.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
"$src/scripts/make-demo-repo" "$work/repo" >/dev/null

NW_PORT=$(nw_free_port)
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = demo
url = $work/repo
poll_interval = 2
[build]
command = cmake -S "$src/kernels" -B "\$NUMWATCH_BUILD_DIR" -DNW_LIBRARY_DIR="\$NUMWATCH_WORKTREE" -DNW_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "\$NUMWATCH_BUILD_DIR" -j2
timeout = 600
[trials]
per_commit = $per_commit
checks = softmax.*
timeout = 30
[slots]
slots = host, host
[http]
port = $NW_PORT
CONF

ncommits=$(git -C "$work/repo" rev-list --count main)
nw_daemon_start "$work/nw.conf" "$work/daemon.log"

# Kill it with SIGKILL once a good part of the trials is stored (mid-run).
some_trials() { [[ $(pg_psql "SELECT count(*) FROM trials") -ge 600 ]]; }
nw_wait 600 "600 trials stored" some_trials
kill -9 "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" 2>/dev/null || true
before=$(pg_psql "SELECT count(*) || ' ' || coalesce(max(id), 0) FROM trials")
read -r count_before max_before <<<"$before"
echo "killed with SIGKILL after $count_before stored trials"

nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 900 "every commit has a final verdict" nw_all_final

# No stored trial lost: everything stored before the kill is still there.
[[ $(pg_psql "SELECT count(*) FROM trials WHERE id <= $max_before") == "$count_before" ]] ||
	fail "trials stored before the kill are missing"
# None duplicated or repeated needlessly: every planned seed ran once, and ran again only after failing.
bad=$(pg_psql "SELECT count(*) FROM (SELECT commit_id, check_id, dtype, seed,
	array_agg(outcome ORDER BY attempt) FILTER (WHERE outcome <> 'infra_error') AS o
	FROM trials GROUP BY 1, 2, 3, 4) s
	WHERE cardinality(o) > 2 OR (cardinality(o) = 2 AND o[1] = 'pass')")
[[ $bad == 0 ]] || fail "$bad seeds ran more often than the plan says (lost or duplicated trials)"
incomplete=$(pg_psql "SELECT count(*) FROM stats s WHERE verdict NOT IN ('build_failed')
	AND (SELECT count(DISTINCT seed) FROM trials t WHERE t.commit_id = s.commit_id AND t.check_id = s.check_id
	     AND t.dtype = s.dtype AND t.outcome <> 'infra_error' AND t.seed < $per_commit) <> $per_commit")
[[ $incomplete == 0 ]] || fail "$incomplete check x dtype runs do not have all $per_commit seeds"
echo "ok: after kill -9 and restart: $(pg_psql "SELECT count(*) FROM trials") trials, none lost, none repeated"

verdict() { pg_psql "SELECT commit_verdict(id) FROM commits WHERE title LIKE '$1%'"; }
pos() { pg_psql "SELECT position FROM commits WHERE title LIKE '$1%'"; }
bug="softmax: vectorised"
broken="softmax: tidy launch"
fix="softmax: handle the tail"
[[ $(verdict "$bug") == regressed ]] || fail "the softmax-breaking commit is '$(verdict "$bug")'"
[[ $(verdict "$broken") == build_failed ]] || fail "the commit that does not compile is '$(verdict "$broken")'"
# The fix closes what the bug opened: improved, and each regression it raised is fixed there.
[[ $(verdict "$fix") == improved ]] || fail "the fix is '$(verdict "$fix")'"
regs=$(pg_psql "SELECT count(*), count(*) FILTER (WHERE r.state = 'fixed' AND f.title LIKE '$fix%'
	AND n.title LIKE '$bug%') FROM regressions r JOIN commits n ON n.id = regression_start(r)
	LEFT JOIN commits f ON f.id = r.fixed_commit_id WHERE r.state <> 'withdrawn'")
read -r nregs nfixed <<<"${regs//|/ }"
[[ $nregs -gt 0 && $nregs == "$nfixed" ]] ||
	fail "regressions: $nfixed of $nregs were new at the bug and fixed at the fix"
echo "ok: $nregs regressions (check x dtype), new at the bug, fixed at the fix"
# Everything before the bug and after the fix is clean (the fix itself is improved).
others=$(pg_psql "SELECT string_agg(title || '=' || commit_verdict(id), '; ') FROM commits
	WHERE (position < $(pos "$bug") OR position > $(pos "$fix")) AND commit_verdict(id) <> 'clean'")
[[ -z $others ]] || fail "commits outside the bug's range are not clean: $others"

# The failing seeds are exactly the rare shapes: C > 1024 and C % 4 != 0 (C is the last dimension).
shapes=$(pg_psql "SELECT count(*), count(*) FILTER (WHERE shape[cardinality(shape)] > 1024
	AND shape[cardinality(shape)] % 4 <> 0) FROM trials t JOIN commits c ON c.id = t.commit_id
	WHERE c.title LIKE '$bug%' AND t.outcome <> 'pass'")
read -r nfail nrare <<<"${shapes//|/ }"
[[ $nfail -gt 0 && $nfail == "$nrare" ]] || fail "failing shapes: $nrare of $nfail have C > 1024 and C % 4 != 0"
echo "ok: $(verdict "$bug") with $nfail failing trials, all with C > 1024 and C % 4 != 0"

# The API says the same, and the CLI's ci-wait exits 1 on the regression and 0 on the fix.
sha=$(pg_psql "SELECT sha FROM commits WHERE title LIKE '$bug%'")
nw_api "/api/v1/commits/$sha" | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["verdict"] == "regressed", c["verdict"]
bad = [k for k in c["checks"] if k["verdict"] == "regressed"]
assert bad and all(k["check"].startswith("softmax.") for k in bad), bad
for k in bad:
    assert k["failing_seeds"], k
    for s in k["failing_seeds"]:
        assert s["shape"][-1] > 1024 and s["shape"][-1] % 4 != 0, s
        assert "--seed %d" % s["seed"] in s["repro"], s
' || fail "the API's answer for the regressed commit is wrong"
rc=0
NUMWATCH_URL="http://127.0.0.1:$NW_PORT" "$NW_BUILD_DIR/daemon/numwatch" ci-wait "$sha" --timeout 10 >/dev/null || rc=$?
[[ $rc == 1 ]] || fail "ci-wait on the regressed commit exited $rc, not 1"
fixsha=$(pg_psql "SELECT sha FROM commits WHERE title LIKE '$fix%'")
NUMWATCH_URL="http://127.0.0.1:$NW_PORT" "$NW_BUILD_DIR/daemon/numwatch" ci-wait "$fixsha" --timeout 10 >/dev/null ||
	fail "ci-wait on the fix did not exit 0"
echo "ok: API and ci-wait agree ($ncommits commits)"
