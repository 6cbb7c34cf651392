"""The metrics of the three SDKs on the same cases, field for field (ctest 'metrics_parity').

    python3 tests/unit/metrics_parity.py BUILD/tests/unit/metrics_dump

PRODUCT.md's check contract is one contract: a trial's ratio, max_abs, max_rel, max_ulp,
non-finite counts, mismatches, unwritten elements, canaries, excluded elements, worst index and
tail mean the same whichever SDK the runner is written with. This test writes cases (random ones
with NaN/Inf on either side, and the edges: subnormals, f16/bf16 (no ULP) and f32 ULPs across
zero and past f32's range, a zero budget, fixed atol/rtol with atol 0, excluded elements that
are NaN, a worst element on a tail tile, unwritten elements, canaries, empty tensors), measures
each with the C SDK's nw_compare() (kernels/sdk/metrics.c, through metrics_dump), the list SDK's
metrics.compare() and the torch SDK's torchcheck.compare(), and fails on any difference.

Every field must be equal exactly: the three compute the same float64 operations in the same
order (budget = factor * plain + floor_eps * eps * scale; ratio = max_abs / budget; err / |ref|),
so no tolerance is needed, and one would hide a real divergence. What legitimately differs is
not compared: the poison bit patterns (each SDK's own quiet NaN; the C program gets its own, the
Python SDKs an unwritten mask) and the digests (FNV-1a over the output bytes in C, a weighted sum
computed on the device in the torch SDK: each is compared only with repeats of its own runner).
"""
import json
import math
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "kernels", "python"))

import torch  # noqa: E402

from numwatch_runner import metrics  # noqa: E402
from numwatch_runner import torchcheck as nwt  # noqa: E402

TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
IV = {"f32": torch.int32, "f16": torch.int16, "bf16": torch.int16}
#: The C SDK's poison per dtype (kernels/sdk/output.c, nw_poison_bits).
C_POISON = {"f32": 0x7FC5A5A5, "f16": 0x7E5A, "bf16": 0x7FDA}
INF, NAN = math.inf, math.nan


def hex64(xs):
    return "".join("%016x" % struct.unpack("<Q", struct.pack("<d", float(x)))[0] for x in xs)


def unhex64(h):
    return struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0]


class Case:
    def __init__(self, label, dtype, dims, got, ref, plains=(), exclude=None, unwritten=None, atol=None, rtol=0.0,
                 factor=2.0, floor_eps=4.0, floor_scale=None, tail_width=0, canary=0):
        n = 1
        for d in dims:
            n *= d
        assert len(got) == len(ref) == n and all(len(p) == n for p in plains), label
        self.__dict__.update(locals())
        del self.__dict__["self"]
        self.n = n

    def out_tensor(self):
        """got in the dtype (rounded), with the C poison where unwritten: (tensor, its bits)."""
        t = torch.tensor(self.got, dtype=torch.float64).to(TD[self.dtype])
        bits = t.view(IV[self.dtype]).clone()
        for i in range(self.n):
            if self.unwritten and self.unwritten[i]:
                b = C_POISON[self.dtype]
                bits[i] = b - (1 << 32) if self.dtype == "f32" and b >= 1 << 31 else (
                    b - (1 << 16) if self.dtype != "f32" and b >= 1 << 15 else b)
        return bits.view(TD[self.dtype]), bits

    def c_json(self):
        t, bits = self.out_tensor()
        o = {"name": "t", "dtype": self.dtype, "dims": self.dims,
             "out": bits.numpy().tobytes().hex(), "ref": hex64(self.ref),
             "plain": [hex64(p) for p in self.plains] if self.atol is None else [],
             "factor": self.factor, "floor_eps": self.floor_eps, "floor_scale": self.floor_scale or 0.0,
             "atol": self.atol or 0.0, "rtol": self.rtol, "tail_width": self.tail_width, "canary": self.canary}
        if self.exclude is not None:
            o["exclude"] = "".join("1" if e else "0" for e in self.exclude)
        return json.dumps(o)

    def kw(self):
        return dict(shape=self.dims, factor=self.factor, floor_eps=self.floor_eps, floor_scale=self.floor_scale,
                    atol=self.atol, rtol=self.rtol, canary=self.canary, tail_width=self.tail_width)

    def list_sdk(self):
        t, _ = self.out_tensor()
        got = [float(v) for v in t.to(torch.float64).tolist()]
        exc = None if self.exclude is None else {i for i, e in enumerate(self.exclude) if e}
        plains = [list(p) for p in self.plains] if self.atol is None else []
        return metrics.compare("t", self.dtype, got, list(self.ref), plains, unwritten=self.unwritten, exclude=exc,
                               **self.kw())

    def torch_sdk(self):
        t, _ = self.out_tensor()
        f = lambda xs: torch.tensor(list(xs), dtype=torch.float64)  # noqa: E731
        unw = None if self.unwritten is None else torch.tensor(self.unwritten, dtype=torch.bool)
        exc = None if self.exclude is None else torch.tensor(self.exclude, dtype=torch.bool)
        plains = [f(p) for p in self.plains] if self.atol is None else []
        return nwt.compare("t", self.dtype, t, f(self.ref), plains, unwritten=unw, exclude=exc, **self.kw())


