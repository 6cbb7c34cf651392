"""How a check is declared: a Check subclass (or check() from functions) and its Case."""
import re

from .dtypes import DTYPES

#: Protocol "name": 1 to 63 bytes of letters, digits and . _ - + :
NAME_RE = re.compile(r"^[A-Za-z0-9._+:-]{1,63}$")
#: Protocol "token": 1 to 63 bytes without control characters.
TOKEN_MAX = 63

# Caps of protocol v1 (daemon/caps.h).
CHECKS_MAX = 256
DTYPES_MAX = 8
FAMILIES_MAX = 32
TENSORS_MAX = 16
SHAPE_MAX = 8


def valid_name(s):
    return isinstance(s, str) and bool(NAME_RE.match(s))


def valid_token(s):
    return (
        isinstance(s, str)
        and 1 <= len(s.encode("utf-8")) <= TOKEN_MAX
        and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in s)
    )


def valid_shape(shape):
    return (
        isinstance(shape, (list, tuple))
        and len(shape) <= SHAPE_MAX
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    )


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Case:
    """One trial's inputs, derived from the seed by Check.make_case().

    shape:   the shape reported as the trial's "case.shape" (at most 8 counts;
             what a dashboard user reads: [rows, cols], [B, H, S, D], ...)
    inputs:  name -> value: lists of floats (flat, row-major) already rounded
             to their dtype, or any scalars the op takes
    outputs: name -> shape of each output tensor, in the order the tensors are
             reported (each gradient apart); the SDK hands the kernel one list
             per output, pre-filled with the poison NaN
    params:  name -> scalar parameters (eps, causal, ...)

    Set by the SDK before reference() runs: family, dtype, seed, index.

    A check may also fill, from make_case() or reference():
      exclude:     output name -> iterable of flat indices left out of the
                   comparison as non-smooth (a kink); they are counted
      floor_scale: output name -> the size of the terms the output is a
                   difference of, when that is larger than the output itself
                   (the budget's floor scales with it instead of max|ref|)

    case["x"] is case.inputs["x"], or case.params["x"] for a parameter.
    """

    def __init__(self, shape, inputs, outputs, params=None):
        self.shape = list(shape)
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)
        self.params = dict(params or {})
        self.exclude = {}
        self.floor_scale = {}
        self.family = None
        self.dtype = None
        self.seed = None
        self.index = None

    def __getitem__(self, key):
        if key in self.inputs:
            return self.inputs[key]
        return self.params[key]

    def __contains__(self, key):
        return key in self.inputs or key in self.params

    def __repr__(self):
        return "Case(family=%r, shape=%r, outputs=%r)" % (self.family, self.shape, self.outputs)


