#!/usr/bin/env python3
"""A long planted history for tests/integration/fake-runner, at scale.

  scale-repo.py vars COMMITS
      the scenario's positions, as psql arguments for bench/scale-history.sql
  scale-repo.py repo DIR COMMITS TIP
      a git repository of COMMITS + TIP first-parent commits, written in one go
      with git fast-import (seconds for thousands of commits)
  scale-repo.py log DIR
      its first-parent history, oldest first, as the tab-separated rows that
      bench/scale-history.sql reads (position, sha, parent, author, email,
      time, title)
  scale-repo.py prebuild DIR STATE_DIR RUNNER COMMITS
      what the daemon's build command leaves in STATE_DIR/builds/SHA for each
      of the first COMMITS commits (the fake runner with its version line and
      the mode files), as another host sharing the database would have built
      them: probes and re-judged jobs there find a runner

Each commit has its own 'version' (its own binary, so its own failures under
the hflaky modes) and the files the fake runner reads. The scenario, with
positions scaled to COMMITS (2000: 800, 1000, 1200, 1500, 1700):

  fake.fwd f32   deterministic: seeds 3 mod 8 fail from FWD_BAD, fixed at FWD_FIX
  fake.extra f32 a new check (extra_checks: it behaves as fake.fwd) from
                 EXTRA_FROM, inside that window: failing since it was
                 introduced, then fixed at FWD_FIX
  fake.bwd f32   a 2% flake throughout (hflaky2), a race at 7% from RACE_F32,
                 never fixed (hflaky7)
  fake.bwd f16   clean, then a 5% race from RACE_F16, never fixed (hflaky5):
                 thousands of clean trials before an open regression (issue 13's
                 underflow)
"""
import os
import subprocess
import sys

BASE_TIME = 1767225600  # 2026-01-01T00:00:00Z
STEP_S = 600


def scenario(commits):
    return {
        "fwd_bad": commits * 2 // 5,
        "extra_from": commits // 2,
        "fwd_fix": commits * 3 // 5,
        "race_f32": commits * 3 // 4,
        "race_f16": commits * 17 // 20,
    }


def files(p, sc):
    """The files the fake runner reads at position p."""
    f = {
        "version": "%d\n" % p,
        "mode": "failing\n" if sc["fwd_bad"] <= p < sc["fwd_fix"] else "good\n",
        "bwd_dtypes": "f32 f16\n",
        "bwd_mode": "hflaky7\n" if p >= sc["race_f32"] else "hflaky2\n",
        "bwd_mode.f16": "hflaky5\n" if p >= sc["race_f16"] else "good\n",
    }
    if p >= sc["extra_from"]:
        f["extra_checks"] = "fake.extra\n"
    return f


def author(p):
    return "Dev %d" % (p % 23), "dev%d@example.com" % (p % 23)


def title(p):
    return "kernels: change %d to the attention path" % p


def write_repo(path, commits, tip):
    sc = scenario(commits)
    subprocess.run(["git", "init", "-q", "-b", "main", path], check=True)
    fi = subprocess.Popen(["git", "-C", path, "fast-import", "--quiet"], stdin=subprocess.PIPE)
    out = fi.stdin
    prev = {}

    def data(b):
        out.write(b"data %d\n" % len(b))
        out.write(b)
        out.write(b"\n")

    for p in range(commits + tip):
        name, email = author(p)
        when = BASE_TIME + p * STEP_S
        out.write(b"commit refs/heads/main\nmark :%d\n" % (p + 1))
        out.write(("author %s <%s> %d +0000\n" % (name, email, when)).encode())
        out.write(("committer %s <%s> %d +0000\n" % (name, email, when)).encode())
        data(title(p).encode())
        if p > 0:
            out.write(b"from :%d\n" % p)
        for f, content in files(p, sc).items():
            if prev.get(f) != content:
                out.write(("M 100644 inline %s\n" % f).encode())
                data(content.encode())
                prev[f] = content
    out.close()
    if fi.wait() != 0:
        sys.exit("scale-repo: git fast-import failed")


def history(path):
    """(sha, parent, author, email, time, title) oldest first, first-parent."""
    r = subprocess.run(["git", "-C", path, "log", "--first-parent", "--reverse",
                        "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%ct%x1f%s", "main"],
                       check=True, capture_output=True, text=True)
    rows = []
    for line in r.stdout.splitlines():
        sha, parents, an, ae, ct, subject = line.split("\x1f")
        rows.append((sha, parents.split(" ")[0] if parents else "", an, ae, ct, subject))
    return rows


def write_log(path):
    for p, (sha, parent, an, ae, ct, subject) in enumerate(history(path)):
        sys.stdout.write("\t".join([str(p), sha, parent or "\\N", an, ae, ct, subject]) + "\n")


def prebuild(path, state_dir, runner, commits):
    sc = scenario(commits)
    body = open(runner).read()
    for p, row in enumerate(history(path)[:commits]):
        d = os.path.join(state_dir, "builds", row[0])
        os.makedirs(d, exist_ok=True)
        for f, content in files(p, sc).items():
            if f != "version":
                with open(os.path.join(d, f), "w") as fh:
                    fh.write(content)
        exe = os.path.join(d, "numwatch-runner-host")
        with open(exe, "w") as fh:
            fh.write(body)
            fh.write("# version %d\n" % p)
        os.chmod(exe, 0o755)


def main(argv):
    if len(argv) == 3 and argv[1] == "vars":
        for k, v in scenario(int(argv[2])).items():
            print("-v %s=%d" % (k, v))
    elif len(argv) == 5 and argv[1] == "repo":
        write_repo(argv[2], int(argv[3]), int(argv[4]))
    elif len(argv) == 3 and argv[1] == "log":
        write_log(argv[2])
    elif len(argv) == 6 and argv[1] == "prebuild":
        prebuild(argv[2], argv[3], argv[4], int(argv[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
