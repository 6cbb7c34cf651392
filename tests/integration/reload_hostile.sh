#!/usr/bin/env bash
# SIGHUP with a hostile [mail] password_file (issue 14, fault 6): a FIFO with no
# writer (which blocked the event loop for ever), /dev/zero (which allocated
# until it failed), a file larger than a password file and a directory each
# give a clear error in the log, keep the running configuration and leave the
# daemon serving; a good file then reloads. At start-up the same files are
# refused at once (--check-config exits 2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
NUMWATCHD=$NW_BUILD_DIR/daemon/numwatchd

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-reload-hostile.XXXXXX")
nw_atexit rm -rf "$work"
pg_start
git init -q -b main "$work/repo"
echo good >"$work/repo/mode"
nw_commit "$work/repo" 0
NW_PORT=$(nw_free_port)
mkfifo "$work/fifo"
head -c 100000 /dev/zero | tr '\0' x >"$work/big"
echo 's3cret' >"$work/password"
# conf PASSWORD_FILE: the configuration, with [mail] password_file = PASSWORD_FILE.
conf() {
	cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = reload
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
[mail]
mbox = $work/mail.mbox
username = numwatch
password_file = $1
CONF
}

# At start-up: refused at once, with the reason.
for f in fifo /dev/zero big .; do
	[[ $f == /* ]] || f=$work/$f
	f=${f%/.}
	conf "$f"
	rc=0
	out=$(timeout 20 "$NUMWATCHD" --config "$work/nw.conf" --check-config 2>&1) || rc=$?
	[[ $rc == 2 ]] || fail "--check-config with password_file '$f': exit $rc, expected 2: $out"
	grep -q "password_file '$f'" <<<"$out" || fail "--check-config with password_file '$f': no reason given: $out"
done
echo "ok: --check-config refuses a FIFO, /dev/zero, a 100 kB file and a directory as password_file at once"

conf "$work/password"
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 60 "all commits final" nw_all_final
health() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$NW_PORT/api/v1/health") == 200 ]]; }
logged() { [[ $(grep -c -F -- "$1" "$work/daemon.log") -ge $2 ]]; }
n=0
for f in fifo /dev/zero big .; do
	[[ $f == /* ]] || f=$work/$f
	f=${f%/.}
	conf "$f"
	n=$((n + 1))
	kill -HUP "$NW_DAEMON_PID"
	nw_wait 30 "the reload with password_file '$f' refused in the log" \
		logged "reload: keeping the running configuration: $work/nw.conf:" "$n"
	grep "reload: keeping the running configuration" "$work/daemon.log" | tail -1 | grep -q "password_file '$f'" ||
		fail "the refused reload does not name password_file '$f': $(tail -1 "$work/daemon.log")"
	nw_wait 30 "the API answering after the reload with password_file '$f'" health
done
rss=$(awk '/VmRSS/ {print $2}' "/proc/$NW_DAEMON_PID/status")
((rss < 200000)) || fail "numwatchd uses $rss kB after the reloads"
echo "ok: SIGHUP with a FIFO, /dev/zero, a 100 kB file and a directory as password_file: refused, still serving (RSS $rss kB)"
conf "$work/password"
kill -HUP "$NW_DAEMON_PID"
nw_wait 30 "a good reload" logged "reload: configuration reloaded from '$work/nw.conf'" 1
echo "ok: a good password_file reloads"
