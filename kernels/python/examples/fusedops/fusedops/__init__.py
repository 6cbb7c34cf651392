"""fusedops: a small PyTorch library of fused GPU ops, the example numwatch watches.

    import fusedops
    y = fusedops.softmax(x)                      # rows of the last dimension
    y = fusedops.rmsnorm(x, w, eps=1e-6)         # with its own backward
    o = fusedops.attention(q, k, v, causal=True) # (batch, heads, seq, dim), tiled, with its own backward

On a GPU with Triton the softmax and rmsnorm forwards are Triton kernels
(_triton.py); everywhere else, and for the backwards and attention, the
torch code of _torch.py computes what those kernels compute, tile by tile.
BACKEND says which.
"""
from . import _torch

try:  # Triton kernels where Triton and a GPU are present
    import torch as _t
    import triton as _triton_mod  # noqa: F401

    from . import _triton

    HAVE_TRITON = _t.cuda.is_available()
except Exception:  # pragma: no cover - no Triton, or no GPU
    _triton = None
    HAVE_TRITON = False

__version__ = "0.1.0"
BACKEND = "triton" if HAVE_TRITON else "torch"


def _on_triton(x):
    """Whether x goes to the Triton kernels: a CUDA tensor with elements (an empty one has no rows
    for a grid, and reshaping it by rows is ambiguous: the torch path handles it)."""
    return HAVE_TRITON and _triton is not None and x.is_cuda and x.numel() > 0


def softmax(x):
    """Softmax over the last dimension, in x's dtype (float32 inside)."""
    if _on_triton(x):
        return _triton.softmax(x)
    return _torch.softmax(x)


def rmsnorm(x, w, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * w over the last dimension; differentiable in x and w."""
    return _torch.RMSNorm.apply(x, w, eps, _on_triton(x))


def attention(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d)) v, tiled over keys (flash-style); differentiable in q, k and v."""
    return _torch.Attention.apply(q, k, v, causal)
