#!/usr/bin/env bash
# bench/api.sh [BUILD_DIR]: GET /api/v1/commits/{sha} on numwatchd against
# nginx serving the same JSON as a static file, both measured with
# `wrk -t2 -c64 -d10s --latency` on this machine. Seeds a private PostgreSQL
# with 10,000 commits (bench/api-seed.sql: 50 checks x 3 dtypes of stats per
# commit, failing trials on the commit asked for), prints requests/s and p99
# latency of both and their ratio, and appends a dated section to
# docs/benchmarks.md.
#
# Environment: NW_BENCH_COMMITS (10000), NW_BENCH_CHECKS (50),
# NW_BENCH_DURATION (10s), NW_BENCH_CONNECTIONS (64), NW_BENCH_DOC (the file
# the section is appended to; docs/benchmarks.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
commits=${NW_BENCH_COMMITS:-10000}
checks=${NW_BENCH_CHECKS:-50}
per_commit=64
duration=${NW_BENCH_DURATION:-10s}
conns=${NW_BENCH_CONNECTIONS:-64}
doc=${NW_BENCH_DOC:-$root/docs/benchmarks.md}
numwatchd=$build/daemon/numwatchd

# Deadlines, in seconds.
readonly SEED_TIMEOUT=900 DAEMON_START_TIMEOUT=30 NGINX_START_TIMEOUT=10 STOP_TIMEOUT=15
readonly WRK_TIMEOUT=120 CURL_TIMEOUT=10

die() {
	echo "bench/api: $*" >&2
	exit 1
}
note() {
	echo "bench/api: $*" >&2
}

for tool in wrk nginx curl git psql python3 timeout; do
	command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (wrk, nginx-light, curl, git, postgresql-client)"
done
[[ -x $numwatchd ]] || die "no numwatchd in '$build/daemon' (build first)"

dir=$(mktemp -d /tmp/nw-bench-api.XXXXXX)
daemon_pid='' nginx_pid=''

# Stops a process we started: SIGTERM, then SIGKILL after STOP_TIMEOUT.
stop_pid() {
	local pid=$1 i
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	stop_pid "$nginx_pid"
	stop_pid "$daemon_pid"
	"$root/scripts/pgcluster" destroy "$dir/pg" >/dev/null 2>&1 || true
	rm -rf "$dir"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for TIMEOUT DESC CMD...: runs CMD every 0.2 s until it succeeds, or dies after TIMEOUT s.
wait_for() {
	local timeout=$1 desc=$2 end
	shift 2
	end=$((SECONDS + timeout))
	until "$@" >/dev/null; do
		((SECONDS < end)) || die "timed out after ${timeout}s waiting for $desc"
		sleep 0.2
	done
}

# --- PostgreSQL, schema, data ------------------------------------------------
# fsync off: the benchmark reads; it only makes seeding faster.
note "starting PostgreSQL"
NW_DATABASE=$(NW_PG_FAST=1 "$root/scripts/pgcluster" start "$dir/pg")
pg_version=$(psql "$NW_DATABASE" -XAtq -c 'SHOW server_version' | awk '{print $1}')

git init -q -b main "$dir/repo" # empty: the poller finds nothing to import or to unmark
http_port=$(free_port)
cat >"$dir/nw.conf" <<CONF
[daemon]
state_dir = $dir/state
database = $NW_DATABASE
node_name = bench
[repository]
name = bench
url = $dir/repo
poll_interval = 24h
[build]
command = false
[slots]
slots = host
[http]
address = 127.0.0.1
port = $http_port
CONF
"$numwatchd" --migrate --config "$dir/nw.conf" 2>>"$dir/daemon.log" || die "migrations failed: $(tail -n 5 "$dir/daemon.log")"

note "seeding $commits commits x $checks checks x 3 dtypes (takes a minute or two)"
seed_start=$SECONDS
timeout "$SEED_TIMEOUT" psql "$NW_DATABASE" -Xq -v ON_ERROR_STOP=1 -v repo_name=bench -v repo_url="$dir/repo" \
	-v commits="$commits" -v checks="$checks" -v per_commit="$per_commit" -f "$root/bench/api-seed.sql" ||
	die "seeding failed"
note "seeded in $((SECONDS - seed_start)) s"
sha=$(psql "$NW_DATABASE" -XAtq -c "SELECT sha FROM commits ORDER BY position DESC LIMIT 1")
[[ $sha =~ ^[0-9a-f]{40}$ ]] || die "no commit seeded"

# --- numwatchd ---------------------------------------------------------------
note "starting numwatchd on port $http_port"
"$numwatchd" --config "$dir/nw.conf" >>"$dir/daemon.log" 2>&1 &
daemon_pid=$!
daemon_ready() {
	kill -0 "$daemon_pid" 2>/dev/null || die "numwatchd exited: $(tail -n 20 "$dir/daemon.log")"
	curl -sf --max-time 2 "http://127.0.0.1:$http_port/api/v1/health" | grep -q '"database":"ok"'
}
wait_for "$DAEMON_START_TIMEOUT" "numwatchd to answer /api/v1/health" daemon_ready
api_url=http://127.0.0.1:$http_port/api/v1/commits/$sha
mkdir -p "$dir/www"
curl -sf --max-time "$CURL_TIMEOUT" -o "$dir/www/commit.json" "$api_url" || die "GET $api_url failed"
python3 - "$dir/www/commit.json" "$checks" <<'EOF' || die "the commit's JSON is not what was seeded"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["verdict"] == "regressed", c["verdict"]
assert len(c["checks"]) == int(sys.argv[2]) * 3, len(c["checks"])
assert sum(len(k["failing_seeds"]) for k in c["checks"]) >= 10
EOF
bytes=$(stat -c %s "$dir/www/commit.json")

# --- nginx -------------------------------------------------------------------
nginx_port=$(free_port)
mkdir -p "$dir/nginx/tmp"
{
	# As root, workers would run as 'nobody', who cannot read this 0700 directory.
	((EUID != 0)) || echo "user root;"
	cat <<CONF
worker_processes auto;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 1024; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 1000000;
	client_body_temp_path $dir/nginx/tmp/body;
	proxy_temp_path $dir/nginx/tmp/proxy;
	fastcgi_temp_path $dir/nginx/tmp/fastcgi;
	uwsgi_temp_path $dir/nginx/tmp/uwsgi;
	scgi_temp_path $dir/nginx/tmp/scgi;
	default_type application/json;
	server {
		listen 127.0.0.1:$nginx_port;
		root $dir/www;
	}
}
CONF
} >"$dir/nginx/nginx.conf"
note "starting nginx on port $nginx_port"
nginx -e "$dir/nginx/error.log" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -g 'daemon off;' \
	>"$dir/nginx/stderr.log" 2>&1 &
