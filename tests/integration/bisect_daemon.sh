#!/usr/bin/env bash
# Flake-aware bisection through the real daemon: a 64-commit history with a
# culprit at a random position that makes a non-deterministic check fail about
# 5% of its trials, three commits that do not build and two that leave the
# binary unchanged. A bisection started by hand (numwatch bisect) over the
# whole range, with two host slots, names the culprit; the daemon is killed
# with SIGKILL mid-bisection and restarted, resumes from the stored probes,
# still names it (at the configured [bisect] confidence, 0.999), and repeats no
# probe needlessly.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-bisect.XXXXXX")
nw_atexit rm -rf "$work"
culprit=${NW_BISECT_CULPRIT:-$((10 + RANDOM % 45))}
echo "culprit planted at position $culprit (set NW_BISECT_CULPRIT to replay)"

# Unbuildable commits and same-binary commits, away from the culprit and the ends.
pick() { # pick N: N distinct positions in 2..61, none the culprit or taken
	local n=$1 out=() p
	while ((${#out[@]} < n)); do
		p=$((2 + RANDOM % 60))
		[[ $p == "$culprit" || " ${taken[*]} ${out[*]} " == *" $p "* ]] && continue
		out+=("$p")
	done
	echo "${out[*]}"
}
taken=()
read -ra broken <<<"$(pick 3)"
taken=("${broken[@]}")
read -ra same <<<"$(pick 2)"

repo=$work/repo
git init -q -b main "$repo"
echo good >"$repo/mode"
for i in $(seq 0 63); do
	bwd=good
	((i >= culprit)) && bwd=flaky5
	echo "$bwd" >"$repo/bwd_mode"
	rm -f "$repo/broken"
	if [[ " ${same[*]} " == *" $i "* ]]; then
		echo "notes $i" >>"$repo/README" # the binary does not change
	else
		echo "$i" >"$repo/version"
	fi
	[[ " ${broken[*]} " == *" $i "* ]] && echo "syntax error" >"$repo/broken"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
export NUMWATCH_URL=http://127.0.0.1:$NW_PORT
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
lease = 30
[repository]
name = bisect
url = $repo
poll_interval = 2
history_max = 100
[build]
command = test ! -e broken && r="\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp "$here/fake-runner" "\$r" && printf '# version %s, %s\n' "\$(cat version)" "\$(cat bwd_mode)" >>"\$r" && cp mode bwd_mode "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = 16
max = 16
timeout = 10
[slots]
slots = host, host
[http]
port = $NW_PORT
[bisect]
confidence = 0.999
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
built() { [[ $(pg_psql "SELECT count(*) FROM builds") == 64 ]]; }
nw_wait 300 "all 64 commits built" built
[[ $(pg_psql "SELECT count(*) FROM builds WHERE status <> 'ok'") == 3 ]] || fail "expected 3 failed builds"

token=$("$NUMWATCH" token create bisect-test --config "$work/nw.conf" 2>/dev/null)
good=$(pg_psql "SELECT sha FROM commits WHERE position = 0")
bad=$(pg_psql "SELECT sha FROM commits WHERE position = 63")
"$NUMWATCH" bisect --good "$good" --bad "$bad" --check fake.bwd --dtype f32 --token "$token" >/dev/null ||
	fail "numwatch bisect failed"
id=$(pg_psql "SELECT max(id) FROM bisections WHERE requested_by = 'token:bisect-test'")

# SIGKILL once a few probes are stored, mid-search; restart; it resumes.
some_probes() { [[ $(pg_psql "SELECT count(*) FROM probes WHERE bisection_id = $id AND finished_at IS NOT NULL") -ge 3 ]]; }
nw_wait 300 "three finished probes" some_probes
[[ $(pg_psql "SELECT state FROM bisections WHERE id = $id") != done ]] || echo "note: bisection finished before the kill"
kill -9 "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" 2>/dev/null || true
probes_before=$(pg_psql "SELECT count(*) FROM probes WHERE bisection_id = $id")
echo "killed with SIGKILL after $probes_before probes"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
finished() { [[ $(pg_psql "SELECT state FROM bisections WHERE id = $id") == done ]]; }
nw_wait 600 "the bisection finishes" finished

outcome=$(pg_psql "SELECT outcome || ' ' || coalesce((SELECT position FROM commits WHERE id = culprit_id)::text, '-')
	|| ' ' || coalesce(confidence, 0) FROM bisections WHERE id = $id")
read -r what where confidence <<<"$outcome"
stats=$(pg_psql "SELECT count(*) || ' probes, ' || coalesce(sum(trials), 0) || ' trials' FROM probes WHERE bisection_id = $id")
[[ $what == culprit && $where == "$culprit" ]] ||
	fail "bisection ended '$what' at '$where' (confidence $confidence), planted at $culprit; $stats"
awk -v c="$confidence" 'BEGIN { exit !(c >= 0.999) }' ||
	fail "the culprit was named with confidence $confidence, [bisect] confidence = 0.999 configured"
echo "ok: culprit at position $culprit named with confidence $confidence ($stats)"

# Never probed: the unbuildable and same-binary commits.
for p in "${broken[@]}" "${same[@]}"; do
	n=$(pg_psql "SELECT count(*) FROM probes pr JOIN commits c ON c.id = pr.commit_id WHERE pr.bisection_id = $id AND c.position = $p")
	[[ $n == 0 ]] || fail "commit $p (unbuildable or same binary) was probed"
done
# No probe repeated needlessly: no seed ran twice at one commit for this bisection, and every probe job ran once.
dup=$(pg_psql "SELECT count(*) FROM (SELECT pr.commit_id, s, count(*) FROM probes pr, unnest(pr.seeds) s
	WHERE pr.bisection_id = $id AND NOT pr.failing_seeds GROUP BY 1, 2 HAVING count(*) > 1) x")
[[ $dup == 0 ]] || fail "$dup seeds probed twice at the same commit"
rerun=$(pg_psql "SELECT count(*) FROM (SELECT t.commit_id, t.seed FROM trials t JOIN checks k ON k.id = t.check_id
	WHERE k.name = 'fake.bwd' GROUP BY 1, 2 HAVING count(*) FILTER (WHERE t.outcome <> 'infra_error') > 2) x")
[[ $rerun == 0 ]] || fail "$rerun seeds ran more than twice at one commit"
echo "ok: unbuildable and same-binary commits never probed; no probe repeated after the restart"
# A rare failure makes long probes: each is split over the two slots (two parts, one round, one commit).
split=$(pg_psql "SELECT count(*) FROM (SELECT round, commit_id FROM probes WHERE bisection_id = $id
	AND purpose = 'search' GROUP BY 1, 2 HAVING count(*) > 1) x")
[[ $split -ge 1 ]] || fail "no probe was split over the two slots"
# A part ends at its own first failure or at its sibling's (the slots tell each other), never
# short of its planned seeds (its job's) otherwise.
parts=$(pg_psql "SELECT count(*) FILTER (WHERE short) || ' ' || count(*) FILTER (WHERE short AND NOT EXISTS (
		SELECT 1 FROM probes o WHERE o.bisection_id = x.bisection_id AND o.round = x.round
		AND o.commit_id = x.commit_id AND o.id <> x.id AND o.failures > 0))
	FROM (SELECT p.*, p.failures = 0 AND p.trials < cardinality(j.seeds) AS short
		FROM probes p JOIN jobs j ON j.id = p.job_id WHERE p.purpose = 'search' AND NOT p.failing_seeds
		AND p.trials IS NOT NULL AND j.state = 'done') x")
read -r ended orphan <<<"$parts"
[[ $orphan == 0 ]] || fail "$orphan probe parts stopped short of their seeds with no failure, theirs or a sibling's"
echo "ok: $split probes split over the two slots, their seeds disjoint; $ended parts (all bisections) ended at a sibling's failure"

# Automatic bisections (queued from the per-commit verdicts) never blame a commit before the culprit,
# and start only from a decisively clean commit, so none should start past it either.
early=$(pg_psql "SELECT count(*) FROM bisections b JOIN commits c ON c.id = b.culprit_id
	WHERE b.outcome = 'culprit' AND c.position < $culprit")
[[ $early == 0 ]] || fail "$early bisections blamed a commit before the culprit"
late=$(pg_psql "SELECT count(*) FROM bisections b JOIN commits c ON c.id = b.culprit_id
	WHERE b.outcome = 'culprit' AND c.position > $culprit")
[[ $late == 0 ]] || fail "$late bisections blamed a commit after the culprit"
echo "ok: no bisection blamed a commit other than the culprit"
