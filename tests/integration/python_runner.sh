#!/usr/bin/env bash
# The Python runner SDK end to end (kernels/python): the SDK's own self-test,
# then the real daemon, a private PostgreSQL and a git repository whose
# commits hold versions of pylib.py (the watched library). Each commit's build
# copies the SDK, the example runner and that commit's pylib.py into the build
# directory, and runner_host names the runner script. The commit that drops
# the odd element of long rows is regressed, with failing seeds only on shapes
# with cols > 256 and cols odd; the commits before it are clean, and the fix is improved.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
py=$NW_SOURCE_DIR/kernels/python
per_commit=${NW_PY_TRIALS:-40}
tail_mark='# the odd element left after the pairs'
start=$SECONDS

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-py.XXXXXX")
nw_atexit rm -rf "$work"

# The SDK's unit-level self-test, on a copy so that the source tree gets no __pycache__.
cp -R "$py" "$work/sdk"
if ! out=$(cd "$work/sdk" && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest 2>&1); then
	echo "$out" >&2
	fail "the SDK's self-test (kernels/python/test_numwatch_runner.py) failed"
fi
echo "ok: SDK self-test: $(grep -E '^Ran ' <<<"$out")"

pg_start

# The watched library's history: good, a commit that does not touch the code,
# the bug (the odd tail of long rows forgotten), the fix.
repo=$work/repo
git init -q -b main "$repo"
commit() { git -C "$repo" add -A && git -C "$repo" -c user.name="Pat Lib" -c user.email=pat@example.com commit -qm "$1"; }
cp "$py/pylib.py" "$repo/pylib.py"
commit "pylib: rmsnorm forward and backward"
echo "pylib: RMSNorm in pure Python." >"$repo/README"
commit "docs: a README"
sed "/$tail_mark/,+1d" "$py/pylib.py" >"$repo/pylib.py"
[[ $(diff "$py/pylib.py" "$repo/pylib.py" | grep -c '^<') == 2 ]] || fail "the planted bug did not apply to pylib.py"
commit "pylib: simplify the paired loop of long rows"
cp "$py/pylib.py" "$repo/pylib.py"
commit "pylib: add the odd element of long rows back"

# The runner file embeds the hash of the library it runs, so that a commit
# whose pylib.py is unchanged builds a byte-identical runner (and a change
# to pylib.py gives a new runner hash).
NW_PORT=$(nw_free_port)
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = pylib
url = $repo
poll_interval = 1
[build]
command = B="\$NUMWATCH_BUILD_DIR" && cp -R "$py/numwatch_runner" pylib.py "\$B/" && rm -rf "\$B/numwatch_runner/__pycache__" && { cat "$py/example_runner.py"; printf '# pylib.py sha256 %s\n' "\$(sha256sum <pylib.py | cut -c1-64)"; } >"\$B/pyrunner" && chmod +x "\$B/pyrunner"
runner_host = pyrunner
timeout = 60
[trials]
per_commit = $per_commit
timeout = 20
hello_timeout = 20
[slots]
slots = host, host
[http]
port = $NW_PORT
CONF
"$NUMWATCHD" --config "$work/nw.conf" --check-config >/dev/null || fail "the config was refused"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
all_four() { [[ $(pg_psql "SELECT count(*) FROM commits") == 4 ]] && nw_all_final; }
nw_wait 150 "every commit has a final verdict" all_four
echo "ok: 4 commits judged in $((SECONDS - start)) s ($(pg_psql "SELECT count(*) FROM trials") trials)"

sha() { pg_psql "SELECT sha FROM commits WHERE title = '$1'"; }
verdict() { pg_psql "SELECT commit_verdict(id) FROM commits WHERE title = '$1'"; }
good="pylib: rmsnorm forward and backward"
docs="docs: a README"
bug="pylib: simplify the paired loop of long rows"
fix="pylib: add the odd element of long rows back"
for t in "$good" "$docs"; do
	[[ $(verdict "$t") == clean ]] || fail "'$t' is '$(verdict "$t")', not clean"
