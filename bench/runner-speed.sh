#!/usr/bin/env bash
# bench/runner-speed.sh NEW [OLD]: the C runner's trial rate against plain PyTorch loops of the
# same checks (issue 17: at least 3x for softmax.fwd and attention.fwd f32), on a GPU host, from
# the repo root. NEW and OLD are numwatch-runner-cuda binaries of the same library commit
# (OLD: the runner before a change to the SDK).
#
#   1. ROUNDS rounds, each: bench/torch_loop.py (TRIALS trials of each check x dtype), then each
#      runner's command line on TRIALS seeds (NW_TIMING=1: its own rate, start-up and first trial
#      left out). Prints each round's rates and the medians of the ratios.
#   2. NW_TIMING's breakdown of a trial, each runner, each check x dtype.
#   3. With OLD: both runners' answers on SEEDS seeds of every check x dtype (REPEATS kernel runs
#      each), kernel_us left out, must be identical line for line: the references, comparisons
#      and digests unchanged. A check that declares itself non-deterministic (atomics) may give
#      other output bits on any run: its answers are compared as their case and verdict only.
#
# Environment: ROUNDS=5 TRIALS=500 SEEDS=100 CHECKS="softmax.fwd attention.fwd" DTYPES="f32 bf16",
# NW_GPU_DEBS=.gpu (a host without libjansson: its debs/ are unpacked first, as gpu-suite.sh does).
# The machine's own python3 (torch) runs with the machine's LD_LIBRARY_PATH.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
new=$(realpath "${1:?usage: runner-speed.sh NEW_RUNNER [OLD_RUNNER]}")
old=${2:+$(realpath "$2")}
rounds=${ROUNDS:-5}
trials=${TRIALS:-500}
seeds=${SEEDS:-100}
repeats=${REPEATS:-2}
checks=${CHECKS:-softmax.fwd attention.fwd}
dtypes=${DTYPES:-f32 bf16}
# shellcheck source=bench/gpu-common.sh
source bench/gpu-common.sh
[[ -d ${NW_GPU_DEBS:-.gpu}/debs ]] && gpu_runtime "${NW_GPU_DEBS:-.gpu}" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rate_of() { # RUNNER CHECK DTYPE: trials/s by NW_TIMING
	NW_TIMING=1 timeout 300 "$1" --check "$2" --dtype "$3" --seed 1000 --count "$trials" 2>&1 >/dev/null |
		awk '/trials\/s from the end/ {print $2}'
}

gpu_host nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
echo "date $(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo "## Rates (trials/s), $rounds rounds of $trials trials"
echo
printf '%-14s %-5s %5s %10s %10s %10s\n' check dtype round torch new old
for ((r = 1; r <= rounds; r++)); do
	gpu_host python3 bench/torch_loop.py --trials "$trials" --checks "${checks// /,}" --dtypes "${dtypes// /,}" \
		>"$work/torch" 2>&1 || cat "$work/torch"
	while read -r _ check dtype _ _ trate _; do
		n=$(rate_of "$new" "$check" "$dtype")
		o=-
		[[ -n $old ]] && o=$(rate_of "$old" "$check" "$dtype")
		printf '%-14s %-5s %5d %10s %10s %10s\n' "$check" "$dtype" "$r" "$trate" "${n:-0}" "${o:-0}"
		echo "$check $dtype $trate ${n:-0} ${o:-0}" >>"$work/rates"
	done < <(grep '^torch ' "$work/torch")
done
echo
python3 - "$work/rates" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    check, dtype, t, n, o = line.split()
    rows.setdefault((check, dtype), []).append((float(t), float(n), float(o) if o != "-" else 0.0))
print("| check | dtype | PyTorch loop | C runner (new) | new / loop | C runner (old) | old / loop |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for (check, dtype), v in rows.items():
    med = lambda xs: statistics.median(xs)
    t, n, o = med([x[0] for x in v]), med([x[1] for x in v]), med([x[2] for x in v])
    rn = med([x[1] / x[0] for x in v])
    ro = med([x[2] / x[0] for x in v])
    print("| %s | %s | %.1f | %.1f | **%.2fx** [%.2f-%.2f] | %s | %s |" % (
        check, dtype, t, n, rn, min(x[1] / x[0] for x in v), max(x[1] / x[0] for x in v),
        "%.1f" % o if o else "-", "%.2fx" % ro if o else "-"))
PY
echo
echo "## Where a trial goes (NW_TIMING=1, $trials trials, microseconds)"
echo
for check in $checks; do
	for dtype in $dtypes; do
		for side in new old; do
			bin=$new
			[[ $side == old ]] && { [[ -n $old ]] || continue; bin=$old; }
			printf '%-4s %-14s %-5s ' "$side" "$check" "$dtype"
			NW_TIMING=1 timeout 300 "$bin" --check "$check" --dtype "$dtype" --seed 1000 --count "$trials" 2>&1 >/dev/null |
				grep '^timing: [0-9]* trials,' | sed 's/^timing: //'
		done
	done
done
[[ -n $old ]] || exit 0
echo
echo "## Answers of both runners, $seeds seeds of every check x dtype, $repeats repeats (kernel_us left out)"
echo
differ=0 total=0
while IFS=: read -r check dtype det; do
	for side in new old; do
		bin=$new
		[[ $side == old ]] && bin=$old
		timeout 600 "$bin" --check "$check" --dtype "$dtype" --seed 0 --count "$seeds" --repeats "$repeats" \
			2>/dev/null | python3 -c '
import json, sys
det = sys.argv[1] == "True"
for line in sys.stdin:
    a = json.loads(line)
    a.pop("kernel_us", None)
    if not det:  # atomics: other bits, errors and digests on any run; the case and verdict stay
        a = {k: a.get(k) for k in ("check", "dtype", "seed", "case", "verdict")}
    print(json.dumps(a, sort_keys=True))' "$det" >"$work/$side"
	done
	n=$(wc -l <"$work/new")
	d=$(diff "$work/new" "$work/old" | grep -c '^<')
	total=$((total + n))
	differ=$((differ + d))
	printf '%-14s %-5s %4d answers, %d differ\n' "$check" "$dtype" "$n" "$d"
	((d == 0)) || diff "$work/new" "$work/old" | head -4
done < <("$new" --list | python3 -c 'import json,sys
for c in json.load(sys.stdin)["checks"]:
    for d in c["dtypes"]: print(c["check"] + ":" + d + ":" + str(c["deterministic"]))')
echo
echo "answers compared: $total, differing: $differ"
((differ == 0))
