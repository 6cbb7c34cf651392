"""Per-tensor metrics of a kernel's output against the float64 reference.

The tolerance rule (PRODUCT.md, "The check contract"), the same as the C SDK's
kernels/sdk/metrics.c:

    ratio = max_abs(kernel - ref) / (factor * max_abs(plain - ref) + floor)
    floor = floor_eps * eps(dtype) * scale        (floor_eps = 4 by default)

where "plain" is a straightforward program in the same dtype (the largest error
over the reduction orders the check gives) and scale is max|ref| unless the
check names the size of the terms its output is a difference of. A check may
instead declare a fixed tolerance: ratio = max(|k - ref| / (atol + rtol*|ref|)).

Hard failures do not go through the ratio: an element still holding the poison
(never written), an element written outside the tensor (the output list grew:
the canary), or a NaN/Inf where the reference is finite (or of another class
than the reference's NaN/Inf) fails the tensor whatever its error. Elements the
check excludes as non-smooth are counted, never hidden, and a kink excuses a
value, not a NaN: the hard checks apply to them too. The errors (the kernel's,
the plain program's, max|ref|) are measured on the same elements: those the
kernel wrote, finite where the reference is finite, and not excluded.
"""
import math
import struct

from .dtypes import EPS, TINY, has_ulp, ordered_list

#: The poison every output element holds before the kernel runs: a quiet NaN
#: with a payload that arithmetic does not produce. Arithmetic on it (reading an
#: output that was never initialised) keeps the payload, and counts as unwritten.
POISON_BITS = 0x7FFDEAD00BADF00D
POISON = struct.unpack("<d", struct.pack("<Q", POISON_BITS))[0]
_POISON_BYTES = struct.pack("<Q", POISON_BITS)
_D = struct.Struct("<d")

#: Default floor of the budget, in units of eps(dtype) at the tensor's scale.
FLOOR_EPS = 4.0


def is_poison(v):
    """Whether v is the poison value (the same object, or a NaN with its bits)."""
    if v is POISON:
        return True
    return isinstance(v, float) and v != v and _D.pack(v) == _POISON_BYTES


