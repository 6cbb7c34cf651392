"""Triton kernels (GPU): the softmax forward and the rmsnorm forward, one row per
program, float32 inside. The column count the softmax sums over comes from
_torch.sum_cols(), shared with the torch code."""
import torch
import triton
import triton.language as tl

from . import _torch


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, x_stride, y_stride, cols, sum_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp(x - m)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(tl.where(offs < sum_cols, e, 0.0), axis=0)
    tl.store(y_ptr + row * y_stride + offs, (e / s).to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x):
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty_like(x2)
    if x2.shape[0] and cols:
        block = triton.next_power_of_2(cols)
        _softmax_kernel[(x2.shape[0],)](x2, y, x2.stride(0), y.stride(0), cols,
                                        _torch.sum_cols(cols, x.dtype), BLOCK=block,
                                        num_warps=4 if block <= 2048 else 8)
    return y.view(x.shape)


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, r_ptr, x_stride, y_stride, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    tl.store(r_ptr + row, r)
    tl.store(y_ptr + row * y_stride + offs, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_fwd(x, w, eps):
    """(y, r): the output and the float32 inverse rms of each row (for the backward)."""
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    w = w.contiguous()
    y = torch.empty_like(x2)
    r = torch.empty((x2.shape[0], 1), dtype=torch.float32, device=x.device)
    if x2.shape[0] and cols:
        _rmsnorm_kernel[(x2.shape[0],)](x2, w, y, r, x2.stride(0), y.stride(0), cols, eps,
                                        BLOCK=triton.next_power_of_2(cols))
    return y.view(x.shape), r.view(x.shape[:-1] + (1,))
