#!/usr/bin/env bash
# case.digest through the real daemon: the fake runner reports one per trial
# (tests/integration/fake-runner), the daemon stores it in trials.case_digest
# and the API shows it. From commit 3 on the repository holds a 'case_shift'
# file (the fake runner's mode: the inputs of odd seeds change): every odd
# seed's case digest changes there and stays changed, every even seed's stays
# what it was at commit 0. Every verdict is left to the runner's 'mode'
# (good), so nothing else happens.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-case.XXXXXX")
nw_atexit rm -rf "$work"
n=5
shift_at=3
seeds=8
repo=$work/repo
git init -q -b main "$repo"
echo good >"$repo/mode"
for ((i = 0; i < n; i++)); do
	((i < shift_at)) || echo "generator2" >"$repo/case_shift"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
nw_mode_conf "$work/nw.conf" cases "$repo" "$seeds" "$seeds"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 300 "every commit judged" nw_all_final

# Every trial of the plan has a case digest of 16 hex digits.
bad=$(pg_psql "SELECT count(*) FROM trials WHERE case_digest IS NULL OR case_digest !~ '^[0-9a-f]{16}\$'")
[[ $bad == 0 ]] || fail "$bad trials without a 16-hex-digit case_digest"
count=$(pg_psql "SELECT count(*) FROM trials t JOIN checks k ON k.id = t.check_id WHERE k.name = 'fake.fwd'")
((count >= n * seeds)) || fail "$count fake.fwd trials, expected at least $((n * seeds))"

# Per seed, the commits at which its case digest differs from commit 0's.
changed=$(pg_psql "SELECT string_agg(x.seed || ':' || x.at, ' ' ORDER BY x.seed) FROM (
	SELECT t.seed, coalesce(string_agg(DISTINCT c.position::text, ',' ORDER BY c.position::text)
		FILTER (WHERE t.case_digest <> z.case_digest), '-') AS at
	FROM trials t JOIN commits c ON c.id = t.commit_id JOIN checks k ON k.id = t.check_id
	JOIN (SELECT t0.seed, t0.case_digest FROM trials t0 JOIN commits c0 ON c0.id = t0.commit_id
		WHERE c0.position = 0 AND t0.attempt = 0) z ON z.seed = t.seed
	WHERE k.name = 'fake.fwd' AND t.seed < $seeds GROUP BY t.seed) x")
want=""
for ((s = 0; s < seeds; s++)); do
	at=-
	if ((s % 2)); then at=$(seq -s, "$shift_at" $((n - 1))); fi
	want+="${want:+ }$s:$at"
done
[[ $changed == "$want" ]] || fail "seeds whose case digest changed (seed:commits): $changed, expected $want"
# The shifted seeds share one new digest per seed at every commit from the shift on.
new=$(pg_psql "SELECT count(DISTINCT t.case_digest) FROM trials t JOIN commits c ON c.id = t.commit_id
	JOIN checks k ON k.id = t.check_id WHERE k.name = 'fake.fwd' AND t.seed = 1 AND c.position >= $shift_at")
[[ $new == 1 ]] || fail "seed 1 has $new case digests from commit $shift_at on, expected 1"

# The API: the trials endpoint and the stored value agree.
sha=$(pg_psql "SELECT sha FROM commits WHERE position = $shift_at")
stored=$(pg_psql "SELECT t.case_digest FROM trials t JOIN commits c ON c.id = t.commit_id
	JOIN checks k ON k.id = t.check_id WHERE c.position = $shift_at AND k.name = 'fake.fwd' AND t.seed = 1
	AND t.attempt = 0")
shown=$(nw_api "/api/v1/trials?commit=$sha&check=fake.fwd&seed=1" |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["trials"][0]["case_digest"])')
[[ $shown == "$stored" ]] || fail "the trials endpoint shows case_digest '$shown', stored '$stored'"
echo "ok: case digests stored and shown; odd seeds shifted at commit $shift_at ($changed)"
