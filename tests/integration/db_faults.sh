#!/usr/bin/env bash
# PostgreSQL drops the daemon's connections (issue 14, faults 1, 2 and 4).
#
#  1. A query blocked on a lock is terminated (pg_terminate_backend): the job
#     claim's error is logged as PostgreSQL's text, the daemon lives on (the
#     ASan build too), and an API read answers 503 with a JSON error saying why.
#  2. The builder's transaction (the builds row, its checks and trials jobs,
#     the job's end) loses its connection in the middle, then during its
#     COMMIT: the build job never ends done without its builds row and trials
#     jobs, and the commit is judged.
#  4. statement_timeout: an API read stuck behind a lock answers 503 with a
#     JSON error within [http] query_timeout (set by a reload); a stuck claim
#     gives up after [daemon] query_timeout.
# Then PostgreSQL restarts (fast three times, immediate once) while trials
# run: every commit is judged, no seed ran twice, the daemon still runs.
# Last, SIGTERM while API reads wait on a lock: each is answered 503 with a
# JSON error, and the daemon exits 0 (its HTTP threads stop with no request
# left suspended).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-dbfaults.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
nw_mode_history "$repo" 3 99 good good
pg_start
NW_PORT=$(nw_free_port)
nw_mode_conf "$work/nw.conf" dbfaults "$repo" 16 64 "[daemon]\nquery_timeout = 20s\n[http]\nquery_timeout = 5m"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 300 "the first commits judged" nw_all_final

