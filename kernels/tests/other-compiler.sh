#!/usr/bin/env bash
# other-compiler.sh RUNNER: the suite as a watched library's own toolchain
# builds it (kernels/ standalone, clang instead of the project's gcc, with
# -Werror) must build, and give the same trial answers as RUNNER (the
# project's host runner) on every check x dtype: the same shapes, data,
# references and verdicts, whatever compiled them (kernel_us aside; the
# digests too, since the demo library's outputs are the same bits). The
# suite's exact arithmetic (-ffp-contract=off, no FMA, its own f16
# rounding) is what makes that hold.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
gcc_runner=${1:?usage: other-compiler.sh RUNNER}
seeds=${NW_OTHER_COMPILER_SEEDS:-12}
if ! command -v clang >/dev/null; then
	echo "skipped: no clang"
	exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/nw-clang.XXXXXX")
trap 'rm -rf "$work"' EXIT
CC=clang timeout 600 cmake -S "$root/kernels" -B "$work/build" -DNW_CUDA=OFF -DNW_KERNELS_WERROR=ON \
	-DCMAKE_BUILD_TYPE=Release >"$work/log" 2>&1 || { cat "$work/log"; echo "FAIL: configure with clang"; exit 1; }
timeout 600 cmake --build "$work/build" -j"$(nproc)" >>"$work/log" 2>&1 || {
	tail -30 "$work/log"
	echo "FAIL: the suite does not build with clang"
	exit 1
}
clang_runner=$work/build/numwatch-runner-host
strip_times() { python3 -c '
import json, sys
for line in sys.stdin:
    j = json.loads(line)
    j.pop("kernel_us", None)
    print(json.dumps(j, sort_keys=True))'; }
pairs=$("$gcc_runner" --list | python3 -c '
import json, sys
for c in json.load(sys.stdin)["checks"]:
    for d in c["dtypes"]:
        print(c["check"], d)')
n=0
while read -r check dtype; do
	a=$(timeout 300 "$gcc_runner" --check "$check" --dtype "$dtype" --seed 0 --count "$seeds" 2>/dev/null | strip_times || true)
	b=$(timeout 300 "$clang_runner" --check "$check" --dtype "$dtype" --seed 0 --count "$seeds" 2>/dev/null | strip_times || true)
	[[ -n $a ]] || { echo "FAIL: no answers from the project's runner for $check $dtype"; exit 1; }
	if [[ $a != "$b" ]]; then
		diff <(echo "$a") <(echo "$b") | head -6
		echo "FAIL: $check $dtype: the clang build answers differently"
		exit 1
	fi
	n=$((n + 1))
done <<<"$pairs"
echo "ok: built with $(clang --version | head -1); $n check x dtype pairs, $seeds seeds each, the same answers as the project's build"
