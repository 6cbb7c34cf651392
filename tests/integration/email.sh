#!/usr/bin/env bash
# Email, end to end, against a real SMTP server (tests/integration/smtp_server.py,
# Debian's python3-aiosmtpd) and the real daemon with a fake runner:
#
# - with the SMTP server hung and then down, the culprit mail stays pending in
#   PostgreSQL with attempts and last_error, and the daemon keeps serving while
#   a send hangs; once the server is up the mail arrives, once, with the exact
#   envelope (author + configured list, de-duplicated), login and headers;
# - kill -9 and a restart send nothing twice;
# - the follow-ups (culprit withdrawn; a later commit clean again) answer the
#   culprit mail: In-Reply-To and References, "Re: " subject, same recipients;
# - without smtp_url (after a SIGHUP) mail goes to the mbox file; over the rate
#   limit mail waits, not dropped; a culprit withdrawn before its mail was tried
#   is not sent at all; SIGTERM drains and exits 0.
#
# The bisection service may not exist yet, so bisections are written directly
# into the database; the mailer's sweep finds them, as it finds those a daemon
# finished just before it died.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"

work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-email.XXXXXX")
nw_atexit rm -rf "$work"

# Debian's aiosmtpd lives in the system python, which may not be the first python3 in PATH.
stop_pid() { kill "$1" 2>/dev/null || true; }
smtp_python=
for py in python3 /usr/bin/python3; do
	if "$py" -c 'import aiosmtpd' 2>/dev/null; then
		smtp_python=$py
		break
	fi
done
[[ -n $smtp_python ]] || fail "no python3 with aiosmtpd (Debian: apt-get install python3-aiosmtpd)"

pg_start

# A history: clean, then a regression (with a non-ASCII title, for RFC 2047), later a fix.
git init -q -b main "$work/repo"
commit() { # MODE AUTHOR EMAIL TITLE
	echo "$1" >"$work/repo/mode"
	git -C "$work/repo" add mode
	git -C "$work/repo" -c user.name="$2" -c user.email="$3" commit -qm "$4"
}
bad_title='softmax: vectorised 4-wide path für große C'
commit good "Max Mustermann" max@example.com "softmax: tidy"
commit failing "Jane Doe" jane@example.com "$bad_title"
# Later commits, each the culprit of one more bisection below: a culprit commit gets one mail.
for i in 2 3 4; do
	echo "$i" >"$work/repo/version"
	git -C "$work/repo" add version
	commit failing "Jane Doe" jane@example.com "$bad_title"
done

SMTP_PORT=$(nw_free_port)
NW_PORT=$(nw_free_port)
mkdir "$work/smtp"
printf 's3cret\n' >"$work/smtp-password"

write_conf() { # the [mail] section's lines
	cat >"$work/nw.conf" <<CONF
[daemon]
state_dir = $work/state
database = $NW_DATABASE
[repository]
name = mailtest
url = $work/repo
poll_interval = 1
[build]
command = cp "$here/fake-runner" "\$NUMWATCH_BUILD_DIR/numwatch-runner-host" && cp mode "\$NUMWATCH_BUILD_DIR/"
[trials]
per_commit = 8
timeout = 5
hello_timeout = 10
[slots]
slots = host
[http]
port = $NW_PORT
public_url = http://numwatch.test:8080/
[bisect]
automatic = false
[mail]
$1
CONF
}
smtp_mail="smtp_url = smtp://127.0.0.1:$SMTP_PORT
from = numwatch CI <numwatch@mail.test>
to = team@example.org, oncall@example.org, JANE@example.com
starttls = try
username = numwatch
password_file = $work/smtp-password
rate_limit = 20
timeout = 3
retry = 1"
write_conf "$smtp_mail"
"$NUMWATCHD" --config "$work/nw.conf" --check-config >/dev/null || fail "the [mail] configuration was refused"

# The port is held by a server that accepts connections and never answers: each send hangs until
# [mail] timeout, on the thread pool.
"$smtp_python" -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
open(sys.argv[2], "w").close()
time.sleep(3600)' "$SMTP_PORT" "$work/silent.ready" &
silent_pid=$!
nw_atexit stop_pid "$silent_pid"
nw_wait 10 "the silent server listens" test -e "$work/silent.ready"

nw_daemon_start "$work/nw.conf" "$work/daemon.log"
nw_wait 120 "every commit has a final verdict" nw_all_final

