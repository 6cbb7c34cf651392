"""The ops in torch, computed the way the GPU kernels compute them: float32
accumulation, key tiles of TILE for attention, one row per program for the
row ops. Runs on any device torch runs on."""
import math

import torch

TILE = 64  # keys per attention tile


def uninitialized(shape, dtype, device):
    """Memory the kernel has not written yet. torch.empty() gives whatever was there; this
    gives NaN, as torch's deterministic mode fills fresh memory, so that reading it shows."""
    return torch.full(shape, math.nan, dtype=dtype, device=device)


# ---- softmax ---------------------------------------------------------------------------------


def sum_cols(cols, dtype):
    """How many columns of a row the sum of the exponentials covers."""
    return cols


def softmax(x):
    if x.numel() == 0:
        return torch.empty_like(x)
    xf = x.float()
    m = xf.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of -inf gives 0/0: NaN, as torch
    e = torch.exp(xf - m)
    s = e[..., : sum_cols(x.shape[-1], x.dtype)].sum(-1, keepdim=True)
    return (e / s).to(x.dtype)


# ---- rmsnorm ---------------------------------------------------------------------------------


def rms_inverse(xf, eps):
    """1 / sqrt(mean(x^2) + eps) per row, in float32."""
    return torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


def reduce_dw(parts, dtype):
    """dw: the column sums of dy * xhat over every row (float32)."""
    return parts.sum(0)


class RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, use_triton):
        if use_triton:
            from . import _triton

            y, r = _triton.rmsnorm_fwd(x, w, eps)
        else:
            xf = x.float()
            r = rms_inverse(xf, eps)
            y = (xf * r * w.float()).to(x.dtype)
        ctx.save_for_backward(x, w, r)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, r = ctx.saved_tensors
        cols = x.shape[-1]
        xf, wf, dyf = x.float(), w.float(), dy.float()
        xhat = xf * r
        g = dyf * wf
        dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = reduce_dw((dyf * xhat).reshape(x.numel() // cols if cols else 0, cols), x.dtype)
        return dx.to(x.dtype), dw.to(w.dtype), None, None


# ---- attention -------------------------------------------------------------------------------


def _scores(q, k, scale, causal, k0):
    """Scores of the queries against keys k0.. of one tile, float32, with the causal mask."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        qi = torch.arange(q.shape[-2], device=q.device).view(-1, 1)
        ki = torch.arange(k0, k0 + k.shape[-2], device=q.device).view(1, -1)
        s = s.masked_fill(ki > qi, -math.inf)
    return s


def dv_accumulator(shape, dtype, device, tail):
    """The float32 accumulator of one key tile's dv."""
    return torch.zeros(shape, dtype=torch.float32, device=device)


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        scale = 1.0 / math.sqrt(q.shape[-1])
        qf = q.float()
        sk = k.shape[-2]
        m = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=torch.float32, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=torch.float32, device=q.device)
        for k0 in range(0, sk, TILE):
            kt, vt = k[..., k0:k0 + TILE, :].float(), v[..., k0:k0 + TILE, :].float()
            s = _scores(qf, kt, scale, causal, k0)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            p = torch.exp(s - safe)
            corr = torch.exp(torch.where(torch.isfinite(m), m - safe, torch.full_like(m, -math.inf)))
            l = l * corr + p.sum(-1, keepdim=True)
            acc = acc * corr + torch.matmul(p, vt)
            m = m_new
        o = acc / l
        lse = torch.where(torch.isfinite(m), m, torch.zeros_like(m)) + torch.log(l)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        causal = ctx.causal
        scale = 1.0 / math.sqrt(q.shape[-1])
        qf, dof = q.float(), do.float()
        sk = k.shape[-2]
        delta = (dof * o).sum(-1, keepdim=True)
        dq = torch.zeros_like(qf)
        dks, dvs = [], []
        for k0 in range(0, sk, TILE):
            kt, vt = k[..., k0:k0 + TILE, :].float(), v[..., k0:k0 + TILE, :].float()
            n = kt.shape[-2]
            p = torch.exp(_scores(qf, kt, scale, causal, k0) - lse)
            dv = dv_accumulator(vt.shape, q.dtype, q.device, n < TILE)
            dv += torch.matmul(p.transpose(-1, -2), dof)
            dp = torch.matmul(dof, vt.transpose(-1, -2))
            ds = p * (dp - delta)
            dq += torch.matmul(ds, kt) * scale
            dks.append(torch.matmul(ds.transpose(-1, -2), qf) * scale)
            dvs.append(dv)
        dk = torch.cat(dks, -2) if dks else torch.zeros_like(k, dtype=torch.float32)
        dv = torch.cat(dvs, -2) if dvs else torch.zeros_like(v, dtype=torch.float32)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None
