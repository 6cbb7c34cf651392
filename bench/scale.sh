#!/usr/bin/env bash
# bench/scale.sh [COMMITS [TRIALS]]: issue 13's scale at any size. Runs
# tests/integration/scale_history.sh (its assertions included) with COMMITS
# generated commits (2000) of TRIALS plan trials per check x dtype (256), and
# prints the latency of every query path as a markdown section for
# docs/benchmarks.md ("Judgement at scale"): the SQL functions timed with
# EXPLAIN ANALYZE before the daemon starts, the API pages with curl, and every
# statement the daemon ran, from PostgreSQL's log (calls, median, max, total).
#
# Environment: NW_BUILD_DIR (the build tree; build/), NW_BENCH_DOC (append the
# section to this file too; nothing by default).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${NW_BUILD_DIR:-$root/build}" && pwd)
commits=${1:-2000}
trials=${2:-256}

[[ -x $build/daemon/numwatchd ]] || {
	echo "bench/scale: no numwatchd in '$build/daemon' (build first)" >&2
	exit 1
}
out=$(mktemp -d /tmp/nw-bench-scale.XXXXXX)
trap 'rm -rf "$out"' EXIT
load=$(cut -d' ' -f1-3 /proc/loadavg)
start=$SECONDS
if ! NW_BUILD_DIR=$build NW_SOURCE_DIR=$root NW_SCALE_COMMITS=$commits NW_SCALE_TRIALS=$trials \
	NW_SCALE_REPORT=$out/report.tsv "$root/tests/integration/scale_history.sh" >"$out/run.log" 2>&1; then
	tail -n 40 "$out/run.log" >&2
	echo "bench/scale: the run failed (above)" >&2
	exit 1
fi
took=$((SECONDS - start))

{
	echo "### Judgement at scale: $(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
	echo
	echo "\`bench/scale.sh $commits $trials\` ($(git -C "$root" rev-parse --short HEAD)): $commits generated commits"
	echo "of $trials plan trials per check x dtype (4 pairs), 3 more through the daemon; the whole run"
	echo "took $took s, load average $load at its start (the machine is shared)."
	grep -E '^(generated|bisections|the daemon)' "$out/run.log" | sed 's/^/    /'
	echo
	echo "| path | calls | median ms | max ms | total ms |"
	echo "| --- | ---: | ---: | ---: | ---: |"
	awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$out/report.tsv"
	echo
} >"$out/section.md"
cat "$out/section.md"
[[ -z ${NW_BENCH_DOC:-} ]] || cat "$out/section.md" >>"$NW_BENCH_DOC"
