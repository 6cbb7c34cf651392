#!/usr/bin/env bash
# Issue 13, "Scale": a history of 2000 commits with 256 trials per check x
# dtype per commit (bench/scale-history.sql writes it straight into
# PostgreSQL: 4 check x dtype pairs, 1.8 million trials, the verdicts and
# regressions the new model gives), then three real commits on top through
# the real daemon (a real git repository of 2003 commits, written with git
# fast-import, polled and imported by the daemon; the fake runner builds and
# runs the last three). Every query path runs at that scale without an SQL
# error: judging (judge_input, judge_record), the regression tracking (a
# re-judged commit queues its successor again, which the daemon judges
# again), queue_bisections (two open races after thousands of clean trials:
# issue 13's underflow), the bisector's steps (two automatic bisections and one
# by hand over 1700 commits, each naming the right culprit), the mail sweep
# (one culprit mail per culprit commit), and every API page (200, valid JSON).
# Neither the daemon nor PostgreSQL logs an error or a warning.
#
# No timing is asserted; every path's latency is printed (psql's EXPLAIN
# ANALYZE, curl, and each statement the daemon ran, from PostgreSQL's log with
# log_min_duration_statement = 0). bench/scale.sh runs this at other sizes:
#   NW_SCALE_COMMITS   commits generated (2000; at least 40)
#   NW_SCALE_TRIALS    plan trials per check x dtype per commit (256)
#   NW_SCALE_REPORT    a file that gets the latencies (tab-separated: path, calls,
#                      median ms, max ms, total ms)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch
bench=$NW_SOURCE_DIR/bench

commits=${NW_SCALE_COMMITS:-2000}
per_commit=${NW_SCALE_TRIALS:-256}
tip=3
((commits >= 40 && per_commit >= 16)) || fail "NW_SCALE_COMMITS must be at least 40, NW_SCALE_TRIALS at least 16"
# Deadlines, in seconds: the generator's grows with the history.
readonly GEN_TIMEOUT=$((300 + commits * per_commit / 2000)) JUDGE_TIMEOUT=300 BISECT_TIMEOUT=300 MAIL_TIMEOUT=120

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-scale.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
timings=$work/timings.tsv
: >"$timings"

# record LABEL MS: one latency for the report.
record() {
	printf '%s\t1\t%s\t%s\t%s\n' "$1" "$2" "$2" "$2" >>"$timings"
}