# hold SQL: a session that runs SQL (taking locks) and then waits; its
# backend is terminated by release. One at a time.
hold() {
	PGAPPNAME=nw_test_holder PGCONNECT_TIMEOUT=10 psql -XAtq -d "$NW_DATABASE" \
		-c "BEGIN" -c "$1" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
	holder=$!
	nw_wait 60 "the lock holder's session" held
}
held() {
	[[ $(pg_psql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'nw_test_holder'
		AND query LIKE 'SELECT pg_sleep%'") == 1 ]]
}
release() {
	pg_psql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'nw_test_holder'" >/dev/null
	wait "$holder" 2>/dev/null || true
}
nw_atexit release
# blocked LIKE: the daemon's backends waiting on a lock whose query is LIKE the pattern.
blocked() {
	pg_psql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type IN ('Lock', 'Advisory')
		AND application_name <> 'nw_test_holder' AND query LIKE '$1'"
}
is_blocked() { (($(blocked "$1") > 0)); }
# terminate LIKE: terminates those backends; true when there was one.
terminate() {
	(($(pg_psql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE wait_event_type IN ('Lock', 'Advisory') AND application_name <> 'nw_test_holder'
		AND query LIKE '$1'") > 0))
}
# Build jobs done without their builds row or trials jobs (a build that stored nothing).
lost_builds() {
	pg_psql "SELECT count(*) FROM jobs j WHERE kind = 'build' AND state = 'done'
		AND (NOT EXISTS (SELECT 1 FROM builds b WHERE b.commit_id = j.commit_id)
		OR NOT EXISTS (SELECT 1 FROM jobs t WHERE t.kind = 'trials' AND t.commit_id = j.commit_id))"
}
# The log's lines with TEXT, which must all be printable (libpq's messages, not freed memory).
log_lines() {
	grep -a -- "$1" "$work/daemon.log" || true
}
printable() {
	! log_lines "$1" | LC_ALL=C grep -q '[^[:print:][:space:]]'
}

echo "--- 1. a blocked job claim is terminated"
hold "LOCK TABLE jobs, commits IN ACCESS EXCLUSIVE MODE"
nw_wait 60 "a job claim blocked on the lock, then terminated" terminate '%job_claim%'
claim_lost() { log_lines "jobs: claim failed: " | grep -q "terminating connection\|server closed the connection"; }
nw_wait 60 "the claim's failure in the log" claim_lost
printable "jobs: claim failed: " || fail "the claim's error is not PostgreSQL's text: $(log_lines "jobs: claim failed: " | head -3 | od -c | head -5)"
kill -0 "$NW_DAEMON_PID" || fail "numwatchd died when its connection was terminated"

echo "--- 1. an API read blocked on the lock is terminated"
curl -s -o "$work/body" -w '%{http_code}' --max-time 60 "http://127.0.0.1:$NW_PORT/api/v1/commits" >"$work/status" &
api=$!
nw_wait 30 "the API's read blocked on the lock, then terminated" terminate 'SELECT json_build_object(_%repository_, (SELECT name FROM repositories%'
wait "$api" || true
[[ $(cat "$work/status") == 503 ]] || fail "GET /api/v1/commits: status $(cat "$work/status"), expected 503"
python3 - "$work/body" <<'PY' || fail "GET /api/v1/commits: no JSON error saying why: $(od -c "$work/body" | head -5)"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
assert d["status"] == 503 and "terminating connection" in d["error"], d
PY

echo "--- 4. statement_timeout: the API in [http] query_timeout, the claim in [daemon] query_timeout"
sed -i 's/^query_timeout = 5m$/query_timeout = 3s/' "$work/nw.conf"
kill -HUP "$NW_DAEMON_PID"
reloaded() { grep -aq "reload: configuration reloaded" "$work/daemon.log"; }
nw_wait 30 "the configuration reloaded" reloaded
start=$SECONDS
status=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 60 "http://127.0.0.1:$NW_PORT/api/v1/commits" || true)
took=$((SECONDS - start))
[[ $status == 503 ]] || fail "GET /api/v1/commits behind a lock: status $status after ${took}s, expected 503"
python3 - "$work/body" <<'PY' || fail "GET /api/v1/commits behind a lock: no JSON error saying why: $(head -c 300 "$work/body")"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
assert d["status"] == 503 and "statement timeout" in d["error"], d
PY
echo "GET /api/v1/commits behind a lock: 503 after ${took}s ([http] query_timeout = 3s)"
# The reload set each connection's timeout, and opened none (a pool has no connection of its own).
conns=$(pg_psql "SELECT string_agg(application_name, ',' ORDER BY application_name) FROM pg_stat_activity
	WHERE application_name LIKE 'numwatchd %'")
want="numwatchd http0,numwatchd http1,numwatchd http2,numwatchd http3,numwatchd judge0,numwatchd judge1"
want+=",numwatchd judge2,numwatchd judge3,numwatchd main,numwatchd store0,numwatchd store1"
[[ $conns == "$want" ]] ||
	fail "numwatchd's connections after the reload: $conns (expected main, http0 to http3, judge0 to judge3, store0 and store1)"
claim_timed_out() { log_lines "jobs: claim failed: " | grep -q "statement timeout"; }
nw_wait 90 "a claim given up after [daemon] query_timeout" claim_timed_out
release
kill -0 "$NW_DAEMON_PID" || fail "numwatchd died"

echo "--- 2. the builder's transaction loses its connection before COMMIT"
# Writers to checks wait (the transaction's third statement); readers do not.
hold "LOCK TABLE checks IN SHARE MODE"
echo good >"$repo/mode" && echo 3 >"$repo/version" && nw_commit "$repo" 3
nw_wait 300 "the build's transaction blocked at its checks, then terminated" terminate 'WITH input AS%'
# Run again from BEGIN, it waits for the lock again; run on outside any transaction, the job ends done.
rerun_or_split() { is_blocked 'WITH input AS%' || (($(lost_builds) > 0)); }
nw_wait 60 "the transaction run again on a new connection" rerun_or_split
lost=$(lost_builds)
[[ $lost == 0 ]] || fail "$lost build jobs ended done without their builds row (a transaction split across connections)"
release
nw_wait 300 "commit 3 judged" nw_all_final

echo "--- 2. the builder's transaction loses its connection during COMMIT"
# A deferred trigger makes the COMMIT wait for an advisory lock the test holds.
pg_psql "CREATE FUNCTION nw_test_hold() RETURNS trigger LANGUAGE plpgsql AS
	\$\$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END \$\$;
	CREATE CONSTRAINT TRIGGER nw_test_hold AFTER INSERT OR UPDATE ON builds
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION nw_test_hold()"
hold "SELECT pg_advisory_xact_lock(4242)"
echo good >"$repo/mode" && echo 4 >"$repo/version" && nw_commit "$repo" 4
nw_wait 300 "the build's COMMIT blocked, then terminated" terminate 'COMMIT'
nw_wait 60 "the transaction asked about and run again" is_blocked 'COMMIT'
release
pg_psql "DROP TRIGGER nw_test_hold ON builds; DROP FUNCTION nw_test_hold()"
nw_wait 300 "commit 4 judged" nw_all_final
grep -aq "a transaction whose COMMIT went unanswered had not committed" "$work/daemon.log" ||
	fail "the daemon did not ask what became of the COMMIT"

echo "--- PostgreSQL restarts while trials run"
echo 0.05 >"$repo/delay"
trials_running() { [[ $(pg_psql "SELECT count(*) FROM jobs WHERE kind = 'trials' AND state = 'running'") -gt 0 ]]; }
health_ok() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$NW_PORT/api/v1/health") == 200 ]]; }
i=5
for mode in fast fast immediate fast; do
	echo good >"$repo/mode" && echo "$i" >"$repo/version" && nw_commit "$repo" "$i"
	i=$((i + 1))
	nw_wait 300 "trials running" trials_running
	pg_restart "$mode" || fail "pg_ctl restart -m $mode failed"
	nw_wait 120 "the daemon back after a $mode restart" health_ok
done
nw_wait 600 "every commit judged after the restarts" nw_all_final
dup=$(nw_no_duplicates) || fail "after the restarts: $dup"
lost=$(lost_builds)
[[ $lost == 0 ]] || fail "$lost build jobs ended done without their builds row"
kill -0 "$NW_DAEMON_PID" || fail "numwatchd died"

echo "--- SIGTERM while API reads wait on a lock"
hold "LOCK TABLE repositories IN ACCESS EXCLUSIVE MODE"
readers=()
for i in 1 2 3; do
	curl -s -o "$work/stop-body$i" -w '%{http_code}' --max-time 120 \
		"http://127.0.0.1:$NW_PORT/api/v1/commits?limit=$i" >"$work/stop-status$i" &
	readers+=($!)
done
three_blocked() { (($(blocked 'SELECT json_build_object(_%repository_, (SELECT name FROM repositories%') == 3)); }
nw_wait 60 "three API reads blocked on the lock" three_blocked
kill -TERM "$NW_DAEMON_PID"
stopped() { ! kill -0 "$NW_DAEMON_PID" 2>/dev/null; }
end=$((SECONDS + 120))
until stopped || ((SECONDS > end)); do sleep 0.5; done
stopped || fail "numwatchd did not exit within 120 s of SIGTERM with API reads waiting"
rc=0
wait "$NW_DAEMON_PID" || rc=$?
NW_DAEMON_PID=
((rc == 0)) || fail "numwatchd exited with status $rc after SIGTERM with API reads waiting: $(tail -n 5 "$work/daemon.log")"
for i in 1 2 3; do
	wait "${readers[i - 1]}" || true
	[[ $(cat "$work/stop-status$i") == 503 ]] ||
		fail "a read waiting at the stop: status $(cat "$work/stop-status$i"), expected 503"
	python3 - "$work/stop-body$i" <<'PY' || fail "a read waiting at the stop: no JSON error: $(head -c 300 "$work/stop-body$i")"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
assert d["status"] == 503 and d["error"], d
PY
done
release
echo "three reads waiting at SIGTERM: each answered 503, numwatchd exited 0"
if grep -aq "ERROR: AddressSanitizer\|runtime error:\|libmicrohttpd" "$work/daemon.log"; then
	fail "sanitizer or libmicrohttpd report in the daemon log"
fi
echo "PASS: db_faults"
