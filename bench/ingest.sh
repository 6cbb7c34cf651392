#!/usr/bin/env bash
# bench/ingest.sh [BUILD_DIR] [ROWS]: trial rows per second through the daemon's
# storage path against a plain COPY of the same rows, on a private PostgreSQL
# with default durability settings. Appends the result to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rows=${2:-200000}
dir=$(mktemp -d /tmp/nw-bench-ingest.XXXXXX)
trap '"$root/scripts/pgcluster" destroy "$dir" >/dev/null 2>&1 || true' EXIT
NW_DATABASE=$("$root/scripts/pgcluster" start "$dir")
export NW_DATABASE
result=$("$build/bench/ingest" "$rows")
echo "$result"
eval "$result" # rows= store_rows_per_s= copy_rows_per_s= ratio=
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
section=$(mktemp)
{
	echo
	echo "### Ingest: $(date -u +%Y-%m-%d), $(nproc) cores ($cpu)"
	echo
	echo "Command: \`bench/ingest.sh $build $rows\` (PostgreSQL $(pg_config --version 2>/dev/null | awk '{print $2}'), default fsync)."
	echo
	echo "| path | rows/s |"
	echo "| --- | ---: |"
	echo "| numwatchd store (batched COPY on its 2 connections; rows already stored through a staging table, ON CONFLICT DO NOTHING) | $store_rows_per_s |"
	echo "| plain COPY of the same rows | $copy_rows_per_s |"
	echo "| ratio | $ratio |"
} >"$section"
# The newest result goes right under the ingest section's marker.
python3 - "$root/docs/benchmarks.md" "$section" <<'PY'
import sys
doc, new = open(sys.argv[1]).read(), open(sys.argv[2]).read()
marker = "<!-- ingest results are appended below by bench/ingest.sh -->\n"
doc = doc.replace(marker, marker + new, 1) if marker in doc else doc + new
open(sys.argv[1], "w").write(doc)
PY
rm -f "$section"
