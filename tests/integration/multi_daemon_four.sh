#!/usr/bin/env bash
# Several daemons, one database (issue 16): four daemons share the work of a
# 64-commit history (a deterministic bug in two checks from commit 40, fixed
# at 52; a commit that does not build at 20; a race from 56 on), while a
# single daemon watches the same history on a database of its own. The four
# conclude what the one does (verdicts, regressions, bisections, mails),
# with no infra_error and no trial or probe run twice, and each of the four
# ran a share of the trials.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-four.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
n=64
git init -q -b main "$repo"
echo fake.x1 >"$repo/extra_checks"
for ((i = 0; i < n; i++)); do
	if ((i >= 40 && i < 52)); then echo failing; else echo good; fi >"$repo/mode"
	if ((i >= 56)); then echo hflaky30; else echo good; fi >"$repo/bwd_mode"
	if ((i == 20)); then touch "$repo/broken"; else rm -f "$repo/broken"; fi
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done

pg_start
fleet_db=$NW_DATABASE
pg_psql "CREATE DATABASE solo"
solo_db="$NW_DATABASE dbname=solo"
conf() {
	mkdir -p "$work/$1"
	NW_PORT=$(nw_free_port) NW_DATABASE=$2 nw_mode_conf "$work/$1/nw.conf" long "$repo" 16 256 \
		"[daemon]\nnode_name = $1\n[repository]\nhistory_max = $n\n[mail]
from = numwatch <numwatch@example.org>\nto = dev@example.org\nsend_to_author = false\nmbox = $work/$3.mbox"
}
conf solo "$solo_db" solo
for d in d1 d2 d3 d4; do conf "$d" "$fleet_db" fleet; done
nw_fleet_start "$work" solo d1 d2 d3 d4
in_db() {
	local db=$1
	shift
	NW_DATABASE=$db "$@"
}
nw_wait 1200 "the four daemons to settle" nw_settled
nw_wait 1200 "the single daemon to settle" in_db "$solo_db" nw_settled

solo=$(in_db "$solo_db" nw_outcome)
fleet=$(nw_outcome)
for fact in "commit 20 build_failed" "commit 40 regressed" "commit 52 improved" "commit 56 regressed" \
	"regression fake.fwd f32 new@40 fixed fixed@52 culprit@40" "regression fake.bwd f32 new@56 culprit fixed@- culprit@56" \
	"mail culprit culprit@40 sent" "mail culprit culprit@56 sent"; do
	grep -qxF "$fact" <<<"$solo" || grep -qF "$fact " <<<"$solo" ||
		fail "the single daemon did not conclude '$fact': $(grep -E '^(commit|regression|bisection|mail)' <<<"$solo")"
done
[[ $(grep -c '^commit' <<<"$solo") == "$n" ]] || fail "the single daemon judged $(grep -c '^commit' <<<"$solo") commits, not $n"
[[ $solo == "$fleet" ]] ||
	fail "four daemons concluded otherwise than one (< one, > four):
$(diff <(echo "$solo") <(echo "$fleet") || true)"
grep -E "^(regression|bisection|mail)" <<<"$fleet"
echo "ok: four daemons concluded what one did: $(grep -c '^verdict' <<<"$fleet") verdicts," \
	"$(grep -c '^regression' <<<"$fleet") regressions, $(grep -c '^bisection' <<<"$fleet") bisections," \
	"$(grep -c '^mail' <<<"$fleet") mails"

infra=$(pg_psql "SELECT (SELECT count(*) FROM trials WHERE outcome = 'infra_error')
	+ (SELECT count(*) FROM stats WHERE verdict = 'infra_error')")
[[ $infra == 0 ]] || fail "$infra infra_error trials or verdicts"
why=$(nw_no_duplicates) || fail "$why"
# A share each: at least a tenth of an even split.
shares=$(pg_psql "SELECT string_agg(host || '=' || n, ' ' ORDER BY host) FROM (SELECT host, count(*) AS n
	FROM trials GROUP BY host) x")
least=$(pg_psql "SELECT CASE WHEN count(*) = 4 THEN min(n) ELSE 0 END || ' ' || sum(n) FROM (SELECT host, count(*) AS n
	FROM trials GROUP BY host) x")
read -r min total <<<"$least"
((min * 40 >= total)) || fail "trials by daemon: '$shares': each of the four should have run a share"
builds=$(pg_psql "SELECT string_agg(host || '=' || n, ' ' ORDER BY host) FROM (SELECT host, count(*) AS n
	FROM host_builds GROUP BY host) x")
echo "ok: no infra_error, no trial or probe run twice; trials by daemon: $shares; builds by host: $builds"

# A done bisection is final: a step saved over one (as a daemon that read it just before another
# finished it would have) is refused, and it stays done with its culprit.
done_before=$(pg_psql "SELECT string_agg(id || ':' || outcome || ':' || coalesce(culprit_id::text, '-'), ' ' ORDER BY id)
	FROM bisections WHERE state = 'done'")
[[ -n $done_before ]] || fail "no done bisection to test"
for b in $(pg_psql "SELECT id FROM bisections WHERE state = 'done'"); do
	if out=$(pg_psql "SELECT bisection_save($b, (SELECT step FROM bisections WHERE id = $b), 'confirming', NULL, NULL,
		0.5, '{}'::jsonb, '[]'::jsonb, '[]'::jsonb)" 2>&1); then
		fail "a step was saved over done bisection $b: '$out'"
	fi
	grep -q "a done bisection is final" <<<"$out" || fail "bisection $b: not the expected refusal: $out"
done
done_after=$(pg_psql "SELECT string_agg(id || ':' || outcome || ':' || coalesce(culprit_id::text, '-'), ' ' ORDER BY id)
	FROM bisections WHERE state = 'done'")
[[ $done_after == "$done_before" ]] || fail "done bisections changed: '$done_before' -> '$done_after'"
echo "ok: a step over a done bisection refused; they stay done: $done_after"