done
# The fix closes the regression the bug opened.
[[ $(verdict "$fix") == improved ]] || fail "the fix is '$(verdict "$fix")', not improved"
[[ $(verdict "$bug") == regressed ]] || fail "the bug commit is '$(verdict "$bug")', not regressed"

# The runner declared its checks, and every check x dtype ran every seed.
decl=$(pg_psql "SELECT string_agg(name || ':' || array_to_string(dtypes, ',') || ':' || array_to_string(families, ',')
	|| ':' || deterministic, ' ' ORDER BY name) FROM checks")
want="rmsnorm.bwd:f32,f16,bf16:aligned,tail,threshold,tiny,extreme:true"
want="$want rmsnorm.fwd:f32,f16,bf16:aligned,tail,threshold,tiny,extreme:true"
[[ $decl == "$want" ]] || fail "declared checks: $decl"
# (Bisection probes may add fresh seeds past the plan's; those are not counted here.)
runs=$(pg_psql "SELECT count(*) FROM stats s WHERE (SELECT count(DISTINCT seed) FROM trials t WHERE t.commit_id = s.commit_id
	AND t.check_id = s.check_id AND t.dtype = s.dtype AND t.seed < $per_commit AND t.outcome <> 'infra_error') = $per_commit")
[[ $runs == 24 ]] || fail "$runs of 24 commit x check x dtype runs have all $per_commit seeds"