nginx_pid=$!
static_url=http://127.0.0.1:$nginx_port/commit.json
nginx_ready() {
	kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited: $(tail -n 20 "$dir/nginx/stderr.log" "$dir/nginx/error.log")"
	curl -sf --max-time 2 -o /dev/null "$static_url"
}
wait_for "$NGINX_START_TIMEOUT" "nginx to serve $static_url" nginx_ready
cmp -s <(curl -sf --max-time "$CURL_TIMEOUT" "$static_url") "$dir/www/commit.json" || die "nginx serves other bytes"

# --- wrk ---------------------------------------------------------------------
# bench NAME URL: a short warm-up, then the measured run; sets <NAME>_rps, <NAME>_p99 (ms)
# and <NAME>_errors (wrk's count of socket errors and non-2xx answers, if any).
bench() {
	local name=$1 url=$2 out rps p99 errors
	timeout "$WRK_TIMEOUT" wrk -t2 -c"$conns" -d2s "$url" >/dev/null || die "wrk warm-up against $url failed"
	out=$(timeout "$WRK_TIMEOUT" wrk -t2 -c"$conns" -d"$duration" --latency "$url") || die "wrk against $url failed"
	printf '%s\n' "$out" >"$dir/wrk-$name.txt"
	printf '%s: %s\n' "$name" "$out" >&2
	errors=$(printf '%s\n' "$out" | grep -E 'Non-2xx|Socket errors' | xargs || true)
	rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ {print $2}')
	p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {v = $2;
		if (v ~ /us$/) printf "%.2f", v / 1000; else if (v ~ /ms$/) printf "%.2f", v + 0;
		else if (v ~ /m$/) printf "%.2f", v * 60000; else printf "%.2f", v * 1000}')
	[[ -n $rps && -n $p99 ]] || die "cannot read wrk's output for $name"
	printf -v "${name}_rps" '%.0f' "$rps"
	printf -v "${name}_p99" '%s' "$p99"
	printf -v "${name}_errors" '%s' "${errors:-none}"
}
numwatchd_rps='' numwatchd_p99='' numwatchd_errors='' nginx_rps='' nginx_p99='' nginx_errors=''
note "wrk -t2 -c$conns -d$duration against numwatchd, then nginx"
bench numwatchd "$api_url"
bench nginx "$static_url"
ratio=$(awk -v a="$numwatchd_rps" -v b="$nginx_rps" 'BEGIN {printf "%.2f", a / b}')
rate_met=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.5) ? "met" : "not met"}')
p99_met=$(awk -v p="$numwatchd_p99" 'BEGIN {print (p < 20) ? "met" : "not met"}')

printf 'response: %s bytes\n' "$bytes"
printf 'numwatchd: %s requests/s, p99 %s ms\n' "$numwatchd_rps" "$numwatchd_p99"
printf 'nginx:     %s requests/s, p99 %s ms\n' "$nginx_rps" "$nginx_p99"
printf 'errors:    numwatchd %s; nginx %s\n' "$numwatchd_errors" "$nginx_errors"
printf 'ratio:     %s (aim >= 0.5: %s; p99 < 20 ms: %s)\n' "$ratio" "$rate_met" "$p99_met"

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
{
	echo
	echo "### API: $(date -u +%Y-%m-%d), $(nproc) cores ($cpu)"
	echo
	echo "Command: \`bench/api.sh $build\`: \`wrk -t2 -c$conns -d$duration --latency\` (after a 2 s warm-up)"
	echo "against \`GET /api/v1/commits/{sha}\` of numwatchd, then against nginx $(nginx -v 2>&1 | sed 's|.*/||')"
	echo "(worker_processes auto, sendfile) serving the same JSON ($bytes bytes) as a static file; wrk,"
	echo "the servers and PostgreSQL $pg_version share the machine. Database: $commits commits, $checks checks"
	echo "x 3 dtypes of stats each, failing trials on the commit asked for (\`bench/api-seed.sql\`)."
	echo
	echo "| server | requests/s | p99 latency |"
	echo "| --- | ---: | ---: |"
	echo "| numwatchd | $numwatchd_rps | $numwatchd_p99 ms |"
	echo "| nginx, static file | $nginx_rps | $nginx_p99 ms |"
	echo "| ratio | $ratio | |"
	echo
	echo "Errors reported by wrk: numwatchd $numwatchd_errors; nginx $nginx_errors."
	echo "Aims: at least half of nginx's rate: $rate_met; p99 under 20 ms: $p99_met."
} >>"$doc"
