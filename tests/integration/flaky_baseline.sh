#!/usr/bin/env bash
# A non-deterministic check that fails 2% of its trials at every commit, with
# no change in the library, is the library's flakiness, not a regression: once
# the check has a baseline (a commit judged not regressed), no commit is judged
# regressed. The rate tests take the baseline's rate pooled over its last eight
# commits (daemon/slot.c, stats.h): against one commit's trials, a commit whose
# flakes happened not to show made the next one look like a regression, and
# every one after it (the baseline stays the last commit not regressed). The
# flakes are drawn from a hash of each commit's version and the seed
# (fake-runner's hflaky2), so the history is the same on every run. The
# SPRT runs at the configured [verdict] alpha.
# Then a commit fixes the flake (64 passes: not yet evidence of a fix at 2%,
# so `clean`) and the next one reverts it at 8%: flagged, and bisected to
# itself. (A fix of a higher rate is judged `improved`, with more trials where
# needed, so that the pool restarts there: tests/unit/test_stats.c.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-flaky.XXXXXX")
nw_atexit rm -rf "$work"
n=24 # the stable 2% part
repo=$work/repo
git init -q -b main "$repo"
echo good >"$repo/mode"
for ((i = 0; i < n + 2; i++)); do
	if ((i < n)); then echo hflaky2; elif ((i == n)); then echo good; else echo hflaky8; fi >"$repo/bwd_mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
nw_mode_conf "$work/nw.conf" flaky "$repo" 64 256 "[verdict]\nalpha = 0.005"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 600 "every commit judged" nw_all_final

verdicts=$(pg_psql "SELECT string_agg(c.position || ':' || s.verdict || '(' || s.failures || '/' || s.trials || ')', ' '
	ORDER BY c.position) FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
	WHERE k.name = 'fake.bwd'")
echo "fake.bwd: $verdicts"
first=$(pg_psql "SELECT min(c.position) FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
	WHERE k.name = 'fake.bwd' AND s.verdict <> 'regressed'")
# Commit 0 is judged against a library that passes; commit 1 against commit 0 (every earlier one regressed).
[[ -n $first ]] && ((first <= 1)) || fail "commit $first is the first judged without a regression: $verdicts"
false_alarms=$(pg_psql "SELECT coalesce(string_agg(c.position::text, ' '), '') FROM stats s JOIN commits c ON c.id = s.commit_id
	JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.bwd' AND s.verdict = 'regressed' AND c.position > $first
	AND c.position < $n")
[[ -z $false_alarms ]] || fail "a stable 2% flake judged regressed at commit(s) $false_alarms: $verdicts"
# The SPRT's p0 comes from the pooled rate, where that is above the floor (and the baseline's trials do not rule it out).
# p0 is the top of the pooled rate's one-sigma Wilson interval (z = 1): (p + 1/2n + sqrt(p(1-p)/n + 1/4n^2)) / (1 + 1/n).
pooled=$(pg_psql "SELECT count(*) FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id,
	LATERAL (SELECT (s.evidence->'baseline_pool'->>'failures')::float8 AS f,
	(s.evidence->'baseline_pool'->>'trials')::float8 AS n) y,
	LATERAL (SELECT (y.f / y.n + 1 / (2 * y.n) + sqrt(y.f / y.n * (1 - y.f / y.n) / y.n + 1 / (4 * y.n * y.n)))
	/ (1 + 1 / y.n) AS hi) x WHERE k.name = 'fake.bwd' AND c.position > $first AND c.position < $n
	AND s.evidence ? 'sprt' AND x.hi > 0.002 AND abs((s.evidence->'sprt'->>'p0')::float8 - x.hi) < 1e-9")
((pooled > 0)) || fail "no SPRT took the pooled baseline rate as its p0"
alphas=$(pg_psql "SELECT count(*) || ' ' || count(*) FILTER (WHERE (s.evidence->'sprt'->>'alpha')::float8 = 0.005)
	FROM stats s JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.bwd' AND s.evidence ? 'sprt'")
read -r sprts configured <<<"$alphas"
((sprts > 0 && sprts == configured)) || fail "$configured of $sprts SPRTs ran at the configured [verdict] alpha = 0.005"
blamed=$(pg_psql "SELECT coalesce(string_agg(c.position::text, ' '), '') FROM bisections b JOIN commits c ON c.id = b.culprit_id
	WHERE b.outcome = 'culprit' AND c.position <> $((n + 1))")
[[ -z $blamed ]] || fail "bisections blamed commit(s) $blamed, where nothing changed"
echo "ok: from commit $first on, none of $((n - 1 - first)) commits judged regressed ($pooled on a pooled baseline rate)"

verdict_at() { pg_psql "SELECT s.verdict FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
	WHERE k.name = 'fake.bwd' AND c.position = $1"; }
[[ $(verdict_at "$n") =~ ^(clean|improved)$ ]] || fail "the fix (commit $n) judged $(verdict_at "$n"): $verdicts"
[[ $(verdict_at $((n + 1))) == regressed ]] || fail "the fix's revert (commit $((n + 1))) judged $(verdict_at $((n + 1))): $verdicts"
echo "ok: the fix judged $(verdict_at "$n"), its revert regressed"
