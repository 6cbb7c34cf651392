"""pylib: the library the Python runner example watches (it stands for the
watched repository's code; tests/integration/python_runner.sh commits versions
of this file to a git repository and lets numwatchd build every commit).

RMSNorm forward and backward over rows of a dense row-major [rows, cols]
tensor, written the way a GPU kernel computes them: float32 arithmetic, each
row's reductions split over LANES lanes combined by a tree, and rows longer
than LONG_ROW read two elements per step (a paired load). Outputs are written
into the caller's lists; the caller stores them in its dtype.

    y  = x * rsqrt(mean(x^2) + eps) * w
    dx = r * (dy*w - xhat * mean(dy*w*xhat)),   r = rsqrt(mean(x^2) + eps), xhat = x*r
    dw = sum over rows of dy * xhat

Pure Python, standard library only.
"""
import math
import struct

EPS = 1e-6
LANES = 8
LONG_ROW = 256

_F = struct.Struct("<f")


def f32(v):
    """v rounded to float32 (overflow gives infinity)."""
    try:
        return _F.unpack(_F.pack(v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def f32v(vs):
    """Every value of a list rounded to float32 (one float32 operation each)."""
    n = len(vs)
    try:
        return list(struct.unpack("<%df" % n, struct.pack("<%df" % n, *vs)))
    except OverflowError:
        return [f32(v) for v in vs]


def _tree(acc):
    while len(acc) > 1:
        acc = f32v([acc[i] + acc[i + 1] for i in range(0, len(acc), 2)])
    return acc[0]


def _row_sum(v):
    """The float32 sum of a row, as the kernel's lanes compute it."""
    n = len(v)
    acc = [0.0] * LANES
    if n > LONG_ROW:
        # Long rows: each step takes a pair of neighbours into one lane.
        pairs = f32v([v[i] + v[i + 1] for i in range(0, n - 1, 2)])
        for k in range(0, len(pairs), LANES):
            chunk = pairs[k : k + LANES]
            acc[: len(chunk)] = f32v([a + b for a, b in zip(acc, chunk)])
        if n % 2:  # the odd element left after the pairs
            acc[0] = f32(acc[0] + v[n - 1])
    else:
        for k in range(0, n, LANES):
            chunk = v[k : k + LANES]
            acc[: len(chunk)] = f32v([a + b for a, b in zip(acc, chunk)])
    return _tree(acc)


def _rstd(row, eps):
    n = len(row)
    ms = f32(_row_sum(f32v([a * a for a in row])) / n)
    return f32(1.0 / math.sqrt(f32(ms + eps)))


def rmsnorm_fwd(x, w, rows, cols, y, eps=EPS):
    """y[i, :] = x[i, :] * rsqrt(mean(x[i, :]^2) + eps) * w."""
    if cols == 0:
        return
    for i in range(rows):
        base = i * cols
        row = x[base : base + cols]
        r = _rstd(row, eps)
        y[base : base + cols] = f32v([h * b for h, b in zip(f32v([a * r for a in row]), w)])


def rmsnorm_bwd(x, w, dy, rows, cols, dx, dw, eps=EPS):
    """Gradients of rmsnorm_fwd: dx ([rows, cols]) and dw ([cols])."""
    acc = [0.0] * cols
    for i in range(rows if cols else 0):
        base = i * cols
        row = x[base : base + cols]
        drow = dy[base : base + cols]
        r = _rstd(row, eps)
        xh = f32v([a * r for a in row])
        g = f32v([d * b for d, b in zip(drow, w)])
        c = f32(_row_sum(f32v([a * b for a, b in zip(g, xh)])) / cols)
        xc = f32v([xj * c for xj in xh])
        t = f32v([gj - v for gj, v in zip(g, xc)])
        dx[base : base + cols] = f32v([r * tj for tj in t])
        prod = f32v([d * h for d, h in zip(drow, xh)])
        acc = f32v([a + q for a, q in zip(acc, prod)])
    for j in range(cols):
        dw[j] = acc[j]
