#!/usr/bin/env python3
"""Hostile HTTP requests against a running numwatchd, sent as raw bytes (curl
normalises paths, so it cannot send most of them).

usage: http_hostile.py PORT SECRET TOKEN

SECRET is the content of a file next to the web root (outside it): no answer
may contain it. TOKEN is a valid write token. Prints one line per check, and
for a failed one what was sent and what came back; exits 1 if any failed.
"""
import json
import selectors
import socket
import sys
import time

PORT = int(sys.argv[1])
SECRET = sys.argv[2].encode()
TOKEN = sys.argv[3]
# Longest the whole of one check may take: generous, for a loaded 2-core machine.
DEADLINE_S = 60


class Failed(Exception):
    pass


def fail(msg):
    raise Failed(msg)


def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=DEADLINE_S)
    return s


def parse(raw):
    """(status, headers dict, body) of one HTTP/1.1 answer, or None."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1."):
        return None
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode("latin-1")
    return status, headers, body


def send(raw):
    """Sends raw request bytes, reads the answer to EOF (the request says Connection: close)."""
    s = connect()
    s.sendall(raw)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def get(target, headers=b"", method=b"GET", body=b""):
    if body:
        headers += b"Content-Length: %d\r\n" % len(body)
    raw = method + b" " + target + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + headers + b"\r\n" + body
    data = send(raw)
    if SECRET in data:
        fail("%r served the file outside the web root: %r" % (raw, data[:300]))
    answer = parse(data)
    if answer is None:
        fail("%r: no HTTP answer: %r" % (raw, data[:300]))
    return raw, answer


def json_error(raw, answer, want):
    """The answer has status 'want' (an int or a set) and a JSON error body; returns the message."""
    status, headers, body = answer
    if status != want and not (isinstance(want, set) and status in want):
        fail("%r: status %d, expected %s: %r" % (raw, status, want, body[:300]))
    if not headers.get("content-type", "").startswith("application/json"):
        fail("%r: status %d with content type %r, not a JSON error: %r"
             % (raw, status, headers.get("content-type"), body[:300]))
    try:
        d = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail("%r: status %d with a body that is not JSON (%s): %r" % (raw, status, e, body[:300]))
    if not isinstance(d, dict) or not d.get("error") or d.get("status") != status:
        fail("%r: JSON error body without a message or with the wrong status: %r" % (raw, d))
    return d["error"]


def half_close(target, n):
    """One idle connection open, then n clients that half-close after their request: how many got a 200."""
    idle = connect()
    conns = []
    for _ in range(n):
        s = connect()
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        s.setblocking(False)
        conns.append((s, bytearray()))
    sel = selectors.DefaultSelector()
    for s, buf in conns:
        sel.register(s, selectors.EVENT_READ, buf)
    open_count = n
    end = time.monotonic() + DEADLINE_S
    while open_count and time.monotonic() < end:
        for key, _ in sel.select(timeout=1):
            try:
                chunk = key.fileobj.recv(65536)
            except ConnectionError:
                chunk = b""
            if chunk:
                key.data.extend(chunk)
            else:
                sel.unregister(key.fileobj)
                open_count -= 1
    answered = 0
    for s, buf in conns:
        answer = parse(bytes(buf))
        if answer and answer[0] == 200:
            answered += 1
        s.close()
    idle.close()
    return answered


# 8: clients that half-close after a complete request are answered, while another connection is open.
def half_closed_clients():
    got = {target: half_close(target, 100) for target in (b"/api/v1/health", b"/api/v1/checks", b"/index.html")}
    if any(n != 100 for n in got.values()):
        fail("half-closed clients with one idle connection open: answered of 100: "
             + ", ".join("GET %s %d" % (t.decode(), n) for t, n in got.items()))
    print("ok: 100 of 100 half-closed clients answered for each of %s, one idle connection open"
          % ", ".join(t.decode() for t in got))

# 9: a NUL anywhere in the target, encoded or raw, is 400 (libmicrohttpd would cut the path at it).
def nul_in_target():
    for target in (b"/%00", b"/index.html%00.png", b"/%00/../../secret.txt", b"/api/v1/health%00",
                   b"/api/v1/checks?dtype=f32%00x", b"/app.js%00", b"/\x00", b"/index.html\x00.png",
                   b"/\x00/../secret.txt", b"/api/v1/health\x00x", b"/\x00HTTP/1.1"):
        raw, answer = get(target)
        json_error(raw, answer, 400)
    print("ok: targets with a NUL byte (%00 or raw) are 400 with a JSON error")

# Path traversal, sent raw: nothing outside the web root (the test checks every answer for SECRET).
def traversal():
    for target in (b"/../secret.txt", b"/../../../../../etc/passwd", b"/..%2fsecret.txt", b"/%2e%2e/secret.txt",
                   b"/%2e%2e%2fsecret.txt", b"/.%2e/secret.txt", b"/%2E%2E/secret.txt", b"/..%5csecret.txt",
                   b"/%252e%252e/secret.txt", b"/js/../../secret.txt", b"/js/%2e%2e/%2e%2e/secret.txt",
                   b"//etc/passwd", b"/%2fetc%2fpasswd", b"/./../secret.txt", b"/..;/secret.txt",
                   b"/....//secret.txt", b"/.../secret.txt", b"/%c0%ae%c0%ae/secret.txt",
                   b"http://localhost/../secret.txt", b"/web/../../secret.txt", b"/%2e%2e%00/secret.txt"):
        raw, answer = get(target)
        json_error(raw, answer, {400, 404})
        if b"root:" in answer[2]:
            fail("%r served /etc/passwd" % raw)
    print("ok: traversal targets (../, %2e%2e, encoded slashes, %00) are 400 or 404, nothing outside the web root")

# 7: error messages that quote bytes that are not UTF-8: a JSON body, the bytes escaped.
def messages_not_utf8():
    for target, want in ((b"/api/v1/bisections/%ff", 400), (b"/api/v1/bisections/\xff\xfe", 400),
                         (b"/no-such-%ff-page", 404), (b"/api/v1/%c3%28", 404), (b"/api/v1/nope/%ed%a0%80", 404)):
        raw, answer = get(target)
        msg = json_error(raw, answer, want)
        if "\\x" not in msg:
            fail("%r: the bytes that are not UTF-8 are not escaped in the message %r" % (raw, msg))
    print("ok: messages quoting bytes that are not UTF-8 are JSON, with the bytes escaped (\\xff)")

# 7: an Authorization header that is not UTF-8 is a 401, not a database error.
def authorization_not_utf8():
    run = json.dumps({"commit": "0123abcd", "check": "fake.fwd", "dtype": "f32"}).encode()
    for auth in (b"Bearer \xff\xfe", b"Bearer nw_\xc3", b"Bearer \xed\xa0\x80x", b"Bearer a b", b"Bearer " + b"a" * 300):
        raw, answer = get(b"/api/v1/runs", b"Authorization: " + auth + b"\r\nContent-Type: application/json\r\n",
                          b"POST", run)
        json_error(raw, answer, 401)
        raw, answer = get(b"/api/v1/checks/fake.fwd/mute", b"Authorization: " + auth + b"\r\n", b"DELETE")
        json_error(raw, answer, 401)
    print("ok: Authorization headers that are no token (not UTF-8, spaces, too long) are 401 with a JSON error")

# With a valid token, a dtype that is not UTF-8 is a 400, not a database error; a JSON body
# that is not UTF-8: 400 with a JSON error.
def not_utf8_with_token():
    raw, answer = get(b"/api/v1/checks/fake.fwd/mute?dtype=%ff",
                      b"Authorization: Bearer " + TOKEN.encode() + b"\r\n", b"DELETE")
    json_error(raw, answer, 400)
    raw, answer = get(b"/api/v1/runs", b"Authorization: Bearer " + TOKEN.encode() + b"\r\n", b"POST",
                      b'{"commit": "\xff"}')
    json_error(raw, answer, 400)
    print("ok: a dtype or a body that is not UTF-8, with a valid token: 400 with a JSON error")

# Still serving.
def still_serving():
    raw, answer = get(b"/api/v1/health")
    if answer[0] != 200:
        fail("health after the hostile requests: status %d" % answer[0])
    print("ok: still serving")

failures = 0
for check in (half_closed_clients, nul_in_target, traversal, messages_not_utf8, authorization_not_utf8, not_utf8_with_token, still_serving):
    try:
        check()
    except Failed as e:
        failures += 1
        print("FAIL: %s" % e, file=sys.stderr)
sys.exit(1 if failures else 0)
