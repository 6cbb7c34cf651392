#!/usr/bin/env bash
# Verdicts do not depend on the order work finishes in (issue 13). A history
# where commit 4 breaks fake.fwd (deterministic: the same seeds fail) and
# commit 8 fixes it is judged twice: once with commit 4's trials held back
# until every later commit has its verdict (its runner waits at a gate the
# test opens), so that commit 5 is first judged against commit 3 and raises
# the regression, and once as it comes ([bisect] automatic = false: a
# bisection would probe commit 4 and wait at its gate too; verdicts and
# regressions do not depend on it). Both must end with the verdicts the
# history has in order: 0-3 clean, 4 regressed (new), 5-7 regressed (still
# open), 8 improved (fixed), 9-10 clean, and one regression, new at 4,
# fixed at 8.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-order.XXXXXX")
nw_atexit rm -rf "$work"
gate=$work/gate-open
repo=$work/repo
git init -q -b main "$repo"
for ((i = 0; i <= 10; i++)); do
	if ((i >= 4 && i < 8)); then echo failing; else echo good; fi >"$repo/mode"
	if ((i == 4)); then echo "fake.fwd $gate" >"$repo/gate"; else rm -f "$repo/gate"; fi
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
expected="0:clean 1:clean 2:clean 3:clean 4:regressed* 5:regressed 6:regressed 7:regressed 8:improved 9:clean 10:clean"
pg_start
NW_PORT=$(nw_free_port)

table() {
	pg_psql "SELECT coalesce(string_agg(c.position || ':' || s.verdict || CASE WHEN s.regression_new THEN '*' ELSE '' END,
		' ' ORDER BY c.position), '') FROM stats s JOIN commits c ON c.id = s.commit_id
		WHERE s.verdict NOT IN ('pending', 'infra_error')"
}
regressions() {
	pg_psql "SELECT coalesce(string_agg(n.position || '-' || r.state || '-' || coalesce(f.position::text, '?'), ' '
		ORDER BY r.id), '') FROM regressions r JOIN commits n ON n.id = regression_start(r)
		LEFT JOIN commits f ON f.id = r.fixed_commit_id WHERE r.state <> 'withdrawn'"
}
settled() {
	nw_all_final && [[ $(pg_psql "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')") == 0 ]]
}

# 1. Commit 4 held back: the later commits are judged first.
nw_mode_conf "$work/nw.conf" order "$repo" 32 256 "[trials]\ntimeout = 900\n[bisect]\nautomatic = false"
nw_daemon_start "$work/nw.conf" "$work/daemon1.log"
later_judged() {
	[[ $(pg_psql "SELECT count(*) FROM stats s JOIN commits c ON c.id = s.commit_id
		WHERE c.position > 4 AND s.verdict NOT IN ('pending', 'infra_error')") == 6 ]]
}
nw_wait 600 "commits 5 to 10 judged while commit 4 waits" later_judged
early=$(table)
echo "before commit 4:  $early"
[[ $early != *"4:"* ]] || fail "commit 4 was judged before the gate opened: $early"
[[ $early == *"5:regressed*"* ]] || fail "commit 5, judged against commit 3, did not raise the regression: $early"
touch "$gate"
nw_wait 600 "every commit judged" settled
held=$(table)
held_regs=$(regressions)
echo "commit 4 held:    $held; regressions $held_regs"
withdrawn=$(pg_psql "SELECT count(*) FROM regressions WHERE state = 'withdrawn'")
_nw_kill_daemon || true # (wait reports the SIGKILL)
NW_DAEMON_PID=

# 2. The same history as it comes, on a fresh database and state directory.
pg_psql "DROP SCHEMA public CASCADE; CREATE SCHEMA public"
rm -rf "$work/state"
nw_daemon_start "$work/nw.conf" "$work/daemon2.log"
nw_wait 600 "every commit judged (second run)" settled
plain=$(table)
plain_regs=$(regressions)
echo "as it comes:      $plain; regressions $plain_regs"

[[ $held == "$expected" ]] || fail "with commit 4 held back: $held; expected $expected"
[[ $plain == "$expected" ]] || fail "as it comes: $plain; expected $expected"
[[ $held_regs == "4-fixed-8" && $plain_regs == "4-fixed-8" ]] ||
	fail "regressions: '$held_regs' (held) and '$plain_regs' (as it comes), expected one new at 4 fixed at 8"
echo "ok: the same verdicts and one regression (new at 4, fixed at 8) in both orders" \
	"(the held run moved the regression commit 5 raised to commit 4; $withdrawn withdrawn)"
