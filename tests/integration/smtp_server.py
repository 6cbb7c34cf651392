#!/usr/bin/python3
"""A real SMTP server for tests/integration/email.sh, built on Debian's
python3-aiosmtpd: it accepts every message and saves it with its envelope.

  smtp_server.py --port PORT --dir DIR [--user USER --password PASSWORD]

Each accepted message becomes DIR/NNNN.json (numbered from 0001, written to a
temporary name and renamed, so a reader never sees half a file):

  {"mail_from": "...", "rcpt_tos": ["...", ...], "auth": "USER" or null,
   "data": "the message as received, CRLF line ends, dot-stuffing undone"}

With --user, the server requires AUTH (PLAIN or LOGIN, allowed without TLS
since this is a test) before MAIL FROM, and refuses wrong credentials.
DIR/ready is written once the server listens; it runs until SIGTERM or
SIGINT. Messages are numbered on from the files already in DIR, so a
restarted server keeps adding to the same directory.
"""
import argparse
import glob
import json
import os
import signal
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Saver:
    def __init__(self, directory):
        self.dir = directory
        self.lock = threading.Lock()
        self.count = len(glob.glob(os.path.join(directory, "[0-9]*.json")))

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.count += 1
            n = self.count
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "auth": session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None,
            # Strict: a message that is not UTF-8 fails the test here.
            "data": envelope.content.decode("utf-8"),
        }
        tmp = os.path.join(self.dir, ".%04d.tmp" % n)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, ensure_ascii=False)
        os.rename(tmp, os.path.join(self.dir, "%04d.json" % n))
        return "250 OK saved as %04d" % n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--user")
    ap.add_argument("--password")
    args = ap.parse_args()

    kwargs = {}
    if args.user:
        def authenticator(server, session, envelope, mechanism, auth_data):
            ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == args.user
                  and auth_data.password.decode() == args.password)
            return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)
        kwargs = dict(authenticator=authenticator, auth_required=True, auth_require_tls=False)

    controller = Controller(Saver(args.dir), hostname="127.0.0.1", port=args.port, **kwargs)
    controller.start()
    with open(os.path.join(args.dir, "ready"), "w") as f:
        f.write("%d\n" % os.getpid())

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    controller.stop()


if __name__ == "__main__":
    main()
