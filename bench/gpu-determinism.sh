#!/usr/bin/env bash
# bench/gpu-determinism.sh PREBUILT [SEEDS] [REPEATS]: on the GPU host, runs
# every check x dtype of each demo commit's CUDA runner given as SHA prefixes
# in $COMMITS (default: the newest one) for seeds 0..SEEDS-1 (500) with
# REPEATS repeats each (4), and counts the trials whose repeats gave
# different digests. A check that claims determinism must count none on a
# clean commit: since a deterministic check's differing digests fail the
# trial (daemon/slot.c), a false claim would fail every commit. PREBUILT is
# the folder bench/gpu-prebuild.sh wrote (its prebuilt/ and blobs/); the
# runner needs libjansson (LD_LIBRARY_PATH). Prints one line per check x
# dtype: commit, check, dtype, deterministic=CLAIM, trials, failed, differed,
# differed but passed (fewer trials than SEEDS: the runner stopped or timed out).
set -euo pipefail
pre=${1:?usage: gpu-determinism.sh PREBUILT [SEEDS] [REPEATS]}
seeds=${2:-500}
repeats=${3:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
commits=${COMMITS:-$(git -C "$pre/repo" rev-parse HEAD 2>/dev/null)}
count() {
	python3 -c '
import json, sys
n = failed = differed = only = 0
for line in sys.stdin:
    try:
        t = json.loads(line)
    except ValueError:
        continue
    d, f = (t.get("digests_differ") or 0) > 0, t.get("verdict") == "fail"
    n, failed, differed, only = n + 1, failed + f, differed + d, only + (d and not f)
print(n, failed, differed, only)'
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "no nvidia-smi: not a GPU host"
for prefix in $commits; do
	sha=$(cd "$pre/prebuilt" && ls | grep "^$prefix" | head -1 || true)
	if [[ -z $sha ]] || ! blob=$(cat "$pre/prebuilt/$sha") || [[ $blob == FAILED ]]; then
		echo "$prefix: no runner built for it in $pre/prebuilt" >&2
		continue
	fi
	xz -dc "$pre/blobs/$blob/numwatch-runner-cuda.xz" >"$tmp/runner" && chmod +x "$tmp/runner"
	"$tmp/runner" --list 2>/dev/null | python3 -c '
import json, sys
for c in json.load(sys.stdin)["checks"]:
    for d in c["dtypes"]:
        print(c["check"], d, "true" if c["deterministic"] else "false")' >"$tmp/checks" || {
		echo "${sha:0:12}: cannot list the runner's checks" >&2
		continue
	}
	while read -r check dtype det; do
		echo "${sha:0:12} $check $dtype deterministic=$det $( (timeout 300 "$tmp/runner" --check "$check" \
			--dtype "$dtype" --seed 0 --count "$seeds" --repeats "$repeats" 2>/dev/null || true) | count)"
	done <"$tmp/checks"
done
