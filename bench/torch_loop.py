#!/usr/bin/env python3
"""bench/torch_loop.py: the same checks written as plain PyTorch loops, for a
trials-per-second comparison with numwatch's C runner (bench/gpu-suite.sh).

Each trial does what a numwatch trial does: draw inputs from a seed, run the
kernel in the check's dtype, compute a float64 reference and the same-dtype
"plain" implementation, and reduce the errors to a verdict on the host. It
prints one line per check: "torch CHECK DTYPE TRIALS SECONDS TRIALS_PER_S".

usage: torch_loop.py [--trials N] [--checks softmax.fwd,attention.fwd]
"""
import argparse
import time

import torch
import torch.nn.functional as F

DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
DEV = "cuda"


def softmax_trial(seed, dtype):
    g = torch.Generator(device=DEV).manual_seed(seed)
    cols = [1024, 1025, 2047, 4097, 333, 64][seed % 6]
    rows = 1 + seed % 16
    x = torch.randn(rows, cols, generator=g, device=DEV, dtype=torch.float64) * 4
    xd = x.to(dtype)
    y = F.softmax(xd, dim=-1)
    ref = F.softmax(xd.double(), dim=-1)
    plain = (xd - xd.max(dim=-1, keepdim=True).values).exp()
    plain = plain / plain.sum(dim=-1, keepdim=True)
    err = (y.double() - ref).abs().max()
    budget = 2 * (plain.double() - ref).abs().max() + 4 * torch.finfo(dtype).eps
    bad = (~torch.isfinite(y)).sum()
    return bool(((err / budget) <= 1).item()) and int(bad.item()) == 0


def attention_trial(seed, dtype):
    g = torch.Generator(device=DEV).manual_seed(seed)
    d = [40, 59, 64, 80, 96, 111, 128][seed % 7]
    sq, sk, h = 64 + seed % 97, 96 + seed % 131, 2
    q = torch.randn(1, h, sq, d, generator=g, device=DEV, dtype=torch.float64)
    k = torch.randn(1, h, sk, d, generator=g, device=DEV, dtype=torch.float64)
    v = torch.randn(1, h, sk, d, generator=g, device=DEV, dtype=torch.float64)
    causal = bool(seed % 2)
    qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
    o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
    ref = F.scaled_dot_product_attention(qd.double(), kd.double(), vd.double(), is_causal=causal)
    s = (qd @ kd.transpose(-1, -2)) / d ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(sq, sk, device=DEV, dtype=torch.bool).triu(1), float("-inf"))
    plain = s.softmax(-1) @ vd
    err = (o.double() - ref).abs().nan_to_num(0).max()
    budget = 2 * (plain.double() - ref).abs().nan_to_num(0).max() + 4 * torch.finfo(dtype).eps
    return bool(((err / budget) <= 1).item())


CHECKS = {"softmax.fwd": softmax_trial, "attention.fwd": attention_trial}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--checks", default="softmax.fwd,attention.fwd")
    ap.add_argument("--dtypes", default="f32,bf16")
    a = ap.parse_args()
    for name in a.checks.split(","):
        for dt in a.dtypes.split(","):
            fn = CHECKS[name]
            for s in range(5):  # warm-up: module load, kernel selection
                fn(s, DT[dt])
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            passed = sum(fn(s, DT[dt]) for s in range(a.trials))
            torch.cuda.synchronize()
            sec = time.perf_counter() - t0
            print("torch %s %s %d %.3f %.1f passed=%d" % (name, dt, a.trials, sec, a.trials / sec, passed))


if __name__ == "__main__":
    main()
