#!/usr/bin/env bash
# bench/ingest.sh [BUILD_DIR] [ROWS]: trial rows per second through the daemon's
# storage path against a plain COPY of the same rows into the same table, and
# the server's cost a row, on a private PostgreSQL with default durability
# settings and pg_stat_statements. Appends the result to docs/benchmarks.md.
#
# Environment:
#   SHAPE=gpu|small       rows like the C suite's answers on a GPU (bench/ingest-answers.jsonl:
#                         8 checks x 3 dtypes, 1 to 3 tensors), or issue 2's one-tensor row
#                         (default gpu)
#   CONNECTIONS="2 4 8"   the store's connections, one run each (default 2)
#   ROUNDS=N              rounds of each path per run, medians reported (default 3)
#   SCHEMA=075            the trials table as before sql/080 (bench/ingest-075.sql)
#   NW_INGEST_NO_DOC=1    print the table, leave docs/benchmarks.md alone
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rows=${2:-200000}
shape=${SHAPE:-gpu}
conns=${CONNECTIONS:-2}
rounds=${ROUNDS:-3}
schema=${SCHEMA:-}
case $shape in
gpu) answers=(-a "$root/bench/ingest-answers.jsonl") ;;
small) answers=() ;;
*)
	echo "ingest.sh: SHAPE must be gpu or small, not '$shape'" >&2
	exit 2
	;;
esac
case $schema in
'' | 075) ;;
*)
	echo "ingest.sh: SCHEMA must be empty or 075, not '$schema'" >&2
	exit 2
	;;
esac
dir=$(mktemp -d /tmp/nw-bench-ingest.XXXXXX)
trap '"$root/scripts/pgcluster" destroy "$dir" >/dev/null 2>&1 || true' EXIT
NW_DATABASE=$("$root/scripts/pgcluster" start "$dir")
export NW_DATABASE
pgsql() { psql -XAtq -d "$NW_DATABASE" -c "$1"; }
# pg_stat_statements: the COPYs' statement time (the server's time a row, waits included).
if pgsql "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null &&
	"$root/scripts/pgcluster" restart "$dir" >/dev/null && pgsql "CREATE EXTENSION pg_stat_statements" >/dev/null; then
	:
else
	echo "ingest.sh: no pg_stat_statements: no statement times" >&2
fi
# The postmaster: the server's CPU is its children's.
NW_PG_PID=$(psql -XAtq -d "$NW_DATABASE" -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" |
	xargs -r ps -o ppid= -p | xargs)
export NW_PG_PID
"$build/bench/ingest" -m
[[ $schema != 075 ]] || psql -XAtq -v ON_ERROR_STOP=1 -d "$NW_DATABASE" -f "$root/bench/ingest-075.sql" >/dev/null
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
section=$(mktemp)
{
	echo
	echo "### Ingest: $(date -u +%Y-%m-%d), $(nproc) cores ($cpu)"
	echo
	echo "Command: \`SHAPE=$shape CONNECTIONS=\"$conns\" ROUNDS=$rounds${schema:+ SCHEMA=$schema} bench/ingest.sh BUILD $rows\`" \
		"(PostgreSQL $(pg_config --version 2>/dev/null | awk '{print $2}'), default fsync; trials table" \
		"${schema:-as migrated}; medians of $rounds rounds). Server time: the COPYs' statement time" \
		"(pg_stat_statements) a row; server CPU: every server process's CPU a row."
	echo
	echo "| store connections | store rows/s | plain COPY rows/s | ratio | store server µs/row | COPY server µs/row | store server CPU µs/row | COPY server CPU µs/row |"
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} >"$section"
for n in $conns; do
	result=$("$build/bench/ingest" "${answers[@]}" -c "$n" -r "$rounds" "$rows")
	echo "$result"
	# rows= shape= tensor_bytes= connections= rounds= store_rows_per_s= copy_rows_per_s= ratio=
	# store_server_us= copy_server_us= store_cpu_us= copy_cpu_us=
	eval "$result"
	# shellcheck disable=SC2154 # set by the eval
	echo "| $connections | $store_rows_per_s | $copy_rows_per_s | $ratio | $store_server_us | $copy_server_us | $store_cpu_us | $copy_cpu_us |" >>"$section"
done
# shellcheck disable=SC2154
printf '\nRows: %s, %s bytes of tensors JSON a row on average.\n' "$shape" "$tensor_bytes" >>"$section"
if [[ ${NW_INGEST_NO_DOC:-0} == 1 ]]; then
	cat "$section"
	rm -f "$section"
	exit 0
fi
# The newest result goes right under the ingest section's marker.
python3 - "$root/docs/benchmarks.md" "$section" <<'PY'
import sys
doc, new = open(sys.argv[1]).read(), open(sys.argv[2]).read()
marker = "<!-- ingest results are appended below by bench/ingest.sh -->\n"
doc = doc.replace(marker, marker + new, 1) if marker in doc else doc + new
open(sys.argv[1], "w").write(doc)
PY
rm -f "$section"