q() { pg_psql "$1"; }
c_good=$(q "SELECT id FROM commits WHERE title = 'softmax: tidy'")
c_bad=$(q "SELECT id FROM commits WHERE email = 'jane@example.com' ORDER BY position LIMIT 1")
sha_good=$(q "SELECT sha FROM commits WHERE id = $c_good")
sha_bad=$(q "SELECT sha FROM commits WHERE id = $c_bad")
repo_id=$(q "SELECT repo_id FROM commits WHERE id = $c_bad")
check_id=$(q "SELECT id FROM checks WHERE name = 'fake.fwd'")
[[ $(q "SELECT verdict FROM stats WHERE commit_id = $c_bad") == regressed ]] || fail "the failing commit did not regress"

# A finished bisection that names the failing commit, as the bisection service writes it.
new_bisection() { # REQUESTED_BY [CULPRIT]: a culprit commit gets one mail, so each test case its own
	q "INSERT INTO bisections (repo_id, check_id, dtype, good_commit_id, bad_commit_id, state, outcome,
		culprit_id, confidence, failing_seeds, requested_by, finished_at)
		VALUES ($repo_id, $check_id, 'f32', $c_good, ${2:-$c_bad}, 'done', 'culprit', ${2:-$c_bad}, 0.9932, '{3}',
		'$1', now()) RETURNING id"
}
step_commit() { q "SELECT id FROM commits WHERE position = $1"; } # 2, 3, 4: after the first failing one
subject_of() { echo "[numwatch] fake.fwd f32 regressed by $(q "SELECT left(sha, 8) FROM commits WHERE id = $1"): $bad_title"; }
mail_state() { # BISECTION KIND
	q "SELECT state || ' attempts=' || attempts || ' error=' || coalesce(last_error, '-')
		FROM mail WHERE bisection_id = $1 AND kind = '$2'"
}
mid() { echo "<numwatch.bisect-$1.$2@mail.test>"; }

