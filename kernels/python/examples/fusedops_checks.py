#!/usr/bin/env python3
"""The numwatch checks of fusedops (examples/fusedops): the watchdog's own suite.

It lives outside the library's repository and stays the same across the
library's history: numwatchd's build command copies it, with the commit's
fusedops package, into each commit's build directory. It is the runner:

    ./fusedops_checks.py                                  # protocol v1 on stdin/stdout (numwatchd)
    ./fusedops_checks.py --check softmax.fwd --dtype f32 --seed 42
    ./fusedops_checks.py --check attention.bwd --dtype bf16 --seed 7 --runs 20
    ./fusedops_checks.py --check all --dtype all --count 500 --summary
    ./fusedops_checks.py --list

It imports fusedops from its own directory (the build directory) and the SDK
(numwatch_runner) from PYTHONPATH. The checks run on the GPU when
CUDA_VISIBLE_DEVICES names one, else on the CPU (NUMWATCH_TORCH_DEVICE forces
either).
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import fusedops  # noqa: E402
import numwatch_runner as nw  # noqa: E402
from numwatch_runner import torchcheck as nwt  # noqa: E402

DTYPES = ("f32", "bf16")
EPS = 1e-6


class Softmax(nwt.TorchCheck):
    """Rows of up to 4097 columns: both sides of the 1024/2048/4096 thresholds, widths that are not a
    multiple of the 4-wide loads, every tiny shape, rows of large offsets and of -inf."""

    op = "softmax"
    dtypes = DTYPES
    families = ("aligned", "tail", "threshold", "tiny", "extreme")
    tail_width = 4

    def make_case(self, g, family, dtype):
        if family == "tiny":
            rows, cols = g.sweep(3, 16)
        else:
            cols = {"aligned": lambda: g.aligned(4, 4, 4096), "tail": lambda: g.tail(4, 1, 4097),
                    "threshold": lambda: g.around((1024, 2048, 4096)),
                    "extreme": lambda: g.randint(1, 1100)}[family]()
            rows = g.randint(1, 4)
        if family == "extreme":
            x = g.extreme_rows(rows, cols, dtype)
        else:
            x = g.normal((rows, cols), dtype, std=3.0)
        return nwt.Case([rows, cols], {"x": x})

    def reference(self, case, x):
        return torch.softmax(x, -1)

    def kernel(self, case, x):
        return fusedops.softmax(x)


class RMSNorm(nwt.TorchCheck):
    """Up to 48 rows (the backward's dw sums them) of up to 1025 columns; weights with signs."""

    op = "rmsnorm"
    dtypes = DTYPES
    families = ("aligned", "tail", "threshold", "tiny", "extreme")
    grads = ("x", "w")
    tail_width = 8

    def make_case(self, g, family, dtype):
        if family == "tiny":
            rows, cols = g.sweep(3, 16)
            rows += 1
        else:
            cols = {"aligned": lambda: g.aligned(8, 8, 1024), "tail": lambda: g.tail(8, 1, 1023),
                    "threshold": lambda: g.around((64, 128, 256, 512, 1024)),
                    "extreme": lambda: g.randint(1, 600)}[family]()
            rows = g.randint(1, 48)
        if family == "extreme":
            x = g.extreme_rows(rows, cols, dtype, kinds=("offset", "spread", "small", "onehot", "constant"))
        else:
            x = g.normal((rows, cols), dtype)
        return nwt.Case([rows, cols], {"x": x, "w": g.normal((cols,), dtype)}, params={"eps": EPS})

    def reference(self, case, x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + case["eps"]) * w

    def kernel(self, case, x, w):
        return fusedops.rmsnorm(x, w, case["eps"])

    def floor_scales(self, case, inputs, douts):
        # dx = r * (g - xhat * mean(g * xhat)) is a difference of terms of size r * |dy * w| (0 for one column).
        # dw sums dy * xhat over the rows: where a column's terms cancel, its error is the order the
        # sum is taken in (the GPU's reduction tree, not the plain program's) times the terms' size,
        # not times the small sum (1 seed in 1000 at 6.8x the budget on an H100 without this).
        if douts is None:
            return {}
        x, w = inputs["x"], inputs["w"]
        r = torch.rsqrt((x * x).mean(-1, keepdim=True) + case["eps"])
        if not x.numel():
            return {"dx": 0.0, "dw": 0.0}
        return {"dx": (r * (douts["y"] * w).abs()).max(),
                "dw": (douts["y"] * x * r).abs().reshape(-1, x.shape[-1]).sum(0).max()}


class Attention(nwt.TorchCheck):
    """Two heads, up to 130 queries and 200 keys: key counts on and off the 64-key tiles, odd head
    dimensions, causal with seqlen_q != seqlen_k, every tiny shape."""

    op = "attention"
    dtypes = DTYPES
    families = ("aligned", "tail", "odd_head", "causal", "tiny")
    grads = ("q", "k", "v")

    def make_case(self, g, family, dtype):
        causal = family == "causal" or (family != "tiny" and g.bernoulli(0.25))
        if family == "tiny":
            sq, sk = g.sweep(3, 7)
            sq, sk, d = sq + 1, sk + 1, 16
        else:
            sq = g.randint(1, 130)
            sk = {"aligned": lambda: 64 * g.randint(1, 3), "tail": lambda: g.tail(64, 1, 200)}.get(
                family, lambda: g.randint(1, 200))()
            d = g.head_dim() if family != "odd_head" else g.choice(nwt.ODD_HEAD_DIMS)
        shape = (1, 2, sq, d), (1, 2, sk, d)
        return nwt.Case([2, sq, sk, d], {"q": g.normal(shape[0], dtype), "k": g.normal(shape[1], dtype),
                                         "v": g.normal(shape[1], dtype)}, params={"causal": causal})

    def reference(self, case, q, k, v):
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if case["causal"]:
            sq, sk = s.shape[-2:]
            mask = torch.ones(sq, sk, dtype=torch.bool, device=s.device).triu(1)
            s = s.masked_fill(mask, -math.inf)
        return torch.matmul(torch.softmax(s, -1), v)

    def kernel(self, case, q, k, v):
        return fusedops.attention(q, k, v, causal=case["causal"])

    def floor_scales(self, case, inputs, douts):
        # dq and dk sum p * (dp - delta) terms: differences of dp = do . v, which cancel exactly where a
        # query sees one key. Their floor scales with |dp| times the other side's size.
        if douts is None:
            return {}
        q, k, v, do = inputs["q"], inputs["k"], inputs["v"], douts["y"]
        dp = torch.matmul(do, v.transpose(-1, -2)).abs().max()
        scale = 1.0 / math.sqrt(q.shape[-1])
        return {"dq": dp * k.abs().max() * scale, "dk": dp * q.abs().max() * scale}


def checks():
    out = Softmax.both() + RMSNorm.both() + Attention.both()
    for c in out:
        if c.name == "rmsnorm.bwd":
            c.deterministic = False  # dw is summed over rows with atomics on the GPU
    return out


REPRO = "python3 fusedops_checks.py --check {check} --dtype {dtype} --seed {seed} --runs {runs}"

if __name__ == "__main__":
    sys.exit(nw.main(checks(), name="fusedops-checks %s (%s)" % (fusedops.__version__, fusedops.BACKEND),
                     device=nwt.device_info, repro=REPRO))
