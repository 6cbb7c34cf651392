#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (tests/fuzz/corpus/<name>/) from real examples.

    tests/fuzz/make-corpus.py        rewrites the seeds it makes (files named seed-*)

Files not named seed-* (crashes kept after a fix: crash-*, ...) are left alone. Sources:
protocol lines from docs/protocol.md and tests/unit/test_protocol.c (and trials like its examples,
as the C SDK fills them); configurations from
systemd/numwatch.conf.example and tests/unit/test_config.c; compute-sanitizer output from
tests/unit/test_sanitizer.c; one HTTP request per API route of docs/api.md; mail headers as
tests/unit/test_mail.c and mailer.c write them.
"""
import hashlib
import json
import re
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fuzz/corpus"


def c_unescape(body):
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = body[i + 1]
        i += 2
        if n in "01234567":
            digits = n
            while i < len(body) and len(digits) < 3 and body[i] in "01234567":
                digits += body[i]
                i += 1
            out.append(int(digits, 8) & 0xFF)
        elif n == "x":
            digits = ""
            while i < len(body) and body[i] in "0123456789abcdefABCDEF":
                digits += body[i]
                i += 1
            out.append(int(digits, 16) & 0xFF)
        else:
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "'": b"'"}.get(n, n.encode())
    return bytes(out)


def c_literals(path):
    """Every run of adjacent string literals in a C file, unescaped and joined."""
    text = path.read_text()
    for m in re.finditer(r'"(?:[^"\\\n]|\\.)*"(?:\s*"(?:[^"\\\n]|\\.)*")*', text):
        parts = re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(0))
        yield b"".join(c_unescape(p) for p in parts)


def write(target, items):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("seed-*"):
        old.unlink()
    seen = set()
    for data in items:
        key = hashlib.sha1(data).hexdigest()[:16]
        if key in seen:
            continue
        seen.add(key)
        (folder / f"seed-{key}").write_bytes(data)
    print(f"{target}: {len(seen)} seeds")


def protocol_lines():
    lines = []
    doc = (ROOT / "docs/protocol.md").read_text()
    # JSON blocks (one object, possibly wrapped over lines).
    for block in re.findall(r"```json\n(.*?)```", doc, re.S):
        try:
            json.loads(block)
            lines.append(" ".join(l.strip() for l in block.splitlines()).encode())
        except json.JSONDecodeError:
            pass
    # The example session: '<' lines, joined where wrapped with '\'.
    session = re.search(r"### An example session.*?```\n(.*?)```", doc, re.S).group(1)
    current = None
    for raw in session.splitlines():
        if raw.startswith("< "):
            current = raw[2:]
        elif current is not None and raw.startswith("  "):
            current += raw.strip()
        else:
            current = None
            continue
        if current.endswith("\\"):
            current = current[:-1]
        else:
            lines.append(current.encode())
            current = None
    # Lines of the unit test (answers, refused answers and requests alike).
    for s in c_literals(ROOT / "tests/unit/test_protocol.c"):
        if s.lstrip().startswith(b"{") and b'"op' in s:
            lines.append(s.replace(b"\n", b" ").rstrip())
    return lines


def protocol_requests():
    """id, seed, repeats, family flag, then check, dtype, family (fuzz_protocol_encode.c)."""
    out = []
    for id_, seed, rep, fam, check, dtype, family in [
        (17, 42, 1, 0, "softmax.bwd", "bf16", ""),
        (1, 0, 2, 1, "softmax.fwd", "f32", "aligned"),
        (3, 2**40, 10, 1, 'odd"name\\', "f32", "tail\n"),
        (-1, 7, 0, 1, "msda.bwd", "f16", "\u00e9t\u00e9"),
    ]:
        head = struct.pack("<qQIB", id_, seed, rep, fam)
        out.append(head + b"\0".join(x.encode() for x in (check, dtype, family)))
    return out


def sdk_answers():
    """Finished trials as fuzz_protocol_answer.c's sdk_answer() reads them (big-endian fields)."""
    chars = "abcdefghijklmnopqrstuvwxyz0123456789_"

    def name(text):
        return bytes([len(text) - 1]) + bytes(chars.index(c) for c in text)

    def real(v):
        return struct.pack(">d", v)

    def tensor(nm, ratio, max_abs, max_rel, nonfinite=0, worst=(2, 1024), tail=True):
        b = name(nm) + real(ratio) + real(max_abs) + real(max_rel) + real(float("nan")) + b"\0"
        b += real(0.0031) + real(0.0028) + struct.pack(">6I", nonfinite, 0, 0, 0, 0, 0)
        b += bytes([len(worst)]) + b"".join(struct.pack(">I", w) for w in worst) + bytes([tail])
        return b

    def trial(check, id_, family, shape, tensors, kernel_us, params=b"\0"):
        b = bytes([check]) + struct.pack(">q", id_) + bytes([family, 1, len(shape)])
        b += b"".join(struct.pack(">I", d) for d in shape) + bytes([len(tensors)]) + b"".join(tensors)
        b += bytes.fromhex("9f2c41d07be3a8e1") + bytes.fromhex("c2b5d8e017a94f63") + b"\0"
        return b + real(kernel_us) + params

    return [
        # docs/protocol.md's failing trial: softmax, family threshold, shape [3, 1025], dx at 4.72.
        trial(0, 17, 2, (3, 1025), [tensor("dx", 4.72, 0.0131, 0.35)], 18.4),
        trial(0, 1, 0, (8, 256), [tensor("y", 0.21, 0.0039, 0.0078, worst=(5, 17), tail=False)], 6.1),
        trial(0, 2, 2, (3, 1025), [tensor("y", float("nan"), float("nan"), float("nan"), nonfinite=3)], 7.4),
        trial(3, 5, 1, (2, 4, 128, 64), [tensor("dq", 0.5, 1e-3, 2e-3), tensor("dk", 0.25, 1e-3, 2e-3),
                                         tensor("dv", 1.5, 1e-2, 3e-2)], 120.0,
              params=bytes([2, 1]) + struct.pack(">q", 1) + bytes([0]) + name("padded")),
        # An error answer: docs/protocol.md's undeclared dtype.
        bytes([0]) + struct.pack(">q", 3) + bytes([0, 0, 0]) + b"dtype 'f64' is not declared by check 'softmax.fwd'",
        bytes([1]) + struct.pack(">q", 9) + bytes([0, 4, 1]) + b"cudaErrorIllegalAddress: an illegal memory access",
    ]


