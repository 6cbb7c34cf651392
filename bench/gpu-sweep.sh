#!/usr/bin/env bash
# bench/gpu-sweep.sh [SHA]: every check x dtype of one demo commit's CUDA runner over SEEDS seeds
# (default 10000; RUNNER=host: its CPU build), straight from its command line (no daemon), a process per pair, PARALLEL at once
# (default 8): the seeds that did not pass, with their answers, so that a rare failure a run
# through the daemon counted can be named (check, dtype, seed, case, tensors). Runs on the GPU
# host from the repo root with .gpu/ carried (bench/gpu-prebuild.sh); SHA defaults to the demo
# history's newest commit. Writes $OUT/sweep.md (OUT defaults to .gpu/out-sweep).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
G=$root/.gpu
OUT=${OUT:-$G/out-sweep}
SEEDS=${SEEDS:-10000}
PARALLEL=${PARALLEL:-8}
RUNNER=${RUNNER:-cuda} # host: the CPU build of the same commit (a rehearsal without a GPU)
mkdir -p "$OUT"
# shellcheck source=bench/gpu-common.sh
. "$root/bench/gpu-common.sh"
gpu_runtime "$G"
sha=${1:-$(git -C "$G/repo" rev-parse main)}
blob=$(cat "$G/prebuilt/$sha" 2>/dev/null)
if [[ -z $blob || $blob == FAILED ]]; then
	echo "gpu-sweep: no runner built for $sha" >&2
	exit 1
fi
runner=/tmp/nw-sweep-runner
gpu_host python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
	"$G/blobs/$blob/numwatch-runner-$RUNNER.xz" "$runner" && chmod +x "$runner" || exit 1
work=$(mktemp -d /tmp/nw-sweep.XXXXXX)
"$runner" --list | gpu_host python3 -c 'import json, sys
for c in json.load(sys.stdin)["checks"]:
    for d in c["dtypes"]:
        print(c["check"], d)' >"$work/pairs" || exit 1
t0=$SECONDS
# Each pair: its answers that are not a pass (the exit status says only whether one failed).
export runner SEEDS work
# shellcheck disable=SC2016 # expanded by the bash that xargs starts
xargs -P "$PARALLEL" -L 1 bash -c 'timeout 900 "$runner" --check "$0" --dtype "$1" --seed 0 --count "$SEEDS" |
	grep -v "\"verdict\":\"pass\"" >"$work/out-$0-$1"; echo "$0 $1 $(wc -l <"$work/out-$0-$1")" >>"$work/counts"' \
	<"$work/pairs"
{
	echo "## gpu-sweep: $(date -u +%Y-%m-%d), $(gpu_host nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
	echo
	echo "Command: \`SEEDS=$SEEDS PARALLEL=$PARALLEL bench/gpu-sweep.sh $sha\`: $(wc -l <"$work/pairs") check x dtype pairs in $((SECONDS - t0)) s."
	echo
	echo "| check | dtype | seeds | not passed |"
	echo "| --- | --- | ---: | ---: |"
	sort "$work/counts" | awk -v n="$SEEDS" '{ printf "| %s | %s | %d | %d |\n", $1, $2, n, $3 }'
	echo
	for f in "$work"/out-*; do
		[[ -s $f ]] || continue
		echo "${f##*/out-}:"
		echo
		echo '```'
		cut -c1-1500 "$f" | head -n 20
		echo '```'
		echo
	done
} >"$OUT/sweep.md"
cat "$OUT/sweep.md"
rm -rf "$work"
