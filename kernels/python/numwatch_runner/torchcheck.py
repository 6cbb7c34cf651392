"""numwatch_runner.torchcheck: checks on torch tensors, run on the runner's device.

    import torch
    import numwatch_runner as nw
    from numwatch_runner import torchcheck as nwt

    class RMSNorm(nwt.TorchCheck):
        op = "rmsnorm"                       # rmsnorm.fwd, and rmsnorm.bwd with grads
        dtypes = ("f32", "f16", "bf16")
        families = ("aligned", "tail", "threshold")
        grads = ("x", "w")                   # the bwd check judges dx and dw, each apart
        tail_width = 8

        def make_case(self, g, family, dtype):
            cols = {"aligned": g.aligned(8, 8, 4096), "tail": g.tail(8, 9, 4095),
                    "threshold": g.around((1024, 2048, 4096))}[family]
            return nwt.Case([4, cols], {"x": g.normal((4, cols), dtype), "w": g.normal((cols,), dtype)},
                            params={"eps": 1e-6})

        def reference(self, case, x, w):     # float64 inputs; also the plain program, in the dtype
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + case["eps"]) * w

        def kernel(self, case, x, w):        # the library, on the dtype's inputs
            return mylib.rmsnorm(x, w, case["eps"])

    if __name__ == "__main__":
        sys.exit(nw.main(RMSNorm.both(), name="mylib-runner", device=nwt.device_info))

What the SDK does per trial (check, dtype, seed), all of it on the runner's
device (nwt.DEVICE: "cuda" when CUDA_VISIBLE_DEVICES names a GPU torch can
use, else "cpu"; NUMWATCH_TORCH_DEVICE overrides):

- inputs from the seed: a CPU torch.Generator seeded from (check, dtype,
  seed), so that a seed means the same data on any machine; make_case() draws
  float64 values and rounds them to the dtype (g.normal(shape, dtype)); the
  case digest hashes them; then they move to the device;
- the reference in float64 from the inputs as rounded to the dtype (every
  floating input upcast), the plain program (plain(), by default the
  reference itself run on the dtype's inputs: the FlashAttention rule) and
  the kernel, `repeats` times;
- a bwd check runs each program forward and backward through autograd with
  one seeded output gradient (drawn after the inputs, rounded to the dtype,
  float64 for the reference) and judges each gradient d<input> apart;
- per output tensor, on the device, the metrics of metrics.compare() (the
  same meaning as the C SDK's): ratio, max_abs, max_rel, max_ulp, nonfinite
  and ref_nonfinite, mismatch, unwritten and canary (kernels that write into
  case.buffer()), excluded (case.exclude()), worst and tail, plus a digest.

On a GPU the metrics and digests replay a CUDA graph per padded shape
(_Graphs; GRAPHS), with the same answers, and the next two seeds' host work
is done by two helper processes while the trial runs, each writing its case
into memory it shares with the runner, from which it goes up with one copy
(_Ahead, _Helper, _SharedSlot; PREPARE_AHEAD, AHEAD_DEPTH), under a contract
(a check's case depends only on the seed, the check's attributes and its
class's, and what trials do not change), sampled against the in-line
preparation; worker threads instead (_Workers) are opt-in.

Standard library and torch only (torch 1.13 on the CPU, torch 2.x with
Triton on the GPU).
"""
import contextlib
import hashlib
import math
import os
import pickle
import platform
import statistics
import struct
import sys
import threading
import time

import torch

from .check import Check, valid_shape, valid_token, TENSORS_MAX
from .dtypes import EPS, TINY, has_ulp
from .metrics import FLOOR_EPS, finite_or_none, tensor_result, unravel
from .rng import stream_key
from .runner import FatalError, TrialError

#: Version of the case derivation of this module (the generator's draws and the
#: helpers' choices): bump it when they change, as rng.GEN_VERSION.
GEN_VERSION = 1

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}
#: The poison a case.buffer() holds before the kernel runs: a quiet NaN per
#: dtype with a payload arithmetic does not produce (metrics.POISON for f64).
POISON_BITS = {torch.float16: 0x7EAD, torch.bfloat16: 0x7FED, torch.float32: 0x7FDEAD01,
               torch.float64: 0x7FFDEAD00BADF00D}
#: Guard elements on each side of a case.buffer(): a write there is a canary.
GUARD = 64
_D = struct.Struct("<d")
_Q = struct.Struct("<Q")

#: Shape families of PRODUCT.md, as sizes.
THRESHOLDS = (1024, 2048, 4096)
TILES = (64, 128)
ODD_HEAD_DIMS = (40, 59, 80, 96, 111)


def _default_device():
    forced = os.environ.get("NUMWATCH_TORCH_DEVICE")
    if forced:
        return forced
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return "cpu"  # a host slot
    return "cuda" if torch.cuda.is_available() else "cpu"


#: The device checks run on.
DEVICE = _default_device()


def device_info():
    """The hello's "device" for DEVICE. Raises when CUDA was asked for and is
    not usable, so that the runner's hello says why."""
    if DEVICE.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("torch %s sees no CUDA device (CUDA_VISIBLE_DEVICES=%r)" % (
                torch.__version__, os.environ.get("CUDA_VISIBLE_DEVICES")))
        p = torch.cuda.get_device_properties(torch.device(DEVICE))
        info = {"backend": "cuda", "name": p.name, "cc": "%d.%d" % (p.major, p.minor),
                "toolkit": torch.version.cuda or "", "torch": torch.__version__}
        try:
            import triton

            info["triton"] = triton.__version__
        except Exception:
            pass
        return info
    return {"backend": "host", "name": "%s (torch %s)" % (platform.machine() or "cpu", torch.__version__),
            "torch": torch.__version__}


_FATAL_MARKS = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
                "CUBLAS_STATUS_EXECUTION_FAILED", "misaligned address")


def _fatal(e):
    """Whether an exception means the device context is gone (a sticky CUDA error)."""
    return isinstance(e, RuntimeError) and any(m in str(e) for m in _FATAL_MARKS)


