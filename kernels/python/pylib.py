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


def _tree(acc):
    while len(acc) > 1:
        acc = [f32(acc[i] + acc[i + 1]) for i in range(0, len(acc), 2)]
    return acc[0]


def _row_sum(v):
    """The float32 sum of a row, as the kernel's lanes compute it."""
    n = len(v)
    acc = [0.0] * LANES
    if n > LONG_ROW:
        # Long rows: each step takes a pair of neighbours into one lane.
        for i in range(0, n - 1, 2):
            lane = (i >> 1) % LANES
            acc[lane] = f32(acc[lane] + f32(v[i] + v[i + 1]))
        if n % 2:  # the odd element left after the pairs
            acc[0] = f32(acc[0] + v[n - 1])
    else:
        for i in range(n):
            acc[i % LANES] = f32(acc[i % LANES] + v[i])
    return _tree(acc)


def _rstd(row, eps):
    n = len(row)
    ms = f32(_row_sum([f32(a * a) for a in row]) / n)
    return f32(1.0 / math.sqrt(f32(ms + eps)))


def rmsnorm_fwd(x, w, rows, cols, y, eps=EPS):
    """y[i, :] = x[i, :] * rsqrt(mean(x[i, :]^2) + eps) * w."""
    for i in range(rows):
        base = i * cols
        row = x[base : base + cols]
        r = _rstd(row, eps)
        for j in range(cols):
            y[base + j] = f32(f32(row[j] * r) * w[j])


def rmsnorm_bwd(x, w, dy, rows, cols, dx, dw, eps=EPS):
    """Gradients of rmsnorm_fwd: dx ([rows, cols]) and dw ([cols])."""
    acc = [0.0] * cols
    for i in range(rows):
        base = i * cols
        row = x[base : base + cols]
        drow = dy[base : base + cols]
        r = _rstd(row, eps)
        xh = [f32(a * r) for a in row]
        g = [f32(d * b) for d, b in zip(drow, w)]
        c = f32(_row_sum([f32(a * b) for a, b in zip(g, xh)]) / cols)
        for j in range(cols):
            dx[base + j] = f32(r * f32(g[j] - f32(xh[j] * c)))
            acc[j] = f32(acc[j] + f32(drow[j] * xh[j]))
    for j in range(cols):
        dw[j] = acc[j]
