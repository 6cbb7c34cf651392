#!/usr/bin/env bash
# What is and is not a regression (issue 13), on one history:
# - fake.bwd appears at commit 3 failing about 12% of its trials at every
#   commit (hflaky12: a new option above budget): reported as failing since
#   commit 3, with its rate, never a regression, never bisected, never mailed;
# - commit 6 breaks three checks at once (fake.fwd, fake.x1, fake.x2 fail on
#   the same seeds): three regressions, each bisected to commit 6, and one
#   culprit mail that lists all three;
# - the commits after it still show them (open), and are not new regressions.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-kinds.XXXXXX")
nw_atexit rm -rf "$work"
introduced=3 breaks=6 n=10
repo=$work/repo
git init -q -b main "$repo"
printf 'fake.x1\nfake.x2\n' >"$repo/extra_checks"
for ((i = 0; i < n; i++)); do
	if ((i < breaks)); then echo good; else echo failing; fi >"$repo/mode"
	((i < introduced)) || echo hflaky12 >"$repo/bwd_mode"
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
NW_PORT=$(nw_free_port)
export NUMWATCH_URL=http://127.0.0.1:$NW_PORT
nw_mode_conf "$work/nw.conf" kinds "$repo" 64 512 "$(nw_mbox_conf "$work/mbox")"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 600 "every commit judged" nw_all_final
nw_wait 600 "every regression bisected" nw_settled
table() {
	pg_psql "SELECT string_agg(c.position || ':' || s.verdict || CASE WHEN s.regression_new THEN '*' ELSE '' END
		|| '(' || s.failures || '/' || s.trials || ')', ' ' ORDER BY c.position)
		FROM stats s JOIN commits c ON c.id = s.commit_id JOIN checks k ON k.id = s.check_id WHERE k.name = '$1'"
}
echo "fake.bwd: $(table fake.bwd)"
echo "fake.fwd: $(table fake.fwd)"

# The new check: failing since it was introduced, at every commit, with its rate; no regression.
sha3=$(pg_psql "SELECT sha FROM commits WHERE position = $introduced")
since=$(pg_psql "SELECT count(*) FROM stats s JOIN checks k ON k.id = s.check_id JOIN commits c ON c.id = s.commit_id
	WHERE k.name = 'fake.bwd' AND s.verdict = 'flaky' AND s.evidence->>'failing_since' = '$sha3'
	AND (s.evidence->'candidate'->>'trials')::int > 0 AND jsonb_array_length(s.evidence->'candidate'->'wilson95') = 2")
[[ $since == $((n - introduced)) ]] ||
	fail "$since of $((n - introduced)) commits report fake.bwd failing since $introduced: $(table fake.bwd)"
bwd=$(pg_psql "SELECT (SELECT count(*) FROM regressions r JOIN checks k ON k.id = r.check_id WHERE k.name = 'fake.bwd')
	|| ' ' || (SELECT count(*) FROM bisections b JOIN checks k ON k.id = b.check_id WHERE k.name = 'fake.bwd')")
[[ $bwd == "0 0" ]] || fail "fake.bwd, failing since it was introduced, has regressions and bisections: $bwd"
echo "ok: fake.bwd fails since commit $introduced ($(pg_psql "SELECT round(100.0 * sum(failures) / sum(trials), 1)
	FROM stats s JOIN checks k ON k.id = s.check_id WHERE k.name = 'fake.bwd'")% of trials): no regression, no bisection"

# Three checks broken by one commit: three regressions new there, each bisected to it.
got=$(pg_psql "SELECT string_agg(k.name || '@' || c.position || ':' || r.state, ' ' ORDER BY k.name)
	FROM regressions r JOIN checks k ON k.id = r.check_id JOIN commits c ON c.id = regression_start(r)
	WHERE r.state <> 'withdrawn'")
[[ $got == "fake.fwd@$breaks:culprit fake.x1@$breaks:culprit fake.x2@$breaks:culprit" ]] ||
	fail "regressions: '$got'"
new=$(pg_psql "SELECT string_agg(DISTINCT c.position::text, ' ') FROM stats s JOIN commits c ON c.id = s.commit_id
	WHERE s.regression_new")
[[ $new == "$breaks" ]] || fail "new regressions at '$new', expected only at $breaks"
later=$(pg_psql "SELECT string_agg(DISTINCT commit_verdict(id), ' ') FROM commits WHERE position > $breaks")
[[ $later == open_regression ]] || fail "the commits after $breaks are '$later', expected open_regression"
echo "ok: three regressions new at $breaks, bisected to it; later commits show them open"

# One culprit mail for the commit, listing all three.
has_mail() { [[ -s $work/mbox ]]; }
nw_wait 120 "the culprit mail" has_mail
python3 - "$work/mbox" "$(pg_psql "SELECT sha FROM commits WHERE position = $breaks")" <<'PY' || fail "the culprit mail is not as expected"
import mailbox, sys
box = list(mailbox.mbox(sys.argv[1]))
culprits = [m for m in box if m["X-Numwatch-Kind"] == "culprit"]
assert len(culprits) == 1, [m["Subject"] for m in box]
m = culprits[0]
body = m.get_payload(decode=True).decode()
assert "regressed by " + sys.argv[2][:8] in m["Subject"], m["Subject"]
assert "and 2 more" in m["Subject"], m["Subject"]
for name in ("fake.fwd", "fake.x1", "fake.x2"):
    assert name in m["Subject"] + body, (name, body)
assert "The same commit also broke" in body, body
print("ok: one culprit mail:", m["Subject"])
PY
