#!/usr/bin/env bash
# What the bad commit's reruns say about its failing seeds, through the real
# daemon, in one history with two regressions, each bisected by hand:
# - fake.fwd (deterministic) starts failing seeds 3, 11, 19, ... at a random
#   commit: a seed-bound bug. The history is first judged with fake.fwd left
#   out of the plans ([trials] checks), then the configuration is reloaded
#   (SIGHUP) and one more commit judges it: regressed, with nothing tested
#   before it. Every failing seed failed its rerun too, so the bisection over
#   the whole untested range takes the reruns as the seeds' replay at the bad
#   commit ('seeds': 'seed_bound': no failing-seed probe there) and replays
#   them into the range, one per probe once they are as good as certain:
#   about log2 N probes, each a trial or two.
# - fake.bwd (non-deterministic) flakes once in 32 trials (seed 5 fails its
#   first run at every commit) before another random commit, and fails 40%
#   of its trials from it on: a race over a flaky baseline, bisected by hand
#   (numwatch bisect). Its failing seeds' reruns fail about as often as any
#   trial, so it bisects with fresh seeds only ('seeds': 'race'), assuming
#   the flake rate its good side shows.
# Each names its culprit; no bisection blames another commit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-seeds.XXXXXX")
nw_atexit rm -rf "$work"
n=24
fwd=${NW_BISECT_CULPRIT:-$((4 + RANDOM % 17))}
bwd=${NW_BISECT_CULPRIT2:-$((4 + RANDOM % 17))}
echo "seed-bound bug at $fwd, race at $bwd (set NW_BISECT_CULPRIT and NW_BISECT_CULPRIT2 to replay)"
repo=$work/repo
git init -q -b main "$repo"
commit_at() { # I: commit position I of the history
	local i=$1
	if ((i >= fwd)); then echo failing; else echo good; fi >"$repo/mode"
	# fake.bwd appears at commit 2: a bisection from before it has no good side to take a rate from.
	if ((i >= bwd)); then echo flaky40; elif ((i >= 2)); then echo flakefirst; fi >"$repo/bwd_mode"
	[[ -s $repo/bwd_mode ]] || rm "$repo/bwd_mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
}
for ((i = 0; i < n; i++)); do commit_at "$i"; done
pg_start
NW_PORT=$(nw_free_port)
nw_mode_conf "$work/nw.conf" seeds "$repo" 64 256 "[trials]\nchecks = fake.bwd"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch
export NUMWATCH_URL=http://127.0.0.1:$NW_PORT
bwd_judged() { [[ $(pg_psql "SELECT count(*) FROM stats s JOIN checks k ON k.id = s.check_id
	WHERE k.name = 'fake.bwd' AND s.verdict <> 'pending'") == $((n - 2)) ]]; }
nw_wait 600 "fake.bwd judged at commits 2 to $((n - 1))" bwd_judged
# Every check from here on; one more commit (position n) is the first to run fake.fwd.
nw_mode_conf "$work/nw.conf" seeds "$repo" 64 256
kill -HUP "$NW_DAEMON_PID"
commit_at "$n"
n=$((n + 1))
tip_judged() { [[ $(pg_psql "SELECT s.verdict FROM stats s JOIN commits c ON c.id = s.commit_id
	JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.fwd' AND c.position = $((n - 1))") == regressed ]]; }
nw_wait 600 "fake.fwd judged regressed at the new commit" tip_judged
[[ $(pg_psql "SELECT count(*) FROM stats s JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.fwd'") == 1 ]] ||
	fail "fake.fwd has results before the new commit: the range would not be untested"
token=$("$NUMWATCH" token create seeds-test --config "$work/nw.conf" 2>/dev/null)
"$NUMWATCH" bisect --good "$(pg_psql "SELECT sha FROM commits WHERE position = 0")" \
	--bad "$(pg_psql "SELECT sha FROM commits WHERE position = $((n - 1))")" --check fake.fwd --dtype f32 \
	--token "$token" >/dev/null || fail "numwatch bisect (fake.fwd) failed"
"$NUMWATCH" bisect --good "$(pg_psql "SELECT sha FROM commits WHERE position = $((bwd - 1))")" \
	--bad "$(pg_psql "SELECT sha FROM commits WHERE position = $((n - 1))")" --check fake.bwd --dtype f32 \
	--token "$token" >/dev/null || fail "numwatch bisect failed"
# And from before fake.bwd existed (commit 1): the default flake rate.
"$NUMWATCH" bisect --good "$(pg_psql "SELECT sha FROM commits WHERE position = 1")" \
	--bad "$(pg_psql "SELECT sha FROM commits WHERE position = $((n - 1))")" --check fake.bwd --dtype f32 \
	--token "$token" >/dev/null || fail "numwatch bisect failed"
bisected() { # CHECK POSITION: a bisection of CHECK whose range holds POSITION is done
	[[ $(pg_psql "SELECT count(*) FROM bisections b JOIN checks k ON k.id = b.check_id
		JOIN commits g ON g.id = b.good_commit_id JOIN commits c ON c.id = b.bad_commit_id
		WHERE k.name = '$1' AND g.position < $2 AND c.position >= $2 AND b.state = 'done'") -ge 1 ]]
}
idle() { [[ $(pg_psql "SELECT count(*) FROM bisections WHERE state <> 'done'") == 0 ]]; }
nw_wait 600 "fake.fwd's regression bisected" bisected fake.fwd "$fwd"
nw_wait 600 "fake.bwd bisected by hand" bisected fake.bwd "$bwd"
nw_wait 600 "every bisection done" idle

row() { # CHECK CULPRIT: the field list of the bisection whose range holds CULPRIT
	pg_psql "SELECT b.id, b.outcome, coalesce(c.position::text, '-'), coalesce(b.posterior->>'seeds', '-'),
		coalesce(b.posterior->>'replayed_reruns', '-'), jsonb_array_length(b.posterior->'replayed'),
		b.posterior->>'flake_rate', bd.position
		FROM bisections b JOIN checks k ON k.id = b.check_id LEFT JOIN commits c ON c.id = b.culprit_id
		JOIN commits g ON g.id = b.good_commit_id JOIN commits bd ON bd.id = b.bad_commit_id
		WHERE k.name = '$1' AND g.position < $2 AND bd.position >= $2 ORDER BY b.id LIMIT 1" | tr '|' ' '
}

read -r id outcome at seeds reruns replayed f bad <<<"$(row fake.fwd "$fwd")"
[[ $outcome == culprit && $at == "$fwd" ]] || fail "fake.fwd: bisection $id ended '$outcome' at $at, the bug is at $fwd"
[[ $seeds == seed_bound ]] || fail "fake.fwd: the failing seeds were judged '$seeds', expected seed_bound"
((reruns >= 1 && reruns == replayed)) || fail "fake.fwd: $reruns of $replayed replayed seeds' reruns taken as their replay"
at_bad=$(pg_psql "SELECT count(*) FROM probes p JOIN commits c ON c.id = p.commit_id WHERE p.bisection_id = $id
	AND p.failing_seeds AND c.position = $bad")
[[ $at_bad == 0 ]] || fail "fake.fwd: $at_bad failing-seed probes at the bad commit, whose reruns already said it"
read -r search probes failing_probes <<<"$(pg_psql "SELECT coalesce(sum(trials), 0), count(*),
	count(*) FILTER (WHERE failing_seeds) FROM probes WHERE bisection_id = $id AND purpose = 'search'" | tr '|' ' ')"
# An untested range of 25 commits: the failing seeds, replayed, find the bug in about log2 N probes.
((failing_probes > 0)) || fail "fake.fwd: no failing seed replayed in the untested range ($probes probes)"
((search <= 20)) || fail "fake.fwd: $search search trials in $probes probes, expected about log2 N"
echo "ok: fake.fwd's seed-bound bug named at $fwd in $search search trials ($probes probes, $failing_probes" \
	"replaying failing seeds), its $replayed failing seeds' reruns taken as their replay at the bad commit"

read -r id outcome at seeds reruns replayed f bad <<<"$(row fake.bwd "$bwd")"
[[ $outcome == culprit && $at == "$bwd" ]] || fail "fake.bwd: bisection $id ended '$outcome' at $at, the race is at $bwd"
[[ $seeds == race || ($seeds != seed_bound && $replayed == 0) ]] ||
	fail "fake.bwd: the failing seeds were judged '$seeds' ($replayed replayed), expected race"
replays=$(pg_psql "SELECT count(*) FROM probes WHERE bisection_id = $id AND failing_seeds")
[[ $replays == 0 ]] || fail "fake.bwd: the race's failing seeds were replayed in $replays probes"
# The good side's rate over its last 16 judged commits since its last change of state (a new regression,
# a fix, changed inputs): one failure planted per commit, among the 64 to 256 trials its verdict took.
want=$(pg_psql "WITH h AS (SELECT c.position, s.* FROM stats s JOIN commits c ON c.id = s.commit_id
	JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.bwd' AND c.position < $bwd
	AND s.verdict IN ('clean', 'flaky', 'improved', 'regressed', 'check_changed'))
	SELECT sum(x.failures)::float8 / sum(x.trials) FROM (SELECT h.failures, h.trials FROM h
	WHERE h.position >= coalesce((SELECT max(position) FROM h WHERE verdict IN ('improved', 'check_changed')
	OR regression_new), 0) ORDER BY h.position DESC LIMIT 16) x")
# (The rate is frozen at the bisection's first step; a verdict judged again since, once the
# history's order settled, may move the window by a commit: within a quarter of it.)
awk -v f="$f" -v w="$want" 'BEGIN { exit !(f > 0.002 && f < 0.05 && f - w <= 0.25 * w && w - f <= 0.25 * w) }' ||
	fail "fake.bwd: assumed flake rate $f, the good side's is $want (one failure per commit planted)"
echo "ok: fake.bwd's race named at $bwd with fresh seeds only ('$seeds'), assuming flake rate $f"
read -r outcome at f <<<"$(pg_psql "SELECT b.outcome, coalesce(c.position::text, '-'), b.posterior->>'flake_rate'
	FROM bisections b JOIN commits g ON g.id = b.good_commit_id LEFT JOIN commits c ON c.id = b.culprit_id
	WHERE g.position = 1" | tr '|' ' ')"
[[ $outcome == culprit && $at == "$bwd" && $f == 0.001 ]] ||
	fail "fake.bwd from commit 1, before the check existed: '$outcome' at $at assuming flake rate $f (want 0.001)"
echo "ok: from before fake.bwd existed, the default flake rate $f and the race named at $bwd"

wrong=$(pg_psql "SELECT string_agg(k.name || ' at ' || c.position, ', ') FROM bisections b
	JOIN checks k ON k.id = b.check_id JOIN commits c ON c.id = b.culprit_id WHERE b.outcome = 'culprit'
	AND c.position <> CASE k.name WHEN 'fake.fwd' THEN $fwd ELSE $bwd END")
[[ -z $wrong ]] || fail "bisections blamed $wrong"
echo "ok: $(pg_psql "SELECT count(*) FROM bisections") bisections, none blamed another commit"
