#!/usr/bin/env bash
# The git poller against real repositories: a force-push marks dropped commits
# unreachable and keeps every stored result of commits that still exist; an
# unreachable remote is retried with backoff and shown in /api/v1/health;
# SIGHUP reloads the configuration and keeps the old one when the new is bad.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-git.XXXXXX")
nw_atexit rm -rf "$work"
pg_start

commit() { # commit MODE TITLE
	echo "$1" >"$work/repo/mode"
	echo "$2" >"$work/repo/title"
	git -C "$work/repo" add mode title
	git -C "$work/repo" -c user.name="Ada Lovelace" -c user.email="ada@example.com" commit -qm "$2"
}
git init -q -b main "$work/repo"
commit good "one"
commit good "two"
commit failing "three"

NW_PORT=$(nw_free_port)
write_conf() { # write_conf PER_COMMIT [EXTRA_LINE]
	cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = poll
url = file://$work/repo
poll_interval = 1
[build]
command = cp "$here/fake-runner" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp mode "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = $1
${2:-}
[slots]
slots = host
[http]
port = $NW_PORT
CONF
}
write_conf 8
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 60 "three commits with final verdicts" nw_all_final

# Authors, emails, titles and first-parent positions are stored.
[[ $(pg_psql "SELECT string_agg(title || ':' || position || ':' || author || ':' || email, ',' ORDER BY position)
	FROM commits") == "one:0:Ada Lovelace:ada@example.com,two:1:Ada Lovelace:ada@example.com,three:2:Ada Lovelace:ada@example.com" ]] ||
	fail "commits stored wrongly: $(pg_psql "SELECT string_agg(title || ':' || position, ',') FROM commits")"
[[ $(pg_psql "SELECT commit_verdict(id) FROM commits WHERE title = 'three'") == regressed ]] || fail "three not regressed"
kept=$(pg_psql "SELECT count(*) || ':' || sum(t.id) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.title IN ('one', 'two')")

# Force-push: drop "three", add "three-fixed" in its place.
git -C "$work/repo" reset -q --hard HEAD~1
commit good "three-fixed"
has_fixed() { [[ $(pg_psql "SELECT commit_verdict(id) FROM commits WHERE title = 'three-fixed'") == clean ]]; }
nw_wait 60 "the force-pushed commit is built and clean" has_fixed
[[ $(pg_psql "SELECT reachable FROM commits WHERE title = 'three'") == f ]] || fail "dropped commit still reachable"
[[ $(pg_psql "SELECT count(*) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.title = 'three'") -gt 0 ]] ||
	fail "results of the dropped commit were deleted"
[[ $(pg_psql "SELECT count(*) || ':' || sum(t.id) FROM trials t JOIN commits c ON c.id = t.commit_id WHERE c.title IN ('one', 'two')") == "$kept" ]] ||
	fail "results of commits that still exist changed after the force-push"
[[ $(pg_psql "SELECT position FROM commits WHERE title = 'three-fixed'") == 2 ]] || fail "wrong position after force-push"
total=$(nw_api "/api/v1/commits" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
[[ $total == 3 ]] || fail "the API lists $total reachable commits, not 3"
echo "ok: force-push: dropped commit unreachable with its results kept; others untouched"

# Unreachable remote: failures counted, retried with backoff, recovered.
mv "$work/repo" "$work/repo.away"
failing_polls() { nw_api /api/v1/health | python3 -c 'import json,sys; h=json.load(sys.stdin); sys.exit(0 if h["poll_failures"] >= 2 and h["poll_error"] else 1)'; }
nw_wait 60 "two failed polls reported in health" failing_polls
grep -q "poll failed (retry in 2 s)" "$work/daemon.log" || fail "no backoff in the log"
mv "$work/repo.away" "$work/repo"
commit good "four"
has_four() { [[ $(pg_psql "SELECT commit_verdict(id) FROM commits WHERE title = 'four'") == clean ]]; }
nw_wait 90 "the remote is back and the new commit is clean" has_four
echo "ok: unreachable remote retried with backoff and recovered"

# SIGHUP: a bad file keeps the running config; a good one takes effect.
write_conf 8 "bogus_key = 1"
kill -HUP "$NW_DAEMON_PID"
nw_wait 10 "reload refused" grep -q "reload: keeping the running configuration: .*nw.conf:.*bogus_key" "$work/daemon.log"
write_conf 12
kill -HUP "$NW_DAEMON_PID"
nw_wait 10 "reload accepted" grep -q "reload: configuration reloaded" "$work/daemon.log"
commit good "five"
has_five() { [[ $(pg_psql "SELECT trials FROM stats s JOIN commits c ON c.id = s.commit_id WHERE c.title = 'five'") == 12 ]]; }
nw_wait 60 "the new commit ran the reloaded 12 trials" has_five
echo "ok: SIGHUP reload keeps a bad config out and applies a good one"