# What the SDK reports is stored whole: family, shape, gen, per-tensor fields, digests, time.
odd=$(pg_psql "SELECT count(*) FROM trials WHERE outcome NOT IN ('pass', 'fail') OR gen IS DISTINCT FROM 1
	OR family IS NULL OR cardinality(shape) <> 2 OR digest !~ '^[0-9a-f]{16}$' OR digests_differ <> 0
	OR kernel_us IS NULL OR json_array_length(tensors) <> (CASE WHEN check_id =
	(SELECT id FROM checks WHERE name = 'rmsnorm.bwd') THEN 2 ELSE 1 END)")
[[ $odd == 0 ]] || fail "$odd trials lack what the Python runner reports (or were not pass/fail)"
names=$(pg_psql "SELECT string_agg(DISTINCT t->>'name', ',' ORDER BY t->>'name') FROM trials, json_array_elements(tensors) t")
[[ $names == "dw,dx,y" ]] || fail "tensor names stored: $names"
families=$(pg_psql "SELECT count(DISTINCT family) FROM trials")
[[ $families == 5 ]] || fail "$families families ran, not 5"

# Failing trials: on the bug commit only, and only with cols > 256 and cols odd (cols is shape[2]).
elsewhere=$(pg_psql "SELECT count(*) FROM trials t JOIN commits c ON c.id = t.commit_id
	WHERE c.title <> '$bug' AND t.outcome <> 'pass'")
[[ $elsewhere == 0 ]] || fail "$elsewhere trials failed outside the bug commit (false alarms)"
shapes=$(pg_psql "SELECT count(*), count(*) FILTER (WHERE shape[2] > 256 AND shape[2] % 2 = 1),
	count(DISTINCT seed) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.title = '$bug' AND t.outcome <> 'pass'")
IFS='|' read -r nfail nodd nseeds <<<"$shapes"
[[ $nfail -gt 0 && $nfail == "$nodd" ]] || fail "failing shapes on the bug commit: $nodd of $nfail have cols > 256 and odd"
regressed=$(pg_psql "SELECT string_agg(k.name || '/' || s.dtype, ',' ORDER BY k.name, s.dtype) FROM stats s
	JOIN checks k ON k.id = s.check_id JOIN commits c ON c.id = s.commit_id WHERE c.title = '$bug' AND s.verdict = 'regressed'")
[[ $regressed == *rmsnorm.fwd/f32* && $regressed == *rmsnorm.bwd/f32* ]] || fail "regressed runs: $regressed"
# Every odd long row the bug commit ran at f32 failed, except where the dropped x^2 was too small to see.
missed=$(pg_psql "SELECT count(*) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.title = '$bug'
	AND t.dtype = 'f32' AND t.seed < $per_commit AND shape[2] > 256 AND shape[2] % 2 = 1 AND t.outcome = 'pass'")
total=$(pg_psql "SELECT count(*) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.title = '$bug'
	AND t.dtype = 'f32' AND t.seed < $per_commit AND shape[2] > 256 AND shape[2] % 2 = 1")
((missed * 4 <= total)) || fail "the bug went unseen on $missed of $total odd long rows at f32"
echo "ok: '$bug' regressed ($regressed): $nfail failing trials over $nseeds seeds, all with cols > 256 and odd; the commits before it clean, the fix improved"

# Same library, same runner bytes: the docs commit's runner hash is the first commit's; the bug's differs.
h() { pg_psql "SELECT runner_hash FROM builds b JOIN commits c ON c.id = b.commit_id WHERE c.title = '$1'"; }
[[ -n $(h "$good") && $(h "$good") == "$(h "$docs")" ]] || fail "runner hashes of identical libraries differ"
[[ $(h "$bug") != "$(h "$docs")" && $(h "$fix") == "$(h "$good")" ]] || fail "runner hashes do not follow pylib.py"

# The API says the same, with seeds and shapes, and ci-wait agrees.
bugsha=$(sha "$bug")
nw_api "/api/v1/commits/$bugsha" >"$work/bug.json" || fail "GET /api/v1/commits/$bugsha failed"
python3 - "$work/bug.json" >"$work/repro" <<'PY' || fail "the API's answer for the bug commit is wrong: $(head -c 600 "$work/bug.json")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["verdict"] == "regressed", c["verdict"]
bad = [k for k in c["checks"] if k["verdict"] == "regressed"]
assert bad and all(k["check"].startswith("rmsnorm.") for k in bad), bad
assert all(k["verdict"] == "clean" for k in c["checks"] if k not in bad), c["checks"]
for k in bad:
    assert k["failing_seeds"], k
    for s in k["failing_seeds"]:
        assert s["outcome"] == "fail", s
        assert s["shape"][1] > 256 and s["shape"][1] % 2 == 1, s
        assert "--seed %d" % s["seed"] in s["repro"], s
        ts = s["tensors"]
        assert any(t["ratio"] is None or t["ratio"] > 1 for t in ts), ts  # each gradient apart: one is off
        assert all({"max_abs", "max_ulp", "worst", "budget", "plain_max_abs"} <= set(t) for t in ts), ts
s = bad[0]["failing_seeds"][0]
print(s["repro"].split(" ", 1)[1])  # the arguments, without the program name
PY
rc=0
NUMWATCH_URL="http://127.0.0.1:$NW_PORT" "$NW_BUILD_DIR/daemon/numwatch" ci-wait "$bugsha" --timeout 10 >/dev/null || rc=$?
[[ $rc == 1 ]] || fail "ci-wait on the bug commit exited $rc, not 1"
NUMWATCH_URL="http://127.0.0.1:$NW_PORT" "$NW_BUILD_DIR/daemon/numwatch" ci-wait "$(sha "$fix")" --timeout 10 >/dev/null ||
	fail "ci-wait on the fix did not exit 0"
echo "ok: API and ci-wait agree"

# The repro command, run with the Python runner in the builds of the bug and of the fix.
read -r -a args <"$work/repro"
rc=0
(cd "$work/state/builds/$bugsha" && ./pyrunner "${args[@]}") >"$work/repro.bug" 2>"$work/repro.err" || rc=$?
if [[ $rc != 1 ]] || ! grep -q '"verdict":"fail"' "$work/repro.bug"; then
	fail "repro '${args[*]}' in the bug's build: exit $rc: $(cat "$work/repro.bug" "$work/repro.err")"
fi
(cd "$work/state/builds/$(sha "$fix")" && ./pyrunner "${args[@]}") >"$work/repro.fix" 2>&1 ||
	fail "repro '${args[*]}' fails in the fix's build: $(cat "$work/repro.fix")"
echo "ok: repro '${args[*]}' fails in the bug's build and passes in the fix's"
echo "ok: python_runner done in $((SECONDS - start)) s"
