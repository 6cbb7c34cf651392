#!/usr/bin/env bash
# bench/api.sh [BUILD_DIR]: GET /api/v1/commits/{sha} on numwatchd against
# nginx serving the same JSON as a static file, both measured with
# `wrk -t2 -c64 -d10s --latency` on this machine, in turns. Seeds a private PostgreSQL
# with 10,000 commits (bench/api-seed.sql: 50 checks x 3 dtypes of stats per
# commit, failing trials on the commit asked for), prints requests/s and p99
# latency of both and their ratio, and appends a dated section to
# docs/benchmarks.md.
#
# Environment: NW_BENCH_COMMITS (10000), NW_BENCH_CHECKS (50),
# NW_BENCH_DURATION (10s), NW_BENCH_CONNECTIONS (64), NW_BENCH_ROUNDS (3: the
# servers take turns, and the medians are reported), NW_BENCH_DOC (the file
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
# The seeded failures: a regression new at this commit, or one still open from before it.
assert c["verdict"] in ("regressed", "open_regression"), c["verdict"]
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
# The machine may be shared: the servers take turns, round after round, and
# the medians are reported, with the CPU time each server used per request.

# cpu_ticks PID...: clock ticks of user and system time the processes used so far.
cpu_ticks() {
	local t=0 p v
	for p in "$@"; do
		v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
		t=$((t + v))
	done
	echo "$t"
}
server_pids() {
	if [[ $1 == nginx ]]; then
		echo "$nginx_pid" "$(cat /proc/"$nginx_pid"/task/*/children 2>/dev/null)"
	else
		echo "$daemon_pid"
	fi
}
median() {
	tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
declare -A rps_of p99_of cpu_of errors_of rounds_of
numwatchd_rps='' numwatchd_p99='' numwatchd_cpu='' nginx_rps='' nginx_p99='' nginx_cpu=''
hz=$(getconf CLK_TCK)

# measure NAME URL: one measured wrk run; appends to the NAME entries of the arrays above.
measure() {
	local name=$1 url=$2 out t0 t1 n rps p99 cpu errors pids
	pids=$(server_pids "$name")
	# shellcheck disable=SC2086 # a list of PIDs
	t0=$(cpu_ticks $pids)
	out=$(timeout "$WRK_TIMEOUT" wrk -t2 -c"$conns" -d"$duration" --latency "$url") || die "wrk against $url failed"
	# shellcheck disable=SC2086
	t1=$(cpu_ticks $pids)
	printf '%s\n' "$out" >>"$dir/wrk-$name.txt"
	printf '%s: %s\n' "$name" "$out" >&2
	n=$(printf '%s\n' "$out" | awk '/ requests in / {print $1}')
	rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ {printf "%.0f", $2}')
	p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {v = $2;
		if (v ~ /us$/) printf "%.2f", v / 1000; else if (v ~ /ms$/) printf "%.2f", v + 0;
		else if (v ~ /m$/) printf "%.2f", v * 60000; else printf "%.2f", v * 1000}')
	[[ -n $n && -n $rps && -n $p99 ]] || die "cannot read wrk's output for $name"
	cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN {printf "%.0f", n ? t / hz * 1e6 / n : 0}')
	errors=$(printf '%s\n' "$out" | grep -E 'Non-2xx|Socket errors' | xargs || true)
	rps_of[$name]+=" $rps"
	p99_of[$name]+=" $p99"
	cpu_of[$name]+=" $cpu"
	rounds_of[$name]+="${rounds_of[$name]:+, }$rps @ $p99"
	[[ -z $errors ]] || errors_of[$name]+="${errors_of[$name]:+; }$errors"
}

rounds=${NW_BENCH_ROUNDS:-3}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
note "warm-up, then $rounds rounds of wrk -t2 -c$conns -d$duration against numwatchd and nginx in turn (load average $load_before)"
timeout "$WRK_TIMEOUT" wrk -t2 -c"$conns" -d2s "$api_url" >/dev/null || die "wrk warm-up against $api_url failed"
timeout "$WRK_TIMEOUT" wrk -t2 -c"$conns" -d2s "$static_url" >/dev/null || die "wrk warm-up against $static_url failed"
for ((round = 1; round <= rounds; round++)); do
	measure numwatchd "$api_url"
	measure nginx "$static_url"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for name in numwatchd nginx; do
	printf -v "${name}_rps" '%.0f' "$(median <<<"${rps_of[$name]}")"
	printf -v "${name}_p99" '%.2f' "$(median <<<"${p99_of[$name]}")"
	printf -v "${name}_cpu" '%.0f' "$(median <<<"${cpu_of[$name]}")"
done
ratio=$(awk -v a="$numwatchd_rps" -v b="$nginx_rps" 'BEGIN {printf "%.2f", a / b}')
rate_met=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.5) ? "met" : "not met"}')
p99_met=$(awk -v p="$numwatchd_p99" 'BEGIN {print (p < 20) ? "met" : "not met"}')

printf 'response:  %s bytes; load average %s before, %s after\n' "$bytes" "$load_before" "$load_after"
printf 'numwatchd: %s requests/s, p99 %s ms, %s us CPU/request (rounds: %s)\n' "$numwatchd_rps" \
	"$numwatchd_p99" "$numwatchd_cpu" "${rounds_of[numwatchd]}"
printf 'nginx:     %s requests/s, p99 %s ms, %s us CPU/request (rounds: %s)\n' "$nginx_rps" "$nginx_p99" \
	"$nginx_cpu" "${rounds_of[nginx]}"
printf 'errors:    numwatchd %s; nginx %s\n' "${errors_of[numwatchd]:-none}" "${errors_of[nginx]:-none}"
printf 'ratio:     %s (aim >= 0.5: %s; p99 < 20 ms: %s)\n' "$ratio" "$rate_met" "$p99_met"

cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
{
	echo
	echo "### API: $(date -u +%Y-%m-%d), $(nproc) cores ($cpu_model)"
	echo
	echo "Command: \`bench/api.sh $build\`: after a 2 s warm-up of each, $rounds rounds of"
	echo "\`wrk -t2 -c$conns -d$duration --latency\` against \`GET /api/v1/commits/{sha}\` of numwatchd and against"
	echo "nginx $(nginx -v 2>&1 | sed 's|.*/||') (worker_processes auto, sendfile) serving the same JSON ($bytes bytes)"
	echo "as a static file, in turn; medians of the rounds. wrk, both servers and PostgreSQL $pg_version share"
	echo "the machine (load average $load_before before, $load_after after). Database: $commits commits,"
	echo "$checks checks x 3 dtypes of stats each, failing trials on the commit asked for (\`bench/api-seed.sql\`)."
	echo "*CPU / request*: user and system time of the server's processes over requests served."
	echo
	echo "| server | requests/s | p99 latency | CPU / request | rounds (requests/s @ p99 ms) |"
	echo "| --- | ---: | ---: | ---: | --- |"
	echo "| numwatchd | $numwatchd_rps | $numwatchd_p99 ms | $numwatchd_cpu µs | ${rounds_of[numwatchd]} |"
	echo "| nginx, static file | $nginx_rps | $nginx_p99 ms | $nginx_cpu µs | ${rounds_of[nginx]} |"
	echo "| ratio | $ratio | | | |"
	echo
	echo "Errors reported by wrk: numwatchd ${errors_of[numwatchd]:-none}; nginx ${errors_of[nginx]:-none}."
	echo "Aims: at least half of nginx's rate: $rate_met; p99 under 20 ms: $p99_met."
} >>"$doc"
