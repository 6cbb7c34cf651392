#!/usr/bin/env python3
"""An example numwatch runner in Python: rmsnorm.fwd and rmsnorm.bwd of pylib.py.

pylib.py (next to this file) stands for the watched library: numwatchd builds
each commit by copying this runner, the numwatch_runner package and that
commit's pylib.py into the build directory (tests/integration/python_runner.sh
does exactly that). The checks below are the watchdog's own suite: they stay
the same across the library's history.

    ./example_runner.py                                   # protocol v1 on stdin/stdout
    ./example_runner.py --check rmsnorm.bwd --dtype bf16 --seed 42
    ./example_runner.py --check all --dtype all --count 2000 --summary
    ./example_runner.py --list

Inputs are stored in the trial's dtype. The reference is computed in float64
from the stored inputs. The plain program is what a framework would run op by
op (the usual RMSNorm module): the normalisation in float32, reductions
accumulated in float32 in two orders (sequential and pairwise), every tensor it
keeps rounded to the dtype.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numwatch_runner as nw  # noqa: E402
import pylib  # noqa: E402

EPS = 1e-6
FAMILIES = ("aligned", "tail", "threshold", "tiny", "extreme")
# Dispatch thresholds and tile sizes, each with its neighbours (PRODUCT.md "Shape families").
THRESHOLD_COLS = (7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025)
MAX_ELEMS = 1024  # keeps a pure-Python trial well under 20 ms
TILE = 8  # the lane count: the worst element is in a tail tile when it lies in the last cols % 8
DTYPES = ("f32", "f16", "bf16")


def _shape(rng, family):
    if family == "tiny":
        # Consecutive tiny trials sweep every (rows, cols) up to (4, 16), empty ones included.
        return (rng.index // 17) % 5, rng.index % 17
    if family == "aligned":
        cols = 8 * rng.randint(1, 96)
    elif family == "tail":
        cols = 8 * rng.randint(0, 95) + rng.randint(1, 7)
    elif family == "threshold":
        cols = rng.choice(THRESHOLD_COLS)
    else:
        cols = rng.randint(1, 16) if rng.bernoulli(0.25) else rng.randint(17, 600)
    cap = max(1, min(4, MAX_ELEMS // cols))
    return rng.randint(min(2, cap) if family == "extreme" else 1, cap), cols


def _rows_x(rng, family, rows, cols, dtype):
    """x as doubles: normal rows, or in the extreme family rows of one of several kinds."""
    x = []
    for _ in range(rows):
        kind = rng.randint(0, 6) if family == "extreme" else 0
        if kind == 0:  # normal, with an offset and a spread
            mu, sigma = rng.uniform(-1.0, 1.0), rng.choice((0.5, 1.0, 2.0))
            row = rng.normals(cols, mu, sigma)
        elif kind == 1:  # a large offset: the mean dominates the rms
            row = rng.normals(cols, 300.0, 1.0)
        elif kind == 2:  # a large spread
            row = rng.normals(cols, 0.0, 1000.0)
        elif kind == 3:  # tiny values: mean(x^2) comparable to eps
            row = rng.normals(cols, 0.0, 1e-3)
        elif kind == 4:  # all zeros: rsqrt(eps)
            row = [0.0] * cols
        elif kind == 5:  # one-hot
            row = [0.0] * cols
            row[rng.randint(0, cols - 1)] = rng.choice((-50.0, 50.0))
        else:  # constant: exact ties
            row = [rng.uniform(-4.0, 4.0)] * cols
        x.extend(row)
    return nw.round_list(x, dtype)


def _weights(rng, family, cols, dtype):
    if family == "extreme" and rng.bernoulli(0.5):
        w = rng.normals(cols)  # signs and near-zeros
    else:
        w = rng.normals(cols, 1.0, 0.1)
    return nw.round_list(w, dtype)


# ---- float32 helpers of the plain program ------------------------------------------

def _f32(v):
    return nw.round_value(v, "f32")


def _sum_seq(v):
    s = 0.0
    for a in v:
        s = _f32(s + a)
    return s


def _sum_pairwise(v):
    """Adjacent pairs summed level by level (an odd last element moves up as is)."""
    v = list(v)
    while len(v) > 1:
        odd = v[-1:] if len(v) % 2 else []
        v = nw.round_list([v[i] + v[i + 1] for i in range(0, len(v) - 1, 2)], "f32") + odd
    return v[0] if v else 0.0


def _vsum_seq(vs):
    """Elementwise float32 sum of equal-length vectors, first to last."""
    acc = [0.0] * (len(vs[0]) if vs else 0)
    for v in vs:
        acc = nw.round_list([a + b for a, b in zip(acc, v)], "f32")
    return acc


def _vsum_pairwise(vs):
    """Elementwise float32 sum of equal-length vectors, adjacent pairs level by level."""
    vs = list(vs)
    while len(vs) > 1:
        odd = vs[-1:] if len(vs) % 2 else []
        vs = [nw.round_list([a + b for a, b in zip(vs[i], vs[i + 1])], "f32") for i in range(0, len(vs) - 1, 2)] + odd
    return vs[0] if vs else None


# The plain program's reduction orders: (sum of a row, elementwise sum of rows).
ORDERS = ((_sum_seq, _vsum_seq), (_sum_pairwise, _vsum_pairwise))


def _plain_rstd(row, total):
    n = len(row)
    ms = _f32(total(nw.round_list([a * a for a in row], "f32")) / n)
    return _f32(1.0 / math.sqrt(_f32(ms + EPS)))


def _ref_rstd(row):
    return 1.0 / math.sqrt(math.fsum(a * a for a in row) / len(row) + EPS)


class RmsnormFwd(nw.Check):
    name = "rmsnorm.fwd"
    dtypes = DTYPES
    families = FAMILIES
    deterministic = True
    tail_width = TILE

    def make_case(self, rng, family, dtype):
        rows, cols = _shape(rng, family)
        x = _rows_x(rng, family, rows, cols, dtype)
        w = _weights(rng, family, cols, dtype)
        return nw.Case([rows, cols], {"x": x, "w": w}, {"y": [rows, cols]}, {"rows": rows, "cols": cols})

    def reference(self, case):
        rows, cols, x, w = case["rows"], case["cols"], case["x"], case["w"]
        y = []
        for i in range(rows if cols else 0):
            row = x[i * cols : (i + 1) * cols]
            r = _ref_rstd(row)
            y.extend(a * r * b for a, b in zip(row, w))
        return {"y": y}

    def plain(self, case, dtype):
        rows, cols, x, w = case["rows"], case["cols"], case["x"], case["w"]
        programs = []
        for total, _ in ORDERS:
            y = []
            for i in range(rows if cols else 0):
                row = x[i * cols : (i + 1) * cols]
                r = _plain_rstd(row, total)
                h = nw.round_list(nw.round_list([a * r for a in row], "f32"), dtype)
                y.extend(nw.round_list([a * b for a, b in zip(h, w)], dtype))
            programs.append({"y": y})
        return programs

    def kernel(self, case, dtype, out):
        pylib.rmsnorm_fwd(case["x"], case["w"], case["rows"], case["cols"], out["y"], EPS)


class RmsnormBwd(nw.Check):
    name = "rmsnorm.bwd"
    dtypes = DTYPES
    families = FAMILIES
    deterministic = True
    tail_width = TILE

    def make_case(self, rng, family, dtype):
        rows, cols = _shape(rng, family)
        x = _rows_x(rng, family, rows, cols, dtype)
        w = _weights(rng, family, cols, dtype)
        dy = rng.normals(rows * cols, dtype=dtype)
        return nw.Case(
            [rows, cols],
            {"x": x, "w": w, "dy": dy},
            {"dx": [rows, cols], "dw": [cols]},
            {"rows": rows, "cols": cols},
        )

    def reference(self, case):
        rows, cols, x, w, dy = case["rows"], case["cols"], case["x"], case["w"], case["dy"]
        dx = []
        dw_terms = [[] for _ in range(cols)]
        scale_dx = 0.0
        for i in range(rows if cols else 0):
            row = x[i * cols : (i + 1) * cols]
            drow = dy[i * cols : (i + 1) * cols]
            r = _ref_rstd(row)
            xh = [a * r for a in row]
            g = [d * b for d, b in zip(drow, w)]
            c = math.fsum(a * b for a, b in zip(g, xh)) / cols
            dx.extend(r * (gj - xj * c) for gj, xj in zip(g, xh))
            scale_dx = max([scale_dx] + [abs(r * gj) for gj in g])
            for j in range(cols):
                dw_terms[j].append(drow[j] * xh[j])
        # dx is a difference of terms of size |r * dy * w|, dw a sum of |dy * xhat|:
        # their rounding errors scale with those, not with the (possibly small) result.
        case.floor_scale["dx"] = scale_dx
        case.floor_scale["dw"] = max([0.0] + [math.fsum(abs(t) for t in ts) for ts in dw_terms])
        return {"dx": dx, "dw": [math.fsum(ts) for ts in dw_terms]}

    def plain(self, case, dtype):
        rows, cols, x, w, dy = case["rows"], case["cols"], case["x"], case["w"], case["dy"]
        R = nw.round_list
        programs = []
        for total, vtotal in ORDERS:
            dx = []
            dw_rows = []
            for i in range(rows if cols else 0):
                row = x[i * cols : (i + 1) * cols]
                drow = dy[i * cols : (i + 1) * cols]
                r = _plain_rstd(row, total)
                xh = R([a * r for a in row], "f32")
                g = R([d * b for d, b in zip(drow, w)], dtype)
                c = _f32(total(R([a * b for a, b in zip(g, xh)], "f32")) / cols)
                t = R([xj * c for xj in xh], "f32")
                u = R([gj - tj for gj, tj in zip(g, t)], "f32")
                dx.extend(R(R([r * uj for uj in u], "f32"), dtype))
                hd = R(xh, dtype)
                dw_rows.append(R([d * h for d, h in zip(drow, hd)], "f32"))
            dw = vtotal(dw_rows) if dw_rows else [0.0] * cols
            programs.append({"dx": dx, "dw": R(dw, dtype)})
        return programs

    def kernel(self, case, dtype, out):
        pylib.rmsnorm_bwd(
            case["x"], case["w"], case["dy"], case["rows"], case["cols"], out["dx"], out["dw"], EPS
        )


CHECKS = [RmsnormFwd(), RmsnormBwd()]
RUNNER = nw.Runner(CHECKS, name="pylib-example-runner 0.1 (numwatch_runner %s)" % nw.__version__)


def main(argv=None):
    return RUNNER.run(argv)


if __name__ == "__main__":
    sys.exit(main())