def c_dict(c, fixed):
    """metrics_dump's line as compare()'s dict."""
    fin = metrics.finite_or_none
    fl = {k: unhex64(c[k]) for k in ("ratio", "max_abs", "max_rel", "max_ulp", "plain_max_abs", "budget")}
    return {
        "name": c["name"], "ratio": fin(fl["ratio"]), "max_abs": fin(fl["max_abs"]), "max_rel": fin(fl["max_rel"]),
        "max_ulp": int(fl["max_ulp"]) if c["has_ulp"] else None,
        "nonfinite": c["nonfinite"], "ref_nonfinite": c["ref_nonfinite"], "unwritten": c["unwritten"],
        "canary": c["canary"], "excluded": c["excluded"], "worst": c["worst"], "tail": c["tail"],
        "mismatch": c["mismatch"], "plain_max_abs": None if fixed else fin(fl["plain_max_abs"]),
        "budget": fin(fl["budget"]), "failed": c["failed"],
    }


SUB = {"f32": 1e-40, "f16": 3e-6, "bf16": 1e-39}  # subnormal in each dtype


def edge_cases():
    out = []
    ref = [1.0, -2.0, 0.5, 3.0, -0.25, 8.0]
    plain = [1.0 + 2**-20, -2.0, 0.5, 3.0 - 2**-19, -0.25, 8.0]
    for dt in ("f32", "f16", "bf16"):
        # Non-finite on either side: NaN for a finite reference, Inf for a finite one, the same Inf,
        # Inf of the other sign, NaN for NaN, a finite value for NaN.
        out.append(Case("nonfinite " + dt, dt, [2, 6],
                        [NAN, INF, INF, -INF, NAN, 1.0] + [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                        [1.0, 2.0, INF, INF, NAN, NAN] + [1.0, 2.0, 3.0, 4.0, 5.0, 6.0 + 1e-3],
                        [[1.0] * 6 + [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]))
        # A kink excuses a value, not a NaN: excluded elements that are NaN, Inf for Inf, far off.
        out.append(Case("excluded " + dt, dt, [6], [NAN, INF, 100.0, 0.5, 3.0, -0.25], ref, [plain],
                        exclude=[True, True, True, False, False, True]))
        out.append(Case("excluded inf " + dt, dt, [3], [INF, 1.0, 2.0], [INF, 1.0, 2.5], [[INF, 1.0, 2.4]],
                        exclude=[True, False, False]))
        # Subnormals on both sides and in the plain program.
        s = SUB[dt]
        out.append(Case("subnormal " + dt, dt, [4], [s, 2 * s, -s, 0.0], [s * 1.25, 2 * s, -s * 0.5, s],
                        [[s, 2 * s, -s, 0.0]]))
        # A zero budget: the plain program exact and the reference all zeros: the floor is 0 too.
        out.append(Case("zero budget " + dt, dt, [3], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [[0.0, 0.0, 0.0]]))
        out.append(Case("zero budget, an error " + dt, dt, [3], [0.0, 1e-3, 0.0], [0.0, 0.0, 0.0],
                        [[0.0, 0.0, 0.0]]))
        # Fixed tolerances, atol 0 (an error is an infinite ratio), rtol only.
        out.append(Case("atol 0 " + dt, dt, [6], [1.0, -2.0, 0.5, 3.0, -0.25, 8.5], ref, atol=0.0))
        out.append(Case("atol 0 exact " + dt, dt, [2], [1.0, 2.0], [1.0, 2.0], atol=0.0))
        out.append(Case("rtol " + dt, dt, [6], [1.01, -2.0, 0.5, 3.3, -0.25, 8.0], ref, atol=1e-3, rtol=1e-2))
        # The worst element on a tail tile (13 columns, tiles of 8), and off it.
        got = [float(i) for i in range(26)]
        r = list(got)
        r[10 + 13] += 0.5
        out.append(Case("tail " + dt, dt, [2, 13], got, r, [got], tail_width=8))
        r = list(got)
        r[3] += 0.5
        out.append(Case("no tail " + dt, dt, [2, 13], got, r, [got], tail_width=8))
        # Unwritten elements (the C poison), the first one of them the worst index.
        out.append(Case("unwritten " + dt, dt, [2, 3], [1.0, 2.0, 0.0, 4.0, 0.0, 6.5], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                        [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], unwritten=[False, False, True, False, True, False]))
        out.append(Case("canary " + dt, dt, [2], [1.0, 2.0], [1.0, 2.0], [[1.0, 2.0]], canary=3))
        out.append(Case("floor scale " + dt, dt, [2], [1.0, 2.0], [1.0, 2.0 + 1e-3], [[1.0, 2.0]], floor_scale=50.0))
        # Empty tensors.
        out.append(Case("empty " + dt, dt, [0, 4], [], [], [[]]))
        out.append(Case("empty fixed " + dt, dt, [3, 0], [], [], atol=1e-3))
        # Several plain programs, one with a NaN.
        out.append(Case("plains " + dt, dt, [3], [1.0, 2.0, 3.0], [1.0, 2.0, 3.1], [[NAN, 2.0, 3.0], [1.0, 2.5, 3.0]]))
    # f32's ULP: across zero, -0 against +0, a reference past f32's range (no ULP there), the
    # largest finite value against the reference just above it.
    out.append(Case("ulp across zero", "f32", [3], [-1e-45, -0.0, 1.0], [1e-45, 0.0, 1.0], [[0.0, 0.0, 1.0]]))
    out.append(Case("ulp past f32", "f32", [3], [3.4e38, 1.0, 2.0], [1e39, 1.0 + 2**-22, 2.0],
                    [[3.4e38, 1.0, 2.0]]))
    out.append(Case("ulp at f32's max", "f32", [2], [3.4028234663852886e38, 1.0],
                    [3.4028235677973366e38, 1.0], [[3.4028234663852886e38, 1.0]]))
    return out


def random_cases(rnd, count):
    out = []
    for k in range(count):
        dt = ("f32", "f16", "bf16")[k % 3]
        dims = rnd.choice(([1], [7], [3, 5], [2, 3, 9], [4, 16], [1, 33]))
        n = 1
        for d in dims:
            n *= d
        scale = rnd.choice((1.0, 1e-3, 50.0, 1e4 if dt != "f16" else 1e2))
        ref = [rnd.gauss(0, 1) * scale for _ in range(n)]
        got = [r + rnd.gauss(0, 1e-2) * scale * rnd.choice((0.0, 0.1, 1.0)) for r in ref]
        plains = [[r + rnd.gauss(0, 1e-2) * scale for r in ref] for _ in range(rnd.randint(1, 3))]
        for _ in range(rnd.randint(0, 3)):
            i = rnd.randrange(n)
            kind = rnd.randrange(7)
            if kind == 0:
                got[i] = NAN
            elif kind == 1:
                ref[i] = rnd.choice((INF, -INF))
                got[i] = rnd.choice((INF, -INF, 1.0, NAN))
            elif kind == 2:
                ref[i] = got[i] = NAN
            elif kind == 3:
                plains[0][i] = rnd.choice((NAN, INF))
            elif kind == 4:
                ref[i] = 0.0
            elif kind == 5:
                ref[i] = NAN
            else:
                got[i] = ref[i]
        kw = {}
        if k % 4 == 1:
            kw["exclude"] = [rnd.random() < 0.2 for _ in range(n)]
        if k % 5 == 2:
            kw["unwritten"] = [rnd.random() < 0.1 for _ in range(n)]
        if k % 6 == 3:
            kw.update(atol=rnd.choice((0.0, 1e-3, 1e-1)), rtol=rnd.choice((0.0, 1e-2)))
        if k % 7 == 4:
            kw["floor_scale"] = rnd.choice((1.0, 100.0))
        kw["factor"] = rnd.choice((2.0, 1.5, 4.0))
        kw["tail_width"] = rnd.choice((0, 4, 8))
        kw["canary"] = 1 if k % 17 == 5 else 0
        out.append(Case("random %d %s" % (k, dt), dt, dims, got, ref, plains, **kw))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: metrics_parity.py METRICS_DUMP")
    cases = edge_cases() + random_cases(random.Random(15), 600)
    proc = subprocess.run([sys.argv[1]], input="".join(c.c_json() + "\n" for c in cases), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        sys.exit("metrics_parity: metrics_dump exited %d: %s" % (proc.returncode, proc.stderr.strip()))
    lines = proc.stdout.splitlines()
    if len(lines) != len(cases):
        sys.exit("metrics_parity: %d cases, %d answers" % (len(cases), len(lines)))
    bad = 0
    for case, line in zip(cases, lines):
        want = c_dict(json.loads(line), case.atol is not None)
        for sdk, have in (("list SDK (metrics.compare)", case.list_sdk()),
                          ("torch SDK (torchcheck.compare)", case.torch_sdk())):
            diff = {k: (want.get(k), have.get(k)) for k in set(want) | set(have) if want.get(k) != have.get(k)}
            if diff:
                bad += 1
                print("FAIL %s: the %s differs from the C SDK's nw_compare (field: (C, Python)): %s" % (
                    case.label, sdk, diff))
    kinds = sum(1 for c in cases if not c.label.startswith("random"))
    if bad:
        sys.exit("metrics_parity: %d of %d comparisons differ" % (bad, 2 * len(cases)))
    print("metrics_parity: %d cases (%d edge cases, %d random; f32, f16, bf16), every field equal in the C, "
          "list and torch SDKs" % (len(cases), kinds, len(cases) - kinds))


if __name__ == "__main__":
    main()