def _out_of_memory(e):
    """Whether an exception is the device's memory running out (not sticky: the context lives on)."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or (isinstance(e, RuntimeError) and "out of memory" in str(e))


def _capture_error(e):
    """Whether an exception is a CUDA graph capture's own (an operation a capture does not allow,
    a capture invalidated): it ends the capture, not the device context."""
    return "captur" in str(e).lower()


# ---- the generator ------------------------------------------------------------------------------


class Gen:
    """Seeded draws for one trial, from a CPU torch.Generator.

    Every value comes from torch.rand in float64 with exact arithmetic after it
    (normal() sums four uniforms, as the list SDK's Rng), so a case depends on
    the seed alone, not on the machine. Tensors are made on the CPU; the SDK
    moves them to the device.

      seed, index, family, dtype: of the trial (index = seed // len(families))
    """

    def __init__(self, check, dtype, seed, index=0, family=None):
        self.g = torch.Generator(device="cpu")
        self.g.manual_seed(stream_key(check, dtype, seed) & ((1 << 63) - 1))
        self.seed, self.index, self.family, self.dtype = seed, index, family, dtype

    #: The 0-dimensional tensor each scalar is drawn into (made by the first), and a numpy view of
    #: it: the value read without a dispatch (.item() is one more torch call a draw).
    _one = _one_np = None

    def get_state(self):
        """The generator's state (a byte tensor)."""
        return self.g.get_state()

    def set_state(self, state):
        self.g.set_state(state)

    def _rand(self, shape):
        return torch.rand(tuple(shape), generator=self.g, dtype=torch.float64)

    # scalars
    def uniform(self, lo=0.0, hi=1.0):
        # torch.rand is uniform_(0, 1) of a new tensor: the same draw into one tensor kept
        if self._one is None:
            self._one = torch.empty((), dtype=torch.float64)
            self._one_np = self._one.numpy()
        self._one.uniform_(0.0, 1.0, generator=self.g)
        return lo + (hi - lo) * float(self._one_np)

    def randint(self, lo, hi):
        """Uniform integer in [lo, hi], both included."""
        span = hi - lo + 1
        if span <= 0:
            raise ValueError("randint(%d, %d): empty range" % (lo, hi))
        return lo + min(int(self.uniform() * span), span - 1)

    def choice(self, seq):
        seq = list(seq)
        return seq[self.randint(0, len(seq) - 1)]

    def bernoulli(self, p):
        return self.uniform() < p

    # tensors
    @staticmethod
    def _cast(t, dtype):
        if dtype is None:
            return t
        return t.to(TORCH_DTYPES.get(dtype, dtype))

    def uniforms(self, shape, lo=0.0, hi=1.0, dtype=None):
        """Uniform in [lo, hi), rounded to dtype (a name or a torch dtype; None: float64)."""
        return self._cast(_affine(lo, hi - lo, self._rand(shape)), dtype)

    def normal(self, shape, dtype=None, mean=0.0, std=1.0):
        """Approximately normal (four uniforms summed and rescaled: |z| < 3.47), rounded to dtype."""
        u = self._rand((4,) + tuple(shape))
        # (((u0 + u1) + u2) + u3 - 2) * sqrt(3), in place in u0: the same roundings, no new tensors.
        z = u[0].add_(u[1]).add_(u[2]).add_(u[3]).sub_(2.0).mul_(1.7320508075688772)
        return self._cast(_affine(mean, std, z), dtype)

    def integers(self, shape, lo, hi):
        """int64 uniform in [lo, hi]."""
        span = hi - lo + 1
        return lo + torch.clamp((self._rand(shape) * span).to(torch.int64), max=span - 1)

    # sizes: the shape families of PRODUCT.md
    def aligned(self, width, lo, hi):
        """A multiple of width in [lo, hi]."""
        return width * self.randint(max(1, -(-lo // width)), max(1, hi // width))

    def tail(self, width, lo, hi):
        """A size in [lo, hi] that is not a multiple of width (a partial last tile)."""
        for _ in range(64):
            n = self.randint(lo, hi)
            if n % width:
                return n
        return (hi // width) * width - 1

    def around(self, points=THRESHOLDS, below=1, above=1):
        """One of p - below .. p + above for p in points: both sides of a dispatch threshold or a tile size."""
        return self.choice(points) + self.randint(-below, above)

    def head_dim(self, extra=(32, 64, 128)):
        """A head dimension: odd ones (40, 59, 80, 96, 111) as often as the usual ones."""
        return self.choice(ODD_HEAD_DIMS if self.bernoulli(0.5) else extra)

    def sweep(self, *limits):
        """Consecutive seeds of a family (index 0, 1, 2, ...) sweep every size tuple up to
        limits, 0 included: sweep(4, 16) gives (0, 0), (0, 1), ... (4, 16), then again."""
        out, i = [], self.index
        for lim in reversed(limits):
            out.append(i % (lim + 1))
            i //= lim + 1
        return tuple(reversed(out))

    def extreme_rows(self, rows, cols, dtype, kinds=("offset", "spread", "small", "zeros", "onehot",
                                                     "constant", "neginf")):
        """A (rows, cols) tensor whose rows are each of a kind drawn from kinds: a large offset, a
        large spread, values near sqrt(eps), zeros, one-hot, constant, or -inf but for one element
        (a fully masked row of attention scores has all of them -inf: add that yourself)."""
        x = self.normal((rows, cols))
        # The rows' draws first, in the order of the rows (scalars only: the generator's stream as
        # when each row was changed as it was drawn), then each kind's rows changed together: the
        # same arithmetic on each element (x + c, x * c in float64, or a value set), in a few torch
        # calls instead of one or two a row.
        add, mul, small, zero, put, fill = ([], []), ([], []), [], [], ([], [], []), ([], [])
        for r in range(rows):
            k = self.choice(kinds)
            if k == "offset":
                add[0].append(r)
                add[1].append(self.choice((-1.0, 1.0)) * self.uniform(1e2, 1e4))
            elif k == "spread":
                mul[0].append(r)
                mul[1].append(self.uniform(20.0, 80.0))
            elif k == "small":
                small.append(r)
            elif k == "zeros":
                zero.append(r)
            elif k == "onehot":
                zero.append(r)
                if cols:
                    put[0].append(r)
                    put[2].append(self.uniform(1.0, 10.0))  # (drawn first: x[r, randint()] = uniform())
                    put[1].append(self.randint(0, cols - 1))
            elif k == "constant":
                fill[0].append(r)
                fill[1].append(self.uniform(-3.0, 3.0))
            elif k == "neginf":
                fill[0].append(r)
                fill[1].append(-math.inf)
                if cols:
                    put[0].append(r)
                    put[2].append(self.uniform(-1.0, 1.0))  # (drawn first: x[r, randint()] = uniform())
                    put[1].append(self.randint(0, cols - 1))
        if cols:
            f64 = torch.float64
            for (idx, c), op in ((add, torch.add), (mul, torch.mul)):
                if idx:
                    i = torch.tensor(idx)
                    x[i] = op(x[i], torch.tensor(c, dtype=f64).view(-1, 1))
            if small:
                i = torch.tensor(small)
                x[i] = x[i] * math.sqrt(EPS[self.dtype if self.dtype in EPS else "f32"])
            if zero:
                x[torch.tensor(zero)] = 0.0
            if fill[0]:
                x[torch.tensor(fill[0])] = torch.tensor(fill[1], dtype=f64).view(-1, 1)
            if put[0]:
                x[torch.tensor(put[0]), torch.tensor(put[1])] = torch.tensor(put[2], dtype=f64)
        return self._cast(x, dtype)


class _StoredGen(Gen):
    """The Gen of a case made elsewhere (a helper process), as make_case left it: its generator is
    made from the stored state when a draw needs it (a forward check's never does, and a backward
    check's output gradients drawn with the case only move the state)."""

    def __init__(self, state, seed, index, family, dtype):
        self._state, self._g = state, None
        self.seed, self.index, self.family, self.dtype = seed, index, family, dtype

    @property
    def g(self):
        if self._g is None:
            self._g = torch.Generator(device="cpu")
            self._g.set_state(self._state)
        return self._g

    def get_state(self):
        return self._state if self._g is None else self._g.get_state()

    def set_state(self, state):
        if self._g is None:
            self._state = state
        else:
            self._g.set_state(state)


def _affine(lo, scale, t):
    """lo + scale * t, in place in the float64 tensor t where lo and scale are numbers, without the
    steps that change nothing: a multiplication by 1, and an addition of 0 where scale * t holds no
    -0.0 (scale > 0, and t holds no -0.0: its draws never do), the one value 0 + x changes."""
    if type(lo) not in (int, float) or type(scale) not in (int, float):
        return lo + scale * t
    if scale != 1:
        t.mul_(scale)
    if lo != 0 or not scale > 0:
        t.add_(lo)
    return t


# ---- views and marks ----------------------------------------------------------------------------


def noncontiguous(t):
    """The same values in a non-contiguous view (every other element of a larger buffer)."""
    if t.dim() == 0 or t.numel() == 0:
        return t
    big = torch.empty(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype, device=t.device)
    big[..., ::2] = t
    return big[..., ::2]


def offset_view(t, offset=1):
    """The same values at a storage offset of 'offset' elements: misaligned for vector loads."""
    flat = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)
    v = flat[offset:].view(t.shape)
    v.copy_(t)
    return v


def transposed(t):
    """The same values in a view whose last two dimensions are stored transposed."""
    if t.dim() < 2:
        return t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


VIEWS = {"noncontiguous": noncontiguous, "offset": offset_view, "transposed": transposed}


def near(values, points=(0.0,), atol=0.0):
    """A boolean mask of the elements of values within atol of any of points: the inputs of a
    kink (relu at 0, a comparison's threshold). For case.exclude()."""
    v = values.double()
    mask = torch.zeros(v.shape, dtype=torch.bool, device=v.device)
    for p in points:
        mask |= (v - p).abs() <= atol
    return mask


def near_integer(values, atol):
    """A boolean mask of the elements within atol of an integer: sampling positions on a pixel
    boundary, where bilinear interpolation has a kink. For case.exclude()."""
    v = values.double()
    return (v - v.round()).abs() <= atol


# ---- the case -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _one_thread():
    """Torch's CPU operations on one thread of this thread's (the OpenMP setting is the calling
    thread's): a case is made so (TorchCheck._prepare), in line, on a worker or in a helper, so
    that a seed's case does not depend on how many cores a machine has (a CPU reduction's order
    does), and so that its small operations do not wake a team of threads on cores the helper
    processes and the trial's thread are using (a team waits for its slowest member: a
    millisecond where one thread takes microseconds)."""
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


class Case:
    """One trial's inputs, made by TorchCheck.make_case().

    shape:   the trial's "case.shape" (at most 8 counts): what a dashboard user reads
    inputs:  name -> CPU tensor (floating ones already in their dtype, as the
             kernel takes them), or any value the programs take
    params:  name -> scalar parameters (eps, causal, ...)
    views:   input name -> "noncontiguous", "offset" or "transposed": the kernel
             gets that input in such a view (the reference and plain programs
             do not care)

    Set by the SDK: family, dtype, seed, index, device. A check may call
    exclude() and set floor_scale[output] (as in the list SDK), and a kernel
    that writes into given buffers takes them from buffer().
    case["x"] is inputs["x"] or params["x"].
    """

    def __init__(self, shape, inputs, params=None, views=None):
        self.shape = list(shape)
        self.inputs = dict(inputs)
        self.params = dict(params or {})
        self.views = dict(views or {})
        self.floor_scale = {}
        self.excluded = {}
        self.family = self.dtype = self.seed = self.index = None
        self.device = DEVICE
        self._buffers = {}
        self._loaded = False
        self._dev = {}  # input name -> the input on the device (one copy per trial)
        self._dev64 = {}  # input name -> the same in float64 (the reference's, the floor scales')
        self._dev_douts = {}
        self._dev_douts64 = {}
        self._dev_kernel = {}  # input name -> the kernel's own copy of it, uploaded with the image (_load)
        self._image = None  # _image(): the bytes of the trial's upload, written ahead of the trial
        self._dev_image = None  # _image(on_device): the upload itself, done ahead (image, event or None)
        self._placed = None  # _image(on_device): the inputs placed for the trial's stream too (_place)
        self._douts_dev = None  # (_load) the output gradients drawn with the case, on the device
        self._slot = None  # the _SharedSlot that _image lies in (a case from a helper process)
        self._digest = None  # case_digest(), when hashed ahead of the trial
        self._douts_ahead = None  # _draw_douts_ahead()
        self.gen = None

    def __getitem__(self, key):
        if key in self.inputs:
            return self.inputs[key]
        return self.params[key]

    def __contains__(self, key):
        return key in self.inputs or key in self.params

    def exclude(self, output, mask):
        """Leaves the elements of 'output' where mask is true out of the comparison (a kink):
        they are counted as excluded, never hidden. mask: a boolean tensor of the output's
        number of elements (any shape)."""
        m = mask.reshape(-1).to(torch.bool)
        self.excluded[output] = m if output not in self.excluded else self.excluded[output] | m

    def buffer(self, name, shape, dtype=None):
        """An output buffer on the device for a kernel that writes into given memory: every
        element holds the poison NaN, and GUARD poisoned elements lie on each side. An element
        the kernel leaves alone is 'unwritten', a write beside it a 'canary'. Return it (or
        write into it and return it) from kernel()."""
        td = TORCH_DTYPES.get(dtype, dtype) if dtype is not None else TORCH_DTYPES[self.dtype]
        n = 1
        for d in shape:
            n *= int(d)
        store = torch.empty(n + 2 * GUARD, dtype=td, device=self.device)
        store.view(_INT_VIEW[td]).fill_(_signed(POISON_BITS[td], td))
        view = store[GUARD:GUARD + n].view(tuple(shape))
        self._buffers[name] = (store, view, n)
        return view

    def __repr__(self):
        return "Case(family=%r, shape=%r)" % (self.family, self.shape)


def _signed(bits, td):
    width = {torch.int16: 16, torch.int32: 32, torch.int64: 64}[_INT_VIEW[td]]
    return bits - (1 << width) if bits >= 1 << (width - 1) else bits


def case_digest(case):
    """BLAKE2b (16 hex digits) of the generated case: shape, every input's name, dtype,
    shape and bytes (other values by repr), the parameters and the views."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr(list(case.shape)).encode("utf-8"))
    for name in sorted(case.inputs):
        v = case.inputs[name]
        h.update(b"\0i" + name.encode("utf-8") + b"\0")
        if isinstance(v, torch.Tensor):
            t = v.detach() if v.requires_grad else v  # (each call a dispatch: only where needed)
            t = t.contiguous() if not t.is_contiguous() else t
            t = t.cpu() if not t.is_cpu else t
            h.update(("%s%s" % (t.dtype, tuple(t.shape))).encode("utf-8"))
            if t.dtype == torch.bfloat16:
                t = t.view(torch.int16)
            h.update(t.numpy().data if t.numel() else b"")  # the bytes, without a copy
        else:
            h.update(repr(v).encode("utf-8"))
    for name in sorted(case.params):
        h.update(b"\0p" + name.encode("utf-8") + b"\0" + repr(case.params[name]).encode("utf-8"))
    for name in sorted(case.views):
        h.update(b"\0v" + name.encode("utf-8") + b"\0" + str(case.views[name]).encode("utf-8"))
    return h.hexdigest()


#: The thread that hashes a case's inputs beside the trial on a GPU (made when first needed).
_HASHER = []


def _case_digest_later(case, gpu):
    """case_digest(case) as a function that returns it. On a GPU the trial's time is the host
    thread's, and hashing the inputs' bytes takes a tenth of it for the larger cases: another
    thread hashes them meanwhile (BLAKE2b lets go of the GIL), reading the CPU tensors that only
    go to the device as copies. On the CPU it is hashed at once: the programs may get the inputs
    themselves there, and the CPU has no time to spare."""
    if not gpu:
        d = case_digest(case)
        return lambda: d
    if not _HASHER:
        import concurrent.futures

        _HASHER.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="numwatch-case-digest"))
    return _HASHER[0].submit(case_digest, case).result


# ---- metrics ------------------------------------------------------------------------------------

#: Whether a trial works on its tensors together: all its outputs measured at once, as rows
#: padded to the longest, and the inputs of a dtype moved to the device as one (the fewest device
#: operations: what a GPU's trial time is made of), or apart: the outputs of each size measured
#: without padding, each input as it is (the fewest elements and calls: what the CPU's is made
#: of). None: together on a GPU, apart on the CPU.
BATCH_ALL = None

#: Device-to-host reads of the SDK (each one a synchronisation on a GPU), counted so that a test
#: can hold a trial to its one read: read by tests, never reset by the SDK.
HOST_READS = [0]
_MASK64 = (1 << 64) - 1
_INF = math.inf
#: The smallest float64 magnitude that rounds to an infinite float32 (2^128 - 2^103, halfway
#: between FLT_MAX and 2^128): a reference at or past it has no float32 ULP.
_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103


def _host(t):
    """The values of an int64 tensor as a list of Python ints: the SDK's one way back from the
    device (a trial calls it once, for all its numbers together)."""
    HOST_READS[0] += 1
    t0 = _now()
    out = t.tolist()
    TIMES["read"] += _now() - t0
    return out


def _upload(t, device):
    """t (a CPU tensor) on device, with its strides. To a GPU through page-locked memory, without
    waiting: a copy from pageable memory would synchronise the host with the device."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _together(device):
    """Whether a trial on device works on its tensors together (BATCH_ALL)."""
    return torch.device(device).type == "cuda" if BATCH_ALL is None else BATCH_ALL


#: Each section of a trial's upload (_image) starts at a multiple of this many bytes, as a fresh
#: allocation of torch's CUDA caching allocator does: every tensor has the alignment it had when
#: each section was a tensor of its own (a reduction's vectorized loads, and so its order of
#: summation, and a Triton kernel's specialisation depend on it).
_SECTION_ALIGN = 512


def _image_layout(groups):
    """Where the CPU tensors of groups [(tensors, also64), ...] (each group of one dtype) lie in one
    byte image: each group's tensors end to end in its dtype, then, when also64, again in float64.
    Returns the sections [(offset, dtype, tensors, group, converted), ...] (converted: the float64
    copy of that group's section) and the image's bytes."""
    sections, at = [], 0
    for j, (ts, also64) in enumerate(groups):
        n = sum(t.numel() for t in ts)
        for dtype, conv in ((ts[0].dtype, False), (torch.float64, True))[:2 if also64 else 1]:
            sections.append((at, dtype, ts, j, conv))
            at += -(-n * _element_size(dtype) // _SECTION_ALIGN) * _SECTION_ALIGN
    return sections, at


_SIZES = {}


def _element_size(dtype):
    n = _SIZES.get(dtype)
    if n is None:
        n = _SIZES[dtype] = torch.empty((), dtype=dtype).element_size()
    return n


def _section(buf, off, dtype, ts):
    """Section (off, dtype) of the byte tensor buf as a 1-dimensional tensor of the elements of ts."""
    return buf[off:off + sum(t.numel() for t in ts) * _element_size(dtype)].view(dtype)


def _write_image(sections, buf):
    """The image of _image_layout's sections written into the byte tensor buf (host work)."""
    mine = {}  # group -> its section in its dtype
    for off, dtype, ts, j, conv in sections:
        v = _section(buf, off, dtype, ts)
        if conv:
            v.copy_(mine[j])  # float64 from the values as rounded to the group's dtype: exact
        elif len(ts) == 1:
            v.copy_(ts[0].reshape(-1))
        else:
            torch.cat([t.reshape(-1) if t.dim() != 1 else t for t in ts], out=v)
        mine.setdefault(j, v)
    return buf


def _alone(groups):
    """The groups that go up apart from the image: one tensor that is not contiguous (it keeps its
    strides, as it always did)."""
    return {j for j, (ts, _) in enumerate(groups) if len(ts) == 1 and not ts[0].is_contiguous()}


class _Staging:
    """The page-locked host buffer a GPU trial's inputs go up from (grown when a trial needs more,
    never given back): allocating page-locked memory for every trial cost about 200 µs a trial on
    an H100 host, and a copy from pageable memory would synchronise with the device. Before the
    buffer is written again the copy out of it is waited for (an event; done by then: the trial
    before ended with its read)."""

    def __init__(self):
        self.buf = None
        self.copied = None  # the event after the last copy out of buf

    def upload(self, image, sections, nbytes, device):
        """The image on device: image (a byte tensor already written, or None: write sections) is
        copied into the buffer, and the buffer's first nbytes to the device, without waiting."""
        if self.copied is not None:
            t0 = _now()
            self.copied.synchronize()
            TIMES["staging_sync"] += _now() - t0
        if self.buf is None or self.buf.numel() < nbytes:
            self.buf = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)
        host = self.buf[:nbytes]
        if image is not None:
            host.copy_(image)
        else:
            _write_image(sections, host)
        dev = host.to(device, non_blocking=True)
        if self.copied is None:
            self.copied = torch.cuda.Event()
        self.copied.record()
        return dev


_STAGING = _Staging()


class _AheadStaging:
    """The upload of a case prepared ahead by a worker thread (_image with on_device), done by the
    worker (each worker has its own: _Worker.staging): it writes the image straight into a
    page-locked buffer and queues the copy to the device on a side stream of its own, recording an
    event; the trial's stream waits on that event (a wait queued on the device, no host
    synchronisation: by the worker when it places the case, _image, else by the trial,
    _upload_groups), so that the trial's own thread neither copies the bytes nor waits. Two
    buffers, used in turn: before one is written again, the copy out of it (queued a case before:
    long done, as a rule) is waited for on the worker. The image on the device is allocated on the
    side stream; the trial's stream's use of it is recorded (record_stream), so that its memory is
    not given to the next image while the trial's operations may still read it."""

    def __init__(self):
        self.lock = threading.Lock()  # (one worker at a time, but a worker given up may still be busy)
        self.bufs = [None, None]
        self.copied = [None, None]
        self.turn = 0
        self.streams = {}  # device -> the side stream

    def upload(self, sections, nbytes, device):
        """(the image on device, the event after its copy)."""
        with self.lock:
            return self._upload(sections, nbytes, device)

    def _upload(self, sections, nbytes, device):
        i, self.turn = self.turn, self.turn ^ 1
        if self.copied[i] is not None:
            self.copied[i].synchronize()  # (on the worker thread)
        if self.bufs[i] is None or self.bufs[i].numel() < nbytes:
            self.bufs[i] = None
            self.bufs[i] = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)
        host = _write_image(sections, self.bufs[i][:nbytes])
        d = torch.device(device)
        if d.index is None:
            d = torch.device("cuda", torch.cuda.current_device())
        side = self.streams.get(d)
        if side is None:
            side = self.streams[d] = torch.cuda.Stream(d)
        with torch.cuda.device(d), torch.cuda.stream(side):
            dev = host.to(d, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(side)
        self.copied[i] = ev
        return dev, ev


_AHEAD_STAGING = _AheadStaging()


def _upload_groups(groups, device, image=None, dev_image=None, slot=None):
    """The CPU tensors of groups [(tensors, also64), ...] (each group of one dtype) on device, as
    [(tensors, their float64 copies or None), ...]. On a GPU (_together) one image goes up with one
    copy (_image_layout: every group, and its float64 values converted on the host) and each
    tensor is a view of it, but a group of one tensor that is not contiguous, which goes up alone
    with its strides; on the CPU each tensor is itself (nothing is copied). image: the bytes
    already written (_image of a case prepared ahead); dev_image: (the image already on the
    device, the event after its copy or None), uploaded by the worker thread (_AheadStaging); slot:
    the _SharedSlot image lies in (a case from a helper process), copied up straight from it."""
    if not _together(device):
        out = []
        for ts, also64 in groups:
            d = [_upload(t, device) for t in ts]
            out.append((d, [t.to(torch.float64) for t in d] if also64 else None))
        return out
    alone = _alone(groups)
    sections, nbytes = _image_layout([g for j, g in enumerate(groups) if j not in alone])
    if dev_image is not None:
        dev, ev = dev_image
        if ev is not None:  # the trial's stream waits for the worker's copy, and holds the memory while it reads it
            cur = torch.cuda.current_stream(dev.device)
            cur.wait_event(ev)
            dev.record_stream(cur)
    elif slot is not None and slot.registered and torch.device(device).type == "cuda":
        dev = slot.upload(image, device)  # (page-locked: one copy straight from it)
    elif torch.device(device).type == "cuda":
        dev = _STAGING.upload(image, sections, nbytes, device)
    else:  # (BATCH_ALL on the CPU: the same layout, in a buffer of this trial's own)
        dev = image if image is not None else _write_image(sections, torch.empty(nbytes, dtype=torch.uint8))
    return _group_views(groups, sections, dev, alone, device)


def _view_at(buf, typed, dtype, off, shape):
    """The contiguous tensor of dtype and shape at byte off of the byte tensor buf: one as_strided
    of buf's view as dtype (typed: those views by dtype, made as needed; buf's length and off are
    multiples of the element size)."""
    base = typed.get(dtype)
    if base is None:
        base = typed[dtype] = buf if dtype == torch.uint8 else buf.view(dtype)
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= max(d, 1)
    return base.as_strided(shape, tuple(reversed(strides)), off // _element_size(dtype))


def _group_views(groups, sections, dev, alone, device):
    """_upload_groups' answer from the image dev on the device: each group's tensors (and float64
    copies) as views of its sections (one typed view of the image a dtype, and each tensor one
    as_strided of it: a section starts at a multiple of _SECTION_ALIGN, the image is as long);
    the groups of alone uploaded apart."""
    typed = {}
    out_views = []
    for off, dtype, ts, _, _ in sections:
        vs = []
        for t in ts:
            vs.append(_view_at(dev, typed, dtype, off, tuple(t.shape)))
            off += t.numel() * _element_size(dtype)
        out_views.append(vs)
    views = iter(out_views)
    out = []
    for j, (ts, also64) in enumerate(groups):
        if j in alone:
            d = [_upload(ts[0], device)]
            out.append((d, [d[0].to(torch.float64)] if also64 else None))
        else:
            out.append((next(views), next(views) if also64 else None))
    return out


def _input_groups(case):
    """The case's tensor inputs by dtype, in their order: [([name, ...], [tensor, ...]), ...]."""
    groups = {}
    for k, v in case.inputs.items():
        if isinstance(v, torch.Tensor):
            groups.setdefault(v.dtype, ([], []))
            groups[v.dtype][0].append(k)
            groups[v.dtype][1].append(v.detach() if v.requires_grad else v)
    return list(groups.values())


#: Whether the kernel's own copy of each input (its first repeat's) goes up with the image, each in
#: a section of its own (as aligned as a fresh allocation, as its clone on the device was), where a
#: trial's inputs go up as one image: one device copy (a launch) less an input on the trial's
#: thread. NUMWATCH_TORCH_KERNEL_COPIES=0 turns it off; the answers are the same.
KERNEL_COPIES = os.environ.get("NUMWATCH_TORCH_KERNEL_COPIES", "") != "0"


def _kernel_copies(case):
    """The inputs whose kernel copy goes up with the image (_upload_plan): contiguous non-empty
    tensors the kernel gets as they are (no view of case.views); the others are cloned on the
    device, as every repeat after the first is."""
    if not KERNEL_COPIES or not _together(case.device):
        return []
    return [k for k, v in case.inputs.items() if isinstance(v, torch.Tensor) and k not in case.views
            and v.numel() and v.is_contiguous()]


def _upload_plan(case):
    """The groups of the case's one upload: its inputs by dtype (floating ones also in float64),
    then the output gradients drawn with the case (_draw_douts_ahead), if any, then the kernel's
    own copy of each input of _kernel_copies, one group each."""
    groups = [(ts, ts[0].is_floating_point()) for _, ts in _input_groups(case)]
    if case._douts_ahead is not None:
        groups.append((case._douts_ahead[3], True))
    for k in _kernel_copies(case):
        v = case.inputs[k]
        groups.append(([v.detach() if v.requires_grad else v], False))
    return groups


#: Whether the worker thread that prepares a case ahead also uploads it (_AheadStaging), on a GPU;
#: else the trial's thread copies the image it wrote into page-locked memory and uploads it. The
#: answers are the same (the same bytes at the same alignment; tests and bench/torch-sdk.py
#: --verify compare them). NUMWATCH_TORCH_UPLOAD_AHEAD=0 turns it off.
UPLOAD_AHEAD = os.environ.get("NUMWATCH_TORCH_UPLOAD_AHEAD", "") != "0"


#: What a worker thread that prepares cases ahead (_Worker) works with, set on that thread: its own
#: page-locked buffers and side stream (staging, an _AheadStaging), and for the job it runs the
#: trial's stream as the trial's thread had it when it asked (trial_stream: _trial_stream()).
_TLS = threading.local()


def _image(case, on_device=False):
    """The host side of _load, done ahead: the bytes of the case's upload (on a GPU, _together).
    on_device (the worker thread, UPLOAD_AHEAD): the upload too, from a page-locked buffer of the
    worker's on its side stream (_AheadStaging), and the case placed for the trial's stream
    (_place): the trial's stream is told to wait for the copy and to hold the image's memory while
    it reads it (both queued here, on the worker), and every input's view of the image is made
    here, so that the trial's thread only checks that its stream is the one the case was placed
    for (_load_now). On the CPU (tests, BATCH_ALL) the image itself is the upload, placed the same
    way. An input that goes up alone (not contiguous), or a GPU whose trial stream is unknown,
    leaves the views to the trial (case._dev_image)."""
    if _together(case.device):
        groups = _upload_plan(case)
        alone = _alone(groups)
        sections, nbytes = _image_layout([g for j, g in enumerate(groups) if j not in alone])
        if on_device and UPLOAD_AHEAD:
            if torch.device(case.device).type == "cuda":
                trial = getattr(_TLS, "trial_stream", None)
                staging = getattr(_TLS, "staging", None) or _AHEAD_STAGING
                dev, ev = staging.upload(sections, nbytes, torch.device("cuda", trial[2]) if trial else case.device)
                if trial is None or alone:
                    case._dev_image = (dev, ev)
                    return
                trial[1].wait_event(ev)
                dev.record_stream(trial[1])
                _place(case, _group_views(groups, sections, dev, alone, case.device), (trial[0], trial[2], dev, ev))
            else:
                dev = _write_image(sections, torch.empty(nbytes, dtype=torch.uint8))
                if alone:
                    case._dev_image = (dev, None)
                    return
                _place(case, _group_views(groups, sections, dev, alone, case.device), (None, None, dev, None))
            return
        out = _HELPER_OUT[0]
        if out is not None and nbytes <= out.numel():  # (in the helper: straight into the buffer it shares)
            case._image = _write_image(sections, out[:nbytes])
        else:
            case._image = _write_image(sections, torch.empty(nbytes, dtype=torch.uint8))


#: The trial's stream of each device as _trial_stream() gives it, by (device index, raw stream).
_STREAMS = {}
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _trial_stream(device):
    """(raw stream, torch.cuda.Stream, device index) of the current stream of the trial's thread on
    device (a GPU), or None: what a case prepared ahead is placed for (_image)."""
    if _RAW_STREAM is None:
        return None
    d = torch.device(device)
    if d.type != "cuda":
        return None
    idx = d.index if d.index is not None else torch.cuda.current_device()
    raw = _RAW_STREAM(idx)
    c = _STREAMS.get((idx, raw))
    if c is None:
        c = _STREAMS[idx, raw] = (raw, torch.cuda.current_stream(idx), idx)
    return c


def _place(case, up, placed):
    """The case's inputs on the device from _upload_groups' answer up (for _upload_plan's groups):
    case._dev, _dev64, _douts_dev (the output gradients drawn with the case) and _dev_kernel.
    placed: set as case._placed (by the worker: (raw stream, device index, image, event))."""
    keyed = _input_groups(case)
    for (keys, _), (d, d64) in zip(keyed, up):
        case._dev.update(zip(keys, d))
        if d64 is not None:
            case._dev64.update(zip(keys, d64))
    at = len(keyed)
    if case._douts_ahead is not None:
        case._douts_dev = up[at]
        at += 1
    case._dev_kernel = {k: d[0] for k, (d, _) in zip(_kernel_copies(case), up[at:])}
    case._placed = placed


def _load(case):
    """The case's tensor inputs on the device, once per trial, floating ones also in float64, with
    the output gradients drawn with the case: on a GPU with one copy (_upload_groups)."""
    t0, s0 = _now(), TIMES["staging_sync"]
    try:
        _load_now(case)
    finally:
        TIMES["upload"] += _now() - t0 - (TIMES["staging_sync"] - s0)


def _load_now(case):
    together = _together(case.device)
    placed = case._placed if together else None
    if placed is not None:  # placed by the worker for the trial's stream (_image): nothing left but to check that
        raw, idx, dev, ev = placed
        case._placed = None
        if ev is not None and _RAW_STREAM(idx) != raw:  # (the trial on another stream: it waits here)
            cur = torch.cuda.current_stream(dev.device)
            cur.wait_event(ev)
            dev.record_stream(cur)
        STATS["upload_ahead"] += 1
        case._loaded = True
        return
    image = case._image if case._image is not None and together else None
    dev_image = case._dev_image if together else None
    case._dev_image = None
    if dev_image is not None:
        STATS["upload_ahead"] += 1
    _place(case, _upload_groups(_upload_plan(case), case.device, image, dev_image, case._slot), None)
    case._slot = None
    case._loaded = True


#: (kind, device, dtype) -> a constant tensor, made once: 0-dimensional zero and NaN for where(),
#: the column of -1s and a 0 of _Batch's differences, and zeros to pad rows with (the longest
#: asked so far: a shorter pad is a prefix).
_CONST = {}


def _const(kind, device, dtype, n=0):
    key = (kind, device, dtype) if kind != "neg" else (kind, device, dtype, n)
    t = _CONST.get(key)
    if t is None or (kind == "pad" and t.numel() < n):
        if kind == "neg":  # -1 for each row but the last, 0 for it, as a column (n, 1, 1)
            t = torch.full((n, 1, 1), -1.0, dtype=dtype, device=device)  # (made there: no copy to wait for)
            t[-1] = 0.0
        elif kind == "pad":
            t = torch.zeros(1 << max(n - 1, 1023).bit_length(), dtype=dtype, device=device)
        else:
            t = torch.full((), math.nan if kind == "nan" else 0.0, dtype=dtype, device=device)
        _CONST[key] = t
    return t[:n] if kind == "pad" else t


def _padded(ts, width, device):
    """The pieces of one torch.cat() that lays the 1-dimensional tensors ts out as the rows of a
    (len(ts), width) matrix: each followed by zeros of its dtype (False for masks) up to width."""
    pieces = []
    for t in ts:
        pieces.append(t)
        if t.numel() < width:
            pieces.append(_const("pad", device, t.dtype, width - t.numel()))
    return pieces


def _cat_into(pieces, out):
    """torch.cat(pieces), converted to out's dtype, written into the contiguous tensor out, which
    must be exactly as long (a cat(out=) of another length would resize it, away from the memory a
    graph reads). Each run of pieces of one dtype is one cat (and one conversion): torch's CUDA cat
    joins tensors of the output's dtype in one kernel, but copies each piece by itself (a launch or
    a memcpy each) when dtypes differ. (Every value converted up to float64: exact.)"""
    n = sum(t.numel() for t in pieces)
    if n != out.numel():
        raise ValueError("%d elements for a tensor of %d" % (n, out.numel()))
    flat, at, i = out.view(-1), 0, 0
    while i < len(pieces):
        j = i + 1
        while j < len(pieces) and pieces[j].dtype == pieces[i].dtype:
            j += 1
        run = [t.reshape(-1) if t.dim() != 1 else t for t in pieces[i:j]]
        m = sum(t.numel() for t in run)
        dst = flat if m == n else flat[at:at + m]
        if len(run) == 1:
            dst.copy_(run[0])
        elif run[0].dtype == out.dtype:
            torch.cat(run, out=dst)
        else:
            dst.copy_(torch.cat(run))
        at, i = at + m, j
    return out


class _Tensor:
    """One output tensor of a _Batch: what compare() was given, and what finish() needs."""

    __slots__ = ("name", "n", "shape", "got", "ref", "plains", "unwritten", "exclude", "factor", "floor_eps",
                 "floor_scale", "canary", "tail_width")


class _Batch:
    """compare()'s work for all output tensors of a trial at once, split where the values come
    back from the device: start() (or parts()) queues the reductions of every tensor together and
    returns them as one int64 tensor (floats by their bits), finish() takes those values as ints
    and builds compare()'s dict of each tensor.

    The tensors (of one dtype, with one fixed tolerance or none and one number of plain
    programs) are laid out as the rows of matrices, each padded with zeros to the longest: the
    kernel's values, each plain program's and the reference's as one float64 tensor X of shape
    (2 + plains, tensors, longest), so that each step of the C SDK's compare loop
    (kernels/sdk/metrics.c) is one device operation for all of them, and each reduction one
    operation over the last dimension. A pad is finite, written, not excluded and exact in every
    program: it adds 0 to every maximum (all of them >= 0, atol and rtol being >= 0), is never
    the first hard element nor ahead of a real one, and counts as finite (finish() takes the pads
    off those counts). Every value is the same as compare()'s of the tensor alone, bit for bit:
    each element's arithmetic is the same, and maxima, first indices and counts do not depend on
    how elements are grouped."""

    def __init__(self, dtype, atol=None, rtol=0.0):
        self.dtype, self.atol, self.rtol = dtype, atol, rtol
        self.fixed = atol is not None
        self.ulp = has_ulp(dtype)
        self.items = []
        self.nplain = None
        self.width = 0  # the longest tensor's elements
        self.layout = None

    def add(self, name, got, ref, plains=(), shape=None, factor=2.0, floor_eps=FLOOR_EPS, floor_scale=None,
            unwritten=None, exclude=None, canary=0, tail_width=0):
        """One tensor more, with compare()'s arguments and their checks."""
        flat = lambda t: t.reshape(-1) if t.dim() != 1 else t  # noqa: E731  (no dispatch where flat)
        ref = flat(ref)
        n = ref.numel()
        got = flat(got)
        if got.numel() != n:
            raise ValueError("tensor '%s': %d values for %d reference elements" % (name, got.numel(), n))
        plains = [flat(p) for p in plains]
        if not self.fixed and not plains:
            raise ValueError("tensor '%s': no plain program and no fixed atol" % name)
        for p in plains:
            if p.numel() != n:
                raise ValueError("tensor '%s': plain program has %d values for %d" % (name, p.numel(), n))
        if self.nplain is not None and len(plains) != self.nplain:
            raise ValueError("tensor '%s': %d plain programs, the batch's others %d" % (name, len(plains),
                                                                                       self.nplain))
        self.nplain = len(plains)
        it = _Tensor()
        it.name, it.n, it.got, it.ref, it.plains = name, n, got, ref, plains
        it.shape = list(shape) if shape is not None else [n]
        it.unwritten = None if unwritten is None else unwritten.reshape(-1).to(device=ref.device,
                                                                                 dtype=torch.bool)
        it.exclude = None if exclude is None else exclude.reshape(-1).to(device=ref.device, dtype=torch.bool)
        it.factor, it.floor_eps, it.floor_scale = factor, floor_eps, floor_scale
        it.canary, it.tail_width = canary, tail_width
        self.items.append(it)
        self.width = max(self.width, n)

    def start(self, tail=()):
        """The reductions, queued on the device, element for element the C SDK's compare loop:
        - an unwritten element (still the poison) counts as unwritten and nothing else;
        - every written element counts in nonfinite/ref_nonfinite where it is NaN/Inf, and as a
          mismatch where it is non-finite on one side only or of another class (NaN, +Inf, -Inf)
          than the reference: excluded or not, a kink excuses a value, not a NaN;
        - an excluded element that is not a mismatch counts as excluded;
        - the others with a finite reference ("ok") are measured: max_abs, max_rel, max|ref|,
          max_ulp, the plain programs' errors where those are finite, the fixed tolerance's ratio;
        - worst: the first ok element of the largest error (or tolerance ratio), hard: the first
          unwritten or mismatched one.
        tail: int64 tensors to bring back with the values (after them; finish() returns their
        values). Returns one int64 tensor, or None for no values."""
        parts = self.parts(tail)
        if not parts:
            return None
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def parts(self, tail=()):
        """start()'s values as the 1-dimensional int64 tensors to concatenate (a trial joins
        those of its batches and its digests in one read)."""
        with torch.no_grad():
            return self._start(tail)

    def _start(self, tail):
        items, L = self.items, self.width
        dev = items[0].ref.device if items else torch.device("cpu")
        parts = []
        self.layout = None
        if L:
            X = _cat_into(self._x_pieces(L), torch.empty(
                (2 + (self.nplain or 0)) * len(items) * L, dtype=torch.float64, device=dev))
            unw = exc = None
            if any(it.unwritten is not None for it in items):
                unw = self._mask_pieces([it.unwritten for it in items], L)
            if any(it.exclude is not None for it in items):
                exc = torch.cat(self._mask_pieces([it.exclude for it in items], L)).view(len(items), L)
            parts = self._measure(X.view(2 + (self.nplain or 0), len(items), L), unw, exc)
        fscales = [it.floor_scale for it in items if isinstance(it.floor_scale, torch.Tensor)]
        if fscales:
            fs = torch.stack([f.reshape(()).to(dev) for f in fscales])
            parts.append(fs.to(torch.float64).view(torch.int64))
        parts += [it.canary.reshape(1).to(dev, torch.int64) for it in items if isinstance(it.canary, torch.Tensor)]
        self.ntail = [t.numel() for t in tail]
        return parts + [t.reshape(-1) for t in tail]

    def _x_rows(self):
        """The rows of X (programs, tensors, L) before padding: the kernel's and each plain
        program's (in the check's dtype, as a rule), then the reference's."""
        items = self.items
        rows = [it.got for it in items]
        for j in range(self.nplain or 0):
            rows += [it.plains[j] for it in items]
        return rows, [it.ref for it in items]

    def _x_pieces(self, L):
        """The pieces of the one cat (_cat_into) that lays the rows of X out, each padded with
        zeros of its dtype to L (the kernel's and the plain programs' rows are then one run of the
        cat, the reference's another)."""
        progs, refs = self._x_rows()
        return _padded(progs + refs, L, self.items[0].ref.device)

    def _mask_pieces(self, ms, L):
        """The pieces of a cat() of boolean rows of L: each mask padded with False, all False for none."""
        dev = self.items[0].ref.device
        out = []
        for m, it in zip(ms, self.items):
            if m is None:
                out.append(_const("pad", dev, torch.bool, L))
            else:
                out += (m,) if it.n == L else (m, _const("pad", dev, torch.bool, L - it.n))
        return out

    def _measure(self, X, unw, exc):
        """The reductions of start() on the laid-out rows: X (programs, tensors, L) float64, unw the
        unwritten rows (a (tensors, L) boolean tensor, or the pieces of its cat(), or None), exc
        the excluded ones ((tensors, L) or None). Depends on the tensors only through X, unw and
        exc (and this batch's dtype and tolerance), so that it can be captured once for a shape
        and replayed (_Graphs). Sets self.layout; returns the int64 tensors of the values."""
        K, T, L = X.shape
        P = K - 2
        dev = X.device
        f64, bool_ = torch.float64, torch.bool
        zero = _const("zero", dev, f64)
        # The boolean rows whose true elements are counted, in one reduction: each program's
        # finite and written elements, the mismatches, then the unwritten and the excluded ones.
        nc = K + 1 + (unw is not None) + (exc is not None)
        C = torch.empty((nc, T, L), dtype=bool_, device=dev)
        cs = C.unbind(0)
        # The float64 rows of the maxima (their first K rows hold |X| a moment first: few and
        # reused buffers, which the CPU's allocator keeps in step with).
        rows = 3 + P + (1 if self.fixed else 0) + (1 if self.dtype == "f32" else 0)
        B = torch.empty((rows, T, L), dtype=f64, device=dev)
        bs = B.unbind(0)
        BK = B[:K]
        F = torch.lt(torch.abs(X, out=BK), _INF, out=C[:K])  # finite (NaN compares false)
        if unw is not None:
            u = cs[K + 1]
            if isinstance(unw, torch.Tensor):
                u.copy_(unw)
            else:
                torch.cat(unw, out=u.view(-1))
            unw = u
            written = ~unw
            F &= written
        ok = cs[0] & cs[K - 1]
        if exc is not None:
            ok = ok > exc  # and not excluded
        # NaN/Inf of another class than the reference's: finite values as 0, NaN as 5, so
        # that the classes compare with one != (an unwritten element is no mismatch: its
        # finite bit is off, its class whatever its bits are, its mismatch bit cleared).
        S = X[::K - 1]  # the kernel's row and the reference's
        cls = S.nan_to_num(5.0, _INF, -_INF).masked_fill_(F[::K - 1], 0.0)
        mism = torch.ne(*cls.unbind(0), out=cs[K])
        if unw is not None:
            mism &= written
        if exc is not None:
            torch.gt(exc, mism, out=cs[-1])  # excluded and not a mismatch (and written)
            if unw is not None:
                cs[-1].logical_and_(written)
        # |program - reference| of the kernel and each plain program, and |reference| (the
        # reference's row takes 0 times itself: exact), each where it and the reference are
        # finite, on the ok elements.
        torch.addcmul(X, _const("neg", dev, f64, K), X[-1], out=BK).abs_()
        torch.where(F & ok, BK, zero, out=BK)
        err, absr, rel = bs[0], bs[1 + P], bs[2 + P]
        torch.div(err, absr, out=rel)
        torch.where(absr > 0, rel, zero, out=rel)
        r = 3 + P
        key = err
        if self.fixed:
            key = bs[r]
            r += 1
            tol = absr * self.rtol + self.atol if self.rtol else self.atol
            # err / 0 is inf (err > 0) or NaN (0 / 0, as an element that is not measured): 0.
            torch.div(err, tol, out=key).nan_to_num_(0.0, _INF, -_INF)
        ulp64 = None
        if self.dtype == "f32":
            # The distance of the float32 values in ULPs: the magnitude's bits with the value's
            # sign, as float64 (exact), differenced; none where the reference is past f32's range.
            Y = S.to(torch.float32)
            o = (Y.view(torch.int32) & 0x7FFFFFFF).to(f64).copysign_(Y)
            d = torch.sub(*o.unbind(0), out=o[0]).abs_()
            torch.where(ok & (absr < _F32_OVERFLOW), d, zero, out=bs[r])
        elif self.ulp:
            i = S.view(torch.int64)
            o = torch.where(i < 0, -(i & 0x7FFFFFFFFFFFFFFF), i)
            ulp64 = torch.where(ok, torch.sub(*o.unbind(0)).abs_(), 0).amax(-1)
        hard = mism if unw is None else mism | unw
        # The first hard element if any (NaN wins an argmax, the first of them), else the
        # first of the largest key.
        pos = torch.where(hard, _const("nan", dev, f64), key).argmax(-1)
        parts = [B.amax(-1).view(torch.int64).view(-1), pos, C.sum(-1).view(-1)]
        if ulp64 is not None:
            parts.append(ulp64)
        self.layout = (rows, nc, unw is not None, exc is not None)
        return parts

    def finish(self, vals):
        """compare()'s dict of each tensor from the values start() queued (a list of ints), and the
        values of its tail tensors: (dicts, [values of each tail tensor])."""
        items, T, L, P, fixed = self.items, len(self.items), self.width, self.nplain or 0, self.fixed
        vals = list(vals)
        tails = []
        for k in reversed(self.ntail):
            tails.insert(0, vals[len(vals) - k:])
            del vals[len(vals) - k:]
        canaries = [it.canary for it in items]
        ct = [j for j, it in enumerate(items) if isinstance(it.canary, torch.Tensor)]
        for j, v in zip(ct, vals[len(vals) - len(ct):]):
            canaries[j] = v
        del vals[len(vals) - len(ct):]
        scales = [it.floor_scale for it in items]
        ft = [j for j, it in enumerate(items) if isinstance(it.floor_scale, torch.Tensor)]
        for j, v in zip(ft, vals[len(vals) - len(ft):]):
            scales[j] = _bits_to_float(v)
        del vals[len(vals) - len(ft):]
        if self.layout:
            rows, ncounts, has_unw, has_exc = self.layout
            fl = struct.unpack("<%dd" % (rows * T), struct.pack("<%dq" % (rows * T), *vals[:rows * T]))
            at = rows * T
            pos = vals[at:at + T]
            at += T
            cnt = vals[at:at + ncounts * T]
            at += ncounts * T
            ulp64 = vals[at:at + T]
        out = []
        for j, it in enumerate(items):
            n = it.n
            max_ulp = 0
            if n:
                row = [fl[r * T + j] for r in range(rows)]
                max_abs, max_ref, max_rel = row[0], row[1 + P], row[2 + P]
                plain_max = max([0.0] + row[1:1 + P])
                max_q = row[3 + P] if fixed else 0.0
                if self.dtype == "f32":
                    max_ulp = int(row[-1])
                elif self.ulp:
                    max_ulp = ulp64[j]
                c = [cnt[i * T + j] for i in range(ncounts)]
                pad = L - n  # pads are finite and written
                n_kfin, n_rfin, n_mismatch = c[0] - pad, c[P + 1] - pad, c[P + 2]
                n_unwritten = c[P + 3] if has_unw else 0
                n_excluded = c[-1] if has_exc else 0
                n_nonfinite, n_ref_nonfinite = n - n_unwritten - n_kfin, n - n_unwritten - n_rfin
                hard_or_worst = pos[j]
            else:
                max_abs = max_rel = max_ref = plain_max = max_q = 0.0
                n_unwritten = n_excluded = n_nonfinite = n_ref_nonfinite = n_mismatch = 0
                hard_or_worst = None
            canary, floor_scale = canaries[j], scales[j]
            if fixed:
                budget = self.atol
                ratio = max_q
            else:
                scale = floor_scale if floor_scale is not None and floor_scale > 0 else max_ref
                budget = it.factor * plain_max + it.floor_eps * EPS[self.dtype] * scale
                if budget <= 0.0:
                    budget = TINY[self.dtype]
                ratio = max_abs / budget
            if n_unwritten or n_mismatch or (max_q if fixed else max_abs) > 0:
                pos_j = hard_or_worst
            else:
                pos_j = None
            shape = it.shape
            idx = unravel(pos_j, shape) if pos_j is not None else None
            tail = False
            if idx and it.tail_width > 1 and shape:
                dlast = shape[-1]
                tail = idx[-1] >= dlast - dlast % it.tail_width
            out.append(tensor_result(
                it.name, ratio=ratio, max_abs=max_abs, max_rel=max_rel,
                max_ulp=max_ulp if self.ulp else None, nonfinite=n_nonfinite,
                ref_nonfinite=n_ref_nonfinite, unwritten=n_unwritten, canary=canary,
                excluded=n_excluded, worst=idx, tail=tail, mismatch=n_mismatch,
                plain_max_abs=None if fixed else plain_max, budget=budget))
        return out, tails


def _bits_to_float(b):
    return _D.unpack(_Q.pack(b & _MASK64))[0]


def compare(name, dtype, got, ref, plains=(), shape=None, factor=2.0, floor_eps=FLOOR_EPS, floor_scale=None,
            atol=None, rtol=0.0, unwritten=None, exclude=None, canary=0, tail_width=0):
    """metrics.compare() on tensors, on their device: the same arguments (got, ref and each
    plain as tensors of one number of elements; unwritten and exclude as boolean masks;
    canary and floor_scale may also be 0-dimensional tensors on the device) and the same dict,
    field for field, with one read from the device. got is taken as it is: round it to the
    dtype first, as a store into a buffer of the dtype would (the SDK does)."""
    b = _Batch(dtype, atol, rtol)
    b.add(name, got, ref, plains, shape, factor, floor_eps, floor_scale, unwritten, exclude, canary, tail_width)
    vals = b.start()
    return b.finish(_host(vals) if vals is not None else [])[0][0]


def digest_tensor(t):
    """A 64-bit hash of a tensor's bits, computed on its device (a weighted sum of the
    elements' bit patterns, wrapping): equal tensors hash equal, and one element that
    differs changes the hash."""
    return _host(_digest_on_device(t).reshape(1))[0] & _MASK64


#: (device, high) -> the digest's weights of elements 0..N-1 for the largest N asked so far (a
#: power of two): a weight depends on the element's index alone, so a shorter tensor takes a prefix.
_WEIGHTS = {}


def _digest_weights(n, device, high):
    """The digest's weights of elements 0..n-1 (of the low halves, or of the high ones)."""
    key = (str(device), high)
    w = _WEIGHTS.get(key)
    if w is None or w.numel() < n:
        idx = torch.arange(1 << max(n - 1, 1).bit_length(), device=device, dtype=torch.int64)
        if high:
            w = ((idx * 2246822519 + 3266489917) % (1 << 30)) * 2 + 1
        else:
            w = ((idx * 2654435761 + 40503) % (1 << 30)) * 2 + 1
        _WEIGHTS[key] = w
    return w[:n]


def _digest_rows(m):
    """The digest of each row of the matrix m (of a floating dtype or int64), as digest_tensor()
    computes it for that row alone: one int64 tensor of m's rows, on m's device. A row padded
    with zeros hashes as the row without its pads (a zero's bits weigh nothing)."""
    rows, n = m.shape
    if n == 0:
        return torch.zeros(rows, dtype=torch.int64, device=m.device)
    bits = m.view(_INT_VIEW[m.dtype]).to(torch.int64) if m.dtype in _INT_VIEW else m.to(torch.int64)
    h = ((bits & 0xFFFFFFFF) * _digest_weights(n, m.device, False)).sum(-1)
    if m.dtype in (torch.float64, torch.int64):  # the high halves, where there are any
        h = h + (((bits >> 32) & 0xFFFFFFFF) * _digest_weights(n, m.device, True)).sum(-1)
    return h


def _digest_on_device(t):
    """digest_tensor() as a 0-dimensional int64 tensor on t's device (no transfer)."""
    t = t.detach().contiguous().reshape(-1)
    return _digest_rows(t.view(1, t.numel()))[0]


# ---- prepared ahead ----------------------------------------------------------------------------


def _env_flag(name):
    """An on/off environment variable: None where unset or empty (the default), else whether it is not "0"."""
    v = os.environ.get(name, "")
    return None if v == "" else v != "0"


def _parse_prepare_ahead(v):
    """NUMWATCH_PREPARE_AHEAD: "thread" or "process"; None where unset or empty (the default, by
    device: _ahead_mode); False for 0, off and the like, and for any other value (with one line on
    stderr)."""
    v = (v or "").strip().lower()
    if v in ("process", "thread"):
        return v
    if v == "":
        return None
    if v not in ("0", "off", "false", "no", "none", "inline"):
        print("numwatch-runner: torchcheck: NUMWATCH_PREPARE_AHEAD=%r is not thread, process or 0: trials are "
              "prepared in line" % v, file=sys.stderr, flush=True)
    return False


#: Whether a trial's host work (the case from the seed, its digest, its inputs packed for the
#: device, a bwd check's output gradients) is done for the next seeds while this trial runs, as the
#: C runner does (kernels/sdk/prepare.c): "process" in helper processes (_Helper, AHEAD_DEPTH of
#: them, a request each: the case written into memory shared with the runner, _SharedSlot; they
#: see the check's attributes and its class's as the runner has them, not a module global the
#: runner changed at run time), "thread" on worker threads of this process (_Workers: they share
#: the trial's interpreter lock, so on an H100 host a trial gained nothing from them), False in
#: line. None (unset, the default): "process" on a GPU, where the trial's host thread launches
#: the device's work and the case's draws are the CPU's; in line on the CPU, where the trial
#: itself is host work on every core. The next seeds are those the
#: command line runs next (--count, --runs), else each the seed after the one before (the daemon
#: sends a part's seeds in order). The first _Ahead.VERIFY_FIRST cases of a check taken from ahead, and
#: every VERIFY_EVERY[mode]-th after, are prepared in line too and compared, and a difference turns
#: the fast path off for that check. NUMWATCH_PREPARE_AHEAD=thread, process or 0 (off).
PREPARE_AHEAD = _parse_prepare_ahead(os.environ.get("NUMWATCH_PREPARE_AHEAD"))

#: Counters of the fast paths, for the bench and the tests (never reset by the SDK).
STATS = {"ahead_hits": 0, "ahead_misses": 0, "ahead_in_line": 0, "ahead_stale": 0, "ahead_verified": 0,
         "ahead_off": 0, "ahead_late": 0, "ahead_dropped": 0, "ahead_shared": 0, "shared_uploads": 0, "douts_ahead": 0, "upload_ahead": 0, "graph_captures": 0, "graph_replays": 0, "graph_verified": 0,
         "graph_off": 0, "graphs_dropped": 0}


#: Where the trials' wall time goes on the trial's own thread, in nanoseconds summed over every
#: trial (never reset by the SDK; time.perf_counter_ns around a few points a trial: always on).
#: Each part but "trial" is apart from the others, so that what the trial spent elsewhere (the
#: SDK's own Python, its metadata) is "trial" less their sum (times_per_trial(): "rest"):
#:   trials, trial     trials timed (TorchCheck._trial) and their wall time
#:   case_wait         waiting for the case prepared ahead (the worker thread, or the helper process)
#:   case_in_line      preparing a case in line (no case from ahead, or one sampled to compare with it)
#:   ahead             taking the case from ahead and asking for the next one (the check's state pickled)
#:   upload            the inputs' upload on the trial's thread (the image copied into page-locked
#:                     memory and its copy queued), or only the wait queued on the worker's copy
#:   staging_sync      GPU sync point: the page-locked buffer's last copy out of it, waited for before
#:                     it is written again (done by then, as a rule)
#:   programs          the reference and plain programs (forward, the check's floor scales, backward):
#:                     the launches of the check's own code
#:   kernel            the kernel's repeats (its launches) and their outputs' bookkeeping
#:   metrics           the metrics and digests: queued eagerly, or a graph's static inputs written
#:                     (and the values decoded)
#:   capture, replay   capturing a metric graph (with its first replay); replaying one (its launch)
#:   read              GPU sync point: the trial's one read (waits for every queued operation of the
#:                     trial, on the device, to finish: most of what the GPU is behind the host)
#:   event_sync        GPU sync point: the kernel's timing events (done by then: after the read)
#:   digest_wait       waiting for the case digest hashed by another thread
#: and on the worker thread: worker_jobs, worker (cases prepared ahead, and their wall time).
TIMES = dict.fromkeys(("trials", "trial", "case_wait", "case_in_line", "ahead", "upload", "staging_sync",
                       "programs", "kernel", "metrics", "capture", "replay", "read", "event_sync",
                       "digest_wait", "worker_jobs", "worker"), 0)
_now = time.perf_counter_ns
_TIME_PARTS = ("case_wait", "case_in_line", "ahead", "upload", "staging_sync", "programs", "kernel", "metrics",
               "capture", "replay", "read", "event_sync", "digest_wait")


def times_per_trial(after=None, before=None):
    """TIMES (or after - before, two copies of it) as microseconds a trial: each part, "rest" (the
    trial's time outside them) and "trial"; and "worker" (a case's preparation on the worker thread,
    a job). Empty where no trial was timed."""
    after = TIMES if after is None else after
    d = {k: after[k] - (before or {}).get(k, 0) for k in after}
    n = d["trials"]
    if not n:
        return {}
    out = {k: d[k] / n / 1000.0 for k in _TIME_PARTS}
    out["rest"] = (d["trial"] - sum(d[k] for k in _TIME_PARTS)) / n / 1000.0
    out["trial"] = d["trial"] / n / 1000.0
    out["worker"] = d["worker"] / d["worker_jobs"] / 1000.0 if d["worker_jobs"] else 0.0
    return out


#: True in the helper process: it prepares in line whatever the settings (no helper of its own).
_IN_HELPER = False
#: In the helper process, the buffer it shares with the runner for the request it prepares (a byte
#: tensor over the runner's _SharedSlot), or None: where _image writes the case's upload.
_HELPER_OUT = [None]


def _print_stats():
    t = times_per_trial()
    print("numwatch-runner: torchcheck: %s" % (STATS,), file=sys.stderr, flush=True)
    if t:
        print("numwatch-runner: torchcheck: us a trial on its thread over %d trials: %s" % (
            TIMES["trials"], ", ".join("%s %.1f" % (k, v) for k, v in t.items())), file=sys.stderr, flush=True)


if os.environ.get("NUMWATCH_TORCH_STATS"):  # the fast paths' counters (and TIMES) on stderr at exit
    import atexit

    atexit.register(_print_stats)


def _ahead_mode(device):
    """How the next trial is prepared ahead: "thread", "process" or None (in line; always in the
    helper itself)."""
    if _IN_HELPER:
        return None
    m = PREPARE_AHEAD
    if m is None:
        return "process" if torch.device(device).type == "cuda" else None
    return m or None


def _douts_rule(case, want):
    """How the output gradients' shapes [(output, shape), ...] came from the inputs' (the first
    input of the same shape, else the shape itself): the next trial's guess."""
    rule = []
    for name, shape in want:
        src = None
        for k, v in case.inputs.items():
            if isinstance(v, torch.Tensor) and tuple(v.shape) == shape:
                src = k
                break
        rule.append((name, src, shape))
    return tuple(rule)


class _Ahead:
    """The next trials prepared while this one runs (TorchCheck._prepare with ahead), by worker
    threads (_Workers: up to AHEAD_DEPTH requests at once, each on a worker of its own) or a helper
    process (_Helper: one request). After the trial of a request is taken, the host work of the
    requests after it starts, before this trial's device work. The requests after it are those the
    runner says come next (upcoming: the command line knows its whole run), the rest guessed, each
    as the seed after the one before it (the daemon sends a part's seeds in order). A request that
    is not one prepared has them all thrown away, and is prepared in line; one that is, has those
    kept that are among the requests after it, and the others thrown away (a seed that skips or
    goes back): a job not begun never runs, one running is let finish and dropped, never waited
    for. After a miss, only a request that follows the one before it (a run of seeds again), or
    every PROBE_EVERY-th, has the next guessed, so out-of-order requests (a bisection's probes)
    cost the workers' time rarely. The helper process is started by the second of two requests in
    a row that were foreseen (never for a one-trial run).

    A prepared case is the in-line one when make_case depends on nothing but the seed and what
    trials do not change (the contract of PREPARE_AHEAD; for the helper, only on what exists at
    import time). What is checked: the check's attributes (pickled) when the request was made
    and when its case is taken (a change between them, a kernel() that sets one: prepared in
    line); and the first VERIFY_FIRST cases of each check taken, and every VERIFY_EVERY[mode]-th
    after, are prepared in line too and compared (_case_difference: the case digest, shape,
    parameters, the inputs' bytes, the generator's state after the draws). A difference turns
    preparing ahead off for that check, with one line on stderr, and the trial takes the in-line
    case. A preparation that fails ahead, or is not ready in time (the helper's wait; a worker's
    AHEAD_TIMEOUT_S, after which the workers are given up for the process), is done in line."""

    PROBE_EVERY = 16
    VERIFY_FIRST = 2
    #: The thread's case is made in this process from the same state as the in-line one: it is
    #: sampled less often than the helper's, which is another process.
    VERIFY_EVERY = {"thread": 64, "process": 16}

    def __init__(self):
        self.workers = None  # _Workers
        self.helpers = []  # _Helper: AHEAD_DEPTH of them, started together
        # [(check, key, handle, state, mode), ...] of the requests prepared for, the first needed
        # first: handle.result() -> case or None
        self.jobs = []
        self.last = None  # (check, key, foreseen) of the request before: foreseen, the (check, key) it expected next
        self.missed = False
        self.since_probe = 0
        self.taken = {}  # (check name, mode) -> cases taken from ahead
        self.off = set()  # check names whose case prepared ahead was not the in-line one
        self.now = None  # (check, its state) when its case was taken: the next start()'s

    @property
    def job(self):
        """The first request prepared for (the one needed first), or None."""
        return self.jobs[0] if self.jobs else None

    @staticmethod
    def depth(mode):
        """How many requests are prepared at once: AHEAD_DEPTH, each by a worker thread or a helper
        process of its own."""
        return AHEAD_DEPTH

    @staticmethod
    def wanted(check, key, upcoming, depth):
        """The requests after (check, key) to prepare, [(check, key), ...] (at most depth): those of
        upcoming (None: none known; False: none come; (check, key); or a list of those, a False
        ending it), then each guessed as the seed after the one before. And whether the first was
        guessed."""
        if upcoming is False:
            return [], False
        told = [] if upcoming is None else list(upcoming) if isinstance(upcoming, list) else [upcoming]
        out, cur = [], (check, key)
        for i in range(depth):
            if i < len(told):
                nxt = told[i]
                if not nxt:
                    break
            else:
                k = cur[0]._next_key(cur[1])
                if k is None:
                    break
                nxt = (cur[0], k)
            out.append(nxt)
            cur = nxt
        return out, upcoming is None

    @staticmethod
    def _pair(jobs, want):
        """Each request of want paired with a job prepared for it (one job each, in order): (the
        jobs paired, in want's order; the requests of want without one; the jobs left over)."""
        free = list(jobs)
        paired, need = [], []
        for c, k in want:
            for j in free:
                if j[0] is c and j[1] == k:
                    free.remove(j)
                    paired.append(j)
                    break
            else:
                need.append((c, k))
        return paired, need, free

    def take(self, check, key, upcoming=None, mode="thread"):
        """The case prepared for this request, or None (then prepare it in line). The other jobs
        are kept if they are among the requests after this one (wanted), else thrown away (never
        waited for)."""
        jobs, self.jobs = self.jobs, []
        self.now = None
        if not jobs:
            return None
        hit, _, rest = self._pair(jobs, [(check, key)])
        hit = hit[0] if hit else None
        keep, _, drop = self._pair(rest, self.wanted(check, key, upcoming, self.depth(mode))[0])
        for j in drop:
            j[2].discard()
            STATS["ahead_dropped"] += 1
        self.jobs = keep
        if hit is None:
            self.missed = True
            STATS["ahead_misses"] += 1
            return None
        self.missed = False
        case = hit[2].result()
        if self.workers is not None and not self.workers.alive:  # given up (a case late): nothing more from them
            for j in self.jobs:
                j[2].discard()
            self.jobs = []
        if case is None:
            STATS["ahead_in_line"] += 1
            return None
        now = _check_state(check, hit[4] == "process")
        self.now = (check, now)
        if now is None or now != hit[3]:  # the check changed since the request (or does not pickle now)
            STATS["ahead_stale"] += 1
            return None
        n = self.taken.get((check.name, hit[4]), 0)
        self.taken[check.name, hit[4]] = n + 1
        if n < self.VERIFY_FIRST or (n - self.VERIFY_FIRST + 1) % self.VERIFY_EVERY[hit[4]] == 0:
            t0 = _now()
            try:
                mine = check._prepare(key[0], key[1], key[2], key[3])
            except Exception as e:
                TIMES["case_in_line"] += _now() - t0
                self._off(check, "in line it raised %s" % type(e).__name__)
                raise
            TIMES["case_in_line"] += _now() - t0
            why = _case_difference(case, mine)
            if why:
                self._off(check, why)
                return mine
            STATS["ahead_verified"] += 1
        STATS["ahead_hits"] += 1
        return case

    def _off(self, check, why):
        if check.name not in self.off:
            self.off.add(check.name)
            STATS["ahead_off"] += 1
            print("numwatch-runner: torchcheck: %s: a case prepared ahead differed from the same case prepared "
                  "in line (%s): this check's trials are prepared in line (NUMWATCH_PREPARE_AHEAD's contract: "
                  "make_case may depend only on the seed, and on what trials do not change)" % (check.name, why),
                  file=sys.stderr, flush=True)

    def start(self, check, key, mode, upcoming=None):
        """Starts preparing the requests after this one (check, key) that are not prepared for yet:
        upcoming as for wanted() (None: guess them, unless misses made guessing rest)."""
        last, now, self.now = self.last, self.now, None
        depth = self.depth(mode)
        want, guessed = self.wanted(check, key, upcoming, depth)
        self.last = (check, key, want[0] if want else False)
        follows = last is not None and last[2] is not False and last[2][0] is check and last[2][1] == key
        if not want:
            return
        if guessed and self.missed and not follows:
            self.since_probe += 1
            if self.since_probe % self.PROBE_EVERY:
                return
        _, need, _ = self._pair(self.jobs, want)
        states = {}
        for c, k in need:
            if len(self.jobs) >= depth:
                break
            if c.name in self.off:
                continue
            if c not in states:
                states[c] = now[1] if now is not None and now[0] is c else _check_state(c, mode == "process")
            state = states[c]
            if mode == "thread":
                if self.workers is None:
                    self.workers = _Workers()
                handle = self.workers.submit(c, k, [j[2] for j in self.jobs])
            else:
                if state is None:  # a check that does not pickle (or holds tensors on the device): in line
                    return
                helper = self._idle_helper(follows)
                if helper is None:
                    return
                handle = helper.submit(c, k, state)
            if handle is None:
                return
            self.jobs.append((c, k, handle, state, mode))

    def _idle_helper(self, follows):
        """A helper process a request can be sent to now, or None. The helpers (AHEAD_DEPTH) are
        started together by the second of two foreseen requests (follows), so that a one-trial run
        never starts them; one that failed stops them all (every trial in line from then on)."""
        if not self.helpers:
            if not follows:
                return None
            self.helpers = [_Helper() for _ in range(AHEAD_DEPTH)]
        for h in self.helpers:
            if h.state != "dead" and h.idle():
                return h
            if h.state == "dead":  # (it said why, once: the others stop without a word)
                for other in self.helpers:
                    other.state = "dead"
                    other.close()
                return None
        return None

    @property
    def helper(self):
        """The first helper process (None before they start): the tests' and the bench's handle."""
        return self.helpers[0] if self.helpers else None

    def drop(self):
        """Forgets what was prepared (prepare-ahead turned off)."""
        for j in self.jobs:
            j[2].discard()
        self.jobs = []
        self.last = self.now = None
        self.missed = False


def _parse_depth(v):
    """NUMWATCH_PREPARE_AHEAD_DEPTH: how many requests worker threads prepare at once, 1 to 8 (2
    where unset or empty; any other value: 2, with one line on stderr)."""
    v = (v or "").strip()
    if not v:
        return 2
    try:
        n = int(v)
        if not 1 <= n <= 8:
            raise ValueError
        return n
    except ValueError:
        print("numwatch-runner: torchcheck: NUMWATCH_PREPARE_AHEAD_DEPTH=%r is not 1 to 8: 2 requests are prepared "
              "ahead" % v, file=sys.stderr, flush=True)
        return 2


#: How many requests are prepared ahead at once by worker threads, each on a worker of its own
#: (the requests after this one: the runner's next, and the one after it, told or guessed): a
#: case's preparation on a worker takes longer than in line (the workers and the trial share the
#: GIL), and with one worker the trial waited for it, as the C runner's SDK did
#: (kernels/sdk/prepare.c, DEPTH 2). NUMWATCH_PREPARE_AHEAD_DEPTH (1 to 8, default 2).
AHEAD_DEPTH = _parse_depth(os.environ.get("NUMWATCH_PREPARE_AHEAD_DEPTH"))

#: How long a trial waits for the case a worker thread prepares for it (a preparation takes
#: milliseconds; waiting costs no more than preparing it again in line would, and the worker is
#: let finish first). Past it, the case is prepared in line and the workers are given up for the
#: process (one line on stderr): a make_case that blocks on a worker cannot stall the runner.
AHEAD_TIMEOUT_S = 60.0
#: How long the runner's exit waits for the jobs the workers are running (_Workers.close).
AHEAD_EXIT_S = 3.0


class _ThreadJob:
    """One request prepared on a worker thread: result() is the case, or None (prepare it in line:
    it raised, or it is later than AHEAD_TIMEOUT_S); discard() throws it away, never waiting."""

    __slots__ = ("worker", "fn", "args", "grad", "threads", "stream", "done", "case", "failed", "dropped")

    def __init__(self, worker, fn, args):
        self.worker, self.fn, self.args = worker, fn, args
        # torch's settings of the trial's thread that are each thread's own: the case is made under
        # them; and the trial's stream on a GPU, which its upload is placed for (_image)
        self.grad, self.threads = torch.is_grad_enabled(), torch.get_num_threads()
        self.stream = _trial_stream(DEVICE) if _together(DEVICE) else None
        self.done = threading.Event()
        self.case = None
        self.failed = self.dropped = False

    def run(self):
        t0 = _now()
        if not self.dropped:
            TIMES["worker_jobs"] += 1
            _TLS.trial_stream = self.stream
            try:
                if torch.get_num_threads() != self.threads:
                    torch.set_num_threads(self.threads)
                with torch.set_grad_enabled(self.grad):
                    self.case = self.fn(*self.args)
            except BaseException:  # met again in line, where the trial reports it
                self.failed = True
            _TLS.trial_stream = None
        if self.dropped:  # (thrown away meanwhile: nothing of it is kept)
            self.case = None
        self.fn = self.args = None
        TIMES["worker"] += _now() - t0
        self.done.set()

    def result(self):
        t0 = _now()
        done = self.done.wait(AHEAD_TIMEOUT_S)
        TIMES["case_wait"] += _now() - t0
        if not done:
            self.discard()
            STATS["ahead_late"] += 1
            self.worker.pool.give_up("a case was not prepared in %g s" % AHEAD_TIMEOUT_S)
            return None
        case, self.case = self.case, None
        return None if self.failed else case

    def discard(self):
        self.dropped = True
        self.case = None


class _Worker:
    """A thread that prepares trials ahead (a daemon: one busy in a check's code never holds up the
    runner's exit), with its own page-locked buffers and side stream for the uploads (_TLS.staging).
    Jobs run one at a time, in order; a job thrown away before it began is skipped."""

    def __init__(self, pool, n):
        import queue

        self.pool = pool
        self.jobs = queue.SimpleQueue()
        self.last = None  # the last job given to it
        self.staging = _AheadStaging()
        self.thread = threading.Thread(target=self._serve, name="numwatch-prepare-%d" % n, daemon=True)
        self.thread.start()

    def _serve(self):
        _TLS.staging = self.staging
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job.run()

    def idle(self):
        return self.last is None or self.last.done.is_set()


class _Workers:
    """The worker threads that prepare trials ahead (_Worker), up to AHEAD_DEPTH, started as needed:
    each request prepared on a worker that holds no other request still wanted, an idle one first
    (one still busy with a request thrown away runs the new one after it). Given up (give_up) when
    a case is late past AHEAD_TIMEOUT_S: they take no more jobs."""

    def __init__(self):
        self.workers = []
        self.alive = True
        import atexit

        atexit.register(self.close)

    def close(self, wait_s=None):
        """At exit: no more jobs, the queued ones skipped, and those running waited for, up to
        AHEAD_EXIT_S in all: a worker still inside a torch call when the interpreter finalizes is
        ended by the thread's exit unwinding C++ frames that cannot be unwound (the process aborts:
        "terminate called without an active exception"). One held longer in a check's own code is
        not waited for (it waits in Python, which ends it cleanly)."""
        self.alive = False
        for w in self.workers:
            if w.last is not None:
                w.last.discard()
            w.jobs.put(None)
        deadline = time.perf_counter() + (AHEAD_EXIT_S if wait_s is None else wait_s)
        for w in self.workers:
            if w.last is not None:
                w.last.done.wait(max(0.0, deadline - time.perf_counter()))

    def submit(self, check, key, held):
        """A handle to take the case of request key, or None (prepare it in line). held: the handles
        of the requests still wanted (their workers are not free)."""
        if not self.alive:
            return None
        busy = {id(h.worker) for h in held if isinstance(h, _ThreadJob)}
        free = [w for w in self.workers if id(w) not in busy]
        w = next((w for w in free if w.idle()), None)
        if w is None and len(self.workers) < max(AHEAD_DEPTH, len(busy) + 1):
            w = _Worker(self, len(self.workers))
            self.workers.append(w)
        if w is None and free:
            w = free[0]
        if w is None:
            return None
        job = _ThreadJob(w, check._prepare, (key[0], key[1], key[2], key[3], "thread"))
        w.last = job
        w.jobs.put(job)
        return job

    def give_up(self, why):
        if self.alive:
            self.alive = False
            for w in self.workers:
                w.jobs.put(None)  # (each ends once the job it is on returns, if ever)
            print("numwatch-runner: torchcheck: the threads that prepare trials ahead are given up, trials are "
                  "prepared in line (%s)" % why, file=sys.stderr, flush=True)


class _StatePickler(pickle.Pickler):
    """Pickles a check's attributes, refusing tensors that are not on the CPU (the helper sees no
    GPU, and a copy of device memory is no snapshot to compare)."""

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            raise pickle.PicklingError("a tensor on %s" % obj.device)
        return None


def _class_state(cls):
    """The data attributes of cls and of its bases below TorchCheck, by class (what a script's main
    block may set at run time, as it sets an instance's): [(class, {name: the value pickled}), ...]."""
    import io
    import types

    out = []
    for klass in cls.__mro__:
        if klass in (TorchCheck, Check, object):
            break
        attrs = {}
        for k, v in vars(klass).items():
            if (k.startswith("__") or k == "_abc_impl" or callable(v) or isinstance(v, types.ModuleType)
                    or hasattr(type(v), "__get__")):  # (descriptors: properties, slots, cached properties)
                continue
            f = io.BytesIO()
            try:  # (one that does not pickle stays as the helper imported it: the samples compare)
                _StatePickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(v)
            except Exception:
                continue
            attrs[k] = f.getvalue()  # (pickled once: the check's state carries the bytes)
        if attrs:
            out.append((klass, attrs))
    return out


def _check_state(check, classes=True):
    """The check as the helper gets it (its class, its class's data attributes and its own,
    pickled), or None where it does not pickle. Compared as bytes: an attribute changed in place
    changes them. classes=False: its own attributes only (a worker thread sees its class's)."""
    import io

    state = dict(vars(check))
    state.pop("_douts_rule", None)
    f = io.BytesIO()
    try:
        _StatePickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(
            (type(check), state, _class_state(type(check)) if classes else []))
    except Exception:
        return None
    return f.getvalue()


def _same_value(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        a, b = a.detach().contiguous(), b.detach().contiguous()
        if a.dtype in _INT_VIEW:  # the bytes (a NaN equals itself, -0.0 is not 0.0)
            a, b = a.view(_INT_VIEW[a.dtype]), b.view(_INT_VIEW[b.dtype])
        return bool(torch.equal(a, b))
    return repr(a) == repr(b)


def _same_dict(a, b):
    return sorted(a) == sorted(b) and all(_same_value(a[k], b[k]) for k in a)


def _case_difference(ahead, mine):
    """What differs between a case prepared ahead and the same request's case prepared in line
    (a few words), or None."""
    if list(ahead.shape) != list(mine.shape):
        return "case shape %r, in line %r" % (list(ahead.shape), list(mine.shape))
    if (ahead._digest or case_digest(ahead)) != case_digest(mine):
        return "case digest"
    for what in ("inputs", "params", "views", "floor_scale", "excluded"):
        if not _same_dict(getattr(ahead, what), getattr(mine, what)):
            return what
    for what in ("family", "dtype", "seed", "index"):
        if getattr(ahead, what) != getattr(mine, what):
            return what
    if not torch.equal(ahead.gen.get_state(), mine.gen.get_state()):
        return "the generator's state after the draws"
    return None


_AHEAD = _Ahead()


# ---- the helper process that prepares trials ahead ---------------------------------------------

#: A buffer shared with a helper starts this large and grows to what a case needs, up to
#: SLOT_BYTES_MAX (a larger case comes through the pipe, as every case did before).
SLOT_BYTES_MIN = 8 << 20
SLOT_BYTES_MAX = 1 << 30


_LIBCUDA = []


def _libcuda():
    """The CUDA driver library (ctypes), or None."""
    if not _LIBCUDA:
        import ctypes

        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuMemHostRegister_v2.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
            lib.cuMemHostUnregister.argtypes = (ctypes.c_void_p,)
        except (OSError, AttributeError):
            lib = None
        _LIBCUDA.append(lib)
    return _LIBCUDA[0]


def _host_register(ptr, size):
    """Page-locks [ptr, ptr + size) for the device's copies: whether it could. Through the driver:
    the runtime's cudaHostRegister, refused, would leave its error for the next launch's check to
    raise (a trial's fatal error); a refusal here only leaves the buffer pageable (the staging
    buffer's copy)."""
    lib = _libcuda()
    return lib is not None and lib.cuMemHostRegister_v2(ptr, size, 0) == 0


def _host_unregister(ptr):
    lib = _libcuda()
    if lib is not None:
        lib.cuMemHostUnregister(ptr)


class _SharedSlot:
    """Memory this process shares with one helper process: an anonymous memory file (memfd) that
    the helper maps through /proc/<runner>/fd/<fd> and writes a case's upload image into (_image),
    so that the case's bytes cross without a pipe, and that is page-locked here on a GPU
    (_host_register), so that the image goes up with one asynchronous copy straight from it
    (no copy into the staging buffer on the trial's thread). The case's CPU inputs are views of it.
    A helper has two, used in turn: a case's buffer is written again only after its trial ended
    (the helper answers one request at a time, and a trial holds one case), and after the last
    copy out of it (an event, done by then as a rule)."""

    def __init__(self):
        self.fd = os.memfd_create("numwatch-case", getattr(os, "MFD_CLOEXEC", 1))
        self.ino = os.fstat(self.fd).st_ino  # (names this file to the helper: fd numbers are reused)
        self.size = 0
        self.mm = None  # the mapping
        self.buf = None  # a byte tensor over the mapping
        self.lent = None  # a weak reference to the storage the last case's views share (lend)
        self.registered = None  # the address _host_register page-locked, or None
        self.copied = None  # the event after the last copy out of it

    def ready(self, nbytes):
        """Before the helper writes into it: the last copy out of it done, and room for nbytes (grown
        to the next power of two from SLOT_BYTES_MIN). False where it cannot be had."""
        if self.copied is not None:
            t0 = _now()
            self.copied.synchronize()
            TIMES["staging_sync"] += _now() - t0
            self.copied = None
        if self.buf is not None and nbytes <= self.size:
            return True
        size = max(SLOT_BYTES_MIN, 1 << max(nbytes - 1, 1).bit_length())
        if size > SLOT_BYTES_MAX:
            return False
        import mmap

        self._unregister()
        self.buf = self.mm = None  # (the old mapping goes with the last view of it)
        os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)
        self.buf = torch.frombuffer(self.mm, dtype=torch.uint8)
        self.size = size
        if torch.device(DEVICE).type == "cuda" and _host_register(self.buf.data_ptr(), size):
            self.registered = self.buf.data_ptr()
        return True

    def lend(self):
        """The buffer as a byte tensor of its own storage, for one case's views: while any of them
        lives (a check that kept an input past its trial), the buffer is not written again
        (in_use)."""
        from torch.multiprocessing.reductions import StorageWeakRef

        t = torch.frombuffer(self.mm, dtype=torch.uint8)
        self.lent = StorageWeakRef(t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage())
        return t

    def in_use(self):
        return self.lent is not None and not self.lent.expired()

    def upload(self, image, device):
        """image (a view of the buffer) on device: one copy, without waiting; the event after it."""
        dev = image.to(device, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record()
        STATS["shared_uploads"] += 1
        return dev

    def _unregister(self):
        if self.registered is not None:
            if self.copied is not None:
                self.copied.synchronize()
            _host_unregister(self.registered)
            self.registered = None

    def close(self):
        try:
            self._unregister()
        except Exception:
            pass
        self.buf = None  # (the mapping stays while a case's views of it live)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


#: How long an answer of the helper may take before the helper is taken as stuck and stopped (a
#: preparation takes milliseconds; the first of a check also imports the check's module).
HELPER_TIMEOUT_S = 60.0
#: How long a trial waits for the helper (for it to start, and for each answer): None (the
#: default) waits for its start not at all and for an answer about four times its usual time; a
#: number waits up to that long, so that every case comes from the helper (the tests).
#: NUMWATCH_HELPER_WAIT_S.
def _parse_wait_s(v):
    if v is None or not v.strip():
        return None
    try:
        w = float(v)
        if not 0.0 <= w < math.inf:
            raise ValueError
        return w
    except ValueError:
        print("numwatch-runner: torchcheck: NUMWATCH_HELPER_WAIT_S=%r is not a number of seconds: the default "
              "is used" % v, file=sys.stderr, flush=True)
        return None


HELPER_WAIT_S = _parse_wait_s(os.environ.get("NUMWATCH_HELPER_WAIT_S"))
#: How long the helper may take to start (import torch and the checks' modules) before it is stopped.
HELPER_START_S = 120.0
#: How long reading one of the helper's answers may take once it has begun (it writes an answer
#: at once: a helper stalled in the middle of one is stopped, never waited for).
HELPER_FRAME_S = 10.0
_FRAME = struct.Struct("<Q")


def _wait_readable(fd, timeout_s):
    """Whether fd has something to read (or its end) within timeout_s (None: however long)."""
    import select

    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))))


def _write_frames(fd, parts):
    """Writes each bytes-like of parts, each after its length, to the file descriptor fd, in one
    write where they are small (each write wakes the reader: one for a request)."""
    out = bytearray()
    for part in parts:
        mv = memoryview(part).cast("B")
        out += _FRAME.pack(mv.nbytes)
        out += mv
    mv = memoryview(out)
    while mv.nbytes:
        n = os.write(fd, mv)
        mv = mv[n:]


def _read_exact(fd, n, into=None, deadline=None):
    """n bytes from fd (into the bytearray into when given); EOFError at end of input. deadline
    (time.perf_counter()): each read waits for its bytes only until then (TimeoutError after),
    so that a writer stalled in the middle of a frame cannot hold the reader."""
    buf = into if into is not None else bytearray(n)
    mv = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.perf_counter()
            if left <= 0 or not _wait_readable(fd, left):
                raise TimeoutError("%d of %d bytes of a frame came in time" % (got, n))
        k = os.readv(fd, [mv[got:]])
        if k == 0:
            raise EOFError("the other side of the pipe is gone")
        got += k
    return buf


def _read_frame(fd, deadline=None):
    """One frame _write_frames wrote: a bytearray (deadline: _read_exact's)."""
    return _read_exact(fd, _FRAME.unpack(bytes(_read_exact(fd, _FRAME.size, None, deadline)))[0], None, deadline)


class _CasePickler(pickle.Pickler):
    """Pickles a prepared Case with its tensors out of band: each a contiguous CPU tensor that
    shares no memory with another, sent as its bytes (_case_to_frames)."""

    def __init__(self, f, tensors, places=None):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors = tensors
        self.places = places or {}
        self.ids = {}

    def persistent_id(self, obj):
        if isinstance(obj, torch.Generator):
            raise pickle.PicklingError("a torch.Generator in the case")
        if not isinstance(obj, torch.Tensor):
            return None
        at = self.places.get(id(obj))
        if at is not None:  # its bytes lie in the shared buffer: sent as where
            return ("slot", at[0], str(obj.dtype).replace("torch.", ""), tuple(obj.shape))
        j = self.ids.get(id(obj))
        if j is None:
            if (obj.device.type != "cpu" or obj.requires_grad or obj.layout != torch.strided or not obj.is_contiguous()
                    or obj.dtype not in _BYTE_DTYPES or type(obj) is not torch.Tensor):
                raise pickle.PicklingError("a tensor the helper does not send")
            j = self.ids[id(obj)] = len(self.tensors)
            self.tensors.append(obj)
        return j


#: The dtypes a prepared case's tensors may have, and the dtype numpy sees their bytes as.
_BYTE_DTYPES = {torch.float64: torch.float64, torch.float32: torch.float32, torch.float16: torch.float16,
                torch.bfloat16: torch.int16, torch.int64: torch.int64, torch.int32: torch.int32,
                torch.int16: torch.int16, torch.int8: torch.int8, torch.uint8: torch.uint8, torch.bool: torch.bool}


def _slot_places(case, out):
    """{id(tensor): (offset, tensor)} of the case's tensors whose bytes lie in out (the buffer the
    helper shares, where _image wrote the case's upload): the image itself, and each contiguous
    tensor of its sections in its own dtype (the inputs, the output gradients drawn with the case),
    end to end there as _write_image laid them. Empty where the image is not in out."""
    img = case._image
    if out is None or img is None or img.numel() == 0 or img.data_ptr() != out.data_ptr():
        return {}
    places = {id(img): (0, img)}
    groups = _upload_plan(case)
    alone = _alone(groups)
    sections, _ = _image_layout([g for j, g in enumerate(groups) if j not in alone])
    for off, dtype, ts, _, conv in sections:
        if conv:
            continue
        for t in ts:
            if t.is_contiguous() and type(t) is torch.Tensor and not t.requires_grad:
                places.setdefault(id(t), (off, t))
            off += t.numel() * _element_size(dtype)
    return places


def _case_to_frames(case, out=None):
    """A prepared case as frames: the pickle (tensors by number, or by where they lie in out, the
    buffer shared with the runner: _slot_places), the layout of the others, their bytes (each at a
    multiple of 64 bytes)."""
    import io

    tensors = []
    f = io.BytesIO()
    gen, case.gen = case.gen, None
    try:
        _CasePickler(f, tensors, _slot_places(case, out)).dump((case, gen.get_state()))
    finally:
        case.gen = gen
    spans, at = [], 0
    for t in tensors:
        # Two tensors sharing memory would come back apart: such a case is prepared in line.
        spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
    spans.sort()
    for (_, e1), (b2, _) in zip(spans, spans[1:]):
        if b2 < e1:
            raise pickle.PicklingError("tensors of the case share memory")
    layout, blobs = [], []
    for t in tensors:
        nb = t.numel() * t.element_size()
        layout.append((str(t.dtype).replace("torch.", ""), tuple(t.shape), at, nb))
        if nb:
            blobs.append((at, t.view(_BYTE_DTYPES[t.dtype]).numpy() if t.dtype == torch.bfloat16 else t.numpy()))
        at += -(-nb // 64) * 64
    return f.getvalue(), pickle.dumps(layout, protocol=pickle.HIGHEST_PROTOCOL), at, blobs


class _CaseUnpickler(pickle.Unpickler):
    def __init__(self, f, tensors, slot=None):
        super().__init__(f)
        self.tensors = tensors
        self.slot = slot
        self.in_slot = False  # whether a tensor of the case lies in the shared buffer
        self.typed = {}  # dtype -> the shared buffer as that dtype
        self.lent = None  # the buffer as the slot lent it for this case (_SharedSlot.lend)

    def persistent_load(self, pid):
        if isinstance(pid, tuple):  # ("slot", offset, dtype, shape): a view of the shared buffer
            _, off, dt, shape = pid
            dtype = getattr(torch, dt)
            n = 1
            for d in shape:
                n *= d
            size = _element_size(dtype)
            buf = self.slot.buf if self.slot is not None else None
            if buf is None or off % size or off + n * size > self.slot.size:
                raise pickle.UnpicklingError("a tensor beyond the shared buffer")
            if not self.in_slot:
                self.lent = self.slot.lend()
            self.in_slot = True
            # (the buffer's size, a power of two from SLOT_BYTES_MIN, is a multiple of any element's)
            return _view_at(self.lent, self.typed, dtype, off, tuple(shape))
        return self.tensors[pid]


class _Helper:
    """A process that prepares trials ahead (TorchCheck._prepare with ahead): a Python of its own
    (the same interpreter, sys.path and main module, as multiprocessing's spawn starts one, so
    that it has the checks' classes), answering one request at a time on pipes of its own (its
    stdin and stdout; what it prints goes to stderr); a runner has AHEAD_DEPTH of them, so that
    two requests are prepared at once (one helper alone takes about as long as a trial). A
    request is (check name, the check as a pickle when it changed: its attributes and its
    class's, the trial's key, the output gradients' guess, BATCH_ALL, the shared buffer to write
    into); the answer the prepared Case (its upload image and the tensors in it as places in the
    shared buffer, _SharedSlot; other tensors as raw bytes) and the generator's state, from which
    the trial's Gen is made again here. They are started by the second of two consecutive seeds
    (_Ahead.start), with no GPU visible (CUDA_VISIBLE_DEVICES=""), OpenMP's idle threads asleep
    (OMP_WAIT_POLICY=PASSIVE unless set: spinning ones took the cores the runner needed), SIGINT
    ignored, and PR_SET_PDEATHSIG on Linux (it dies with the runner's thread that started it).
    Until it says it is ready (it imports torch and the checks' module, a few seconds; stopped
    after HELPER_START_S) trials are prepared in line; a check that does not pickle or holds a
    tensor off the CPU, or a case that does not pickle (a generator, tensors that share memory,
    ...), is prepared in line; a helper that fails, dies or stalls (an answer later than
    HELPER_TIMEOUT_S, or one that stops in the middle for HELPER_FRAME_S) is stopped with the
    others, and every trial is prepared in line, with one line on stderr. It ends when this process's end of its
    stdin closes (at exit, or when this process dies: numwatchd kills the runner's process group
    anyway)."""

    def __init__(self):
        import subprocess

        self.state = "starting"
        self.sent = {}  # check name -> (check, _check_state()) as the helper has it
        self.pending = None  # the request whose answer is not read yet
        self.sent_at = 0.0
        self.took = None  # how long the helper takes to answer, about (a moving average, seconds)
        self.started = time.perf_counter()
        # The buffers it writes cases into (_SharedSlot: two, in turn), or None where this system has
        # no memory files (every case comes through the pipe); need: the largest image it could
        # not fit (they grow to it).
        self.slots, self.turn, self.need = None, 0, 0
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            self.slots = []
            try:
                for _ in range(2):
                    self.slots.append(_SharedSlot())
            except OSError:
                for sl in self.slots:
                    sl.close()
                self.slots = None
        # No GPU in the helper (a case is made on the CPU: a check that reaches for the device there
        # fails, and its case is prepared in line); its parent's pid, to die with it (_helper_main).
        env = dict(os.environ, NUMWATCH_PREPARE_AHEAD="0", NUMWATCH_TORCH_DEVICE=DEVICE,
                   OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY") or "PASSIVE",
                   PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="", NUMWATCH_HELPER_PARENT=str(os.getpid()))
        env.pop("NUMWATCH_TORCH_STATS", None)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # SIGINT ignored from the start (a Ctrl-C at the terminal is the runner's to handle).
        code = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); import sys; sys.path.insert(0, %r); "
                "from numwatch_runner.torchcheck import _helper_main; _helper_main()" % here)
        main = sys.modules.get("__main__")
        # What the cases depend on besides the seed: the same modules, and torch's default dtype
        # (set at run time; what the main module sets when imported, the helper sets too). Cases
        # are made on one CPU thread everywhere (_one_thread).
        init = {"path": list(sys.path), "main_path": None, "main_name": None,
                "default_dtype": str(torch.get_default_dtype()).replace("torch.", "")}
        spec = getattr(main, "__spec__", None)
        if spec is not None and getattr(spec, "name", None):
            if spec.name != "__main__" and not spec.name.endswith(".__main__"):
                init["main_name"] = spec.name
        elif getattr(main, "__file__", None):
            init["main_path"] = os.path.abspath(main.__file__)
        if main is not None:  # the helper's classes of the main module are __mp_main__'s: the same here
            sys.modules.setdefault("__mp_main__", main)
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=env, close_fds=True, bufsize=0)
            self.wfd, self.rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
            try:  # room for a whole case in the pipe: the helper's write is done before the trial reads
                import fcntl

                fcntl.fcntl(self.rfd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
            except Exception:
                pass
            _write_frames(self.wfd, [pickle.dumps(init, protocol=pickle.HIGHEST_PROTOCOL)])
        except Exception as e:
            self._stop("cannot start it: %s: %s" % (type(e).__name__, e))
            return
        import atexit

        atexit.register(self.close)

    def ready(self):
        """Whether it answers requests (False while it starts, and after it failed). One that has
        not said it is ready HELPER_START_S after it was started is stopped."""
        if self.state == "starting":
            try:
                left = self.started + HELPER_START_S - time.perf_counter()
                if left <= 0 or not _wait_readable(self.rfd, min(HELPER_WAIT_S or 0.0, left)):
                    if time.perf_counter() - self.started >= HELPER_START_S:
                        self._stop("it did not start in %g s" % HELPER_START_S)
                    return False
                msg = pickle.loads(_read_frame(self.rfd, time.perf_counter() + HELPER_FRAME_S))
            except Exception as e:
                self._stop("it did not start: %s: %s" % (type(e).__name__, e))
                return False
            if msg != "ready":
                self._stop("it did not start: %s" % (msg,))
                return False
            self.state = "ready"
        return self.state == "ready"

    def idle(self):
        """Whether a request can be sent to it now: it serves, and the answer of its last request
        was taken, or was thrown away and has come (read and dropped here: answers stay in step;
        waiting HELPER_WAIT_S for it, no time by default)."""
        if not self.ready():
            return False
        job = self.pending
        if job is None:
            return True
        if not job.dropped or not self._arrived(HELPER_WAIT_S or 0.0):
            return False
        self._read(job, False)
        return self.state == "ready"

    def _next_slot(self):
        """The shared buffer the next case goes into (the last copy out of it done, grown to the
        largest case seen), or None: through the pipe."""
        if self.slots is None:
            return None
        slot = self.slots[self.turn]
        try:
            if slot.in_use():  # (a case's input kept past its trial: never written over)
                new = _SharedSlot()
                slot.close()
                slot = self.slots[self.turn] = new
            if not slot.ready(self.need):
                return None
        except Exception as e:  # (no room for a memory file, a page-locking refused): the pipe from now on
            print("numwatch-runner: torchcheck: no memory shared with the helper (%s: %s): its cases come "
                  "through a pipe" % (type(e).__name__, e), file=sys.stderr, flush=True)
            for sl in self.slots:
                sl.close()
            self.slots = None
            return None
        self.turn ^= 1
        return slot

    def submit(self, check, key, blob):
        """Sends the request of key; a handle to take its case, or None (prepare it in line).
        blob: _check_state(check), the check as the helper is to have it."""
        if not self.idle():
            return None
        slot = self._next_slot()
        # The check as the helper has it: its class and attributes, sent again when their pickle
        # changes (the output gradients' guess goes with each request); the buffer to write into.
        last = self.sent.get(check.name)
        same = last is not None and last[0] is check and last[1] == blob
        req = (check.name, None if same else blob, key, check._douts_rule, _together(DEVICE),
               (slot.fd, slot.size, slot.ino) if slot is not None else None)
        try:
            _write_frames(self.wfd, [pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL)])
        except Exception as e:
            self._stop("cannot send it a request: %s: %s" % (type(e).__name__, e))
            return None
        if not same:
            self.sent[check.name] = (check, blob)
        self.pending = _HelperJob(self, check, key, slot)
        self.sent_at = time.perf_counter()
        return self.pending

    def _arrived(self, wait_s):
        """Whether the pending answer is there to read (waiting up to wait_s); a helper whose answer
        is later than HELPER_TIMEOUT_S is stopped."""
        if _wait_readable(self.rfd, wait_s):
            return True
        if time.perf_counter() - self.sent_at > HELPER_TIMEOUT_S:
            self._stop("no answer in %g s" % HELPER_TIMEOUT_S)
        return False

    def answer(self, job, want):
        """The case the helper prepared for job (the pending request) when want, else None. A trial
        waits for it about four times as long as the helper usually takes (10 ms until it has
        answered once), then prepares its case in line: the answer is read, and dropped, before the
        next request is sent (a helper that falls behind, or imports a check's module, costs no
        more than the in-line preparation)."""
        if self.pending is not job or self.state != "ready":
            return None
        wait = 0.010 if self.took is None else min(4.0 * self.took + 0.001, 1.0)
        # (a request sent trials ago, and begun late behind one thrown away, still gets about twice
        # a preparation's time: less than preparing it here would cost)
        left = max(wait - (time.perf_counter() - self.sent_at), min(wait / 2, 0.5))
        if HELPER_WAIT_S is not None:
            left = max(0.0, HELPER_WAIT_S - (time.perf_counter() - self.sent_at))
        if not want or not self._arrived(left):
            job.dropped = True  # read when it comes, before the next request (idle), and dropped
            return None
        return self._read(job, want)

    def _read(self, job, want):
        self.pending = None
        try:
            deadline = time.perf_counter() + HELPER_FRAME_S  # (it writes an answer at once)
            name, key, ok, took, head, layout, need = pickle.loads(_read_frame(self.rfd, deadline))
            self.need = max(self.need, need)  # (an image that did not fit: the buffers grow to it)
            if (name, key) != (job.check.name, job.key):
                raise RuntimeError("answers out of step: %r for %r" % ((name, key), (job.check.name, job.key)))
            # How long it takes to prepare a case, as it measured it (the first of a check, which
            # imports the check's module, left out when it is far longer than the rest).
            self.took = took if self.took is None else 0.8 * self.took + 0.2 * min(took, 10 * self.took)
            if ok:
                TIMES["worker_jobs"] += 1
                TIMES["worker"] += int(took * 1e9)
            if not ok:
                return None  # it could not prepare the case (an exception, or a case it does not send)
            buf = _read_frame(self.rfd, deadline)
        except Exception as e:
            self._stop("%s: %s" % (type(e).__name__, e))
            return None
        if not want:
            return None
        import io

        try:
            tensors = []
            for dt, shape, at, nb in pickle.loads(layout):
                dtype = getattr(torch, dt)
                if nb:  # views of the one buffer read (each at a multiple of 64 bytes), no copy
                    n = nb // torch.empty((), dtype=dtype).element_size()
                    tensors.append(torch.frombuffer(buf, dtype=dtype, count=n, offset=at).view(shape))
                else:
                    tensors.append(torch.empty(shape, dtype=dtype))
            unpickler = _CaseUnpickler(io.BytesIO(head), tensors, job.slot)
            case, state = unpickler.load()
        except Exception:  # (a class of the case this process cannot find, ...): prepared in line
            return None
        if unpickler.in_slot:
            case._slot = job.slot
            STATS["ahead_shared"] += 1
        dtype, seed, family, index = job.key[:4]
        # the trial's generator where make_case left it (no seeding: the state is whole)
        case.gen = _StoredGen(state, seed, index, family, dtype)
        case.device = DEVICE
        return case

    def _stop(self, why):
        if self.state != "dead":
            self.state = "dead"
            print("numwatch-runner: torchcheck: the helper that prepares trials ahead is stopped, trials are "
                  "prepared in line (%s)" % why, file=sys.stderr, flush=True)
        self.close()

    def close(self):
        proc = getattr(self, "proc", None)
        self.proc = None
        if proc is not None:
            try:
                proc.stdout.close()  # an answer it is writing fails,
                proc.stdin.close()  # and its end of input ends it
                proc.wait(2)
            except Exception:
                proc.kill()
                try:
                    proc.wait(2)
                except Exception:
                    pass
        for slot in getattr(self, "slots", None) or ():  # (after it: it maps them by their numbers)
            slot.close()
        self.slots = None


class _HelperJob:
    """The handle of a request sent to a helper (slot: the _SharedSlot its case is written into, or
    None)."""

    def __init__(self, helper, check, key, slot=None):
        self.helper, self.check, self.key, self.slot = helper, check, key, slot
        self.dropped = False

    def result(self):
        t0 = _now()
        try:
            return self.helper.answer(self, True)
        finally:
            TIMES["case_wait"] += _now() - t0

    def discard(self):
        self.dropped = True
        self.helper.answer(self, False)


def _die_with_parent():
    """The helper dies with the runner (Linux: PR_SET_PDEATHSIG, SIGKILL when the thread that
    started it ends; a parent gone already: exit). Elsewhere it ends when its stdin does."""
    parent = os.environ.get("NUMWATCH_HELPER_PARENT")
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:
            pass
    if parent and os.getppid() != int(parent):
        os._exit(0)


def _shared_buffer(shared, parent, slot):
    """The runner's shared buffer slot = (its fd, its size) as a byte tensor (mapped once through
    /proc/<parent>/fd, again when it grew), or None (no slot, or it cannot be mapped: the pipe)."""
    if slot is None:
        return None
    fd, size, ino = slot
    m = shared.get(fd)
    if m is None or m[0] != (size, ino):
        import mmap

        shared.pop(fd, None)
        try:
            with open("/proc/%d/fd/%d" % (parent, fd), "r+b") as f:
                if os.fstat(f.fileno()).st_ino != ino:  # (not the runner's buffer: that number is another file now)
                    return None
                m = shared[fd] = ((size, ino), torch.frombuffer(mmap.mmap(f.fileno(), size), dtype=torch.uint8))
        except (OSError, ValueError):
            if os.environ.get("NUMWATCH_HELPER_DEBUG"):
                import traceback

                traceback.print_exc()
            return None
    return m[1]


def _helper_main():
    """The helper process (_Helper): answers requests on its stdin and stdout until its stdin ends."""
    import importlib
    import runpy
    import traceback
    import types

    global BATCH_ALL, _IN_HELPER
    _IN_HELPER = True
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # what the checks' modules print goes to stderr, as in the runner
    sys.stdout = sys.stderr
    try:
        init = pickle.loads(_read_frame(rfd))
        sys.path[:] = init["path"]
        torch.set_num_threads(1)  # (it makes cases only: on one thread, as everywhere: _one_thread)
        torch.set_default_dtype(getattr(torch, init["default_dtype"]))
        if init["main_path"] or init["main_name"]:  # the runner's main module, where its checks may be
            mod = types.ModuleType("__mp_main__")
            if init["main_path"]:
                mod.__dict__.update(runpy.run_path(init["main_path"], run_name="__mp_main__"))
            else:
                mod = importlib.import_module(init["main_name"])
            sys.modules["__main__"] = sys.modules["__mp_main__"] = mod
        _write_frames(wfd, [pickle.dumps("ready")])
    except BaseException as e:
        try:
            _write_frames(wfd, [pickle.dumps("%s: %s" % (type(e).__name__, e))])
        except Exception:
            pass
        return
    checks = {}
    shared = {}  # the runner's fd -> (its size, a byte tensor over it)
    parent = int(os.environ.get("NUMWATCH_HELPER_PARENT") or os.getppid())
    while True:
        try:
            name, blob, key, rule, together, slot = pickle.loads(_read_frame(rfd))
        except EOFError:
            return
        t0 = time.perf_counter()
        frames = None
        need = 0
        try:
            if blob is not None:
                cls, state, classes = pickle.loads(blob)
                for klass, attrs in classes:  # (as the runner has them now)
                    for k, v in attrs.items():
                        setattr(klass, k, pickle.loads(v))
                c = cls.__new__(cls)
                c.__dict__.update(state)
                checks[name] = c
            c = checks[name]
            c._douts_rule = rule
            BATCH_ALL = together
            _HELPER_OUT[0] = _shared_buffer(shared, parent, slot)
            case = c._prepare(key[0], key[1], key[2], key[3], True)
            out, _HELPER_OUT[0] = _HELPER_OUT[0], None
            if out is not None and case._image is not None and case._image.numel() > out.numel():
                need = case._image.numel()  # (it did not fit: the runner grows the buffer)
            head, layout, n, blobs = _case_to_frames(case, out)
        except Exception:
            _HELPER_OUT[0] = None
            if os.environ.get("NUMWATCH_HELPER_DEBUG"):
                traceback.print_exc()
        else:
            frames = (head, layout, n, blobs)
        try:
            # The answer: (the request, whether prepared, how long it took, the case's pickle, its
            # tensors' layout, the bytes an image that did not fit the shared buffer needs), then the
            # bytes of the tensors that are not in the shared buffer.
            head, layout, n, blobs = frames or (None, None, 0, [])
            meta = pickle.dumps((name, key, frames is not None, time.perf_counter() - t0, head, layout, need),
                                protocol=pickle.HIGHEST_PROTOCOL)
            if frames is None:
                _write_frames(wfd, [meta])
                continue
            out = bytearray(_FRAME.pack(len(meta)))
            out += meta
            out += _FRAME.pack(n)
            at = 0
            for off, arr in blobs:  # the tensors' bytes, each at its offset (a copy: one write)
                out += bytes(off - at)
                mv = memoryview(arr).cast("B")
                out += mv
                at = off + mv.nbytes
            out += bytes(n - at)
            mv = memoryview(out)
            while mv.nbytes:
                k = os.write(wfd, mv)
                mv = mv[k:]
        except (BrokenPipeError, OSError):
            return


# ---- metric graphs ------------------------------------------------------------------------------

#: Whether a trial's metrics and digests (the SDK's own operations after the kernel: some 50 a
#: trial) replay a CUDA graph captured for their shape instead of being launched one by one (_Graphs).
#: None: on where the device is a GPU; NUMWATCH_TORCH_GRAPHS=0 turns them off. The answers are the same.
GRAPHS = _env_flag("NUMWATCH_TORCH_GRAPHS")
#: Graphs a process keeps (the least recently used dropped), and about how much device memory they may
#: hold together (a graph that alone would hold more is never captured): each its static buffers, and
#: its intermediates and output in the graphs' one memory pool (about
#: 25 MB for the example's largest key, 3 outputs of 64K elements; 0.4 MB for the smallest). The
#: example's 10 checks x dtypes use about 70 keys at one number of repeats.
GRAPHS_MAX = 256
GRAPH_BYTES_MAX = 1 << 29
#: The longest output (elements) measured by a graph; longer ones eagerly (their time is elements).
GRAPH_WIDTH_MAX = 1 << 20
#: The shortest row of a graph: outputs are padded to a power of two from here (the metrics and
#: digests do not change with padding), so that a few graphs serve every shape.
GRAPH_WIDTH_MIN = 1024
#: Replays of a graph checked against the eager measurement of the same trial before it is trusted.
GRAPH_VERIFY = 2
#: What captures and replays graphs: _CudaGraph on a GPU; tests and the bench's --emulate-graphs
#: set _EmulatedGraph to run the same path on the CPU.
_GRAPH_IMPL = None


def _graphs_on(device):
    if GRAPHS is False or _GRAPHS.dropped:
        return False
    if _GRAPH_IMPL is not None:
        return True
    return torch.device(device).type == "cuda"


def _graph_width(n):
    """The padded row length of a graph for outputs of at most n elements, or None (eagerly)."""
    if n <= 0 or n > GRAPH_WIDTH_MAX:
        return None
    return 1 << max(n - 1, GRAPH_WIDTH_MIN - 1).bit_length()


class _CudaGraph:
    """torch.cuda.CUDAGraph, captured on a side stream (after one eager run there, as torch asks)
    without torch.cuda.graph()'s device synchronisation, garbage collection and emptied cache
    (each capture would cost tens of milliseconds), with errors of this thread only
    (capture_error_mode "thread_local": the thread that prepares trials ahead does host work
    meanwhile). Replayed on the current stream. Every graph's intermediates and output are in one
    memory pool (pool): the graphs are replayed one at a time on one stream, and each replay's
    output is read (_Graphs.measure) before another graph replays; an output stays allocated in
    the pool while its graph is kept, so no other graph's capture is given its memory."""

    stream = None
    pool = None

    def capture(self, fn):
        cur = torch.cuda.current_stream()
        if _CudaGraph.stream is None:
            _CudaGraph.stream = torch.cuda.Stream()
        if _CudaGraph.pool is None:
            _CudaGraph.pool = torch.cuda.graph_pool_handle()
        s = _CudaGraph.stream
        s.wait_stream(cur)  # the static inputs were written on the current stream
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            fn()  # warm-up, eagerly
            try:
                g.capture_begin(pool=_CudaGraph.pool, capture_error_mode="thread_local")
            except TypeError:  # a torch without the argument
                g.capture_begin(pool=_CudaGraph.pool)
            try:
                out = fn()
            except BaseException:
                try:  # the capture's own error, not capture_end()'s about it
                    g.capture_end()
                except Exception:
                    pass
                raise
            g.capture_end()
        cur.wait_stream(s)
        self.graph, self.out = g, out
        return out

    def replay(self):
        self.graph.replay()


class _EmulatedGraph:
    """_CudaGraph's stand-in on the CPU (tests, bench/torch-sdk.py --emulate-graphs): capture()
    runs fn once as a warm-up and once more for the output, replay() runs it again into that
    output's memory, as a CUDA graph's replay rewrites it."""

    def capture(self, fn):
        fn()
        self.fn, self.out = fn, fn()
        return self.out

    def replay(self):
        self.out.copy_(self.fn())


class _Graph:
    """One captured measurement: its static inputs, its output and its decoding layout."""

    __slots__ = ("key", "impl", "TD", "F", "U", "E", "CN", "layout", "verified", "nbytes", "consts")


class _Graphs:
    """A trial's metrics and digests (_Batch._measure of every output together, and the repeats'
    digests) as one CUDA graph per shape, replayed with the trial's values copied into its static
    inputs: about 8 device operations a trial instead of about 55 (on a GPU each is a launch).

    Only the SDK's own operations are captured, never the check's or the library's code (the
    reference, the plain programs, the kernel, autograd): those may branch on values on the host,
    read the inputs' CPU copies, allocate, synchronise or differ from call to call, and a graph
    would replay their first call's decisions silently. The metrics are a fixed sequence of tensor
    operations whose only inputs are the laid-out rows, which pad to a power of two without changing
    any value (see _Batch: a pad is finite, written, exact and 0 in every maximum and count that is
    not corrected for), so a key of (device, dtype, programs, outputs, padded width, repeats,
    tolerance, which masks, floor scales and canaries) serves many shapes: the example's checks
    use about 7 a check and dtype.

    Safety: a key is captured the second time it is seen; each graph's first GRAPH_VERIFY replays
    are checked against the eager measurement of the same trial (every metric and digest); any
    exception (capture, replay, a constant made during capture) or disagreement turns graphs off
    for that check, with one line on stderr, and the trial answers eagerly; but the device's
    memory running out (in a capture or a replay) drops every graph, empties torch's cache and
    turns graphs off for the process (one line; the trial measured eagerly), and an error that
    ends the device context (_fatal) is the trial's fatal error, as it would be eagerly. GRAPHS
    (the NUMWATCH_TORCH_GRAPHS environment variable) turns them off altogether."""

    def __init__(self):
        import collections

        self.cache = collections.OrderedDict()
        self.nbytes = 0  # of the graphs in the cache, about
        self.seen = {}
        self.off = set()  # check names
        self.dropped = None  # why every graph was dropped and graphs are off for the process (out of memory)
        self.too_big = set()  # keys whose graph alone would pass GRAPH_BYTES_MAX: measured eagerly

    def measure(self, check, batch, laid, lw, td, eager):
        """(tensors, hashes) of the trial as eager() measures them, or None: not graphed (then
        measure eagerly). batch: the trial's one _Batch; laid: each repeat's outputs as the pieces
        of padded rows of lw (the graph's width) in td."""
        items = batch.items
        T, R = len(items), len(laid)
        dev = items[0].ref.device
        progs, refs = batch._x_rows()
        if any(t.dtype != td for t in progs):
            return None  # (a plain program's rows in another dtype: the static inputs' layout does not hold)
        fs = [it.floor_scale for it in items if isinstance(it.floor_scale, torch.Tensor)]
        cn = [it.canary for it in items if isinstance(it.canary, torch.Tensor)]
        unw = [it.unwritten for it in items]
        exc = [it.exclude for it in items]
        has_unw = any(m is not None for m in unw)
        has_exc = any(m is not None for m in exc)
        key = (str(dev), batch.dtype, str(td), 2 + (batch.nplain or 0), T, lw, R, batch.atol, batch.rtol,
               has_unw, has_exc, len(fs), len(cn))
        g = self.cache.get(key)
        if g is None:
            n = self.seen.get(key, 0) + 1
            if len(self.seen) >= 16 * GRAPHS_MAX:
                self.seen.clear()
            self.seen[key] = n
            if n < 2:
                return None  # once: eagerly (a shape seen once is not worth a capture)
        if g is None:
            if key in self.too_big:
                return None
            # About what it holds: its inputs, and in the pool X in float64, the float64 rows of the
            # maxima and some ten more (T, lw) tensors of intermediates (measured on the CPU's allocator).
            nplain = 2 + (batch.nplain or 0)
            nbytes = nplain * T * lw * 8 * 2 + T * lw * 8 * 17 + (nplain - 1 + R) * T * lw * _element_size(td)
            if nbytes > GRAPH_BYTES_MAX:  # never a graph larger than the budget
                self.too_big.add(key)
                return None
            # Room for it first (the least recently used dropped): the budget holds with it.
            while self.cache and (len(self.cache) + 1 > GRAPHS_MAX or self.nbytes + nbytes > GRAPH_BYTES_MAX):
                self.nbytes -= self.cache.popitem(last=False)[1].nbytes
        want = eager() if g is None or g.verified < GRAPH_VERIFY else None  # before finish() below
        oom = None
        try:
            fresh = g is None
            if fresh:
                g = _Graph()
                g.key, g.verified, g.nbytes = key, 0, nbytes
                # In the check's dtype the rows of X but the reference's, then every repeat's rows
                # to digest; in float64 the reference's rows, then the floor scales: each written
                # with one cat, the rest done in the graph.
                g.TD = torch.zeros((nplain - 1 + R) * T * lw, dtype=td, device=dev)
                g.F = torch.zeros(T * lw + len(fs), dtype=torch.float64, device=dev)
                g.U = torch.zeros((T, lw), dtype=torch.bool, device=dev) if has_unw else None
                g.E = torch.zeros((T, lw), dtype=torch.bool, device=dev) if has_exc else None
                g.CN = torch.zeros(len(cn), dtype=torch.int64, device=dev) if cn else None
            _cat_into(_padded(progs, lw, dev) + [t for p in laid for t in p], g.TD)
            _cat_into(_padded(refs, lw, dev) + [f.reshape(1) if f.device == dev else f.reshape(1).to(dev) for f in fs],
                      g.F)
            if has_unw:
                _cat_into(batch._mask_pieces(unw, lw), g.U)
            if has_exc:
                _cat_into(batch._mask_pieces(exc, lw), g.E)
            if cn:
                _cat_into([c.reshape(1) for c in cn], g.CN)
            t0 = _now()
            if fresh:
                r0 = TIMES["read"]
                try:
                    self._capture(g, batch, lw)
                finally:
                    TIMES["capture"] += _now() - t0 - (TIMES["read"] - r0)
                STATS["graph_captures"] += 1
            else:
                g.impl.replay()
                TIMES["replay"] += _now() - t0
            if fresh:
                self.cache[key] = g
                self.nbytes += g.nbytes
            self.cache.move_to_end(key)
            STATS["graph_replays"] += 1
            vals = _host(g.impl.out)  # read before any other graph replays (they share one memory pool)
            batch.width, batch.layout, batch.ntail = lw, g.layout, []
            nd = R * T
            got = (batch.finish(vals[:len(vals) - nd])[0], vals[len(vals) - nd:])
        except Exception as e:
            _CudaGraph.stream = None  # a new side stream for the next capture, whatever this one's state
            what = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            if _out_of_memory(e):
                oom = what  # handled below, once this exception's frames (and the graph's tensors) are gone
            elif _fatal(e) and not _capture_error(e):
                raise  # the device context is gone: a fatal error, whatever the graphs' part in it
            else:
                self._off(check, key, what)
                return want
        if oom is not None:
            g = None
            self._drop_all(oom)
            return want  # (None: the trial measures eagerly)
        if want is not None:
            if got != want:
                self._off(check, key, "a replay disagreed with the eager measurement")
                return want
            g.verified += 1
            STATS["graph_verified"] += 1
        return got

    def _capture(self, g, batch, lw):
        """Captures the measurement of g's static inputs and replays it once (its output then
        holds this trial's values). The constants it uses (_const, the digest's weights) exist
        before the capture: the eager warm-up makes them; one made during the capture would hold
        nothing until a replay, so that is an error."""
        m = _Batch(batch.dtype, batch.atol, batch.rtol)  # the tolerance and dtype alone: no tensors kept
        TD, F, U, E, CN = g.TD, g.F, g.U, g.E, g.CN
        K, T = 2 + (batch.nplain or 0), len(batch.items)
        progs, refs = (K - 1) * T * lw, T * lw

        def fn():
            X = torch.cat([TD[:progs].to(torch.float64), F[:refs]]).view(K, T, lw)
            parts = m._measure(X, U, E)
            if F.numel() > refs:
                parts.append(F[refs:].view(torch.int64))
            if CN is not None:
                parts.append(CN)
            parts.append(_digest_rows(TD[progs:].view(-1, lw)))
            return torch.cat(parts)

        impl = (_GRAPH_IMPL or _CudaGraph)()
        fn()  # the constants made eagerly
        before = ({k: id(v) for k, v in _CONST.items()}, {k: id(v) for k, v in _WEIGHTS.items()})
        impl.capture(fn)
        after = ({k: id(v) for k, v in _CONST.items()}, {k: id(v) for k, v in _WEIGHTS.items()})
        if after != before:
            for d, ids in zip((_CONST, _WEIGHTS), before):
                for k in [k for k in d if ids.get(k) != id(d[k])]:
                    del d[k]  # made during the capture: never to be used eagerly
            raise RuntimeError("a constant was made during the capture")
        impl.replay()
        # The constants a replay reads, kept with the graph: a CUDA graph holds their addresses, and
        # _const and _digest_weights replace a tensor by a longer one when longer rows come (the old
        # one's memory would go back to the allocator for anything else to use).
        g.consts = list(_CONST.values()) + list(_WEIGHTS.values())
        g.impl, g.layout = impl, m.layout

    def _drop_all(self, why):
        """Out of device memory in a capture or a replay: every graph dropped (their memory given
        back to the device), graphs off for the rest of the process, one line on stderr."""
        import gc

        self.cache.clear()
        self.nbytes = 0
        self.seen.clear()
        self.dropped = why
        _CudaGraph.pool = None
        STATS["graphs_dropped"] += 1
        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        print("numwatch-runner: torchcheck: out of device memory in a metric graph (%s): every graph dropped, "
              "metric graphs off for this process, trials measured eagerly" % why, file=sys.stderr, flush=True)

    def _off(self, check, key, why):
        g = self.cache.pop(key, None)
        if g is not None:
            self.nbytes -= g.nbytes
        if check.name not in self.off:
            self.off.add(check.name)
            STATS["graph_off"] += 1
            print("numwatch-runner: torchcheck: %s: metric graphs off for this check, its trials measured "
                  "eagerly (%s)" % (check.name, why), file=sys.stderr, flush=True)


_GRAPHS = _Graphs()


# ---- the check ----------------------------------------------------------------------------------


def _as_dict(out, names):
    if isinstance(out, torch.Tensor):
        return {names[0] if names else "y": out}
    if isinstance(out, dict):
        return dict(out)
    if isinstance(out, (list, tuple)):
        if len(names) < len(out):
            raise TrialError("%d outputs returned; name them with 'outputs' or return a dict" % len(out))
        return dict(zip(names, out))
    raise TrialError("a program returned %r, not a tensor, a tuple or a dict of tensors" % type(out).__name__)


class TorchCheck(Check):
    """One pass of one op on torch tensors. Subclass it and set:

    op             the op's name; the check is op.fwd, or op.bwd with backward=True
                   (TorchCheck.both() makes the two); or set name yourself
    dtypes, families, deterministic, budget_factor, floor_eps, atol, rtol,
    tail_width     as for nw.Check
    grads          the inputs whose gradients a bwd check judges (outputs "d<name>")
    outputs        names of a forward's outputs when a program returns a tensor
                   or a tuple (default "y"); a dict names its own

    and implement:

    make_case(g, family, dtype) -> Case
        Draw from g (Gen) alone; floating inputs in the dtype the kernel takes.
    reference(case, **inputs) -> tensor, tuple or dict of tensors
        The op, straightforwardly. The SDK calls it on float64 inputs for the
        reference and, unless plain() is defined, on the dtype's inputs as the
        plain same-dtype program.
    plain(case, **inputs)       (optional) the same-dtype program (plain_programs() for several)
    kernel(case, **inputs)      the library under test, on the device
    floor_scales(case, inputs, douts) -> {output: scale}   (optional)
        For an output that is a difference of larger terms (a gradient that
        is exactly 0 where one key gets all the weight): the size of those
        terms, computed from the float64 inputs and output gradients (douts:
        None for a forward check); the budget's floor scales with it instead
        of max|ref| (as case.floor_scale). Return 0-dimensional tensors (not
        float(t)): they stay on the device until the trial's one read, where
        a float() would wait for the device.
    """

    op = None
    backward = False
    grads = ()
    outputs = ("y",)

    def __init__(self, backward=None):
        if backward is not None:
            self.backward = backward
        if self.name is None and self.op:
            self.name = "%s.%s" % (self.op, "bwd" if self.backward else "fwd")
        if self.backward and not self.grads:
            raise ValueError("check %r: a backward check needs grads" % self.name)

    @classmethod
    def both(cls):
        """The forward check and, when grads are declared, the backward one."""
        out = [cls(backward=False)]
        if cls.grads:
            out.append(cls(backward=True))
        return out

    def pass_name(self):
        if self.pass_:
            return self.pass_
        return "bwd" if self.backward else "fwd"

    def make_case(self, g, family, dtype):
        raise NotImplementedError("%s.make_case" % type(self).__name__)

    def reference(self, case, **inputs):
        raise NotImplementedError("%s.reference" % type(self).__name__)

    def kernel(self, case, **inputs):
        raise NotImplementedError("%s.kernel" % type(self).__name__)

    # ---- one trial --------------------------------------------------------------------------

    def _inputs(self, case, kind):
        """The inputs of one program on the device: "ref" float64, "plain" or "kernel" as made.
        The inputs go to the device once per trial (_load), and to float64 once; the kernel
        gets its own copy of each on the device (a kernel that writes into an input must not
        change the next repeat's)."""
        if not case._loaded:
            _load(case)
        out = {}
        for k, v in case.inputs.items():
            if isinstance(v, torch.Tensor):
                t = case._dev64[k] if kind == "ref" and k in case._dev64 else case._dev[k]
                if kind == "kernel":
                    # its own copy: the one uploaded with the image (the first repeat's), else a clone
                    own = case._dev_kernel.pop(k, None)
                    t = VIEWS[case.views[k]](t) if k in case.views else own if own is not None else t.clone()
                if self.backward and k in self.grads:
                    t = t.detach().requires_grad_(True)
                out[k] = t
            else:
                out[k] = v
        return out

    def _douts(self, case, k, dtype):
        """The output gradient of output k on the device, in dtype (float64 made once)."""
        if dtype == torch.float64:
            return case._dev_douts64[k]
        t = case._dev_douts[k]
        return t.to(dtype) if t.dtype != dtype else t

    def _grads(self, inputs, res):
        grads = {}
        for k, gr in zip(self.grads, res):
            if gr is None:
                gr = torch.zeros_like(inputs[k])
            grads["d" + k] = gr
        return grads

    def _programs(self, case, plain_fns):
        """The reference (float64 inputs) and the plain programs (the dtype's), forward and, for a
        bwd check, backward, with the check's floor scales: (ref, [plain, ...]), each a dict of
        outputs (of gradients "d<input>"). The output gradients are drawn for the reference's
        outputs, after the inputs; one autograd pass takes every program's backward."""
        names = list(self.outputs)
        ins = self._inputs(case, "ref")
        ref = _as_dict(self.reference(case, **ins), names)
        if self.backward:
            want = [(k, tuple(ref[k].shape)) for k in ref]
            pre = case._douts_ahead
            if pre is not None and pre[0] == want and torch.equal(case.gen.get_state(), pre[1]):
                case.gen.set_state(pre[2])  # as if drawn here
                d, d64 = case._douts_dev  # (uploaded with the inputs)
                STATS["douts_ahead"] += 1
            else:
                douts = [case.gen.normal(shape, case.dtype) for _, shape in want]
                d, d64 = _upload_groups([(douts, True)], case.device)[0]
            self._douts_rule = _douts_rule(case, want)
            case._dev_douts, case._dev_douts64 = dict(zip(ref, d)), dict(zip(ref, d64))
        hook = getattr(self, "floor_scales", None)
        if hook is not None:
            with torch.no_grad():
                dd = dict(case._dev_douts64) if self.backward else None
                for k, v in (hook(case, {k: (t.detach() if isinstance(t, torch.Tensor) else t)
                                         for k, t in ins.items()}, dd) or {}).items():
                    # A tensor stays on the device until the trial's one read.
                    case.floor_scale[k] = v.detach() if isinstance(v, torch.Tensor) else float(v)
        runs = []
        for fn in plain_fns:
            pins = self._inputs(case, "plain")
            runs.append((_as_dict(fn(case, **pins), names), pins))
        if not self.backward:
            return ref, [p for p, _ in runs]
        ys, gs, wrt = [], [], []
        for outs, pins, is_ref in [(ref, ins, True)] + [(p, pins, False) for p, pins in runs]:
            for k in outs:
                ys.append(outs[k])
                gs.append(self._douts(case, k, torch.float64 if is_ref else outs[k].dtype))
            wrt += [pins[k] for k in self.grads]
        res = torch.autograd.grad(ys, wrt, gs, allow_unused=True)
        g = len(self.grads)
        out = [self._grads(ins, res[:g])]
        for j, (_, pins) in enumerate(runs):
            out.append(self._grads(pins, res[g * (j + 1):g * (j + 2)]))
        return out[0], out[1:]

    def _kernel(self, case):
        """The kernel forward (and backward with the drawn output gradients for a bwd check):
        its outputs (gradients) by name."""
        inputs = self._inputs(case, "kernel")
        outs = _as_dict(self.kernel(case, **inputs), list(self.outputs))
        if not self.backward:
            return outs
        ys = [outs[k] for k in outs]
        gs = [self._douts(case, k, outs[k].dtype) for k in outs]
        res = torch.autograd.grad(ys, [inputs[k] for k in self.grads], gs, allow_unused=True)
        return self._grads(inputs, res)

    def run_trial(self, dtype, seed, family, index, repeats, named=False, upcoming=None):
        """The answer's fields for one trial (after "op" and "id"); TrialError or FatalError
        for an error answer. named: the request named the family (the next request of a run of
        seeds then names it too). upcoming: the request the runner makes next when it knows it,
        (check, (dtype, seed, family, index, named)), or False for none (None: unknown); or a list
        of the requests it makes next, in order (a False ends it: none after them)."""
        t0 = _now()
        try:
            return self._trial(dtype, seed, family, index, repeats, named, upcoming)
        except (TrialError, FatalError):
            raise
        except Exception as e:
            if _fatal(e):
                raise FatalError("%s: %s" % (self.name, e)) from e
            raise
        finally:
            TIMES["trials"] += 1
            TIMES["trial"] += _now() - t0

    def _prepare(self, dtype, seed, family, index, ahead=False):
        with _one_thread():
            return self._prepare_case(dtype, seed, family, index, ahead)

    def _prepare_case(self, dtype, seed, family, index, ahead=False):
        """A trial's host work: its case from the seed (make_case) and the case's checks, and for a
        bwd check whose inputs go up together (on a GPU) or that is prepared ahead, the output
        gradients where their shapes can be told from the inputs (_draw_douts_ahead: they go up
        with the inputs). ahead: on the thread or process that prepares the next trial while this
        one runs (_Ahead), which also hashes the case (case_digest) and writes the bytes of its
        upload (_image); "thread": the worker thread, which also uploads them (UPLOAD_AHEAD)."""
        g = Gen(self.name, dtype, seed, index, family)
        case = self.make_case(g, family, dtype)
        if not isinstance(case, Case):
            raise TrialError("%s: make_case() returned %r, not a torchcheck.Case" % (self.name,
                                                                                      type(case).__name__))
        case.family, case.dtype, case.seed, case.index, case.gen = family, dtype, seed, index, g
        if not valid_shape(case.shape):
            raise TrialError("%s: case shape %r is not a list of at most 8 counts" % (self.name, case.shape))
        for k, v in case.views.items():
            if v not in VIEWS or k not in case.inputs:
                raise TrialError("%s: bad view %r of input %r" % (self.name, v, k))
        if self.backward and (ahead or _together(case.device)):
            self._draw_douts_ahead(case)
        if ahead:
            case._digest = case_digest(case)
            _image(case, on_device=ahead == "thread")
        return case

    def _next_key(self, key):
        """The request that follows key = (dtype, seed, family, index, named) in a run of seeds:
        the next seed, in the same family when the request named it, else in the seed's."""
        dtype, seed, family, index, named = key
        if seed + 1 >= 1 << 64:
            return None
        n = len(self.families)
        return (dtype, seed + 1, family if named else self.families[(seed + 1) % n], (seed + 1) // n, named)

    #: ((output, input whose shape it had or None, shape), ...) of the last trial's output gradients
    #: (a bwd check): how the next trial's are guessed (_draw_douts_ahead).
    _douts_rule = None

    def _draw_douts_ahead(self, case):
        """A bwd check's output gradients drawn ahead, with the shapes the last trial's outputs had
        (those of the inputs they matched): the draws come after the inputs', so they are the same
        as the trial's own when the guess is right, which _programs() verifies (the outputs' names
        and shapes, and the generator's state untouched since the case was made) before taking
        them; else it draws them itself. The generator is left as make_case() left it."""
        rule = self._douts_rule
        if rule is None:
            return
        shapes = []
        for name, src, shape in rule:
            if src is not None:
                v = case.inputs.get(src)
                if not isinstance(v, torch.Tensor):
                    return
                shape = tuple(v.shape)
            shapes.append((name, shape))
        gen = case.gen.g
        before = gen.get_state()
        douts = [case.gen.normal(shape, case.dtype) for _, shape in shapes]
        after = gen.get_state()
        gen.set_state(before)
        case._douts_ahead = (shapes, before, after, douts)

    def _trial(self, dtype, seed, family, index, repeats, named=False, upcoming=None):
        """One trial. Its host work (the case) may have been prepared while the trial before ran
        (_Ahead); the next seed's starts before this one's device work. Everything after the case
        is made runs on the device without waiting for it: the inputs go up without a
        synchronisation, the kernel is timed by CUDA events on a GPU, and every number of the
        answer (each tensor's metrics, each repeat's digests, the canaries, the floor scales a
        check computed on the device) comes back in one read."""
        key = (dtype, seed, family, index, named)
        ahead = _ahead_mode(DEVICE)
        case = None
        T = TIMES
        t0, w0, i0 = _now(), T["case_wait"], T["case_in_line"]
        try:
            if ahead:
                case = _AHEAD.take(self, key, upcoming, ahead)
            else:
                _AHEAD.drop()
            t1 = _now()
            T["ahead"] += t1 - t0 - (T["case_wait"] - w0) - (T["case_in_line"] - i0)
            if case is None:
                case = self._prepare(dtype, seed, family, index)
                T["case_in_line"] += _now() - t1
        finally:
            if ahead:
                t1 = _now()
                _AHEAD.start(self, key, ahead, upcoming)
                T["ahead"] += _now() - t1
        gpu = torch.device(case.device).type == "cuda"
        if case._digest is not None:
            cdigest = (lambda d=case._digest: d)
        else:
            cdigest = _case_digest_later(case, gpu)
        fixed = self.atol is not None

        with torch.no_grad() if not self.backward else contextlib.nullcontext():
            plain_fns = []
            if not fixed:
                overridden = type(self).plain is not Check.plain
                multi = getattr(self, "plain_programs", None)
                plain_fns = multi() if multi else [self.plain if overridden else self.reference]
            t0, u0, s0 = _now(), T["upload"], T["staging_sync"]
            ref, plains = self._programs(case, plain_fns)
            T["programs"] += _now() - t0 - (T["upload"] - u0) - (T["staging_sync"] - s0)
            names = list(ref)
            if not 1 <= len(names) <= TENSORS_MAX:
                raise TrialError("%s: 1 to %d outputs, not %d" % (self.name, TENSORS_MAX, len(names)))
            for k in names:
                if not valid_token(k):
                    raise TrialError("%s: bad output name %r" % (self.name, k))
                for p in plains:
                    if k not in p or p[k].numel() != ref[k].numel():
                        raise TrialError("%s: the plain program's '%s' does not match the reference's" % (
                            self.name, k))

            # Each repeat's outputs, rounded to the dtype (as a store into a buffer of the dtype):
            # the first repeat's are measured, every repeat's digested. On a GPU, where a trial's
            # time is the number of operations it launches, every output is measured in one
            # _Batch and digested as one matrix of padded rows (a copy, which a later repeat
            # cannot change); on the CPU, where it is their elements, without the padding: a
            # _Batch for the outputs of each size, a digest for each output.
            td = TORCH_DTYPES[dtype]
            sizes = [ref[k].numel() for k in names]
            width = max(sizes)
            groups = [list(range(len(names)))]
            batch_all = _together(case.device)
            if not batch_all:
                by_size = {}
                for j, n in enumerate(sizes):
                    by_size.setdefault(n, []).append(j)
                groups = list(by_size.values())
            # Measured by a graph (_Graphs): the digests' rows are laid out at the graph's width.
            graphed = batch_all and _graphs_on(case.device) and self.name not in _GRAPHS.off
            lw = _graph_width(width) if graphed else None
            graphed = lw is not None
            lw = lw or width
            first = first_unw = None
            # GPU: each repeat's outputs as the pieces of its padded rows, not digested yet: those
            # of a repeat before the last copied (torch.cat), which a later repeat cannot change,
            # the last's as they are (the digest's one cat, or the graph's input, copies them).
            laid = []
            digests_dev = []
            canaries = {}  # output -> guard elements overwritten, the most of any repeat (as the C SDK)
            times = []
            events = []
            t0 = _now()
            for rep in range(repeats):
                case._buffers = {}
                if gpu:
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                else:
                    t0 = time.perf_counter_ns()
                outs = self._kernel(case)
                if gpu:
                    stop.record()
                    events.append((start, stop))
                else:
                    times.append((time.perf_counter_ns() - t0) / 1000.0)
                gots, unws = [], {}
                with torch.no_grad():
                    for k in names:
                        if k not in outs:
                            raise TrialError("%s: the kernel gave no output '%s'" % (self.name, k))
                        o = outs[k]
                        o = o.detach() if o.requires_grad else o
                        if o.numel() != ref[k].numel():
                            raise TrialError("%s: the kernel's '%s' has %d elements, the reference's %d" % (
                                self.name, k, o.numel(), ref[k].numel()))
                        for store, view, nb in case._buffers.values():
                            if view.numel() and o.data_ptr() == view.data_ptr() and o.dtype == view.dtype:
                                ibits = store.view(_INT_VIEW[store.dtype])
                                pb = _signed(POISON_BITS[store.dtype], store.dtype)
                                unws[k] = ibits[GUARD:GUARD + nb] == pb
                                c = (ibits[:GUARD] != pb).sum() + (ibits[GUARD + nb:] != pb).sum()
                                canaries[k] = c if k not in canaries else torch.maximum(canaries[k], c)
                                break
                        o = o.to(td) if o.dtype != td else o  # as a store into a buffer of the dtype
                        gots.append(o.reshape(-1) if o.dim() != 1 else o)
                    if first is None:
                        first, first_unw = gots, unws
                    if not batch_all:
                        digests_dev += [_digest_rows(t.view(1, t.numel())) for t in gots]
                        continue
                    pieces = _padded(gots, lw, gots[0].device)
                    laid.append(pieces if rep == repeats - 1 else [torch.cat(pieces)])
                    if sum(p[0].numel() for p in laid) >= 1 << 22 and rep < repeats - 1:
                        digests_dev.append(_digest_rows(torch.cat([p[0] for p in laid]).view(
                            len(laid) * len(names), lw)))
                        laid = []

            T["kernel"] += _now() - t0
            t0, m0 = _now(), [T[k] for k in ("read", "replay", "capture")]
            with torch.no_grad():
                batches = []
                for group in groups:
                    batch = _Batch(dtype, self.atol, self.rtol)
                    for j in group:
                        k = names[j]
                        batch.add(k, first[j], ref[k], [p[k] for p in plains], shape=list(ref[k].shape),
                                  factor=self.budget_factor, floor_eps=self.floor_eps,
                                  floor_scale=case.floor_scale.get(k), unwritten=first_unw.get(k),
                                  exclude=case.excluded.get(k), canary=canaries.get(k, 0),
                                  tail_width=self.tail_width)
                    batches.append(batch)

                def eager():
                    """(tensors, hashes): every batch's values and the digests in one read."""
                    parts, widths = [], []
                    for batch in batches:
                        ps = batch.parts()
                        parts += ps
                        widths.append(sum(p.numel() for p in ps))
                    parts += digests_dev
                    if laid:
                        flat = [t for p in laid for t in p]
                        rows = torch.cat(flat) if len(flat) > 1 else flat[0]
                        parts.append(_digest_rows(rows.view(len(laid) * len(names), lw)))
                    vals = _host(torch.cat(parts) if len(parts) > 1 else parts[0])
                    measured = {}
                    at = 0
                    for group, batch, w in zip(groups, batches, widths):
                        for j, t in zip(group, batch.finish(vals[at:at + w])[0]):
                            measured[j] = t
                        at += w
                    return [measured[j] for j in range(len(names))], vals[at:]

                res = None
                if graphed and laid and not digests_dev and len(batches) == 1:
                    res = _GRAPHS.measure(self, batches[0], laid, lw, td, eager)
                tensors, hashes = res if res is not None else eager()
            T["metrics"] += _now() - t0 - sum(T[k] - v for k, v in zip(("read", "replay", "capture"), m0))
            digests = []
            for r in range(repeats):
                h = hashlib.blake2b(digest_size=8)
                for j, k in enumerate(names):
                    v = hashes[r * len(names) + j] & _MASK64
                    h.update(k.encode("utf-8") + b"\0" + v.to_bytes(8, "little"))
                digests.append(h.hexdigest())
            if gpu:
                t0 = _now()
                events[-1][1].synchronize()  # done with the read above: no wait
                times = [a.elapsed_time(b) * 1000.0 for a, b in events]
                T["event_sync"] += _now() - t0
        digest = digests[0]
        differ = sum(d != digest for d in digests[1:])
        failed = any([t.pop("failed") for t in tensors])
        ratios = [t["ratio"] for t in tensors]
        ratio = None if any(r is None for r in ratios) else max(ratios)
        t0 = _now()
        cd = cdigest()
        T["digest_wait"] += _now() - t0
        return {
            "verdict": "fail" if failed else "pass",
            "case": {"family": family, "shape": list(case.shape), "gen": GEN_VERSION, "digest": cd},
            "ratio": ratio,
            "tensors": tensors,
            "digest": digest,
            "digests_differ": differ,
            "kernel_us": finite_or_none(statistics.median(times)),
        }