def configs():
    out = [(ROOT / "systemd/numwatch.conf.example").read_bytes()]
    for s in c_literals(ROOT / "tests/unit/test_config.c"):
        if re.search(rb"^\[(daemon|repository|build|trials|sanitizer|slots|store|http|mail|verdict|bisect)\]", s, re.M):
            out.append(s)
    minimal = b"[repository]\nurl = https://github.com/example/demo-kernels.git\n[build]\ncommand = make\n"
    for s in list(out):
        if b"[repository]" not in s:
            out.append(minimal + s)
    return out


def sanitizer_outputs():
    out = []
    for s in c_literals(ROOT / "tests/unit/test_sanitizer.c"):
        if s.startswith(b"=========") or b"\n=========" in s:
            out.append(bytes([255]) + s)  # an excerpt buffer of 1020 bytes
            out.append(bytes([8]) + s)  # and a short one (32 bytes)
    return out


def http_requests():
    auth = "Authorization: Bearer nw_0123456789abcdef\r\n"
    gets = [
        "/api/v1/health", "/api/v1/commits?limit=2", "/api/v1/commits?limit=50&offset=100",
        "/api/v1/commits/50be9908", "/api/v1/commits/50be9908/build-log", "/api/v1/checks",
        "/api/v1/checks/softmax.fwd?dtype=bf16&limit=2",
        "/api/v1/trials?commit=50be9908&check=softmax.fwd&dtype=bf16&outcome=fail&seed=3",
        "/api/v1/bisections?limit=1", "/api/v1/bisections/7", "/api/v1/bisections/%ff",
        "/api/v1/regressions?state=active&limit=1", "/api/v1/regressions/12", "/metrics", "/",
        "/index.html", "/app.js", "/nothing/../index.html", "/api/v1/nothing",
    ]
    out = [f"GET {p} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n".encode() for p in gets]
    out.append(b"HEAD /api/v1/checks HTTP/1.1\r\nHost: x\r\n\r\n")
    posts = [
        ("POST", "/api/v1/bisections", '{"good":"079ea265","bad":"50be9908","check":"softmax.fwd","dtype":"bf16"}'),
        ("POST", "/api/v1/runs", '{"commit":"50be9908","check":"softmax.fwd","dtype":"bf16","trials":1000}'),
        ("POST", "/api/v1/commits/50be9908/rerun", ""),
        ("POST", "/api/v1/checks/msda.bwd/mute", '{"until":"2026-12-31","dtype":"f32","reason":"pixel-boundary kink, #214"}'),
        ("DELETE", "/api/v1/checks/msda.bwd/mute?dtype=f32", ""),
        ("POST", "/api/v1/runs", "[1,2]"),
        ("PUT", "/api/v1/runs", "{}"),
    ]
    for method, path, body in posts:
        out.append(
            f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body.encode())}\r\n\r\n{body}".encode()
        )
    out.append(b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\n" + auth.encode() +
               b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n")
    return out


def mail_inputs():
    """date, bisection id, then From, To, Subject, Message-ID, In-Reply-To, body, kind (fuzz_mail.c)."""
    body = ("softmax.fwd bf16 started failing at 3f2a1c9d4e5f (softmax: vectorised 4-wide path)\n"
            "by Jane Doe <jane@example.org>.\n\n  ./numwatch-runner-host --check softmax.fwd --dtype bf16 --seed 3\n")
    cases = [
        ("numwatch <numwatch@example.org>", "jane@example.org, ci@example.org",
         "[numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax: vectorised 4-wide path",
         "<numwatch.bisect-12.culprit@example.org>", "", body, "c"),
        ("numwatch@example.org", "", "Re: [numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax:",
         "<numwatch.bisect-12.fixed@example.org>", "<numwatch.bisect-12.culprit@example.org>", "fixed\n", "f"),
        ("\"numwatch CI\" <ci@example.org>", "a@example.org",
         "[numwatch] softmax.fwd bf16 regressed by 3f2a1c9d: softmax: vektorisierter Pfad f\u00fcr gr\u00f6\u00dfere Zeilen \u2713",
         "<numwatch.bisect-3.culprit@example.org>", "", "K\u00f6rper\r\nFrom here\n", ""),
        ("numwatch@example.org", "x@example.org", "[numwatch] a =?x?= b", "<a@b>", "", "body\n", "w"),
    ]
    out = []
    for i, fields in enumerate(cases):
        head = struct.pack("<qq", 1772712000 + i, 12 + i)
        out.append(head + b"\0".join(f.encode() for f in fields))
    return out


def dictionaries():
    """libFuzzer dictionaries: the config file's sections and keys, the API's words."""
    src = (ROOT / "daemon/config.c").read_text()
    words = set()
    for sec, key in re.findall(r'^\s+(?:STR|UINT|DUR|BOOL|REAL|ENV)\w*\("(\w+)", "(\w+)"', src, re.M):
        words.update({f"[{sec}]", f"{key} = "})
    words.update({"\n", " = ", "env = ", "0*4", "h", "ms", "s", "min", "yes", "no", "try", "true", "false",
                  "smtps://", "${", "$", "#", ";"})
    http = {"GET ", "POST ", "DELETE ", "HEAD ", "PUT ", " HTTP/1.1\r\n", " HTTP/1.0\r\n", "\r\n", "\r\n\r\n",
            "/api/v1", "/commits/", "/build-log", "/checks/", "/trials", "/bisections/", "/regressions/",
            "/health", "/metrics", "/runs", "/rerun", "/mute", "?limit=", "&offset=", "dtype=", "state=",
            "commit=", "check=", "seed=", "outcome=", "Authorization: Bearer ", "Content-Length: ",
            "Transfer-Encoding: chunked\r\n", "Connection: close\r\n", "Expect: 100-continue\r\n",
            "Host: x\r\n", "%00", "%ff", "%2e%2e/", "../", "50be9908", "softmax.fwd", "bf16",
            '{"good":"', '"bad":"', '"check":"', '"dtype":"', '"trials":', '"until":"'}

    def quote(w):
        return '"' + "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else f"\\x{ord(c):02x}" for c in w) + '"'

    for name, ws in (("config", words), ("http", http)):
        (ROOT / f"tests/fuzz/{name}.dict").write_text(
            f"# libFuzzer dictionary for fuzz_{name} (written by make-corpus.py)\n"
            + "".join(f"{quote(w)}\n" for w in sorted(ws)))
        print(f"{name}.dict: {len(ws)} words")


def main():
    dictionaries()
    write("protocol_decode", protocol_lines())
    write("protocol_encode", protocol_requests())
    write("protocol_answer", sdk_answers())
    write("config", configs())
    write("sanitizer", sanitizer_outputs())
    write("http", http_requests())
    write("mail", mail_inputs())


if __name__ == "__main__":
    main()
