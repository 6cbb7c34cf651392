#!/usr/bin/env bash
# Several daemons, one database (issue 16). Two daemons share one database,
# each with its own state directory, node name and port, on a demo-like
# history (a deterministic bug in two checks from commit 5, fixed at 10; a
# commit that does not build; a race from 12 on); a single daemon watches the
# same history on a database of its own, at the same time. The two conclude
# what the one does: the same verdicts, regressions, bisections and mails;
# no trial is an infra_error (each daemon runs only runners it built); no
# trial or probe ran twice; both did trials; the health page lists both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-multi.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
git init -q -b main "$repo"
echo fake.x1 >"$repo/extra_checks"
for ((i = 0; i < 16; i++)); do
	if ((i >= 5 && i < 10)); then echo failing; else echo good; fi >"$repo/mode"
	if ((i >= 12)); then echo hflaky30; else echo good; fi >"$repo/bwd_mode"
	if ((i == 7)); then touch "$repo/broken"; else rm -f "$repo/broken"; fi
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done

pg_start
fleet_db=$NW_DATABASE
pg_psql "CREATE DATABASE solo"
solo_db="$NW_DATABASE dbname=solo"
# conf NAME DATABASE MBOX: a daemon of its own state directory, node name and port.
conf() {
	mkdir -p "$work/$1"
	NW_PORT=$(nw_free_port) NW_DATABASE=$2 nw_mode_conf "$work/$1/nw.conf" demo "$repo" 32 256 \
		"public_url = http://numwatch.test:8080/\n[daemon]\nnode_name = $1\n[mail]
from = numwatch <numwatch@example.org>\nto = dev@example.org\nsend_to_author = false\nmbox = $work/$3.mbox"
}
conf solo "$solo_db" solo
conf a "$fleet_db" fleet
conf b "$fleet_db" fleet
nw_fleet_start "$work" solo a b
in_db() {
	local db=$1
	shift
	NW_DATABASE=$db "$@"
}
nw_wait 900 "the two daemons to settle" nw_settled
nw_wait 900 "the single daemon to settle" in_db "$solo_db" nw_settled

solo=$(in_db "$solo_db" nw_outcome)
fleet=$(nw_outcome)
# What the single daemon concluded is what the history plants (so the comparison means something).
for fact in "commit 7 build_failed" "commit 5 regressed" "commit 10 improved" "commit 12 regressed" \
	"regression fake.fwd f32 new@5 fixed fixed@10 culprit@5" "regression fake.x1 f32 new@5 fixed fixed@10 culprit@5" \
	"regression fake.bwd f32 new@12 culprit fixed@- culprit@12" "bisection fake.bwd f32 done culprit culprit@12" \
	"mail culprit culprit@5 sent" "mail culprit culprit@12 sent" "mail fixed culprit@5 sent"; do
	grep -qxF "$fact" <<<"$solo" || grep -qF "$fact " <<<"$solo" ||
		fail "the single daemon did not conclude '$fact': $(grep -E '^(commit|regression|bisection|mail)' <<<"$solo")"
done
# Two regressions of one culprit fixed by one commit: one follow-up in its thread, not one each.
n=$(grep -c '^mail fixed culprit@5 ' <<<"$solo") || true
[[ $n == 1 ]] || fail "$n fixed follow-ups for culprit 5's two regressions fixed at 10, expected 1"
[[ $solo == "$fleet" ]] ||
	fail "two daemons concluded otherwise than one (< one, > two):
$(diff <(echo "$solo") <(echo "$fleet") || true)"
grep -E "^(regression|bisection|mail)" <<<"$fleet"
echo "ok: two daemons concluded what one did: $(grep -c '^verdict' <<<"$fleet") verdicts," \
	"$(grep -c '^regression' <<<"$fleet") regressions, $(grep -c '^bisection' <<<"$fleet") bisections," \
	"$(grep -c '^mail' <<<"$fleet") mails"

infra=$(pg_psql "SELECT (SELECT count(*) FROM trials WHERE outcome = 'infra_error')
	+ (SELECT count(*) FROM stats WHERE verdict = 'infra_error')")
[[ $infra == 0 ]] || fail "$infra infra_error trials or verdicts: $(pg_psql "SELECT DISTINCT error FROM trials
	WHERE outcome = 'infra_error' LIMIT 3")"
why=$(nw_no_duplicates) || fail "$why"
shares=$(pg_psql "SELECT string_agg(host || '=' || n, ' ' ORDER BY host) FROM (SELECT host, count(*) AS n
	FROM trials GROUP BY host) x")
[[ $shares =~ ^a=[1-9][0-9]*\ b=[1-9][0-9]*$ ]] || fail "trials by daemon: '$shares': both should have run some"
builds=$(pg_psql "SELECT string_agg(host || '=' || n, ' ' ORDER BY host) FROM (SELECT host, count(*) AS n
	FROM host_builds GROUP BY host) x")
echo "ok: no infra_error, no trial or probe run twice; trials by daemon: $shares; builds by host: $builds"

# Each daemon's health page lists both, alive and agreeing.
port_a=$(sed -n 's/^port = //p' "$work/a/nw.conf")
NW_PORT=$port_a nw_api /api/v1/health | python3 -c '
import json, sys
h = json.load(sys.stdin)
d = {x["name"]: x for x in h["daemons"]}
assert sorted(d) == ["a", "b"], sorted(d)
for x in d.values():
    assert x["alive"] and x["state"] == "running", x
    assert x["host_slots"] == 2 and x["gpu_slots"] == 0 and x["slots"] == "host,host1", x
    assert x["config_differs_from"] == [] and x["schema_differs_from"] == [], x
    assert x["version"] and x["schema_version"] >= 40 and x["last_seen"], x
assert d["a"]["self"] and not d["b"]["self"]
' || fail "the health page does not list both daemons as expected: $(NW_PORT=$port_a nw_api /api/v1/health)"
# Read whole first: grep -q quits at its match, and curl, still writing, would fail the pipeline.
metrics=$(NW_PORT=$port_a nw_api /metrics)
grep -q '^numwatch_daemon_up{node="b",version="[^"]*",state="running"} 1$' <<<"$metrics" ||
	fail "/metrics does not show daemon b up"
echo "ok: the health page and /metrics list both daemons"

# A third daemon with other verdict settings says so, and so do the others: their verdicts would
# not be comparable. (It joins after the history settled: there is nothing left for it to judge.)
conf c "$fleet_db" fleet
printf '[verdict]\nalpha = 0.02\n' >>"$work/c/nw.conf"
nw_fleet_start "$work" c
port_c=$(sed -n 's/^port = //p' "$work/c/nw.conf")
differs() {
	NW_PORT=$port_a nw_api /api/v1/health | python3 -c '
import json, sys
d = {x["name"]: x for x in json.load(sys.stdin)["daemons"]}
sys.exit(0 if "c" in d and d["c"]["config_differs_from"] and "a" in d["c"]["config_differs_from"] else 1)'
}
nw_wait 120 "daemon c listed as differing from a" differs
logged() { grep -q "fleet: daemon 'a' .* differs from this one .*settings verdict.alpha" "$work/c/daemon.log"; }
nw_wait 60 "daemon c's log saying how it differs" logged
NW_PORT=$port_c nw_api /api/v1/health | grep -q '"config_differs_from"' || fail "daemon c's health page lacks the field"
echo "ok: a daemon with another [verdict] alpha is listed as differing, and says so in its log: $(grep -m1 -o "fleet: daemon 'a' .*" "$work/c/daemon.log")"