start=$SECONDS
"$bench/scale-repo.py" repo "$repo" "$commits" "$tip" || fail "cannot write the repository"
read -r -a scenario <<<"$("$bench/scale-repo.py" vars "$commits" | tr '\n' ' ')"
declare -A pos
for v in "${scenario[@]}"; do
	[[ $v == -v ]] || pos[${v%%=*}]=${v#*=}
done
echo "repository: $((commits + tip)) commits in $((SECONDS - start)) s; scenario: ${scenario[*]}"

pg_start
NW_PORT=$(nw_free_port)
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = scale
url = $repo
poll_interval = 2
history_max = 100000
[build]
command = r="\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp "$NW_FAKE_RUNNER" "\$r" && printf '# version %s\\n' "\$(cat version)" >>"\$r" && cp mode bwd_dtypes bwd_mode bwd_mode.* "\$NUMWATCH_BUILD_DIR/" && { test ! -e extra_checks || cp extra_checks "\$NUMWATCH_BUILD_DIR/"; }
[trials]
per_commit = $per_commit
max = $((4 * per_commit))
[slots]
slots = host, host
[http]
port = $NW_PORT
CONF
"$NUMWATCHD" --migrate --config "$work/nw.conf" >"$work/migrate.log" 2>&1 || fail "numwatchd --migrate: $(cat "$work/migrate.log")"

start=$SECONDS
"$bench/scale-repo.py" log "$repo" | NW_PG_PSQL_TIMEOUT=$GEN_TIMEOUT pg_psql '\i '"$bench/scale-history.sql" \
	-v repo_name=scale -v repo_url="$repo" -v commits="$commits" -v per_commit="$per_commit" "${scenario[@]}" \
	>"$work/gen.log" 2>&1 || fail "bench/scale-history.sql: $(tail -n 5 "$work/gen.log")"
gen_s=$((SECONDS - start))
record "generate the history (bench/scale-history.sql), s" "$gen_s"
"$bench/scale-repo.py" prebuild "$repo" "$work/state" "$NW_FAKE_RUNNER" "$commits" || fail "cannot prebuild the runners"

read -r ncommits ntrials nstats nopen < <(pg_psql "SELECT (SELECT count(*) FROM commits), (SELECT count(*) FROM trials),
	(SELECT count(*) FROM stats), (SELECT count(*) FROM regressions WHERE state = 'open' AND bisection_id IS NULL)" -F ' ')
echo "generated in ${gen_s} s: $ncommits commits, $ntrials trials, $nstats stats rows, $nopen open regressions not yet bisected"
((ncommits == commits)) || fail "$ncommits commits generated, expected $commits"
pairs=$(pg_psql "SELECT count(*) FROM (SELECT check_id, dtype FROM stats GROUP BY 1, 2
	HAVING min(trials) >= $per_commit AND count(*) >= $commits / 2) x")
((pairs >= 4)) || fail "$pairs check x dtype pairs have $per_commit trials at every commit, expected 4"
((ntrials >= 3 * commits * per_commit)) || fail "$ntrials trials generated"
((nopen == 2)) || fail "$nopen open regressions without a bisection, expected the two races"

# Ids of what the paths are timed on.
id_at() { pg_psql "SELECT id FROM commits WHERE position = $1"; }
sha_at() { pg_psql "SELECT sha FROM commits WHERE position = $1"; }
fwd=$(pg_psql "SELECT id FROM checks WHERE name = 'fake.fwd'")
extra=$(pg_psql "SELECT id FROM checks WHERE name = 'fake.extra'")
bwd=$(pg_psql "SELECT id FROM checks WHERE name = 'fake.bwd'")
repo_id=$(pg_psql "SELECT id FROM repositories WHERE name = 'scale'")
last=$(id_at $((commits - 1)))
last_pos=$((commits - 1))

# sql_time LABEL SQL: its EXPLAIN ANALYZE execution time in a transaction rolled back (nothing stays).
sql_time() {
	local ms
	ms=$(pg_psql "ROLLBACK" -c "BEGIN" -c "EXPLAIN (ANALYZE, FORMAT JSON) $2" | jq -s '.[0][0]["Execution Time"]') ||
		fail "$1: the query failed: $2"
	[[ $ms =~ ^[0-9.]+$ ]] || fail "$1: no execution time from EXPLAIN ANALYZE: $ms"
	record "sql: $1" "$ms"
}

# The paths of judging the newest generated commit, as the daemon would judge it.
for pair in "$fwd fwd f32" "$extra extra f32" "$bwd bwd f32" "$bwd bwd f16"; do
	read -r chk name dt <<<"$pair"
	sql_time "judge_input() $name $dt" "SELECT * FROM judge_input($last, $chk, '$dt', $per_commit)"
done
[[ $(pg_psql "SELECT count(*), count(base_id), count(base_first), min(pool_trials)
	FROM judge_input($last, $bwd, 'f32', $per_commit)" -F ' ') == "$per_commit $per_commit $per_commit "* ]] ||
	fail "judge_input() of the newest commit lacks its baseline's seeds"
sql_time "judge_baseline()" "SELECT judge_baseline($last, $bwd, 'f32')"
sql_time "judge_clean_state()" "SELECT judge_clean_state($last, $bwd, 'f32')"
sql_time "library_rate() 8 commits" "SELECT * FROM library_rate($repo_id, $bwd, 'f32', $last_pos, 8)"
sql_time "regression_open_at()" "SELECT regression_open_at($bwd, 'f32', $last_pos)"
sql_time "judge_record() (re-judging)" "SELECT r.* FROM stats s JOIN jobs j ON j.kind = 'trials'
	AND j.commit_id = s.commit_id AND j.check_id = s.check_id AND j.dtype = s.dtype,
	LATERAL judge_record(s.commit_id, s.check_id, s.dtype, s.trials, s.failures, s.worst_ratio, 'flaky',
	s.failing_seeds, s.evidence, s.baseline_id, 0, 0, j.id, $per_commit, 'done') r
	WHERE s.commit_id = $last AND s.check_id = $bwd AND s.dtype = 'f32'"
sql_time "commit_verdict() of every commit" "SELECT count(*) FROM commits WHERE commit_verdict(id) = 'regressed'"
# Issue 13's bug: thousands of clean trials before an open regression made this statement fail (underflow).
sql_time "queue_bisections()" "SELECT queue_bisections($repo_id)"
queued=$(pg_psql "ROLLBACK" -c "BEGIN" -c "SELECT count(*) FROM queue_bisections($repo_id)")
((queued == 2)) || fail "queue_bisections() queued $queued bisections for the two open races"

# From here on PostgreSQL logs every statement with its duration.
pg_log=$NW_PG_DIR/postgres.log
[[ -f $pg_log ]] || pg_log=$NW_PG_DIR/home/postgres.log
[[ -f $pg_log ]] || fail "no server log under $NW_PG_DIR"
pg_psql "ALTER SYSTEM SET log_min_duration_statement = 0"
pg_psql "SELECT pg_reload_conf()" >/dev/null
logging() { pg_psql "SELECT 'scale: logging'" && grep -q "statement: SELECT 'scale: logging'" "$pg_log"; }
nw_wait 30 "PostgreSQL logging every statement" logging
log_from=$(stat -c %s "$pg_log")

nw_daemon_start "$work/nw.conf" "$work/daemon.log"
tip_final() {
	[[ $(pg_psql "SELECT count(*) FROM commits c WHERE c.position >= $commits AND commit_verdict(c.id) NOT IN ('pending')
		AND (SELECT count(*) FROM stats s WHERE s.commit_id = c.id AND s.verdict <> 'pending') = 4") == "$tip" ]]
}
nw_wait "$JUDGE_TIMEOUT" "the $tip commits on top judged by the daemon" tip_final
verdicts=$(pg_psql "SELECT string_agg(c.position || ' ' || k.name || '/' || s.dtype || ' ' || s.verdict
	|| coalesce(' #' || s.regression_id || CASE WHEN s.regression_new THEN ' new' ELSE ' open' END, ''), ', '
	ORDER BY c.position, k.name, s.dtype) FROM stats s JOIN commits c ON c.id = s.commit_id
	JOIN checks k ON k.id = s.check_id WHERE c.position >= $commits")
echo "the daemon's verdicts: $verdicts"
wrong=$(pg_psql "SELECT count(*) FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
	WHERE c.position >= $commits AND NOT CASE WHEN k.name <> 'fake.bwd' THEN s.verdict = 'clean'
	ELSE s.verdict = 'regressed' AND NOT s.regression_new
	AND s.regression_id = (SELECT r.id FROM regressions r WHERE r.check_id = s.check_id AND r.dtype = s.dtype
	AND r.good_commit_id IS NOT NULL AND r.fixed_commit_id IS NULL) END")
((wrong == 0)) || fail "$wrong verdicts of the commits on top are not: fake.fwd and fake.extra clean, fake.bwd's races still open"

# The two races: bisected by the daemon (queue_bisections, then its steps), each to its culprit.
race_f32=$(id_at "${pos[race_f32]}") race_f16=$(id_at "${pos[race_f16]}")
auto_done() {
	[[ $(pg_psql "SELECT count(*) FROM bisections b JOIN regressions r ON r.id = b.regression_id
		WHERE r.first_commit_id IN ($race_f32, $race_f16) AND b.state = 'done'") == 2 ]]
}
nw_wait "$BISECT_TIMEOUT" "both races bisected" auto_done
bisections=$(pg_psql "SELECT string_agg(b.id || ': ' || b.outcome || ' at ' || coalesce(cu.position::text, '-')
	|| ' (' || (SELECT count(*) FROM probes p WHERE p.bisection_id = b.id) || ' probes, range '
	|| g.position || '..' || bd.position || ')', ', ' ORDER BY b.id) FROM bisections b
	JOIN commits g ON g.id = b.good_commit_id JOIN commits bd ON bd.id = b.bad_commit_id
	LEFT JOIN commits cu ON cu.id = b.culprit_id")
echo "bisections: $bisections"
[[ $(pg_psql "SELECT string_agg(cu.position::text, ' ' ORDER BY cu.position) FROM bisections b
	JOIN regressions r ON r.id = b.regression_id JOIN commits cu ON cu.id = b.culprit_id
	WHERE r.first_commit_id IN ($race_f32, $race_f16) AND b.outcome = 'culprit'") == "${pos[race_f32]} ${pos[race_f16]}" ]] ||
	fail "the races were not blamed on commits ${pos[race_f32]} and ${pos[race_f16]}: $bisections"
[[ $(pg_psql "SELECT count(*) FROM regressions WHERE first_commit_id IN ($race_f32, $race_f16) AND state = 'culprit'") == 2 ]] ||
	fail "the races' regressions are not in state culprit"

# One culprit mail per culprit commit, written by the mail sweep.
mails_sent() {
	[[ $(pg_psql "SELECT count(*) FROM mail WHERE kind = 'culprit' AND state = 'sent'
		AND culprit_id IN ($race_f32, $race_f16)") == 2 ]]
}
nw_wait "$MAIL_TIMEOUT" "the two culprit mails" mails_sent
[[ $(grep -c '^From ' "$work/state/mail.mbox") == 2 ]] || fail "the mbox holds $(grep -c '^From ' "$work/state/mail.mbox") mails, expected 2"

# A bisection by hand over 1700 commits (from the root to the f16 race; at 2000 commits): the load of each step reads
# the plan results of the whole range; its culprit is the automatic one's, and gets no second mail.
token=$("$NUMWATCH" token create scale --config "$work/nw.conf" 2>/dev/null)
start_ms=$(date +%s%3N)
out=$(curl -sS --max-time 60 -o "$work/body" -w '%{http_code}' -H "Authorization: Bearer $token" \
	-d "{\"good\":\"$(sha_at 0)\",\"bad\":\"$(sha_at "${pos[race_f16]}")\",\"check\":\"fake.bwd\",\"dtype\":\"f16\"}" \
	"http://127.0.0.1:$NW_PORT/api/v1/bisections")
[[ $out == 201 || $out == 200 ]] || fail "POST /api/v1/bisections: status $out: $(head -c 300 "$work/body")"
record "api: POST /api/v1/bisections (${pos[race_f16]} commits)" "$(($(date +%s%3N) - start_ms))"
manual=$(jq -r .id "$work/body")
manual_done() { [[ $(pg_psql "SELECT state FROM bisections WHERE id = $manual") == "done" ]]; }
nw_wait "$BISECT_TIMEOUT" "the bisection by hand over ${pos[race_f16]} commits" manual_done
read -r outcome culprit_pos < <(pg_psql "SELECT b.outcome, cu.position FROM bisections b LEFT JOIN commits cu
	ON cu.id = b.culprit_id WHERE b.id = $manual" -F ' ')
[[ $outcome == culprit && $culprit_pos == "${pos[race_f16]}" ]] ||
	fail "the bisection by hand ended '$outcome' at '$culprit_pos', expected the culprit ${pos[race_f16]}: $(pg_psql "SELECT log FROM bisections WHERE id = $manual")"
# Wait for two sweeps since (the first may have read before it ended), then count the culprit's mails.
swept_from=$(stat -c %s "$pg_log")
swept() { (($(tail -c +"$((swept_from + 1))" "$pg_log" | grep -c "execute.*SELECT 'culprit', b.id") >= 2)); }
nw_wait "$MAIL_TIMEOUT" "two mail sweeps after the bisection by hand" swept
[[ $(pg_psql "SELECT count(*) FROM mail WHERE kind = 'culprit' AND culprit_id = $race_f16") == 1 ]] ||
	fail "the f16 race's culprit got $(pg_psql "SELECT count(*) FROM mail WHERE kind = 'culprit' AND culprit_id = $race_f16") mails"

# The regression tracking: a commit judged again with another verdict, then back (one transaction),
# queues its successor's job again; the daemon judges it again, the same, and stops there.
p0=$((commits / 10))
c0=$(id_at "$p0") c1=$(id_at $((p0 + 1))) c2=$(id_at $((p0 + 2)))
before=$(pg_psql "SELECT updated_at FROM stats WHERE commit_id = $c1 AND check_id = $fwd AND dtype = 'f32'")
finished2=$(pg_psql "SELECT finished_at FROM jobs WHERE kind = 'trials' AND commit_id = $c2 AND check_id = $fwd AND dtype = 'f32'")
rejudge() {
	echo "SELECT r.done, r.verdict FROM stats s JOIN jobs j ON j.kind = 'trials' AND j.commit_id = s.commit_id
		AND j.check_id = s.check_id AND j.dtype = s.dtype, LATERAL judge_record(s.commit_id, s.check_id, s.dtype,
		s.trials, s.failures, s.worst_ratio, '$1', s.failing_seeds, s.evidence, s.baseline_id, 0, 0, j.id,
		$per_commit, 'done') r WHERE s.commit_id = $c0 AND s.check_id = $fwd AND s.dtype = 'f32'"
}
[[ $(pg_psql "COMMIT" -c "BEGIN" -c "$(rejudge flaky)" -c "$(rejudge clean)" | tr '\n' ' ') == "t|flaky t|clean " ]] ||
	fail "judge_record() did not record commit $p0 again"
rejudged() {
	[[ $(pg_psql "SELECT s.updated_at > '$before' AND j.state = 'done' FROM stats s JOIN jobs j ON j.kind = 'trials'
		AND j.commit_id = s.commit_id AND j.check_id = s.check_id AND j.dtype = s.dtype
		WHERE s.commit_id = $c1 AND s.check_id = $fwd AND s.dtype = 'f32'") == t ]]
}
nw_wait "$JUDGE_TIMEOUT" "commit $((p0 + 1)) judged again by the daemon" rejudged
[[ $(pg_psql "SELECT verdict || ' ' || baseline_id FROM stats WHERE commit_id = $c1 AND check_id = $fwd AND dtype = 'f32'") == "clean $c0" ]] ||
	fail "commit $((p0 + 1)) judged again: $(pg_psql "SELECT verdict, baseline_id, evidence->>'reason' FROM stats WHERE commit_id = $c1 AND check_id = $fwd AND dtype = 'f32'")"
[[ $(pg_psql "SELECT finished_at FROM jobs WHERE kind = 'trials' AND commit_id = $c2 AND check_id = $fwd AND dtype = 'f32'") == "$finished2" ]] ||
	fail "judging commit $((p0 + 1)) again, unchanged, queued commit $((p0 + 2)) again"
echo "ok: commit $p0 judged again queued commit $((p0 + 1)), judged again by the daemon (clean), and no further"

# Every API page: 200 and valid JSON (/metrics: the Prometheus text).
api_get() {
	local label=$1 path=$2 out code t
	out=$(curl -sS --max-time 60 -o "$work/body" -w '%{http_code} %{time_total}' "http://127.0.0.1:$NW_PORT$path") ||
		fail "GET $path: curl failed"
	read -r code t <<<"$out"
	[[ $code == 200 ]] || fail "GET $path: status $code: $(head -c 300 "$work/body")"
	if [[ $path == /metrics ]]; then
		grep -q '^numwatch_up 1$' "$work/body" || fail "GET /metrics: no numwatch_up 1"
	else
		jq -e . "$work/body" >/dev/null || fail "GET $path: not JSON: $(head -c 300 "$work/body")"
	fi
	record "api: GET $label" "$(awk -v t="$t" 'BEGIN { printf "%.1f", t * 1000 }')"
}
tip_sha=$(sha_at $((commits + tip - 1)))
api_get /api/v1/health /api/v1/health
api_get /metrics /metrics
api_get /api/v1/commits /api/v1/commits
api_get "/api/v1/commits?limit=500&offset=$((commits / 2))" "/api/v1/commits?limit=500&offset=$((commits / 2))"
api_get "/api/v1/commits/{sha} (the tip)" "/api/v1/commits/$tip_sha"
api_get "/api/v1/commits/{sha} (the f32 race)" "/api/v1/commits/$(sha_at "${pos[race_f32]}")"
api_get "/api/v1/commits/{sha} (a fwd regression, 32 failing seeds)" "/api/v1/commits/$(sha_at $((pos[fwd_bad] + 1)))"
api_get /api/v1/checks /api/v1/checks
api_get "/api/v1/checks/fake.bwd" "/api/v1/checks/fake.bwd"
api_get "/api/v1/checks/fake.extra?limit=500" "/api/v1/checks/fake.extra?limit=500"
api_get "/api/v1/trials (a commit, 256 seeds)" "/api/v1/trials?commit=$tip_sha&check=fake.bwd&dtype=f32&limit=500"
api_get /api/v1/bisections /api/v1/bisections
for b in $(pg_psql "SELECT id FROM bisections ORDER BY id"); do
	api_get "/api/v1/bisections/{id} (range $(pg_psql "SELECT bd.position - g.position FROM bisections b
		JOIN commits g ON g.id = b.good_commit_id JOIN commits bd ON bd.id = b.bad_commit_id WHERE b.id = $b"))" \
		"/api/v1/bisections/$b"
done
jq -e '.range | length == '"${pos[race_f16]}" "$work/body" >/dev/null || fail "the bisection by hand's page lacks its range"
# The regressions' pages, where this tree has them (issue 13 asks for them).
code=$(curl -sS --max-time 60 -o "$work/body" -w '%{http_code}' "http://127.0.0.1:$NW_PORT/api/v1/regressions")
if [[ $code == 404 ]] && jq -e '.error | test("no such endpoint")' "$work/body" >/dev/null; then
	echo "note: no /api/v1/regressions in this tree"
else
	api_get /api/v1/regressions /api/v1/regressions
	for r in $(pg_psql "SELECT id FROM regressions ORDER BY id"); do
		api_get "/api/v1/regressions/{id}" "/api/v1/regressions/$r"
	done
fi

# No SQL error, and no warning, in either log.
if grep -E ' numwatchd (error|warning): ' "$work/daemon.log"; then
	fail "the daemon logged errors or warnings (above)"
fi
"$bench/scale-report.py" "$pg_log" "$log_from" >"$work/paths.tsv" || fail "PostgreSQL logged an SQL error (above)"
if tail -c +"$((log_from + 1))" "$pg_log" | grep -E '(WARNING|FATAL|PANIC):'; then
	fail "PostgreSQL logged warnings (above)"
fi

cat "$work/paths.tsv" >>"$timings"
echo "latencies (ms; path, calls, median, max, total):"
column -t -s $'\t' "$timings"
[[ -z ${NW_SCALE_REPORT:-} ]] || cp "$timings" "$NW_SCALE_REPORT"
echo "ok: $commits commits x $per_commit trials: every query path ran without an SQL error"
