#!/usr/bin/env bash
# timing.sh RUNNER: NW_TIMING=1 makes a runner print, at exit, its phases per
# trial and its own rate, in the format bench/gpu-suite.sh reads; without it
# the runner prints no timing at all.
set -euo pipefail
runner=${1:?usage: timing.sh RUNNER}
fail() {
	echo "FAIL: $*"
	exit 1
}
err=$(NW_TIMING=1 "$runner" --check softmax.fwd --dtype f32 --seed 0 --count 20 2>&1 >/dev/null)
python3 - "$err" <<'PY' || fail "NW_TIMING output: $err"
import re, sys
text = sys.argv[1]
m = re.search(r"^timing: 20 trials, ([0-9.]+) us per trial: generation ([0-9.]+) inputs ([0-9.]+) "
              r"reference ([0-9.]+) outputs ([0-9.]+) kernel ([0-9.]+) compare ([0-9.]+) "
              r"the rest (-?[0-9.]+) \(us\)$", text, re.M)
r = re.search(r"^timing: ([0-9.]+) trials/s from the end of the first trial to the end of the last$", text, re.M)
assert m and r, "missing line"
total, *phases = map(float, m.groups())
assert total > 0 and all(p >= 0 for p in phases[:-1]), "negative phase"
assert abs(phases[-1]) < 0.5 * total, "the timed phases miss most of a trial"
assert phases[0] > 0 and phases[2] > 0 and phases[5] > 0, "generation, reference, compare untimed"
assert float(r.group(1)) > 0
PY
[[ -z $("$runner" --check softmax.fwd --dtype f32 --seed 0 --count 2 2>&1 >/dev/null | grep '^timing:') ]] ||
	fail "timing printed without NW_TIMING"
echo "ok: $(echo "$err" | tail -1)"
