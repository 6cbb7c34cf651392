# shellcheck shell=bash
# A private, throw-away PostgreSQL cluster for integration tests.
#
#   . "$(dirname "$0")/../lib/pg.sh"
#   pg_start                  fresh cluster in a mktemp dir under ${NW_TEST_TMP:-/tmp};
#                             exports NW_DATABASE (a libpq conninfo), NW_PGHOST,
#                             NW_PGPORT, NW_PGUSER and NW_PG_DIR
#   pg_psql "SQL" [ARGS...]   runs SQL with psql -XAtq, stops at the first error
#   pg_restart [fast|immediate]
#                             restarts the server on the same port (pg_ctl restart
#                             -m MODE, default fast): every connection drops
#   pg_stop                   stops the cluster and deletes its directory
#   nw_atexit CMD [ARGS...]   runs CMD when the test exits, before the cluster
#                             stops (last registered, first run)
#
# The cluster is stopped and deleted when the test exits, whether it passes,
# fails, or is stopped by SIGTERM, SIGINT or SIGHUP (ctest's timeout). This
# library owns the EXIT trap: register other cleanup with nw_atexit instead of
# `trap ... EXIT`. Bash runs a trap only once the foreground command returns;
# a test that waits for long should wait with `wait $!` on a background job.
# A watcher process in its own session also deletes the cluster once the test's
# process has gone, so even SIGKILL (or ctest killing the test's process tree
# at its timeout) leaves no server behind.
#
# The server runs with fsync off (NW_PG_FAST=1): fine for tests, never for data.

_nw_pg_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NW_SOURCE_DIR=${NW_SOURCE_DIR:-$(cd "$_nw_pg_lib_dir/../.." && pwd)}
_nw_pgcluster=$NW_SOURCE_DIR/scripts/pgcluster
_nw_pg_dir=
_nw_atexit=()

# Longest a single pg_psql call may take, in seconds.
NW_PG_PSQL_TIMEOUT=${NW_PG_PSQL_TIMEOUT:-60}
# Longest the watcher outlives a test that never exits, in seconds.
_nw_pg_watch_max=$((6 * 3600))

nw_atexit() {
	local cmd
	printf -v cmd '%q ' "$@"
	_nw_atexit+=("$cmd")
}

_nw_on_exit() {
	local rc=$? i
	trap - EXIT
	for ((i = ${#_nw_atexit[@]} - 1; i >= 0; i--)); do
		eval "${_nw_atexit[i]}" || true
	done
	_nw_atexit=()
	pg_stop >/dev/null 2>&1 || true
	exit "$rc"
}

trap _nw_on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

pg_start() {
	local base=${NW_TEST_TMP:-/tmp}
	if [[ -n $_nw_pg_dir ]]; then
		echo "pg_start: a cluster is already running in '$_nw_pg_dir'" >&2
		return 1
	fi
	mkdir -p "$base" || return 1
	_nw_pg_dir=$(mktemp -d "$base/nw-pg.XXXXXX") || return 1

	# The watcher deletes the cluster once the test's process is gone, and
	# exits by itself once the cluster directory is gone (pg_stop). It is
	# started through a subshell that exits at once, so that it is nobody's
	# child: ctest kills a timed-out test's whole process tree. It must not
	# hold the test's stdout or stderr open, or ctest would wait for it.
	# shellcheck disable=SC2016 # expanded by the watcher's shell
	(setsid bash -c '
		pid=$1 dir=$2 pgcluster=$3 max=$4
		while kill -0 "$pid" 2>/dev/null && [[ -e $dir ]] && ((SECONDS < max)); do
			sleep 1
		done
		[[ ! -e $dir ]] || "$pgcluster" destroy "$dir"
	' nw-pg-watcher "$$" "$_nw_pg_dir" "$_nw_pgcluster" "$_nw_pg_watch_max" \
		</dev/null >/dev/null 2>&1 &)

	if ! NW_PG_FAST=1 "$_nw_pgcluster" start "$_nw_pg_dir" >/dev/null; then
		echo "pg_start: cannot start a cluster in '$_nw_pg_dir'" >&2
		pg_stop >/dev/null 2>&1 || true
		return 1
	fi
	# shellcheck source=/dev/null
	. "$_nw_pg_dir/env" || return 1
	export NW_DATABASE NW_PGHOST NW_PGPORT NW_PGUSER
	export NW_PG_DIR=$_nw_pg_dir
}

pg_psql() {
	if [[ -z ${NW_DATABASE:-} ]]; then
		echo "pg_psql: no cluster (call pg_start first)" >&2
		return 1
	fi
	local sql=$1
	shift
	PGCONNECT_TIMEOUT=10 timeout "$NW_PG_PSQL_TIMEOUT" \
		psql -XAtq -v ON_ERROR_STOP=1 -d "$NW_DATABASE" "$@" -c "$sql"
}

pg_restart() {
	[[ -n $_nw_pg_dir ]] || {
		echo "pg_restart: no cluster (call pg_start first)" >&2
		return 1
	}
	"$_nw_pgcluster" restart "$_nw_pg_dir" "${1:-fast}" 2>/dev/null
}

pg_stop() {
	local rc=0
	[[ -n $_nw_pg_dir ]] || return 0
	"$_nw_pgcluster" destroy "$_nw_pg_dir" || rc=$?
	_nw_pg_dir=
	unset NW_DATABASE NW_PGHOST NW_PGPORT NW_PGUSER NW_PG_DIR
	return "$rc"
}
