#!/usr/bin/env bash
# bench/flaky-verdicts.sh [BUILD_DIR] [RUNS]: how many commits of a history
# without any change come out `regressed` for a non-deterministic check that
# fails RATE% (default 2) of its trials at random (fake-runner flakyN), over N
# (default 24) commits, per_commit PER (32), max MAX (256), through the real
# numwatchd on two host slots and a private PostgreSQL (tests/lib). Prints
# each run's verdicts and count; writes nothing else. Needs the build tree's
# numwatchd (default build/). docs/benchmarks.md "Verdicts on a flaky check".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export NW_BUILD_DIR=${1:-$root/build} NW_SOURCE_DIR=$root
runs=${2:-3}
RATE=${RATE:-2} N=${N:-24} PER=${PER:-32} MAX=${MAX:-256}
[[ -x $NW_BUILD_DIR/daemon/numwatchd ]] || { echo "flaky-verdicts.sh: no numwatchd in '$NW_BUILD_DIR'" >&2; exit 1; }
one_run() (
	. "$root/tests/lib/pg.sh"
	. "$root/tests/lib/daemon.sh"
	work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-flaky-bench.XXXXXX")
	nw_atexit rm -rf "$work"
	repo=$work/repo
	git init -q -b main "$repo"
	echo good >"$repo/mode"
	echo "flaky$RATE" >"$repo/bwd_mode"
	for ((i = 0; i < N; i++)); do
		echo "$i" >"$repo/version"
		nw_commit "$repo" "$i"
	done
	pg_start
	NW_PORT=$(nw_free_port)
	nw_mode_conf "$work/nw.conf" flaky "$repo" "$PER" "$MAX"
	nw_daemon_start "$work/nw.conf" "$work/daemon.log"
	nw_wait 1800 "every commit judged" nw_all_final
	pg_psql "SELECT string_agg(c.position || ':' || s.verdict || '(' || s.failures || '/' || s.trials || ')', ' '
		ORDER BY c.position) FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
		WHERE k.name = 'fake.bwd'"
	pg_psql "SELECT count(*) FILTER (WHERE s.verdict = 'regressed') || ' of ' || count(*) || ' commits regressed'
		FROM stats s JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.bwd'"
)
echo "fake.bwd failing $RATE% at random, $N commits, per_commit $PER, max $MAX, $runs runs"
for ((r = 1; r <= runs; r++)); do
	echo "run $r:"
	one_run 2>/dev/null | sed 's/^/  /'
done