def finite_or_none(x):
    """x when it is a finite number, else None (JSON has no NaN or infinity)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def tensor_result(name, *, ratio, max_abs, max_rel, max_ulp, nonfinite, ref_nonfinite, unwritten,
                  canary, excluded, worst, tail, mismatch, plain_max_abs, budget):
    """One tensor's answer (PROTOCOL.md "trial"), whichever SDK measured it: numbers that are not
    finite as None, and whether it failed."""
    return {
        "name": name,
        "ratio": finite_or_none(ratio),
        "max_abs": finite_or_none(max_abs),
        "max_rel": finite_or_none(max_rel),
        "max_ulp": max_ulp,
        "nonfinite": nonfinite,
        "ref_nonfinite": ref_nonfinite,
        "unwritten": unwritten,
        "canary": canary,
        "excluded": excluded,
        "worst": worst,
        "tail": tail,
        # Beyond version 1's list (the daemon stores unknown fields with the trial):
        "mismatch": mismatch,
        "plain_max_abs": finite_or_none(plain_max_abs),
        "budget": finite_or_none(budget),
        "failed": not (ratio <= 1.0) or mismatch > 0 or unwritten > 0 or canary > 0,
    }


def _same_class(a, b):
    if a != a or b != b:
        return a != a and b != b
    return a == b  # both infinite here


def unravel(i, shape):
    """Flat row-major index i as a multi-index of shape."""
    idx = []
    for d in reversed(shape):
        d = d if d > 0 else 1
        idx.append(i % d)
        i //= d
    return idx[::-1]


def compare(
    name,
    dtype,
    got,
    ref,
    plains=(),
    shape=None,
    factor=2.0,
    floor_eps=FLOOR_EPS,
    floor_scale=None,
    atol=None,
    rtol=0.0,
    unwritten=None,
    exclude=None,
    canary=0,
    tail_width=0,
):
    """Measures one output tensor. Returns a dict of protocol tensor fields.

    got:        the kernel's values (floats, already rounded to dtype)
    ref:        the float64 reference, same length
    plains:     lists of the plain same-dtype program's values (one per
                reduction order); the largest error counts. Empty with atol set.
    shape:      the tensor's shape, for the worst index (default: flat)
    unwritten:  per element, true where the output still held the poison
    exclude:    a set of flat indices left out as non-smooth (counted)
    canary:     elements written outside the tensor
    tail_width: last-dimension tile width; the worst element is "tail" when it
                lies in the last, partial tile

    The dict has: name, ratio, max_abs, max_rel, max_ulp, nonfinite,
    ref_nonfinite, unwritten, canary, excluded, worst, tail, and beyond the
    protocol's list mismatch, plain_max_abs, budget, failed. Numbers that are
    not finite are None (null on the wire).
    """
    n = len(ref)
    if len(got) != n:
        raise ValueError("tensor '%s': %d values for %d reference elements" % (name, len(got), n))
    shape = list(shape) if shape is not None else [n]
    fixed = atol is not None
    if not fixed and not plains:
        raise ValueError("tensor '%s': no plain program and no fixed atol" % name)
    for p in plains:
        if len(p) != n:
            raise ValueError("tensor '%s': plain program has %d values for %d" % (name, len(p), n))
    exclude = exclude or ()
    ulp = has_ulp(dtype)
    isfinite = math.isfinite

    n_unwritten = n_excluded = n_nonfinite = n_ref_nonfinite = n_mismatch = 0
    max_abs = max_rel = max_ref = plain_max = max_q = 0.0
    max_ulp = 0
    worst = hard = None
    if ulp:
        # Both sides as ordered integers once, rather than element by element.
        safe = [0.0 if (unwritten is not None and unwritten[i]) else v for i, v in enumerate(got)]
        ogot = ordered_list(safe, dtype)
        oref = ordered_list(ref, dtype)

    for i in range(n):
        if unwritten is not None and unwritten[i]:
            n_unwritten += 1
            if hard is None:
                hard = i
            continue
        k = got[i]
        r = ref[i]
        kfin = isfinite(k)
        rfin = isfinite(r)
        if not kfin:
            n_nonfinite += 1
        if not rfin:
            n_ref_nonfinite += 1
        if kfin != rfin or (not kfin and not _same_class(k, r)):
            n_mismatch += 1
            if hard is None:
                hard = i
            continue
        # A kink excuses a value, not a NaN: the hard checks above apply to excluded elements too.
        if i in exclude:
            n_excluded += 1
            continue
        if not rfin:
            continue
        a = abs(r)
        if a > max_ref:
            max_ref = a
        err = abs(k - r)
        # The plain program's error counts on the elements the kernel's does (as its floor's scale):
        # a budget made of errors the kernel is not measured on would excuse errors elsewhere.
        for p in plains:
            v = p[i]
            if isfinite(v):
                e = abs(v - r)
                if e > plain_max:
                    plain_max = e
        if r != 0.0:
            rel = err / a
            if rel > max_rel:
                max_rel = rel
        if ulp and err > 0.0:
            a_, b_ = ogot[i], oref[i]
            if a_ is not None and b_ is not None and abs(a_ - b_) > max_ulp:
                max_ulp = abs(a_ - b_)
        if fixed:
            if err > max_abs:
                max_abs = err
            tol = atol + rtol * a
            q = err / tol if tol > 0.0 else (math.inf if err > 0.0 else 0.0)
            if q > max_q:
                max_q = q
                worst = i
        elif err > max_abs:
            max_abs = err
            worst = i

    if fixed:
        budget = atol
        ratio = max_q
    else:
        scale = floor_scale if floor_scale is not None and floor_scale > 0 else max_ref
        budget = factor * plain_max + floor_eps * EPS[dtype] * scale
        if budget <= 0.0:
            budget = TINY[dtype]
        ratio = max_abs / budget

    pos = hard if hard is not None else worst
    idx = unravel(pos, shape) if pos is not None else None
    tail = False
    if idx and tail_width > 1 and shape:
        d = shape[-1]
        tail = idx[-1] >= d - d % tail_width
    return tensor_result(name, ratio=ratio, max_abs=max_abs, max_rel=max_rel,
                         max_ulp=max_ulp if ulp else None, nonfinite=n_nonfinite,
                         ref_nonfinite=n_ref_nonfinite, unwritten=n_unwritten, canary=canary,
                         excluded=n_excluded, worst=idx, tail=tail, mismatch=n_mismatch,
                         plain_max_abs=None if fixed else plain_max, budget=budget)
