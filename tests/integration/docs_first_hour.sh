#!/usr/bin/env bash
# docs/watching-your-library.md, run as written: every ```sh block in order (bash -e, in HOME,
# with the exit status the block's info string expects: "sh exit=1"), every "```LANG file=PATH"
# block written to PATH first. HOME is a scratch directory; numwatchd, numwatch and a python3 that
# imports torch come first on PATH; /opt/numwatch is the source tree, /home/you is HOME,
# dbname=numwatch the private cluster and the ports 8080 and 8081 free ones. The daemons the page
# starts are killed when the test ends (the page stops them itself).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
. "$here/../lib/daemon.sh"
start=$SECONDS
doc=$NW_SOURCE_DIR/docs/watching-your-library.md
work=$(mktemp -d "${NW_TEST_TMP:-/tmp}/nw-docs.XXXXXX")
nw_atexit rm -rf "$work"

torch_py=
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import torch' 2>/dev/null; then
		torch_py=$(command -v "$p")
		break
	fi
done
[[ -n $torch_py ]] || fail "no python3 imports torch (Debian: apt-get install python3-torch)"

mkdir -p "$work/home" "$work/bin"
ln -s "$NW_BUILD_DIR/daemon/numwatchd" "$NW_BUILD_DIR/daemon/numwatch" "$work/bin/"
ln -s "$torch_py" "$work/bin/python3"
kill_pidfiles() {
	local f
	for f in "$work"/home/numwatch/*.pid; do
		[[ -e $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true
	done
}
nw_atexit kill_pidfiles

pg_start
port1=$(nw_free_port)
port2=$(nw_free_port)

HOME=$work/home PATH=$work/bin:$PATH PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 \
	"$torch_py" - "$doc" "$NW_SOURCE_DIR" "$work/home" "$NW_DATABASE" "$port1" "$port2" <<'PY' || fail "docs/watching-your-library.md does not run as written (see above)"
import os, re, subprocess, sys, time

doc, src, home, database, port1, port2 = sys.argv[1:]
subs = [("/opt/numwatch", src), ("/home/you", home), ("dbname=numwatch", database), ("8080", port1),
        ("8081", port2)]

def substitute(text):
    for a, b in subs:
        text = text.replace(a, b)
    return text

blocks = re.findall(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", open(doc).read(), re.S | re.M)
ran = written = 0
for lang, info, body in blocks:
    attrs = dict(kv.split("=", 1) for kv in info.split() if "=" in kv)
    body = substitute(body)
    if "file" in attrs:
        path = os.path.expanduser(attrs["file"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(body)
        written += 1
        continue
    if lang != "sh":
        continue
    want = int(attrs.get("exit", "0"))
    limit = int(attrs.get("timeout", "300"))
    t0 = time.monotonic()
    try:
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=home, capture_output=True, text=True,
                           timeout=limit)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
    ran += 1
    print("block %d (%.0f s): exit %s\n%s" % (ran, time.monotonic() - t0, rc, body.rstrip()))
    if rc != want:
        sys.stderr.write("FAIL: exit %s, expected %d\n--- stdout ---\n%s\n--- stderr ---\n%s\n" % (
            rc, want, str(out)[-3000:], str(err)[-3000:]))
        for log in ("fusedops.log", "axpy.log"):
            path = os.path.join(home, "numwatch", log)
            if os.path.exists(path):
                sys.stderr.write("--- %s (end) ---\n%s\n" % (log, open(path).read()[-3000:]))
        sys.exit(1)
print("ok: %d command blocks ran with the exit status the page says, %d files written from it" % (ran, written))
if ran < 15 or written < 4:
    sys.exit("too few blocks: the page's conventions changed?")
PY
echo "ok: docs_first_hour done in $((SECONDS - start)) s"
