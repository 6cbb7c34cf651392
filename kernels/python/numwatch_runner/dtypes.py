"""Dtypes: names, machine constants, and rounding to a dtype on the host.

Values are Python floats (IEEE binary64) everywhere in the SDK. A tensor "of
dtype f16" is a list of floats that are all representable in f16; rounding a
float to a dtype is what storing it into a buffer of that dtype does (round to
nearest, ties to even, overflow to infinity, NaN stays NaN).

Rounding the exact float64 result of one +, -, *, / or sqrt of dtype values to
the dtype gives the dtype's own correctly rounded result (binary64 has more than
2p + 2 bits for every p here), so `round_value(a * b, "f32")` is exactly what a
float32 multiply returns. That is how plain same-dtype programs are emulated.
"""
import math
import struct

#: Every dtype name the SDK knows, in the order the docs list them.
DTYPES = ("f32", "f16", "bf16", "f64")

#: Machine epsilon: the spacing of values just above 1.
EPS = {"f64": 2.0**-52, "f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}
#: Smallest positive normal value.
TINY = {"f64": 2.0**-1022, "f32": 2.0**-126, "f16": 2.0**-14, "bf16": 2.0**-126}
#: Largest finite value.
MAX = {
    "f64": 1.7976931348623157e308,
    "f32": (2.0 - 2.0**-23) * 2.0**127,
    "f16": 65504.0,
    "bf16": (2.0 - 2.0**-7) * 2.0**127,
}
# Significant bits and the exponent of the smallest subnormal, for the exact rounding below.
_PRECISION = {"f64": 53, "f32": 24, "f16": 11, "bf16": 8}
_MIN_SUB_EXP = {"f64": -1074, "f32": -149, "f16": -24, "bf16": -133}

_INF = math.inf
_F = struct.Struct("<f")
_E = struct.Struct("<e")


def check_dtype(dtype):
    """Raises ValueError unless dtype is one of DTYPES."""
    if dtype not in EPS:
        raise ValueError("unknown dtype %r (known: %s)" % (dtype, ", ".join(DTYPES)))


def round_exact(x, dtype):
    """x rounded to dtype by arithmetic alone (frexp/ldexp/round), for any dtype.

    Slower than round_value(); it is the definition the fast paths are tested
    against, and the fallback where they cannot decide.
    """
    x = float(x)
    if x != x or x == 0.0 or x in (_INF, -_INF) or dtype == "f64":
        return x
    _, e = math.frexp(x)  # x = m * 2**e with 0.5 <= |m| < 1
    q = max(e - _PRECISION[dtype], _MIN_SUB_EXP[dtype])
    r = round(math.ldexp(x, -q))  # Python rounds floats half to even, exactly
    v = math.ldexp(r, q)
    if abs(v) > MAX[dtype]:
        return math.copysign(_INF, x)
    return math.copysign(v, x) if v == 0.0 else v


def _f32(x):
    try:
        return _F.unpack(_F.pack(x))[0]
    except OverflowError:  # struct refuses values that round to infinity
        return math.copysign(_INF, x)


def _f16(x):
    try:
        return _E.unpack(_E.pack(x))[0]
    except OverflowError:
        return math.copysign(_INF, x)


def round_value(x, dtype):
    """One value rounded to dtype (round to nearest even)."""
    if dtype == "f32":
        return _f32(x)
    if dtype == "f16":
        return _f16(x)
    if dtype == "bf16":
        return round_exact(x, "bf16")
    if dtype == "f64":
        return float(x)
    check_dtype(dtype)
    return float(x)


def _round_bf16_list(xs):
    n = len(xs)
    try:
        bits = struct.unpack("<%dI" % n, struct.pack("<%df" % n, *xs))
    except OverflowError:
        return [round_exact(x, "bf16") for x in xs]
    # Round the float32 bits to their top 16 (nearest even). Going through float32
    # first rounds twice; that differs from one rounding only where the first step
    # landed exactly on a bf16 midpoint, so those few are redone exactly.
    top = [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16 for b in bits]
    out = list(struct.unpack("<%df" % n, struct.pack("<%dI" % n, *top)))
    for i, b in enumerate(bits):
        if b & 0xFFFF == 0x8000:
            out[i] = round_exact(xs[i], "bf16")
    return out


def round_list(xs, dtype):
    """A new list: every value of xs rounded to dtype (fast for long lists)."""
    n = len(xs)
    if n == 0 or dtype == "f64":
        return [float(x) for x in xs]
    if dtype == "f32":
        try:
            return list(struct.unpack("<%df" % n, struct.pack("<%df" % n, *xs)))
        except OverflowError:
            return [_f32(x) for x in xs]
    if dtype == "f16":
        try:
            return list(struct.unpack("<%de" % n, struct.pack("<%de" % n, *xs)))
        except OverflowError:
            return [_f16(x) for x in xs]
    if dtype == "bf16":
        return _round_bf16_list([float(x) for x in xs])
    check_dtype(dtype)
    return [float(x) for x in xs]


def _ordered(x, dtype):
    """x's bits as an integer that orders like the value (for ULP distances)."""
    if dtype == "f32":
        (i,) = struct.unpack("<i", _F.pack(x))
        return -(i & 0x7FFFFFFF) if i < 0 else i
    (i,) = struct.unpack("<q", struct.pack("<d", x))
    return -(i & 0x7FFFFFFFFFFFFFFF) if i < 0 else i


def ordered_list(xs, dtype):
    """For f32/f64: each value rounded to dtype as an integer that orders like
    the value (ULP distances are differences), None where not finite."""
    xs = round_list(xs, dtype)
    n = len(xs)
    if dtype == "f32":
        ints = struct.unpack("<%di" % n, struct.pack("<%df" % n, *xs))
        mask = 0x7FFFFFFF
    else:
        ints = struct.unpack("<%dq" % n, struct.pack("<%dd" % n, *xs))
        mask = 0x7FFFFFFFFFFFFFFF
    isfinite = math.isfinite
    return [(-(i & mask) if i < 0 else i) if isfinite(x) else None for i, x in zip(ints, xs)]


def has_ulp(dtype):
    """Whether ulp_distance() is defined for dtype (f32 and f64)."""
    return dtype in ("f32", "f64")


def ulp_distance(a, b, dtype):
    """Units in the last place between a and b, both rounded to dtype (f32, f64).

    Returns None when either is not finite in that dtype.
    """
    a = round_value(a, dtype)
    b = round_value(b, dtype)
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    return abs(_ordered(a, dtype) - _ordered(b, dtype))
