#!/usr/bin/env bash
# A commit judged again after a bisection probed it keeps its plan. Commit 4
# breaks fake.fwd (deterministic: seeds 3, 11, 19, ... fail); its trials wait
# at a gate the test opens, so that commit 5 is first judged against commit
# 3, raises the regression, and its bisection probes commit 5 with fresh
# seeds (32 on: seed 35 fails there). Once commit 4 is judged, commit 5 is
# judged again against it. That verdict read the highest seed stored at the
# commit as its plan's: it grew to 36 seeds, asked commit 4 for seeds 32-35,
# which a probe ran once there, seed 35 failing once, and the verdict waited
# for a rerun nothing ran: pending for good (multi_daemon timed out so, one
# daemon judging a commit before another judged its parent). The history must
# settle with the verdicts it has in order, commit 5 judged on its 32 seeds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-probed.XXXXXX")
nw_atexit rm -rf "$work"
gate=$work/gate-open
repo=$work/repo
git init -q -b main "$repo"
for ((i = 0; i <= 6; i++)); do
	if ((i >= 4)); then echo failing; else echo good; fi >"$repo/mode"
	if ((i == 4)); then echo "fake.fwd $gate" >"$repo/gate"; else rm -f "$repo/gate"; fi
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
nw_mode_conf "$work/nw.conf" probed "$repo" 32 256 "[trials]\ntimeout = 900"
# Three slots: commit 4's trials and its bisection probe wait at the gate, the third runs the rest.
sed -i 's/^slots = host, host$/slots = host, host, host/' "$work/nw.conf"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"

fwd5() {
	pg_psql "SELECT coalesce(string_agg(t.seed::text, ',' ORDER BY t.seed), '') FROM trials t
		JOIN commits c ON c.id = t.commit_id JOIN checks k ON k.id = t.check_id
		WHERE c.position = 5 AND k.name = 'fake.fwd' AND t.seed >= 32 AND t.outcome = 'fail'"
}
probed() {
	[[ -n $(fwd5) ]] && [[ $(pg_psql "SELECT count(*) FROM jobs j JOIN commits c ON c.id = j.commit_id
		WHERE c.position = 5 AND j.kind = 'probe' AND j.state IN ('queued', 'running')") == 0 ]]
}
nw_wait 300 "the bisection's fresh seeds failing at commit 5 while commit 4 waits" probed
early=$(pg_psql "SELECT s.verdict || CASE WHEN s.regression_new THEN '*' ELSE '' END FROM stats s
	JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
	WHERE c.position = 5 AND k.name = 'fake.fwd'")
[[ $early == 'regressed*' ]] || fail "commit 5, judged against commit 3, did not raise the regression: '$early'"
echo "commit 5 judged first: $early; fresh seeds failing there: $(fwd5)"
touch "$gate"

settled() {
	nw_all_final && [[ $(pg_psql "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')") == 0 ]]
}
settled_within() {
	local end=$((SECONDS + $1))
	until settled; do
		((SECONDS < end)) || return 1
		kill -0 "$NW_DAEMON_PID" 2>/dev/null || fail "numwatchd died while the history settled"
		sleep 0.5
	done
}
if ! settled_within 300; then
	fail "the history did not settle: $(pg_psql "SELECT string_agg(c.position || ' ' || k.name || ' ' || s.verdict
		|| ' (' || s.trials || ' trials: ' || coalesce(s.evidence ->> 'reason', '') || ')', '; ')
		FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id
		WHERE s.verdict = 'pending'")"
fi
table=$(pg_psql "SELECT string_agg(c.position || ':' || s.verdict || CASE WHEN s.regression_new THEN '*' ELSE '' END
	|| ':' || s.trials, ' ' ORDER BY c.position) FROM stats s JOIN commits c ON c.id = s.commit_id
	JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.fwd'")
expected="0:clean:32 1:clean:32 2:clean:32 3:clean:32 4:regressed*:32 5:regressed:32 6:regressed:32"
[[ $table == "$expected" ]] || fail "fake.fwd (position:verdict:trials): $table; expected $expected"
echo "ok: settled with the verdicts of the history in order, commit 5 judged on its 32 seeds: $table"
