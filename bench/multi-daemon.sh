#!/usr/bin/env bash
# bench/multi-daemon.sh [BUILD_DIR] [COMMITS] [PER_COMMIT]: throughput of 1, 2
# and 4 numwatchd daemons sharing one PostgreSQL database on this machine
# (issue 16). Each daemon has two host slots, its own state directory and node
# name, and runs the fake runner (tests/integration/fake-runner: a fast
# runner, every trial passes) over a history of COMMITS (default 48) commits
# with two checks (fake.fwd, fake.x1) of PER_COMMIT (default 64) seeds each,
# from a fresh database each time (default durability: fsync on). Prints,
# per daemon count: the trials, the span from the first trial stored to the
# last (the database's clock), trials per second, each daemon's share of the
# trials and builds, and the CPU seconds PostgreSQL's processes used over the
# run (with that as a share of one core over the span): how close the
# database is to being the bottleneck. RUNS=N (default 1) repeats each daemon
# count N times. Writes nothing else.
# docs/benchmarks.md "Several daemons on one database".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export NW_BUILD_DIR=${1:-$root/build} NW_SOURCE_DIR=$root
commits=${2:-48}
per=${3:-64}
[[ -x $NW_BUILD_DIR/daemon/numwatchd ]] || { echo "multi-daemon.sh: no numwatchd in '$NW_BUILD_DIR'" >&2; exit 1; }

one_run() (
	local n=$1 d name
	. "$root/tests/lib/pg.sh"
	. "$root/tests/lib/daemon.sh"
	work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-multi-bench.XXXXXX")
	nw_atexit rm -rf "$work"
	repo=$work/repo
	git init -q -b main "$repo"
	echo good >"$repo/mode"
	echo fake.x1 >"$repo/extra_checks"
	for ((i = 0; i < commits; i++)); do
		echo "$i" >"$repo/version"
		nw_commit "$repo" "$i"
	done
	# Default durability, as in production (fsync on): not pg_start's test cluster.
	pgdir=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-multi-bench-pg.XXXXXX")
	nw_atexit "$root/scripts/pgcluster" destroy "$pgdir"
	NW_DATABASE=$("$root/scripts/pgcluster" start "$pgdir")
	export NW_DATABASE
	names=()
	for ((d = 1; d <= n; d++)); do
		name=d$d
		names+=("$name")
		mkdir -p "$work/$name"
		NW_PORT=$(nw_free_port) nw_mode_conf "$work/$name/nw.conf" bench "$repo" "$per" "$per" \
			"[daemon]\nnode_name = $name\n[repository]\nhistory_max = $commits\n[bisect]\nautomatic = false"
	done
	# CPU seconds (user + system) of every process of the cluster: its postmaster and children.
	pg_cpu() {
		local pm total=0 pid t
		pm=$(head -n 1 "$(find -L "$pgdir" -maxdepth 3 -name postmaster.pid | head -n 1)")
		for pid in "$pm" $(pgrep -P "$pm"); do
			t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
			total=$((total + t))
		done
		echo "$total"
	}
	cpu_before=$(pg_cpu)
	nw_fleet_start "$work" "${names[@]}"
	nw_wait 3600 "every commit judged" nw_all_final
	cpu_after=$(pg_cpu)
	hz=$(getconf CLK_TCK)
	pg_psql "SELECT count(*), round(extract(epoch FROM max(finished_at) - min(finished_at))::numeric, 1)
		FROM trials" | {
		IFS='|' read -r trials span
		python3 - "$n" "$trials" "$span" "$(( (cpu_after - cpu_before) ))" "$hz" <<'PY'
import sys
n, trials, span, ticks, hz = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cpu = ticks / hz
print("%d daemon%s: %d trials in %.1f s: %.0f trials/s; PostgreSQL %.1f CPU s (%.0f%% of one core)"
      % (n, "" if n == 1 else "s", trials, span, trials / span, cpu, 100 * cpu / span))
PY
	}
	echo "  trials by daemon: $(pg_psql "SELECT string_agg(host || ' ' || n || ' (' || round(100.0 * n / total, 0)
		|| '%)', ', ' ORDER BY host) FROM (SELECT host, count(*) AS n, sum(count(*)) OVER () AS total
		FROM trials GROUP BY host) x")"
	echo "  from the first daemon's start to the last verdict: $(pg_psql "SELECT round(extract(epoch FROM
		(SELECT max(updated_at) FROM stats) - (SELECT min(started_at) FROM daemons))::numeric, 1)") s"
	echo "  builds by host: $(pg_psql "SELECT string_agg(host || ' ' || n, ', ' ORDER BY host) FROM (SELECT host,
		count(*) AS n FROM host_builds GROUP BY host) x") (first builds: $(pg_psql "SELECT count(*) FROM builds"))"
	infra=$(pg_psql "SELECT count(*) FROM trials WHERE outcome = 'infra_error'")
	echo "  infra_error trials: $infra"
)

echo "multi-daemon: $commits commits x 2 checks x $per seeds, 2 host slots per daemon, $(nproc) cores ($(uname -m))"
for n in 1 2 4; do
	for ((r = 0; r < ${RUNS:-1}; r++)); do
		one_run "$n" 2>/dev/null
	done
done