class Check:
    """One pass of one op, e.g. "rmsnorm.fwd". Subclass it and set:

    name           "op.pass" (a protocol name); op and pass_ default to its two halves
    dtypes         the dtypes it runs at ("f32", "f16", "bf16", "f64")
    families       the shape families, chosen by seed: family = seed % len(families)
    deterministic  False when repeats of a seed may legitimately differ (atomics)
    budget_factor  the factor on the plain program's error (2: the FlashAttention rule)
    floor_eps      the budget's floor in eps(dtype) at the tensor's scale (4)
    atol, rtol     a fixed tolerance instead (atol not None: plain() is not used)
    tail_width     last-dimension tile width, to flag a worst element in a tail tile

    and implement:

    make_case(rng, family, dtype) -> Case
        Derive the shape and data from rng alone (see Rng). Inputs stored in a
        dtype must already be rounded to it (rng.normals(n, dtype=dtype)).
    reference(case) -> {output: [float]}
        The float64 result (Python floats), from the stored inputs.
    plain(case, dtype) -> {output: [float]} or a list of such dicts
        A straightforward same-dtype program (round every step with
        round_value/round_list); several dicts for several reduction orders,
        the largest error counts.
    kernel(case, dtype, out)
        Call the library: write each output's elements into the lists of out
        (out["y"][i] = v), which hold the poison NaN until written. The SDK
        rounds what was written to dtype, as a store to a buffer of that dtype
        would. Raise FatalError if the device context is lost.
    """

    name = None
    op = None
    pass_ = None
    dtypes = ("f32",)
    families = ("default",)
    deterministic = True
    budget_factor = 2.0
    floor_eps = 4.0
    atol = None
    rtol = 0.0
    tail_width = 0

    def make_case(self, rng, family, dtype):
        raise NotImplementedError("%s.make_case" % type(self).__name__)

    def reference(self, case):
        raise NotImplementedError("%s.reference" % type(self).__name__)

    def plain(self, case, dtype):
        raise NotImplementedError("%s.plain" % type(self).__name__)

    def kernel(self, case, dtype, out):
        raise NotImplementedError("%s.kernel" % type(self).__name__)

    # The protocol's view of the declaration.
    def op_name(self):
        return self.op or (self.name.split(".", 1)[0] if self.name else None)

    def pass_name(self):
        if self.pass_:
            return self.pass_
        parts = (self.name or "").split(".", 1)
        return parts[1] if len(parts) == 2 else "fwd"

    def declaration(self):
        """The check's entry in the hello answer."""
        return {
            "check": self.name,
            "op": self.op_name(),
            "pass": self.pass_name(),
            "dtypes": list(self.dtypes),
            "deterministic": bool(self.deterministic),
            "families": list(self.families),
        }

    def validate(self):
        """Raises ValueError when the declaration breaks the protocol's rules."""
        who = "check %r" % (self.name,)
        if not valid_name(self.name):
            raise ValueError("%s: the name must be 1 to 63 of [A-Za-z0-9._+:-]" % who)
        for what, v in (("op", self.op_name()), ("pass", self.pass_name())):
            if not valid_name(v):
                raise ValueError("%s: bad %s %r" % (who, what, v))
        dts = list(self.dtypes)
        if not dts or len(dts) > DTYPES_MAX or len(set(dts)) != len(dts):
            raise ValueError("%s: dtypes must be 1 to %d distinct names" % (who, DTYPES_MAX))
        for d in dts:
            if d not in DTYPES:
                raise ValueError("%s: unknown dtype %r (known: %s)" % (who, d, ", ".join(DTYPES)))
        fams = list(self.families)
        if not fams or len(fams) > FAMILIES_MAX or len(set(fams)) != len(fams):
            raise ValueError("%s: families must be 1 to %d distinct names" % (who, FAMILIES_MAX))
        for f in fams:
            if not valid_name(f):
                raise ValueError("%s: bad family name %r" % (who, f))
        if self.atol is None and not (self.budget_factor >= 0 and self.floor_eps >= 0):
            raise ValueError("%s: budget_factor and floor_eps must be >= 0" % who)
        if self.atol is not None and not (self.atol >= 0 and self.rtol >= 0):
            raise ValueError("%s: atol and rtol must be >= 0" % who)


class _FunctionCheck(Check):
    def __init__(self, name, make_case, reference, kernel, plain=None, **attrs):
        self.name = name
        self._make_case = make_case
        self._reference = reference
        self._kernel = kernel
        self._plain = plain
        for k, v in attrs.items():
            if k == "pass":
                k = "pass_"
            if not hasattr(Check, k) or callable(getattr(Check, k)):
                raise TypeError("check(): unknown attribute %r" % k)
            setattr(self, k, v)

    def make_case(self, rng, family, dtype):
        return self._make_case(rng, family, dtype)

    def reference(self, case):
        return self._reference(case)

    def plain(self, case, dtype):
        if self._plain is None:
            raise NotImplementedError("check %r has no plain program" % self.name)
        return self._plain(case, dtype)

    def kernel(self, case, dtype, out):
        return self._kernel(case, dtype, out)


def check(name, make_case, reference, kernel, plain=None, **attrs):
    """A Check from functions: check("scale.fwd", make_case=..., reference=...,
    plain=..., kernel=..., dtypes=("f32",), families=("aligned", "tail"))."""
    c = _FunctionCheck(name, make_case, reference, kernel, plain, **attrs)
    c.validate()
    return c
