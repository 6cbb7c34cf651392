#!/usr/bin/env bash
# A check whose inputs changed is not a regression (issue 13, case identity).
# From commit 5 on, the runner generates other inputs for odd seeds (the fake
# runner's case_shift: their case.digest changes; family, shape and gen do
# not), and about 30% of those new inputs fail (fail30), the same seeds at
# every commit. Paired by seed alone, commit 5 would look like a regression
# and be blamed. It must instead be `check_changed`, saying how many seeds
# changed; its failures make a regression nobody is blamed for
# (check_changed: no bisection, no mail); the commits after it, with the
# same inputs, are `flaky` (the same seeds fail on both sides), not
# regressed; and CI passes all of them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-changed.XXXXXX")
nw_atexit rm -rf "$work"
n=9 shift_at=5 seeds=32
repo=$work/repo
git init -q -b main "$repo"
echo good >"$repo/mode"
for ((i = 0; i < n; i++)); do
	((i < shift_at)) || echo "generator2 fail30" >"$repo/case_shift"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
export NUMWATCH_URL=http://127.0.0.1:$NW_PORT
nw_mode_conf "$work/nw.conf" changed "$repo" "$seeds" 256 "[mail]
from = numwatch <numwatch@example.org>
to = dev@example.org
mbox = $work/mbox"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 600 "every commit judged" nw_all_final
idle() { [[ $(pg_psql "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')") == 0 ]]; }
nw_wait 120 "the queue drained" idle
sleep 6 # a bisector step and a mail sweep: none may start
table=$(pg_psql "SELECT string_agg(c.position || ':' || s.verdict || CASE WHEN s.regression_new THEN '*' ELSE '' END
	|| '(' || s.failures || '/' || s.trials || ',changed ' || s.changed_seeds || ')', ' ' ORDER BY c.position)
	FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.fwd'")
echo "fake.fwd: $table"

read -r v changed failures <<<"$(pg_psql "SELECT s.verdict || ' ' || s.changed_seeds || ' ' || s.failures
	FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
	WHERE k.name = 'fake.fwd' AND c.position = $shift_at")"
[[ $v == check_changed ]] || fail "commit $shift_at is '$v', expected check_changed: $table"
[[ $changed == $((seeds / 2)) ]] || fail "commit $shift_at: $changed seeds changed, the odd ones are $((seeds / 2))"
((failures > 0)) || fail "commit $shift_at: no failing seed: the test's fail30 did not bite"
cv=$(pg_psql "SELECT commit_verdict(id) FROM commits WHERE position = $shift_at")
[[ $cv == check_changed ]] || fail "commit $shift_at's overall verdict is '$cv'"
echo "ok: commit $shift_at is check_changed: $changed seeds changed, $failures fail with their new inputs"

# Nobody blamed: a regression in state check_changed, no bisection, no mail.
regs=$(pg_psql "SELECT coalesce(string_agg(c.position || ':' || r.state || ':' || r.changed_seeds, ' '), '')
	FROM regressions r JOIN commits c ON c.id = r.first_commit_id")
[[ $regs == "$shift_at:check_changed:$((seeds / 2))" ]] || fail "regressions: '$regs'"
[[ $(pg_psql "SELECT count(*) FROM bisections") == 0 ]] || fail "a bisection was started"
[[ ! -s $work/mbox ]] || fail "a mail was sent"
new=$(pg_psql "SELECT count(*) FROM stats WHERE regression_new")
[[ $new == 0 ]] || fail "$new new-regression verdicts: $table"

# The commits after it run the same inputs: flaky (the same seeds fail on both sides), never regressed.
after=$(pg_psql "SELECT string_agg(DISTINCT s.verdict, ' ') FROM stats s JOIN commits c ON c.id = s.commit_id
	JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.fwd' AND c.position > $shift_at")
[[ $after == flaky ]] || fail "the commits after $shift_at are '$after', expected flaky: $table"
for p in "$shift_at" $((n - 1)); do
	"$NUMWATCH" ci-wait "$(pg_psql "SELECT sha FROM commits WHERE position = $p")" --timeout 30 >/dev/null ||
		fail "ci-wait failed commit $p"
done
echo "ok: nobody blamed (regression '$regs', no bisection, no mail); the later commits are flaky; CI passes"
