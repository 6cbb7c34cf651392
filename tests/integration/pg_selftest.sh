#!/usr/bin/env bash
# Checks tests/lib/pg.sh: a test gets a working private cluster, and the cluster
# is gone after pg_stop, after SIGTERM to the test, and after SIGKILL to it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/../lib/pg.sh
. "$here/../lib/pg.sh"

checks=0
fail() {
	echo "pg_selftest: FAIL: $*" >&2
	exit 1
}
ok() {
	checks=$((checks + 1))
	echo "pg_selftest: ok: $*"
}

# Waits up to $2 seconds for directory $1 to disappear.
gone_within() {
	local dir=$1 deadline=$((SECONDS + $2))
	while [[ -e $dir ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# Prints PID and all its descendants, parents first.
descendants() {
	local p
	echo "$1"
	for p in $(ps -o pid= --ppid "$1"); do
		descendants "$p"
	done
}

# Stops a process tree, then kills all of it, as ctest does at a test's timeout.
kill_tree() {
	local -a pids
	mapfile -t pids < <(descendants "$1")
	kill -STOP "${pids[@]}" 2>/dev/null || true
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

# Starts a test-like child that takes a cluster and idles; prints its PID and
# the cluster directory.
start_child() {
	local out=$1
	bash -c '
		set -euo pipefail
		. "$1"
		pg_start
		echo "$NW_PG_DIR" >"$2"
		while :; do sleep 0.2; done
	' child "$here/../lib/pg.sh" "$out" </dev/null >/dev/null 2>&1 &
	child=$!
	local deadline=$((SECONDS + 30))
	until [[ -s $out ]]; do
		kill -0 "$child" 2>/dev/null || fail "child test exited before its cluster started"
		((SECONDS < deadline)) || fail "child test's cluster did not start within 30 s"
		sleep 0.1
	done
	child_dir=$(cat "$out")
}

pg_start
dir=$NW_PG_DIR
port=$NW_PGPORT
[[ -f $dir/data/PG_VERSION ]] || fail "no data directory in '$dir' after pg_start"
[[ $NW_DATABASE == "host=127.0.0.1 port=$NW_PGPORT dbname=numwatch user=numwatch" ]] ||
	fail "unexpected NW_DATABASE '$NW_DATABASE'"
ok "pg_start made a cluster in $dir ($NW_DATABASE)"

pg_psql "CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)"
pg_psql "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) AS g"
n=$(pg_psql "SELECT count(*) FROM t")
[[ $n == 100 ]] || fail "expected 100 rows, counted '$n'"
[[ $(pg_psql "SHOW fsync") == off ]] || fail "test cluster runs with fsync on"
[[ $(pg_psql "SHOW listen_addresses") == 127.0.0.1 ]] || fail "test cluster listens beyond 127.0.0.1"
if pg_psql "SELECT * FROM no_such_table" 2>/dev/null; then
	fail "pg_psql succeeded on a failing statement"
fi
ok "created a table, inserted and counted 100 rows; a bad statement fails"

pg_stop
[[ ! -e $dir ]] || fail "'$dir' still exists after pg_stop"
if psql -XAtq -d "host=127.0.0.1 port=$port dbname=numwatch user=numwatch connect_timeout=5" \
	-c 'SELECT 1' >/dev/null 2>&1; then
	fail "server still answers on port $port after pg_stop"
fi
ok "pg_stop stopped the server and deleted '$dir'"

tmp=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-pg-selftest.XXXXXX")
nw_atexit rm -rf "$tmp"

start_child "$tmp/term"
kill -TERM "$child"
wait "$child" 2>/dev/null || true
gone_within "$child_dir" 30 || fail "'$child_dir' still exists 30 s after SIGTERM to its test"
ok "SIGTERM to a test removed its cluster"

# ctest kills a timed-out test with SIGKILL, and every process it started too.
start_child "$tmp/kill"
kill_tree "$child"
wait "$child" 2>/dev/null || true
gone_within "$child_dir" 30 || fail "'$child_dir' still exists 30 s after SIGKILL to its test's process tree"
ok "SIGKILL to a test and all its descendants removed its cluster (watcher)"

echo "pg_selftest: $checks passed, 0 failed"
