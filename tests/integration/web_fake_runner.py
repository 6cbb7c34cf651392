#!/usr/bin/env python3
"""A protocol-v1 runner for dashboard tests: many checks, several dtypes, and
per-commit misbehaviour chosen by the file 'mode' in its working directory
(the build directory, where the test's build command copies it).

'mode' holds comma-separated directives:
  good                every trial passes (the default)
  regress=CHECK/DTYPE seeds 3, 11, 19, ... fail deterministically (ratio 4.72, tail tile)
  nan=CHECK/DTYPE     seeds 1, 9, 17, ... give NaN in one gradient's tail tile only
  flaky=CHECK/DTYPE   seed 5 fails on its first run only
  garbage=CHECK/DTYPE answers that check with a line that is not JSON (infra_error)
  slow=SECONDS        every trial takes that long
The file 'checks' (optional) holds how many checks to declare (default 50).
"""
import json
import os
import sys
import time

OPS = ["softmax", "layernorm", "rmsnorm", "attention", "msda", "gelu", "silu", "rope", "matmul", "conv2d",
       "dropout", "embedding", "xentropy", "topk", "cumsum", "groupnorm", "batchnorm", "adam", "swiglu",
       "scatter", "gather", "flash_dmattn", "sparse_attn", "logsumexp", "rotary_emb"]
NONDET = {"msda.bwd", "scatter.bwd", "flash_dmattn.bwd", "sparse_attn.bwd"}


def read(name, default):
    try:
        with open(name) as f:
            return f.read().strip()
    except OSError:
        return default


nchecks = int(read("checks", "50") or 50)
directives = {}
for part in read("mode", "good").split(","):
    k, _, v = part.strip().partition("=")
    directives.setdefault(k, []).append(v)
slow = float(directives.get("slow", ["0"])[0] or 0)


def targets(kind):
    return set(directives.get(kind, []))


checks = []
for i in range(nchecks):
    op, ps = OPS[(i // 2) % len(OPS)], ("fwd", "bwd")[i % 2]
    if i >= 2 * len(OPS):
        op = "%s%d" % (op, i // (2 * len(OPS)))
    name = "%s.%s" % (op, ps)
    if op == "msda":
        dtypes = ["f32", "f64"]
    elif i % 7 == 6:
        dtypes = ["f32"]
    else:
        dtypes = ["f32", "f16", "bf16"]
    checks.append({"check": name, "op": op, "pass": ps, "dtypes": dtypes, "deterministic": name not in NONDET,
                   "families": ["aligned", "tail", "threshold", "tiny"]})


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def tensor(name, ratio, nonfinite=0, tail=False, worst=(0, 1)):
    return {"name": name, "ratio": ratio, "max_abs": ratio * 2.4e-4, "max_rel": ratio * 3.1e-3,
            "max_ulp": int(ratio * 3) if ratio < 1e6 else None, "nonfinite": nonfinite, "ref_nonfinite": 0,
            "unwritten": 0, "canary": 0, "excluded": 0, "worst": list(worst), "tail": tail}


for line in sys.stdin:
    req = json.loads(line)
    op = req.get("op")
    if op == "hello":
        send({"op": "hello", "protocol": 1, "runner": "web-fake-runner",
              "device": {"backend": "host", "name": "cpu"}, "checks": checks})
    elif op == "bye":
        send({"op": "bye"})
        sys.exit(0)
    elif op == "trial":
        if slow:
            time.sleep(slow)
        seed, key = req["seed"], "%s/%s" % (req.get("check"), req.get("dtype"))
        if key in targets("garbage"):
            print("this is not json {", flush=True)
            continue
        family = ("aligned", "tail", "threshold", "tiny")[seed % 4]
        shape = [2 + seed % 3, (1023, 1024, 1025, 4097)[seed % 4]]
        bwd = req.get("check", "").endswith(".bwd")
        names = ["dq", "dk", "dv"] if bwd else ["y"]
        tensors = [tensor(n, 0.21 + 0.01 * (seed % 5)) for n in names]
        fail = False
        if key in targets("regress") and seed % 8 == 3:
            tensors[0] = tensor(names[0], 4.72, tail=True, worst=(1, shape[1] - 1))
            fail = True
        if key in targets("nan") and seed % 8 == 1:
            tensors[-1] = tensor(names[-1], 1e308, nonfinite=37, tail=True, worst=(0, shape[1] - 2))
            tensors[-1]["max_abs"] = None
            tensors[-1]["max_rel"] = None
            fail = True
        if key in targets("flaky") and seed == 5:
            marker = "failed-once-%s-%s" % (req.get("check"), req.get("dtype"))
            if not os.path.exists(marker):
                open(marker, "w").close()
                tensors[0] = tensor(names[0], 1.31, worst=(0, 7))
                fail = True
        ratio = max(t["ratio"] for t in tensors)
        send({"op": "trial", "id": req["id"], "verdict": "fail" if fail else "pass",
              "case": {"family": family, "shape": shape, "gen": 1}, "ratio": ratio, "tensors": tensors,
              "digest": "%016x" % (seed * 2654435761 % (1 << 64)), "digests_differ": 0, "kernel_us": 12.5})
    else:
        send({"op": op, "error": "unknown op"})
