#!/usr/bin/env bash
# Hostile HTTP, sent as raw bytes by http_hostile.py (curl normalises paths and
# refuses to send much of this): clients that half-close their socket after the
# request, with another connection open, are answered; a NUL in the target
# (%00 or raw) is 400; traversal (../, %2e%2e, encoded slashes, NUL) serves
# nothing outside the web root; error messages that quote bytes that are not
# UTF-8 are JSON with the bytes escaped; an Authorization header that is not
# UTF-8 is 401, not a database error.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCH=$NW_BUILD_DIR/daemon/numwatch

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-http-hostile.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
git init -q -b main "$work/repo"
echo good >"$work/repo/mode"
nw_commit "$work/repo" 0
# A web root of its own, with a file beside it that must never be served.
mkdir -p "$work/web/js"
echo '<!doctype html><title>numwatch</title>' >"$work/web/index.html"
echo 'console.log(1)' >"$work/web/js/app.js"
secret="SECRET-$RANDOM$RANDOM-OUTSIDE-THE-WEB-ROOT"
echo "$secret" >"$work/secret.txt"
NW_PORT=$(nw_free_port)
cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = hostile
url = $work/repo
poll_interval = 1
[build]
command = cp "$here/fake-runner" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp mode "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = 4
[slots]
slots = host
[http]
port = $NW_PORT
web_root = $work/web
CONF
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 60 "all commits final" nw_all_final
token=$("$NUMWATCH" token create hostile --config "$work/nw.conf" 2>/dev/null)
[[ $token == nw_* ]] || fail "no token printed"

python3 "$here/http_hostile.py" "$NW_PORT" "$secret" "$token" || fail "hostile HTTP requests (above)"
kill -0 "$NW_DAEMON_PID" 2>/dev/null || fail "numwatchd died during the hostile requests"
echo "ok: http_hostile"