# What the SMTP server saved, looked up by Message-ID: count, envelope, a decoded header, the body.
smtp_mail_of() { # MESSAGE-ID WHAT
	"$smtp_python" - "$work/smtp" "$1" "$2" <<'PY'
import email, email.policy, email.utils, glob, json, sys, time
d, mid, what = sys.argv[1:]
found = []
for f in sorted(glob.glob(d + "/[0-9]*.json")):
    rec = json.load(open(f, encoding="utf-8"))
    # From bytes: parsed from a str, an 8bit UTF-8 body would be mangled by the email package.
    msg = email.message_from_bytes(rec["data"].encode("utf-8"), policy=email.policy.default)
    if msg["Message-ID"] == mid:
        found.append((rec, msg))
if what == "count":
    print(len(found))
    sys.exit(0)
if len(found) != 1:
    sys.exit("expected one message with Message-ID %s, found %d" % (mid, len(found)))
rec, msg = found[0]
if what == "envelope":
    print("from=%s to=%s auth=%s" % (rec["mail_from"], ",".join(rec["rcpt_tos"]), rec["auth"]))
elif what == "body":
    print(msg.get_content(), end="")
elif what == "raw":
    print(rec["data"], end="")
elif what == "date_age":
    print(int(abs(time.time() - email.utils.parsedate_to_datetime(msg["Date"]).timestamp())))
else:
    print(msg[what] if msg[what] is not None else "")
PY
}
smtp_count() { smtp_mail_of "$1" count; }
has_mail() { [[ $(smtp_count "$1") == 1 ]]; }
expect() { # WHAT GOT WANT
	[[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
}
expect_in() { # WHAT TEXT NEEDLE
	[[ $2 == *"$3"* ]] || fail "$1: '$3' not found in:
$2"
}

# 1. The server hangs: the send times out off the loop, the mail stays pending, the API answers meanwhile.
b1=$(new_bisection email-test-1)
in_flight() { [[ $(q "SELECT count(*) FROM mail WHERE bisection_id = $b1 AND next_try > now() + interval '20 seconds'") == 1 ]]; }
nw_wait 30 "the culprit mail of bisection $b1 is being sent" in_flight
t=$(curl -sS -o /dev/null -w '%{time_total}' --max-time 5 "http://127.0.0.1:$NW_PORT/api/v1/health") ||
	fail "the API did not answer while a send hung"
awk -v t="$t" 'BEGIN { exit !(t < 1.0) }' || fail "the API took ${t}s to answer while a send hung"
tried() { [[ $(q "SELECT count(*) FROM mail WHERE bisection_id = $b1 AND kind = 'culprit' AND state = 'pending'
	AND attempts >= $1 AND last_error IS NOT NULL") == 1 ]]; }
nw_wait 30 "a failed attempt is recorded" tried 1
echo "ok: a hung server: $(mail_state "$b1" culprit); the API answered in ${t}s meanwhile"

# 2. The server is down: connections are refused; still pending, attempts go on.
kill "$silent_pid"
wait "$silent_pid" 2>/dev/null || true
refused() { q "SELECT last_error FROM mail WHERE bisection_id = $b1 AND kind = 'culprit'" | grep -Eqi "refused|couldn't connect"; }
nw_wait 60 "a refused connection is recorded" refused
expect "messages before the server is up" "$(smtp_count "$(mid "$b1" culprit)")" 0
echo "ok: server down: $(mail_state "$b1" culprit)"

# 3. The server comes up (with login required): the mail arrives, once.
"$smtp_python" "$here/smtp_server.py" --port "$SMTP_PORT" --dir "$work/smtp" --user numwatch --password s3cret \
	>"$work/smtp.log" 2>&1 &
smtp_pid=$!
nw_atexit stop_pid "$smtp_pid"
nw_wait 20 "the SMTP server is up" test -e "$work/smtp/ready"
sent() { [[ $(q "SELECT state FROM mail WHERE bisection_id = $1 AND kind = '$2'") == sent ]]; }
nw_wait 60 "the culprit mail of bisection $b1 is sent" sent "$b1" culprit
m=$(mid "$b1" culprit)
nw_wait 10 "the server saved it" has_mail "$m"
row=$(mail_state "$b1" culprit)
[[ $row == "sent attempts="* && $row == *" error=-" ]] || fail "after the send: $row"
(($(q "SELECT attempts FROM mail WHERE bisection_id = $b1 AND kind = 'culprit'") >= 3)) ||
	fail "not retried: $row"

# The envelope: the author, then the configured list (JANE@ is the author again), and the login.
expect "envelope" "$(smtp_mail_of "$m" envelope)" \
	"from=numwatch@mail.test to=jane@example.com,team@example.org,oncall@example.org auth=numwatch"
subject="[numwatch] fake.fwd f32 regressed by ${sha_bad:0:8}: $bad_title"
expect "From" "$(smtp_mail_of "$m" From)" "numwatch CI <numwatch@mail.test>"
expect "To" "$(smtp_mail_of "$m" To)" "jane@example.com, team@example.org, oncall@example.org"
expect "Subject (decoded)" "$(smtp_mail_of "$m" Subject)" "$subject"
expect "In-Reply-To of the first mail" "$(smtp_mail_of "$m" In-Reply-To)" ""
expect "References of the first mail" "$(smtp_mail_of "$m" References)" ""
# Header lines as written (the parser would normalise them).
raw=$(smtp_mail_of "$m" raw)
for want in $'\r\nSubject: =?UTF-8?B?' $'\r\nMessage-ID: '"$m"$'\r\n' $'\r\nMIME-Version: 1.0\r\n' \
	$'\r\nContent-Type: text/plain; charset=utf-8\r\n' $'\r\nContent-Transfer-Encoding: 8bit\r\n' \
	$'\r\nAuto-Submitted: auto-generated\r\n' $'\r\nX-Numwatch-Bisection: '"$b1"$'\r\n'; do
	expect_in "raw message" "$raw" "$want"
done
grep -qE $'^Date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-3][0-9] (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) 20[0-9]{2} [0-2][0-9]:[0-5][0-9]:[0-6][0-9] \\+0000\r$' \
	<<<"$raw" || fail "no RFC 5322 Date header in:
$raw"
(($(smtp_mail_of "$m" date_age) < 300)) || fail "the Date is not the mail's creation time"
if grep -qv $'\r$' <<<"$raw"; then fail "a line of the message does not end in CRLF"; fi
body=$(smtp_mail_of "$m" body)
for want in \
	"  Culprit:     ${sha_bad:0:12}  $bad_title" \
	"               by Jane Doe <jane@example.com>" \
	"  Last clean:  ${sha_good:0:12}  softmax: tidy" \
	"               by Max Mustermann <max@example.com>" \
	"  Confidence:  99.3% (bisection $b1)" \
	"  check:   fake.fwd" \
	"  dtype:   f32" \
	"  seed:    3" \
	"  shape:   [2, 1003] (family tail)" \
	"  outcome: fail" \
	"  error:   ratio 3.5 to the tolerance budget (a trial fails above 1)" \
	"           in tensor y: max_abs 0.001, max_rel 0.01" \
	"  numwatch repro --commit $sha_bad --check fake.fwd --dtype f32 --seed 3" \
	"  commit:    http://numwatch.test:8080/?view=commit&sha=$sha_bad#fake.fwd/f32" \
	"  bisection: http://numwatch.test:8080/?view=bisection&id=$b1"; do
	expect_in "body of the culprit mail" "$body" "$want"
done
echo "ok: the culprit mail arrived once after $(q "SELECT attempts FROM mail WHERE bisection_id = $b1 AND kind = 'culprit'") attempts: envelope, headers and body as expected"

# 4. kill -9 and start again: nothing is sent twice (a new bisection's mail shows the sweep ran since).
kill -9 "$NW_DAEMON_PID"
wait "$NW_DAEMON_PID" 2>/dev/null || true
nw_daemon_start "$work/nw.conf" "$work/daemon.log"
b2=$(new_bisection email-test-2 "$(step_commit 2)")
nw_wait 60 "the culprit mail of bisection $b2 is sent after the restart" sent "$b2" culprit
nw_wait 10 "the server saved it" has_mail "$(mid "$b2" culprit)"
sleep 3 # one more sweep and poll
expect "copies of bisection $b1's culprit mail after kill -9" "$(smtp_count "$m")" 1
expect "mail rows of bisection $b1" "$(q "SELECT count(*) FROM mail WHERE bisection_id = $b1")" 1
echo "ok: no duplicate after kill -9 and a restart"

# 5. Withdrawn: a follow-up in the culprit mail's thread.
q "UPDATE bisections SET outcome = 'withdrawn', updated_at = now() WHERE id = $b2"
w=$(mid "$b2" withdrawn)
nw_wait 60 "the withdrawn follow-up of bisection $b2 arrives" has_mail "$w"
root=$(mid "$b2" culprit)
expect "In-Reply-To of the withdrawn mail" "$(smtp_mail_of "$w" In-Reply-To)" "$root"
expect "References of the withdrawn mail" "$(smtp_mail_of "$w" References)" "$root"
expect "Subject of the withdrawn mail" "$(smtp_mail_of "$w" Subject)" "Re: $(subject_of "$(step_commit 2)")"
expect "envelope of the withdrawn mail" "$(smtp_mail_of "$w" envelope)" "$(smtp_mail_of "$root" envelope)"
expect_in "body of the withdrawn mail" "$(smtp_mail_of "$w" body)" "has been withdrawn"
echo "ok: the withdrawn follow-up answers $root"

# 6. Fixed: a later commit is clean again; the follow-up answers the first bisection's mail.
commit good "Jane Doe" jane@example.com "softmax: fix the tail"
sha_fix=$(git -C "$work/repo" rev-parse HEAD)
f=$(mid "$b1" fixed)
nw_wait 120 "the fixed follow-up of bisection $b1 arrives" has_mail "$f"
expect "In-Reply-To of the fixed mail" "$(smtp_mail_of "$f" In-Reply-To)" "$m"
expect "References of the fixed mail" "$(smtp_mail_of "$f" References)" "$m"
expect "Subject of the fixed mail" "$(smtp_mail_of "$f" Subject)" "Re: $subject"
expect "envelope of the fixed mail" "$(smtp_mail_of "$f" envelope)" "$(smtp_mail_of "$m" envelope)"
body=$(smtp_mail_of "$f" body)
expect_in "body of the fixed mail" "$body" "fake.fwd (f32) is clean again in mailtest."
expect_in "body of the fixed mail" "$body" "  Clean again: ${sha_fix:0:12}  softmax: fix the tail"
expect_in "body of the fixed mail" "$body" "http://numwatch.test:8080/?view=commit&sha=$sha_fix#fake.fwd/f32"
# The withdrawn bisection gets no "fixed" mail.
expect "fixed mails of the withdrawn bisection" "$(q "SELECT count(*) FROM mail WHERE bisection_id = $b2 AND kind = 'fixed'")" 0
echo "ok: the fixed follow-up answers $m"

# 7. No smtp_url (SIGHUP): the mbox. A rate limit of 1 an hour holds the next mail back, not dropped.
write_conf "from = numwatch CI <numwatch@mail.test>
to = team@example.org
mbox = $work/mail.mbox
rate_limit = 1"
kill -HUP "$NW_DAEMON_PID"
nw_wait 10 "the configuration is reloaded" grep -q "reload: configuration reloaded" "$work/daemon.log"
b3=$(new_bisection email-test-3 "$(step_commit 3)")
queued() { [[ -n $(q "SELECT id FROM mail WHERE bisection_id = $1 AND kind = 'culprit'") ]]; }
nw_wait 30 "the culprit mail of bisection $b3 is queued" queued "$b3"
sleep 6 # three polls: it would have gone by now without the limit
expect "bisection $b3's mail over the rate limit" "$(mail_state "$b3" culprit)" "pending attempts=0 error=-"
[[ ! -e $work/mail.mbox ]] || fail "a mail went to the mbox over the rate limit"
# A culprit withdrawn before its mail was tried: the mail is cancelled, and there is nothing to follow up.
b4=$(new_bisection email-test-4 "$(step_commit 4)")
nw_wait 30 "the culprit mail of bisection $b4 is queued" queued "$b4"
q "UPDATE bisections SET outcome = 'withdrawn', updated_at = now() WHERE id = $b4"
cancelled() { [[ $(q "SELECT state FROM mail WHERE bisection_id = $b4 AND kind = 'culprit'") == failed ]]; }
nw_wait 30 "the culprit mail of bisection $b4 is cancelled" cancelled
expect "mails of the withdrawn bisection $b4" "$(q "SELECT string_agg(kind || ':' || state, ',') FROM mail WHERE bisection_id = $b4")" "culprit:failed"
echo "ok: over the rate limit the mail waits; a culprit withdrawn in time is not mailed: $(mail_state "$b4" culprit)"

# Raise the limit (SIGHUP again): the waiting mail goes to the mbox.
write_conf "from = numwatch CI <numwatch@mail.test>
to = team@example.org
mbox = $work/mail.mbox
rate_limit = 20"
kill -HUP "$NW_DAEMON_PID"
nw_wait 60 "the culprit mail of bisection $b3 is written" sent "$b3" culprit
"$smtp_python" - "$work/mail.mbox" "$(mid "$b3" culprit)" "$(subject_of "$(step_commit 3)")" <<'PY' || fail "the mbox file is not as expected"
import email, email.policy, mailbox, re, sys
path, mid, subject = sys.argv[1:]
raw = open(path, "rb").read()
# Entries start with a "From " line of the envelope sender and a UTC asctime() date, after an empty line.
froms = re.findall(rb"(?:\A|\n\n)(From [^\n]*)\n", raw)
assert froms and all(re.fullmatch(rb"From numwatch@mail\.test \w{3} \w{3} [ 0-9]\d \d\d:\d\d:\d\d \d{4}", f)
                     for f in froms), froms
assert raw.endswith(b"\n\n") and b"\r" not in raw, "entries end with an empty line, LF only"
box = mailbox.mbox(path, factory=lambda f: email.message_from_binary_file(f, policy=email.policy.default),
                   create=False)
msgs = [m for m in box if m["Message-ID"] == mid]
assert len(msgs) == 1, "%d messages %s in %s" % (len(msgs), mid, path)
m = msgs[0]
assert m["To"] == "jane@example.com, team@example.org", m["To"]
assert m["From"] == "numwatch CI <numwatch@mail.test>", m["From"]
assert m["Subject"] == subject, m["Subject"]
assert "numwatch repro --commit" in m.get_content()
PY
echo "ok: without smtp_url the mail is in the mbox file: $work/mail.mbox"

# SIGTERM drains (the mailer included) and exits 0.
kill -TERM "$NW_DAEMON_PID"
for _ in $(seq 1 60); do kill -0 "$NW_DAEMON_PID" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$NW_DAEMON_PID" 2>/dev/null; then fail "daemon did not exit after SIGTERM"; fi
wait "$NW_DAEMON_PID" || fail "daemon exited non-zero after SIGTERM"
NW_DAEMON_PID=
grep -q "mail: stopped" "$work/daemon.log" || fail "the mailer did not stop on the drain"
echo "ok: SIGTERM drained the mailer and exited 0"
