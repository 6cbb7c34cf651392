#!/usr/bin/env bash
# A race in a deterministic check is bisected with fresh seeds only: from the
# culprit on, every trial fails with probability 50% and a failing trial's
# repeats disagree (digests_differ). The bad commit's failing seeds fail again
# only as any seed does, so the daemon does not replay them (a replay that
# passed would read as "the failure was a flake"), says so in the
# bisection's log, and still names the culprit: in the bisection it queues
# by itself and in one started by hand over the whole history. The culprit
# gets one mail (both bisections name it), which says how often the race
# shows and repeats its repro accordingly.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-race.XXXXXX")
nw_atexit rm -rf "$work"
culprit=${NW_BISECT_CULPRIT:-$((3 + RANDOM % 10))}
echo "race planted at position $culprit (set NW_BISECT_CULPRIT to replay)"
repo=$work/repo
nw_mode_history "$repo" 16 "$culprit" good race
pg_start
NW_PORT=$(nw_free_port)
export NUMWATCH_URL=http://127.0.0.1:$NW_PORT
nw_mode_conf "$work/nw.conf" race "$repo" 32 32 "$(nw_mbox_conf "$work/mbox")"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
tip_judged() { [[ $(pg_psql "SELECT s.verdict FROM stats s JOIN commits c ON c.id = s.commit_id
	WHERE c.position = 15") == regressed ]]; }
nw_wait 300 "the newest commit judged regressed" tip_judged

token=$("$NUMWATCH" token create race-test --config "$work/nw.conf" 2>/dev/null)
good=$(pg_psql "SELECT sha FROM commits WHERE position = 0")
bad=$(pg_psql "SELECT sha FROM commits WHERE position = 15")
"$NUMWATCH" bisect --good "$good" --bad "$bad" --check fake.fwd --dtype f32 --token "$token" >/dev/null ||
	fail "numwatch bisect failed"
id=$(pg_psql "SELECT max(id) FROM bisections WHERE requested_by = 'token:race-test'")
finished() { [[ $(pg_psql "SELECT count(*) FROM bisections WHERE state <> 'done'") == 0 ]]; }
nw_wait 600 "the bisections finish" finished

for b in $(pg_psql "SELECT id FROM bisections ORDER BY id"); do
	row=$(pg_psql "SELECT b.outcome || ' ' || coalesce(c.position::text, '-') FROM bisections b
		LEFT JOIN commits c ON c.id = b.culprit_id WHERE b.id = $b")
	[[ $row == "culprit $culprit" ]] || fail "bisection $b ended '$row', the race is at $culprit"
	frozen=$(pg_psql "SELECT coalesce(posterior->'replayed', 'null')::text FROM bisections WHERE id = $b")
	[[ $frozen == "[]" ]] || fail "bisection $b froze '$frozen' as its replayed failing seeds, expected []"
	replayed=$(pg_psql "SELECT count(*) FROM probes WHERE bisection_id = $b AND failing_seeds")
	[[ $replayed == 0 ]] || fail "bisection $b replayed the race's failing seeds in $replayed probes"
	said=$(pg_psql "SELECT count(*) FROM bisections, jsonb_array_elements(log) e
		WHERE id = $b AND e->>'msg' LIKE '%not replayed: their repeats differed%'")
	[[ $said == 1 ]] || fail "bisection $b's log says $said times (not once) why the failing seeds were not replayed"
done
echo "ok: $(pg_psql "SELECT count(*) FROM bisections") bisections named the race at $culprit with fresh seeds only" \
	"(by hand: $(pg_psql "SELECT coalesce(sum(trials), 0) FROM probes WHERE bisection_id = $id") probe trials)"

# The culprit mail tells how often the race shows, and its repro runs the seed often enough to see
# it (one run would pass half the time). The rate is the search's estimate at the culprit.
read -r seeds rate <<<"$(pg_psql "SELECT coalesce(posterior->>'seeds', '-') || ' '
	|| coalesce(round((posterior->>'culprit_rate')::numeric, 3)::text, '-') FROM bisections WHERE id = $id")"
# (A binomial estimate from some 30 to 60 trials past the culprit: outside 0.2 to 0.8 about once in 10^4.)
awk -v r="$rate" 'BEGIN { exit !(r >= 0.2 && r <= 0.8) }' ||
	fail "bisection $id estimated the culprit's rate at '$rate' (seeds: $seeds), the race fails 50%"
mail_of() { # the body of bisection $1's culprit mail
	python3 - "$work/mbox" "$1" <<'PY'
import mailbox, sys
for m in mailbox.mbox(sys.argv[1]):
    if m["X-Numwatch-Bisection"] == sys.argv[2] and not m["In-Reply-To"]:
        print(m.get_payload(decode=True).decode("utf-8", "replace"))
PY
}
# Both bisections name the same commit: it gets one mail, its first bisection's (the automatic one).
first=$(pg_psql "SELECT min(id) FROM bisections WHERE outcome = 'culprit'")
mailed() { mail_of "$first" | grep -q -- "--runs [0-9]"; }
nw_wait 60 "the culprit's mail (bisection $first) with a repeated repro" mailed
n=$(python3 -c 'import mailbox, sys; print(sum(1 for m in mailbox.mbox(sys.argv[1]) if not m["In-Reply-To"]))' "$work/mbox")
[[ $n == 1 ]] || fail "$n culprit mails for one culprit named by two bisections"
mail_of "$first" >"$work/mail.txt"
grep -q "% of fresh seeds fail at the culprit" "$work/mail.txt" || fail "the culprit mail does not say how often it fails"
repro=$(grep -m1 -o "numwatch repro .* --runs [0-9]*" "$work/mail.txt")
runs=${repro##* }
# mail_repro_runs: 7 runs at 50%, 3 at 0.8, 21 at 0.2.
((runs >= 3 && runs <= 21)) || fail "the mail's repro runs the seed $runs times for a 50% race (rate $rate)"
# The mail's command, run here (the config added): it must fail. More runs than the mail's so that
# this test does not fail 1% of the time; then some of them pass too.
rc=0; ${repro/numwatch/$NUMWATCH} --config "$work/nw.conf" --runs 40 >"$work/repro.out" 2>&1 || rc=$?
count=$(grep -o "failed [0-9]* of 40 runs" "$work/repro.out" | cut -d' ' -f2 || true)
[[ $rc == 1 && -n $count ]] && ((count > 0 && count < 40)) ||
	fail "the mail's repro, 40 runs: exit $rc, $(tail -3 "$work/repro.out")"
echo "ok: the culprit mail (seeds: $seeds, rate $rate) repeats the repro $runs times; 40 runs failed $count"

# A range entirely after the race (its good end races too): the culprit it names fails its
# confirmation at the parent, and after each withdrawal it is re-tested with new seeds, not
# withdrawn again on the same trials; after three, nobody is blamed. (The parent passes a short
# confirmation by chance now and then, 1/64 at this rate: then fewer withdrawals, each still
# on its own round.)
late_good=$(pg_psql "SELECT sha FROM commits WHERE position = 13")
"$NUMWATCH" bisect --good "$late_good" --bad "$bad" --check fake.fwd --dtype f32 --token "$token" >/dev/null ||
	fail "numwatch bisect (range after the race) failed"
late=$(pg_psql "SELECT max(id) FROM bisections WHERE requested_by = 'token:race-test'")
nw_wait 600 "the bisection after the race finishes" finished
read -r outcome withdrawals <<<"$(pg_psql "SELECT outcome || ' ' || coalesce(posterior->>'withdrawals', '0')
	FROM bisections WHERE id = $late")"
rounds=$(pg_psql "SELECT count(DISTINCT round) FROM probes WHERE bisection_id = $late AND purpose = 'confirm'
	AND commit_id = (SELECT id FROM commits WHERE position = 13)")
((withdrawals > 0)) || echo "note: the first confirmation passed the racing parent by chance"
((rounds >= withdrawals)) ||
	fail "$withdrawals withdrawals rested on $rounds confirmation round(s) at the parent: expected new seeds each time"
[[ $outcome == withdrawn || ($outcome == culprit && withdrawals -lt 3) ]] ||
	fail "the bisection of a range after the race ended '$outcome' after $withdrawals withdrawals"
dup=$(pg_psql "SELECT count(*) FROM (SELECT pr.commit_id, s FROM probes pr, unnest(pr.seeds) s
	WHERE pr.bisection_id = $late GROUP BY 1, 2 HAVING count(*) > 1) x")
[[ $dup == 0 ]] || fail "$dup seeds ran twice at one commit in the bisection after the race"
echo "ok: a range after the race: $withdrawals withdrawals on $rounds confirmation rounds ($outcome)"
