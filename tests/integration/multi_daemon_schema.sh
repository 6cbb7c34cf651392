#!/usr/bin/env bash
# Several daemons, one database (issue 16): one host is upgraded first. While
# daemon 'old' (this tree's numwatchd) runs trials, daemon 'new' starts
# numwatchd-next (the same daemon with one migration more, as the next release
# would have) and migrates the database. The old one notices within a
# heartbeat and refuses to write, with a clear log line: no trial, claim or
# lease of its after that, its row in the daemons table says why, its health
# page answers 503 read_only; the new one takes its jobs over and finishes,
# with nothing lost or run twice. A third daemon of the old release started
# then exits at once (status 3) with the same line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-schema.XXXXXX")
nw_atexit rm -rf "$work"
repo=$work/repo
per_commit=32
git init -q -b main "$repo"
echo good >"$repo/mode"
echo 0.05 >"$repo/delay" # trials long enough to be interrupted
for ((i = 0; i < 16; i++)); do
	echo "$i" >"$repo/version"
	nw_commit "$repo" "$i"
done
pg_start
for d in old new late; do
	mkdir -p "$work/$d"
	NW_PORT=$(nw_free_port) nw_mode_conf "$work/$d/nw.conf" schema "$repo" $per_commit 256 \
		"[daemon]\nnode_name = $d\nlease = 10"
done
# The newest migration this tree's numwatchd knows (sql/NNN_*.sql).
known=$(find "$here/../../sql" -name '[0-9][0-9][0-9]_*.sql' -printf '%f\n' | sort | tail -n 1 | cut -c1-3)
nw_fleet_start "$work" old
running() { [[ $(pg_psql "SELECT count(*) >= 50 FROM trials WHERE host = 'old'") == t ]]; }
nw_wait 300 "the old daemon to run trials" running
NUMWATCHD=$NW_BUILD_DIR/tests/integration/numwatchd-next nw_fleet_start "$work" new

line="the database's schema is newer than this numwatchd"
refused() { grep -q "$line" "$work/old/daemon.log"; }
nw_wait 60 "the old daemon to refuse to write" refused
said=$(grep -m1 "$line" "$work/old/daemon.log")
[[ $said == *"numwatchd error: schema: "*"it has 999_next.sql (this numwatchd knows up to $known); refusing to write"* ]] ||
	fail "the old daemon's refusal does not say what and why: '$said'"
echo "ok: the old daemon says: ${said#*numwatchd error: }"

nw_wait 600 "the new daemon to finish" nw_settled
row=$(pg_psql "SELECT state || ' ' || (note LIKE '%999_next.sql%') FROM daemons WHERE name = 'old'")
[[ $row == "refused true" ]] || fail "the old daemon's row in the daemons table: '$row'"
# Nothing written by the old daemon after its refusal (the row's last write), by the database's clock.
after=$(pg_psql "SELECT (SELECT count(*) FROM trials t, daemons d WHERE d.name = 'old' AND t.host = 'old'
	AND t.finished_at > d.last_seen) || ' ' || (SELECT count(*) FROM jobs j, daemons d WHERE d.name = 'old'
	AND j.owner = 'old' AND j.claimed_at > d.last_seen) || ' ' || (SELECT count(*) FROM jobs WHERE owner = 'old')")
[[ $after == "0 0 0" ]] || fail "the old daemon wrote after it refused (trials, claims, jobs held): $after"
taken=$(pg_psql "SELECT count(*) FROM jobs WHERE taken_from = 'old'")
why=$(nw_no_duplicates) || fail "$why"
incomplete=$(pg_psql "SELECT count(*) FROM stats s WHERE (SELECT count(DISTINCT seed) FROM trials t
	WHERE t.commit_id = s.commit_id AND t.check_id = s.check_id AND t.dtype = s.dtype
	AND t.outcome <> 'infra_error' AND t.seed < $per_commit) <> $per_commit")
[[ $incomplete == 0 ]] || fail "$incomplete check x dtype runs lack seeds"
echo "ok: nothing written by the old daemon after its refusal; the new one took $taken jobs over and finished"

# The old daemon keeps serving reads, and says it refuses to write; the new one lists it.
port_old=$(sed -n 's/^port = //p' "$work/old/nw.conf")
port_new=$(sed -n 's/^port = //p' "$work/new/nw.conf")
code=$(curl -sS -o "$work/health" -w '%{http_code}' "http://127.0.0.1:$port_old/api/v1/health")
[[ $code == 503 ]] || fail "the old daemon's health answered $code, not 503"
python3 - "$work/health" <<'PY' || fail "the old daemon's health page: $(cat "$work/health")"
import json, sys
h = json.load(open(sys.argv[1]))
assert h["status"] == "read_only" and "999_next.sql" in h["read_only"], h
PY
NW_PORT=$port_new nw_api /api/v1/health | python3 -c '
import json, sys
known = int(sys.argv[1])
h = json.load(sys.stdin)
d = {x["name"]: x for x in h["daemons"]}
assert h["status"] == "ok" and h["read_only"] is None, h
assert d["old"]["state"] == "refused" and not d["old"]["alive"] and "999_next.sql" in d["old"]["note"], d["old"]
assert d["new"]["schema_version"] == 999 and d["old"]["schema_version"] == known, d
' "$((10#$known))" || fail "the new daemon's health page does not show the old one refused: $(NW_PORT=$port_new nw_api /api/v1/health)"
echo "ok: the old daemon serves reads and says it refuses to write; the new one lists it as refused"

# An old daemon started now refuses at once.
rc=0
timeout 60 "$NUMWATCHD" --config "$work/late/nw.conf" >"$work/late/daemon.log" 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "an old daemon started on the newer schema exited $rc, not 3: $(cat "$work/late/daemon.log")"
grep -q "numwatchd error: schema: $line" "$work/late/daemon.log" ||
	fail "an old daemon started on the newer schema does not say why: $(cat "$work/late/daemon.log")"
[[ $(pg_psql "SELECT count(*) FROM daemons WHERE name = 'late'") == 0 ]] || fail "the late daemon wrote its row"
echo "ok: an old daemon started on the newer schema exits 3 and says why"
