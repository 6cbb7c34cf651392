"""Self-test of the torch SDK (numwatch_runner.torchcheck), on the CPU.

    cd kernels/python && python3 -m unittest -v test_torchcheck

Needs torch (Debian's python3-torch is enough); skipped without it. The
ctest 'python_sdk' (kernels/python/run-tests.sh) refuses to skip.
"""
import ast
import collections
import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numwatch_runner as nw  # noqa: E402
from numwatch_runner import metrics  # noqa: E402

try:
    import torch
    from numwatch_runner import torchcheck as nwt
except ImportError:  # pragma: no cover
    torch = None


def strict_json(text):
    def bad(tok):
        raise ValueError("non-JSON token %s" % tok)
    return json.loads(text, parse_constant=bad)


if torch is not None:

    class _NanTailGrad(torch.autograd.Function):
        """y = x * w + 1 whose dw is NaN on the last partial tile of 8 (the planted flash-dmattn bug)."""

        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * w + 1

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            dx = dy * w
            dw = (dy * x).sum(0)
            cols = dw.shape[0]
            if dw.dtype == torch.bfloat16 and cols % 8:
                dw = dw.clone()
                dw[cols - cols % 8:] = math.nan
            return dx, dw

    class Counted(nwt.TorchCheck):
        """y = 2x, whose case records the intra-op threads make_case ran with (a parameter: the case
        digest hashes it)."""

        op = "counted"
        dtypes = ("f32",)
        families = ("ok",)

        def make_case(self, g, family, dtype):
            n = g.randint(1, 64)
            return nwt.Case([n], {"x": g.normal((n,), dtype)}, params={"threads": torch.get_num_threads()})

        def reference(self, case, x):
            return 2 * x

        def kernel(self, case, x):
            return 2 * x

    class Keeper(Counted):
        """Keeps every case's CPU input past its trial (a check's cache, a "last case" for a report),
        with a copy of it as the trial saw it; a class attribute that does not pickle (a lock)."""

        op = "keeper"
        kept = []
        lock = threading.Lock()

        def reference(self, case, x):
            Keeper.kept.append((case["x"], case["x"].clone()))
            return 2 * x

    class Planted(nwt.TorchCheck):
        """y = x * w + 1 on (rows, cols); each family plants one kind of wrong result."""

        op = "planted"
        dtypes = ("f32", "bf16")
        families = ("ok", "scaled", "nan", "dtail", "unwritten", "canary", "kink", "raise", "fatal", "racy",
                    "view")
        grads = ("x", "w")
        tail_width = 8
        calls = 0

        def make_case(self, g, family, dtype):
            rows, cols = g.randint(1, 3), g.tail(8, 9, 200)
            views = {"x": "noncontiguous", "w": "offset"} if family == "view" else {}
            return nwt.Case([rows, cols], {"x": g.normal((rows, cols), dtype), "w": g.normal((cols,), dtype)},
                            views=views)

        def reference(self, case, x, w):
            return x * w + 1

        def kernel(self, case, x, w):
            fam = case.family
            n = x.numel()
            idx = torch.arange(n, device=x.device).view(x.shape)
            if fam == "view":
                assert not x.is_contiguous() and w.storage_offset() == 1, "views not applied"
            if fam == "raise":
                raise ValueError("planted exception")
            if fam == "fatal":
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            if fam == "dtail":
                return _NanTailGrad.apply(x, w)
            if fam in ("unwritten", "canary") and not self.backward:
                y = case.buffer("y", x.shape)
                full = (x * w + 1).reshape(-1)
                if fam == "unwritten":
                    y.view(-1)[:-1] = full[:-1]
                else:
                    y.view(-1)[:] = full
                    torch.as_strided(y, (n + 1,), (1,))[n] = 0.0
                return y
            y = x * w + 1
            if fam == "scaled":
                y = torch.where(idx == 3, y * 1.25 + 0.5, y)
            elif fam == "nan":
                y = torch.where(idx == 5, torch.full_like(y, math.nan), y)
            elif fam == "kink":
                case.exclude("y" if not self.backward else "dx", idx == 0)
                y = torch.where(idx == 0, y + 100.0, y)
            elif fam == "racy":
                Planted.calls += 1
                if Planted.calls % 2:  # one ulp off every other run: within tolerance, not deterministic
                    y = torch.where(idx == 0, torch.nextafter(y, torch.full_like(y, math.inf)), y)
            return y

    class PlantedSizes(Planted):
        """Outputs of two sizes (padded rows), the second of a shape no input has (its output
        gradient's shape cannot be told from the inputs' ahead)."""

        op = "sizes"
        outputs = ("y", "s")

        def reference(self, case, x, w):
            return x * w + 1, (x * x).sum(-1)

        def kernel(self, case, x, w):
            y = Planted.kernel(self, case, x, w)
            return (y, (x * x).sum(-1)) if isinstance(y, torch.Tensor) else y

    class Scribbles(nwt.TorchCheck):
        """A kernel that writes into its inputs after it computed its output."""

        op = "scribbles"
        dtypes = ("f32", "bf16")
        families = ("ok",)

        def make_case(self, g, family, dtype):
            n = g.randint(1, 300)
            return nwt.Case([n], {"x": g.normal((n,), dtype), "w": g.normal((n,), dtype)})

        def reference(self, case, x, w):
            return x * w + 1

        def kernel(self, case, x, w):
            y = x * w + 1
            x.mul_(3.0)
            w.fill_(7.0)
            return y

    class PlantedFixed(Planted):
        """A fixed tolerance (atol, rtol) instead of a plain program, and a floor scale."""

        op = "fixed"
        atol, rtol = 1e-3, 1e-2

    class PlantedTwoPlains(Planted):
        """Two plain programs (two reduction orders) and a floor scale on the device."""

        op = "plains"

        def plain_programs(self):
            return [self.reference, lambda case, x, w: (x * w) + 1.0]

        def floor_scales(self, case, inputs, douts):
            return {"dx": inputs["x"].abs().max()} if douts is not None else {}

    #: A module's setting that a script's main block changes at run time (what a helper process,
    #: which imports the module, does not see).
    SETTINGS = {"scale": 1.0}

    class Configured(Planted):
        """A check whose cases depend on state of the runner's, not of import time (what breaks the
        contract of preparing ahead): a module global set at run time (as a script's main block
        sets one from its arguments), a class attribute set at run time, and an instance attribute
        changed in place. The helper gets the check's attributes and its class's, not the module's."""

        op = "configured"
        scale = 1.0

        def __init__(self, backward=None):
            super().__init__(backward)
            self.rows = [2]

        def make_case(self, g, family, dtype):
            rows, cols = self.rows[0], g.tail(8, 9, 200)
            x = g.normal((rows, cols), dtype) * (SETTINGS["scale"] if self.op == "configured" else Configured.scale)
            return nwt.Case([rows, cols], {"x": x, "w": g.normal((cols,), dtype)})

    class Resized(Configured):
        """A class attribute set at run time and an instance attribute changed in place (the
        attributes' pickle changes: the helper gets them again)."""

        op = "resized"

    def on_worker():
        """Whether this is the thread that prepares trials ahead (not the trial's own)."""
        return threading.current_thread() is not threading.main_thread()

    class Gated(Planted):
        """make_case waits at a gate on the thread that prepares trials ahead (never in line), so a
        test holds a preparation running while trials go on: a case thrown away, or late."""

        op = "gated"
        families = ("ok", "scaled", "nan", "kink")
        gate = entered = None  # threading.Event: the gate open; the worker's make_case at the gate
        gate_s = 120.0  # (a deadline: a test that fails does not hang)
        made = []  # weakrefs of the cases made on the worker
        inside = []  # the seeds whose make_case is at the gate or through it, in the order they came
        together = None  # a threading.Barrier the workers' make_case of the seeds in meet passes first
        meet = ()
        where = {}  # seed -> the name of the thread that made its case (the last one)
        cond = threading.Condition()

        def make_case(self, g, family, dtype):
            case = Planted.make_case(self, g, family, dtype)
            if on_worker():
                Gated.where[g.seed] = threading.current_thread().name
                if g.seed in Gated.meet:
                    Gated.together.wait(Gated.gate_s)  # (raises if the other never comes)
                Gated.made.append(weakref.ref(case))
                with Gated.cond:
                    Gated.inside.append(g.seed)
                    Gated.cond.notify_all()
                Gated.entered.set()
                Gated.gate.wait(Gated.gate_s)
            return case

        @staticmethod
        def wait_inside(n, timeout=120.0):
            """Whether n make_case calls on workers came to the gate within timeout."""
            with Gated.cond:
                return Gated.cond.wait_for(lambda: len(Gated.inside) >= n, timeout)

        @staticmethod
        def reset(open_gate=False):
            Gated.gate, Gated.entered, Gated.made, Gated.inside = threading.Event(), threading.Event(), [], []
            Gated.together, Gated.meet, Gated.where = None, (), {}
            if open_gate:
                Gated.gate.set()

    class FailsAhead(Planted):
        """make_case raises on the worker only: the case is prepared in line, as if never tried."""

        op = "failsahead"

        def make_case(self, g, family, dtype):
            if on_worker():
                raise RuntimeError("planted: only ahead")
            return Planted.make_case(self, g, family, dtype)

    class Settings(Planted):
        """A case that records torch's settings of the thread that made it (each thread's own)."""

        op = "settings"

        def make_case(self, g, family, dtype):
            case = Planted.make_case(self, g, family, dtype)
            case.params.update(grad=torch.is_grad_enabled(), threads=torch.get_num_threads())
            return case

    def planted_runner():
        return nw.Runner(Planted.both(), name="planted-torch 1",
                         repro="./planted --check {check} --dtype {dtype} --seed {seed} --runs {runs}")


RUNNER_SCRIPT = """import sys
sys.path.insert(0, %r)
import test_torchcheck as t
sys.exit(t.planted_runner().run())
"""

#: The runner as a script should be (its work under the main guard: the helper process loads it).
RUNNER_SCRIPT_GUARDED = """import sys
sys.path.insert(0, %r)
import test_torchcheck as t
if __name__ == "__main__":
    sys.exit(t.planted_runner().run())
"""


def seed_of(family):
    return list(Planted.families).index(family)


@unittest.skipIf(torch is None, "torch is not installed")
class CompareTest(unittest.TestCase):
    """torchcheck.compare() is metrics.compare() on tensors, field for field."""

    def data(self, rnd, n, dtype, special):
        ref = [rnd.gauss(0, 1) * rnd.choice((1.0, 1e-3, 50.0)) for _ in range(n)]
        got = [r + rnd.gauss(0, 1e-3) * rnd.choice((0.0, 1.0, 10.0)) for r in ref]
        plains = [[r + rnd.gauss(0, 2e-3) for r in ref] for _ in range(rnd.randint(1, 2))]
        if special:
            for _ in range(3):
                i = rnd.randrange(n)
                kind = rnd.randrange(5)
                if kind == 0:
                    got[i] = math.nan
                elif kind == 1:
                    ref[i] = math.inf
                    got[i] = rnd.choice((math.inf, -math.inf, 1.0))
                elif kind == 2:
                    ref[i] = got[i] = math.nan
                elif kind == 3:
                    plains[0][i] = math.nan
                else:
                    ref[i] = 0.0
        got = nw.round_list(got, dtype)
        return got, ref, plains

    def test_same_fields_as_the_list_sdk(self):
        rnd = random.Random(7)
        for trial in range(160):
            dtype = ("f32", "f16", "bf16", "f64")[trial % 4]
            n = rnd.choice((1, 7, 64, 333))
            rows = rnd.choice((1, n)) if n % 1 == 0 else 1
            shape = [rows, n // rows] if n % rows == 0 else [n]
            got, ref, plains = self.data(rnd, n, dtype, special=trial % 3 == 0)
            unwritten = [rnd.random() < 0.02 for _ in range(n)] if trial % 5 == 0 else None
            exclude = {i for i in range(n) if rnd.random() < 0.05} if trial % 7 == 0 else None
            kw = dict(shape=shape, factor=rnd.choice((2.0, 1.5)), floor_eps=4.0, canary=trial % 11 == 0,
                      tail_width=rnd.choice((0, 8)))
            if trial % 6 == 1:
                kw.update(atol=rnd.choice((1e-3, 0.0)), rtol=rnd.choice((0.0, 1e-2)))
            if trial % 9 == 2:
                kw.update(floor_scale=10.0)
            want = metrics.compare("t", dtype, got, ref, plains if "atol" not in kw else [], unwritten=unwritten,
                                   exclude=exclude, **kw)
            mask = None if exclude is None else torch.tensor([i in exclude for i in range(n)])
            unw = None if unwritten is None else torch.tensor(unwritten)
            t = torch.tensor
            have = nwt.compare("t", dtype, t(got, dtype=torch.float64), t(ref, dtype=torch.float64),
                               [t(p, dtype=torch.float64) for p in plains] if "atol" not in kw else [],
                               unwritten=unw, exclude=mask, **kw)
            self.assertEqual(have, want, "trial %d dtype %s kw %s" % (trial, dtype, kw))

    def test_a_batch_measures_each_tensor_as_alone(self):
        """A trial measures all its outputs at once (torchcheck._Batch: rows padded to the longest):
        each tensor's dict is compare()'s of it alone, whatever the others hold."""
        rnd = random.Random(11)
        for trial in range(60):
            dtype = ("f32", "f16", "bf16", "f64")[trial % 4]
            atol = rnd.choice((1e-3, 0.0)) if trial % 5 == 1 else None
            rtol = rnd.choice((0.0, 1e-2)) if atol is not None else 0.0
            nplain = rnd.randint(1, 2)
            batch = nwt._Batch(dtype, atol, rtol)
            want = []
            for j in range(rnd.randint(1, 4)):
                n = rnd.choice((0, 1, 5, 64, 200))
                got, ref, plains = self.data(rnd, n, dtype, special=rnd.random() < 0.5) if n else ([], [], [[]])
                plains = (plains * 2)[:nplain] if atol is None else []
                unwritten = [rnd.random() < 0.1 for _ in range(n)] if rnd.random() < 0.3 else None
                exclude = {i for i in range(n) if rnd.random() < 0.1} if rnd.random() < 0.3 else None
                kw = dict(shape=[n], factor=2.0, floor_eps=4.0, tail_width=rnd.choice((0, 8)),
                          floor_scale=rnd.choice((None, 10.0)), canary=rnd.choice((0, 2)))
                want.append(metrics.compare("t%d" % j, dtype, got, ref, plains, unwritten=unwritten,
                                            exclude=exclude, atol=atol, rtol=rtol, **kw))
                t = lambda xs: torch.tensor(xs, dtype=torch.float64)  # noqa: E731
                if rnd.random() < 0.5:  # scales and canaries also as tensors, read with the rest
                    kw["floor_scale"] = None if kw["floor_scale"] is None else t(kw["floor_scale"])
                    kw["canary"] = torch.tensor(kw["canary"])
                batch.add("t%d" % j, t(got), t(ref), [t(p) for p in plains], unwritten=None if unwritten is None else
                          torch.tensor(unwritten, dtype=torch.bool), exclude=None if exclude is None else
                          torch.tensor([i in exclude for i in range(n)], dtype=torch.bool), **kw)
            extra = torch.tensor([-5, 7])
            vals = batch.start(tail=[extra])
            have, tails = batch.finish(nwt._host(vals))
            self.assertEqual(have, want, "trial %d" % trial)
            self.assertEqual(tails, [[-5, 7]])
            # The same rows padded further (a metric graph's width, a power of two): the same values.
            batch.width = nwt._graph_width(batch.width) or batch.width
            vals = batch.start(tail=[extra])
            self.assertEqual(batch.finish(nwt._host(vals)), (want, [[-5, 7]]), "trial %d padded" % trial)

    def test_empty_tensor(self):
        e = torch.zeros(0, dtype=torch.float64)
        self.assertEqual(nwt.compare("e", "f32", e, e, [e], shape=[0, 4]),
                         metrics.compare("e", "f32", [], [], [[]], shape=[0, 4]))


@unittest.skipIf(torch is None, "torch is not installed")
class GenTest(unittest.TestCase):
    def test_a_seed_means_the_same_data(self):
        a = nwt.Gen("x.fwd", "bf16", 42)
        b = nwt.Gen("x.fwd", "bf16", 42)
        self.assertTrue(torch.equal(a.normal((3, 5), "bf16"), b.normal((3, 5), "bf16")))
        self.assertEqual(a.randint(0, 10**6), b.randint(0, 10**6))
        c = nwt.Gen("x.fwd", "bf16", 43)
        self.assertFalse(torch.equal(nwt.Gen("x.fwd", "bf16", 42).uniforms((8,)), c.uniforms((8,))))
        # Pinned values: a torch whose CPU generator draws differently breaks seed replay across machines
        # (the case digest would then change and the daemon stop pairing seeds): bump GEN_VERSION.
        g = nwt.Gen("softmax.fwd", "f32", 0)
        self.assertEqual(g.uniforms((2,)).tolist(), PINNED_UNIFORMS)

    def test_draws_are_in_the_dtype(self):
        g = nwt.Gen("x.fwd", "f16", 1)
        x = g.normal((100,), "f16")
        self.assertEqual(x.dtype, torch.float16)
        self.assertLess(float(x.abs().max()), 3.47)
        self.assertEqual(g.integers((50,), 3, 5).unique().tolist(), [3, 4, 5])

    def test_size_helpers(self):
        g = nwt.Gen("x.fwd", "f32", 5)
        for _ in range(50):
            a, t, r = g.aligned(8, 1, 100), g.tail(8, 1, 100), g.around((64, 128))
            self.assertTrue(a % 8 == 0 and 8 <= a <= 96, a)
            self.assertTrue(t % 8 and 1 <= t <= 100, t)
            self.assertIn(r, (63, 64, 65, 127, 128, 129))
            self.assertIn(g.head_dim(), nwt.ODD_HEAD_DIMS + (32, 64, 128))
        sweeps = {nwt.Gen("x", "f32", s, index=s).sweep(2, 3) for s in range(12)}
        self.assertEqual(sweeps, {(a, b) for a in range(3) for b in range(4)})
        x = g.extreme_rows(16, 5, "f32")
        self.assertEqual(x.shape, (16, 5))

    def test_extreme_rows_as_drawn_row_by_row(self):
        """extreme_rows() changes its rows kind by kind, after drawing them all: the same values, bit
        for bit, and the same generator state after, as changing each row as it is drawn (the
        version before, kept here), for every kind, empty shapes and every dtype."""
        def row_by_row(g, rows, cols, dtype, kinds=("offset", "spread", "small", "zeros", "onehot", "constant",
                                                    "neginf")):
            x = g.normal((rows, cols))
            for r in range(rows):
                k = g.choice(kinds)
                if k == "offset":
                    x[r].add_(g.choice((-1.0, 1.0)) * g.uniform(1e2, 1e4))
                elif k == "spread":
                    x[r].mul_(g.uniform(20.0, 80.0))
                elif k == "small":
                    x[r].mul_(math.sqrt(nw.dtypes.EPS[g.dtype if g.dtype in nw.dtypes.EPS else "f32"]))
                elif k == "zeros":
                    x[r] = 0.0
                elif k == "onehot":
                    x[r] = 0.0
                    if cols:
                        x[r, g.randint(0, cols - 1)] = g.uniform(1.0, 10.0)
                elif k == "constant":
                    x[r] = g.uniform(-3.0, 3.0)
                elif k == "neginf":
                    x[r] = -math.inf
                    if cols:
                        x[r, g.randint(0, cols - 1)] = g.uniform(-1.0, 1.0)
            return g._cast(x, dtype)

        n = 0
        for seed in range(60):
            for dtype in ("f32", "bf16", "f16", "f64"):
                for rows, cols in ((seed % 13, 1 + seed % 37), (0, 5), (4, 0), (48, 300 + seed)):
                    for kinds in (("offset", "spread", "small", "zeros", "onehot", "constant", "neginf"),
                                  ("offset", "spread", "small", "onehot", "constant"), ("onehot",)):
                        a, b = nwt.Gen("x.fwd", dtype, seed), nwt.Gen("x.fwd", dtype, seed)
                        x = a.extreme_rows(rows, cols, dtype, kinds)
                        y = row_by_row(b, rows, cols, dtype, kinds)
                        self.assertEqual((x.dtype, x.shape), (y.dtype, y.shape))
                        iv = {torch.float64: torch.int64, torch.float32: torch.int32}.get(x.dtype, torch.int16)
                        self.assertTrue(torch.equal(x.view(iv), y.view(iv)), (seed, dtype, rows, cols, kinds))
                        self.assertTrue(torch.equal(a.g.get_state(), b.g.get_state()))
                        self.assertEqual(a.uniform(), b.uniform())
                        n += 1
        self.assertEqual(n, 60 * 4 * 4 * 3)

    def test_views_keep_values(self):
        x = torch.arange(12.0).view(3, 4)
        for name, fn in nwt.VIEWS.items():
            v = fn(x)
            self.assertTrue(torch.equal(v, x), name)
        self.assertFalse(nwt.noncontiguous(x).is_contiguous())
        self.assertEqual(nwt.offset_view(x).storage_offset(), 1)
        self.assertFalse(nwt.transposed(x).is_contiguous())

    def test_marks(self):
        v = torch.tensor([0.0, 0.5, 1.0 - 1e-9, 2.25, -1e-12])
        self.assertEqual(nwt.near_integer(v, 1e-6).tolist(), [True, False, True, False, True])
        self.assertEqual(nwt.near(v, (0.5, 2.0), 0.3).tolist(), [False, True, False, True, False])


@unittest.skipIf(torch is None, "torch is not installed")
class TrialTest(unittest.TestCase):
    def trial(self, check, dtype, family, repeats=1):
        return planted_runner().trial(check, dtype, seed_of(family), None, repeats)

    def test_correct_passes_both_passes_each_gradient(self):
        for dtype in ("f32", "bf16"):
            a = self.trial("planted.fwd", dtype, "ok", 2)
            self.assertEqual((a["verdict"], a["digests_differ"]), ("pass", 0), a)
            self.assertEqual([t["name"] for t in a["tensors"]], ["y"])
            self.assertRegex(a["case"]["digest"], "^[0-9a-f]{16}$")
            self.assertRegex(a["digest"], "^[0-9a-f]{16}$")
            b = self.trial("planted.bwd", dtype, "ok", 2)
            self.assertEqual(b["verdict"], "pass", b)
            self.assertEqual([t["name"] for t in b["tensors"]], ["dx", "dw"])
            self.assertIsInstance(b["kernel_us"], float)
            # the repeats of a correct kernel agree; answers are strict JSON
            strict_json(nw.encode(b))

    def test_wrong_element_fails_at_its_index(self):
        a = self.trial("planted.fwd", "f32", "scaled")
        t = a["tensors"][0]
        self.assertEqual(a["verdict"], "fail")
        self.assertGreater(t["ratio"], 1)
        cols = a["case"]["shape"][1]
        self.assertEqual(t["worst"], [3 // cols, 3 % cols])
        self.assertIsInstance(t["max_ulp"], int)
        self.assertIsNone(self.trial("planted.fwd", "bf16", "scaled")["tensors"][0]["max_ulp"])

    def test_nan_fails_whatever_the_rest(self):
        t = self.trial("planted.fwd", "f32", "nan")["tensors"][0]
        self.assertEqual((t["nonfinite"], t["mismatch"]), (1, 1))
        cols = self.trial("planted.fwd", "f32", "nan")["case"]["shape"][1]
        self.assertEqual(t["worst"], [5 // cols, 5 % cols])

    def test_nan_on_one_gradients_tail_tile_in_bf16_only(self):
        a = self.trial("planted.bwd", "bf16", "dtail")
        dx, dw = a["tensors"]
        self.assertEqual(a["verdict"], "fail")
        self.assertEqual((dx["nonfinite"], dx["mismatch"]), (0, 0))
        self.assertLessEqual(dx["ratio"], 1.0)  # judged apart: dx is fine
        cols = a["case"]["shape"][1]
        self.assertEqual(dw["nonfinite"], cols % 8)
        self.assertTrue(dw["tail"])
        self.assertGreaterEqual(dw["worst"][0], cols - cols % 8)
        self.assertEqual(self.trial("planted.fwd", "bf16", "dtail")["verdict"], "pass")
        self.assertEqual(self.trial("planted.bwd", "f32", "dtail")["verdict"], "pass")

    def test_unwritten_and_canary_of_given_buffers(self):
        a = self.trial("planted.fwd", "f32", "unwritten")
        t = a["tensors"][0]
        self.assertEqual((a["verdict"], t["unwritten"], t["canary"]), ("fail", 1, 0))
        rows, cols = a["case"]["shape"]
        self.assertEqual(t["worst"], [rows - 1, cols - 1])
        self.assertTrue(t["tail"])
        a = self.trial("planted.fwd", "bf16", "canary")
        t = a["tensors"][0]
        self.assertEqual((a["verdict"], t["unwritten"], t["canary"]), ("fail", 0, 1))

    def test_excluded_counted_not_failed(self):
        for check, name in (("planted.fwd", "y"), ("planted.bwd", "dx")):
            a = self.trial(check, "f32", "kink")
            t = {t["name"]: t for t in a["tensors"]}[name]
            self.assertEqual(t["excluded"], 1, a)
            if check == "planted.fwd":
                self.assertEqual(a["verdict"], "pass")

    def test_views(self):
        self.assertEqual(self.trial("planted.fwd", "f32", "view")["verdict"], "pass")
        self.assertEqual(self.trial("planted.bwd", "bf16", "view")["verdict"], "pass")

    def test_repeats_reveal_non_determinism(self):
        a = self.trial("planted.fwd", "f32", "racy", repeats=3)
        self.assertEqual((a["verdict"], a["digests_differ"] > 0), ("pass", True), a)

    def test_errors_and_fatal_errors(self):
        r = planted_runner()
        a, quit = r.answer({"op": "trial", "id": 4, "check": "planted.fwd", "dtype": "f32",
                            "seed": seed_of("raise"), "repeats": 1})
        self.assertEqual((a["verdict"], a["fatal"], quit), ("error", False, False))
        self.assertIn("planted exception", a["error"])
        a, quit = r.answer({"op": "trial", "id": 5, "check": "planted.bwd", "dtype": "f32",
                            "seed": seed_of("fatal"), "repeats": 1})
        self.assertEqual((a["verdict"], a["fatal"], quit), ("error", True, True))

    def test_case_digest_pairs_seeds(self):
        r = planted_runner()
        d = [r.trial("planted.fwd", "f32", s, None, 1)["case"]["digest"] for s in (0, 0, 11, 1)]
        self.assertEqual(d[0], d[1])
        self.assertNotEqual(d[0], d[2])  # the same family, other data
        self.assertNotEqual(d[0], d[3])

    def test_outputs_together_or_apart(self):
        """A GPU measures a trial's outputs together (rows padded to the longest), the CPU those of
        each size apart: the answers are the same."""

        checks = Planted.both() + PlantedSizes.both()  # outputs of other sizes: padded rows
        answers = {}
        try:
            for together in (True, False):
                nwt.BATCH_ALL = together
                r = nw.Runner(checks, name="sizes 1")
                for c in checks:
                    for family in ("ok", "scaled", "nan", "dtail", "unwritten", "canary", "kink", "view", "racy"):
                        if c.backward and family in ("unwritten", "canary", "racy"):
                            continue
                        for dtype, repeats in (("f32", 1), ("bf16", 2)):
                            Planted.calls = 0
                            a = r.trial(c.name, dtype, seed_of(family), None, repeats)
                            a.pop("kernel_us")
                            answers.setdefault((c.name, family, dtype), []).append(a)
        finally:
            nwt.BATCH_ALL = None
        for key, (a, b) in answers.items():
            self.assertEqual(a, b, key)
        self.assertEqual(answers[("sizes.fwd", "nan", "f32")][0]["tensors"][0]["nonfinite"], 1)

    def test_case_digest_beside_the_trial(self):
        g = nwt.Gen("planted.fwd", "f32", 3)
        case = Planted().make_case(g, "ok", "f32")
        self.assertEqual(nwt._case_digest_later(case, True)(), nwt.case_digest(case))
        self.assertEqual(nwt._case_digest_later(case, False)(), nwt.case_digest(case))

    def test_declarations(self):
        h = planted_runner().hello()
        self.assertEqual([c["check"] for c in h["checks"]], ["planted.fwd", "planted.bwd"])
        self.assertEqual([c["pass"] for c in h["checks"]], ["fwd", "bwd"])
        self.assertIn("{seed}", h["repro"])
        with self.assertRaises(ValueError):
            class NoGrads(nwt.TorchCheck):
                op = "x"
            NoGrads(backward=True)
        self.assertEqual(len(NoGrads.both()), 1)


@unittest.skipIf(torch is None, "torch is not installed")
class FastPathsTest(unittest.TestCase):
    """A GPU runner's fast paths give the in-line trial's answers, field for field but kernel_us:
    the next seed prepared ahead (by a helper process, or a thread) and the metrics and digests
    replayed from graphs (emulated on the CPU: each replay runs the captured operations again, on
    the same static buffers)."""

    FAMILIES = ("ok", "scaled", "nan", "dtail", "unwritten", "canary", "kink", "view", "raise")

    def setUp(self):
        saved = (nwt.PREPARE_AHEAD, nwt.GRAPHS, nwt._GRAPH_IMPL, nwt.BATCH_ALL, nwt.HELPER_WAIT_S)
        nwt.HELPER_WAIT_S = 120.0  # every case from the helper, however busy the machine (the default is
        #                            to prepare in line an answer that is late: the same answers)

        def restore():
            nwt.PREPARE_AHEAD, nwt.GRAPHS, nwt._GRAPH_IMPL, nwt.BATCH_ALL, nwt.HELPER_WAIT_S = saved
            nwt._AHEAD.drop()
            if any(h.state == "dead" for h in nwt._AHEAD.helpers):  # new ones for the next test
                for h in nwt._AHEAD.helpers:
                    h.close()
                nwt._AHEAD.helpers = []
            nwt._AHEAD.off.clear()
            nwt._AHEAD.taken.clear()
            nwt._GRAPHS.__init__()
        self.addCleanup(restore)
        nwt._GRAPHS.__init__()
        self.checks = Planted.both() + PlantedSizes.both() + PlantedFixed.both() + PlantedTwoPlains.both()

    def requests(self):
        """Runs of seeds (prepared ahead), jumps (misses), named families, errors, repeats 1 and 2."""
        out = []
        for c in self.checks:
            for dtype in ("f32", "bf16"):
                n = len(c.families)
                for seed in list(range(2 * n)) + [7 * n + 3, 40, 41, 42]:
                    out.append((c.name, dtype, seed, None, 1 + seed % 2))
                for seed in (5, 6, 7):
                    out.append((c.name, dtype, seed, "ok", 2))
        return out

    def answers(self, runner, requests, foresee=False):
        """The answers (kernel_us left out) to requests; foresee: each trial is told the next
        request, as the runner's command line tells it (else it guesses the next seed)."""
        requests = [r for r in requests if r[3] is not None or Planted.families[r[2] % len(Planted.families)] not in (
            "fatal", "racy")]  # (a fatal error ends a runner: its own test; racy: not deterministic across runs)
        got = []
        for i, (check, dtype, seed, family, repeats) in enumerate(requests):
            Planted.calls = 0
            upcoming = (requests[i + 1][:4] if i + 1 < len(requests) else False) if foresee else None
            try:
                a = runner.trial(check, dtype, seed, family, repeats, upcoming)
                a.pop("kernel_us")
            except Exception as e:
                a = (type(e).__name__, str(e))
            got.append(a)
        return got

    def in_line(self, requests=None):
        nwt.PREPARE_AHEAD, nwt.GRAPHS = False, False
        return self.answers(nw.Runner(self.checks, name="planted 1"), requests or self.requests())

    def start_helper(self, r, check="planted.fwd"):
        """Two consecutive seeds (the second starts the helper processes), then waits until they
        serve; the first of them."""
        r.trial(check, "f32", 0, None, 1)
        r.trial(check, "f32", 1, None, 1)
        self.assertEqual(len(nwt._AHEAD.helpers), nwt.AHEAD_DEPTH)
        for helper in nwt._AHEAD.helpers:
            for _ in range(2400):
                if helper.ready() or helper.state != "starting":
                    break
                time.sleep(0.05)
            self.assertEqual(helper.state, "ready")
        return nwt._AHEAD.helper

    def test_prepared_ahead_gives_the_same_answers(self):
        nwt.BATCH_ALL = True  # packed inputs, as on a GPU
        want = self.in_line()
        for mode in ("thread", "process"):
            nwt.PREPARE_AHEAD, nwt.GRAPHS = mode, False
            r = nw.Runner(self.checks, name="planted 1")
            if mode == "process":
                self.start_helper(r)
            before = dict(nwt.STATS)
            self.assertEqual(self.answers(r, self.requests()), want, mode)
            d = {k: nwt.STATS[k] - before[k] for k in before}
            self.assertGreater(d["ahead_hits"], len(want) // 2, mode)
            self.assertGreater(d["ahead_misses"], 0, mode)
            self.assertGreater(d["douts_ahead"], 0, mode)
            # The first two of each check x direction taken were also prepared in line, and agreed.
            self.assertGreaterEqual(d["ahead_verified"], 2 * len(self.checks), mode)
            self.assertEqual((d["ahead_off"], nwt._AHEAD.off), (0, set()), mode)
            nwt._AHEAD.drop()

    @unittest.skipUnless(hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"), "memory files")
    def test_the_helpers_cases_cross_in_shared_memory(self):
        """A helper writes a case's upload image into memory it shares with the runner, and the
        case's inputs are views of it: the in-line answers. A case larger than the shared buffer
        comes through the pipe, and the buffers grow to it: the next such cases are shared again."""
        nwt.BATCH_ALL = True  # packed inputs, as on a GPU
        want = self.in_line()
        self.addCleanup(setattr, nwt, "SLOT_BYTES_MIN", nwt.SLOT_BYTES_MIN)
        nwt.SLOT_BYTES_MIN = 4096  # (the planted cases' images are 1-4 KB or more: some do not fit at first)
        nwt.PREPARE_AHEAD, nwt.GRAPHS = "process", False
        self.fresh_ahead()
        r = nw.Runner(self.checks, name="planted 1")
        self.start_helper(r)
        before = dict(nwt.STATS)
        self.assertEqual(self.answers(r, self.requests()), want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertGreater(d["ahead_shared"], d["ahead_hits"] // 2, d)
        self.assertLess(d["ahead_shared"], d["ahead_hits"], d)  # (some came through the pipe, before growing)
        self.assertGreater(max(h.need for h in nwt._AHEAD.helpers), 4096)
        self.assertTrue(all(sl.size >= 8192 for h in nwt._AHEAD.helpers for sl in h.slots if sl.buf is not None))

    def test_an_input_kept_past_its_trial_is_never_written_over(self):
        """A case from a helper has its inputs in shared memory: a check that keeps one past its
        trial keeps its values (the buffer is replaced, not written again), and a class attribute
        that does not pickle (a lock) leaves the helpers to the others (the samples compare)."""
        nwt.BATCH_ALL = True
        nwt.PREPARE_AHEAD, nwt.GRAPHS = "process", False
        self.fresh_ahead()
        self.addCleanup(Keeper.kept.clear)
        r = nw.Runner([Keeper(backward=False)], name="keeper 1")
        self.start_helper(r, "keeper.fwd")
        before = dict(nwt.STATS)
        for seed in range(2, 30):
            r.trial("keeper.fwd", "f32", seed, None, 1)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertGreater(d["ahead_shared"], 20, d)
        changed = [i for i, (kept, then) in enumerate(Keeper.kept) if not torch.equal(kept, then)]
        self.assertEqual(changed, [])

    def test_cases_are_made_on_one_thread(self):
        """make_case runs with one intra-op thread in line, on a worker and in a helper (a seed's case
        does not depend on the machine's cores), and the thread count is given back after it."""
        nwt.BATCH_ALL = True
        self.addCleanup(torch.set_num_threads, torch.get_num_threads())
        torch.set_num_threads(2)
        c = Counted(backward=False)
        case = c._prepare("f32", 0, "ok", 0)
        self.assertEqual((case["threads"], torch.get_num_threads()), (1, 2))
        for mode in ("thread", "process"):
            nwt.PREPARE_AHEAD, nwt.GRAPHS = mode, False
            self.fresh_ahead()
            r = nw.Runner([c], name="counted 1")
            if mode == "process":
                self.start_helper(r, "counted.fwd")
            before = dict(nwt.STATS)
            for seed in range(6):  # (a case of another thread count has another digest: turned off)
                r.trial("counted.fwd", "f32", seed, None, 1)
            d = {k: nwt.STATS[k] - before[k] for k in before}
            self.assertGreater(d["ahead_hits"], 2, mode)
            self.assertEqual((d["ahead_off"], nwt._AHEAD.off), (0, set()), mode)
            self.assertEqual(torch.get_num_threads(), 2)

    def test_uploaded_ahead_gives_the_same_answers(self):
        """The worker thread's upload of the case it prepared (UPLOAD_AHEAD: on the CPU the image it
        wrote, on a GPU the copy on its side stream) gives the in-line answers, as the trial's own
        upload does; every case taken from ahead went up that way."""
        nwt.BATCH_ALL = True
        want = self.in_line()
        self.addCleanup(setattr, nwt, "UPLOAD_AHEAD", nwt.UPLOAD_AHEAD)
        for on in (True, False):
            nwt.UPLOAD_AHEAD = on
            for graphs in (False, True):
                nwt.PREPARE_AHEAD, nwt.GRAPHS = "thread", graphs
                nwt._GRAPH_IMPL = nwt._EmulatedGraph if graphs else None
                nwt._GRAPHS.__init__()
                self.fresh_ahead()
                before = dict(nwt.STATS)
                self.assertEqual(self.answers(nw.Runner(self.checks, name="planted 1"), self.requests()), want,
                                 (on, graphs))
                d = {k: nwt.STATS[k] - before[k] for k in before}
                self.assertGreater(d["ahead_hits"], len(want) // 2)
                self.assertEqual(d["upload_ahead"], d["ahead_hits"] if on else 0, (on, graphs))
                self.assertEqual((d["ahead_off"], d["graph_off"]), (0, 0))

    def test_kernel_copies_give_the_same_answers(self):
        """The kernel's own copy of each input uploaded with the image (KERNEL_COPIES) instead of a
        clone on the device: the same answers, in line and prepared ahead, graphs or not; a kernel
        that writes into its inputs changes neither another repeat's inputs nor the programs'."""
        nwt.BATCH_ALL = True
        self.addCleanup(setattr, nwt, "KERNEL_COPIES", nwt.KERNEL_COPIES)
        checks = self.checks + [Scribbles()]
        reqs = self.requests() + [("scribbles.fwd", dt, s, None, 1 + s % 2) for dt in ("f32", "bf16")
                                  for s in range(6)]
        got = {}
        for on in (False, True):
            nwt.KERNEL_COPIES = on
            for mode, graphs in ((False, False), ("thread", True)):
                nwt.PREPARE_AHEAD, nwt.GRAPHS = mode, graphs
                nwt._GRAPH_IMPL = nwt._EmulatedGraph if graphs else None
                nwt._GRAPHS.__init__()
                self.fresh_ahead()
                got[on, mode] = self.answers(nw.Runner(checks, name="planted 1"), reqs)
        want = got[False, False]
        for k, v in got.items():
            self.assertEqual(v, want, k)
        scribbled = want[-12:]  # (the scribbles' requests, last: none left out by answers())
        self.assertEqual([(a["verdict"], a["digests_differ"]) for a in scribbled], [("pass", 0)] * 12)

    def test_the_request_foreseen_is_prepared(self):
        """Told the next request (the command line's next seed, a seed run again, another check),
        the thread prepares exactly that one: every trial after the first takes its case from
        ahead, with the in-line answers."""
        nwt.BATCH_ALL = True
        reqs = [(c.name, dtype, seed, None, 1 + seed % 2) for c in self.checks[:4] for dtype in ("f32", "bf16")
                for seed in (0, 0, 0, 3, 1, 2, 2, 9)]
        want = self.in_line(reqs)
        nwt.PREPARE_AHEAD, nwt.GRAPHS = "thread", False
        self.fresh_ahead()
        before = dict(nwt.STATS)
        self.assertEqual(self.answers(nw.Runner(self.checks, name="planted 1"), reqs, foresee=True), want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertEqual((d["ahead_hits"], d["ahead_misses"], d["ahead_in_line"], d["ahead_off"]),
                         (len(want) - 1, 0, 0, 0))

    def test_a_case_dropped_or_late_on_the_thread(self):
        """A preparation still running when another request comes is thrown away without being
        waited for, and nothing of its case is kept once it ends; one later than AHEAD_TIMEOUT_S
        has its trial prepared in line and the thread given up (one line on stderr), and the
        thread ends once its check's code returns. Answers: the in-line ones throughout."""
        nwt.BATCH_ALL = True
        ahead = self.fresh_ahead()
        self.addCleanup(setattr, nwt, "AHEAD_TIMEOUT_S", nwt.AHEAD_TIMEOUT_S)
        self.addCleanup(setattr, nwt, "AHEAD_DEPTH", nwt.AHEAD_DEPTH)
        nwt.AHEAD_DEPTH = 1  # (one worker: depth 2 has tests of its own)
        Gated.reset()
        self.addCleanup(lambda: Gated.gate.set())
        def ask(seed, upcoming):  # (told the next request, as the command line tells it)
            a = r.trial("gated.fwd", "f32", seed, None, 1, upcoming and ("gated.fwd", "f32", upcoming, None))
            a.pop("kernel_us")
            return a

        nwt.PREPARE_AHEAD, nwt.GRAPHS = False, False
        r = nw.Runner(Gated.both(), name="gated 1")
        want = [ask(0, 1), ask(5, 6), ask(6, 7), ask(7, 8), ask(8, False)]
        nwt.PREPARE_AHEAD = "thread"
        r = nw.Runner(Gated.both(), name="gated 1")
        before = dict(nwt.STATS)
        got = [ask(0, 1)]  # seed 1 is prepared, and waits at the gate
        self.assertTrue(Gated.entered.wait(120))
        dropped = ahead.job[2]
        got.append(ask(5, 6))  # seed 5 instead: seed 1's case thrown away, not waited for
        self.assertFalse(dropped.done.is_set())
        self.assertEqual(nwt.STATS["ahead_late"], before["ahead_late"])
        Gated.entered.clear()
        Gated.gate.set()  # seed 1's make_case returns; then seed 6's runs
        self.assertTrue(dropped.done.wait(120))
        self.assertIsNone(dropped.case)
        ahead.job[2].done.wait(120)
        Gated.gate.clear()
        Gated.entered.clear()
        got.append(ask(6, 7))  # seed 6 from ahead; seed 7 is prepared, and waits at the gate
        self.assertTrue(Gated.entered.wait(120))
        late = ahead.job[2]
        nwt.AHEAD_TIMEOUT_S = 0.05  # (it waits at the gate until the gate opens: late whatever the machine)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            got += [ask(7, 8), ask(8, False)]  # seed 7 in line after the wait; seed 8 in line: the thread given up
        self.assertEqual(got, want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertEqual((d["ahead_misses"], d["ahead_hits"], d["ahead_late"]), (1, 1, 1))
        self.assertEqual(len(err.getvalue().splitlines()), 1, err.getvalue())
        self.assertIn("given up", err.getvalue())
        self.assertIsNone(ahead.job)
        Gated.gate.set()
        self.assertTrue(late.done.wait(120))
        self.assertEqual(len(ahead.workers.workers), 1)
        ahead.workers.workers[0].thread.join(120)
        self.assertFalse(ahead.workers.workers[0].thread.is_alive())
        import gc

        gc.collect()
        self.assertEqual(len(Gated.made), 3)  # seeds 1, 6 and 7
        self.assertEqual([w() for w in Gated.made], [None] * 3)

    def depth2(self):
        """Two requests prepared at once (AHEAD_DEPTH 2, each on a worker of its own), for this test."""
        nwt.BATCH_ALL = True
        self.addCleanup(setattr, nwt, "AHEAD_DEPTH", nwt.AHEAD_DEPTH)
        self.addCleanup(setattr, nwt, "AHEAD_TIMEOUT_S", nwt.AHEAD_TIMEOUT_S)
        self.addCleanup(Gated.reset, True)
        nwt.AHEAD_DEPTH = 2
        nwt.PREPARE_AHEAD, nwt.GRAPHS = False, False

    def gated_answers(self, r, seeds, told=False, check="gated.fwd"):
        """The answers (kernel_us left out) to seeds of check in f32; told: each trial is told the two
        requests after it (a False after the last), as the command line tells them."""
        out = []
        for i, s in enumerate(seeds):
            up = None
            if told:
                up = [(check, "f32", t, None) for t in seeds[i + 1:i + 3]]
                up += [False] if len(up) < 2 else []
            a = r.trial(check, "f32", s, None, 1 + s % 2, up)
            a.pop("kernel_us")
            out.append(a)
        return out

    def test_two_workers_prepare_two_requests_at_once(self):
        """Depth 2: the two requests after a trial are prepared at once, each on a worker of its own
        (the make_case of seeds 1 and 2 meet at a barrier: neither goes on without the other), and
        every trial after the first takes its case from ahead, with the in-line answers; the
        requests told (the command line) or guessed (each the seed after the one before)."""
        self.depth2()
        seeds = list(range(8))
        Gated.reset(True)
        want = self.gated_answers(nw.Runner(Gated.both(), name="gated 1"), seeds)
        for told in (False, True):
            nwt.PREPARE_AHEAD = "thread"
            ahead = self.fresh_ahead()
            Gated.reset(True)
            Gated.together, Gated.meet = threading.Barrier(2), (1, 2)
            before = dict(nwt.STATS)
            self.assertEqual(self.gated_answers(nw.Runner(Gated.both(), name="gated 1"), seeds, told), want, told)
            d = {k: nwt.STATS[k] - before[k] for k in before}
            self.assertEqual((d["ahead_hits"], d["ahead_misses"], d["ahead_in_line"], d["ahead_dropped"],
                              d["ahead_late"], d["ahead_off"]), (len(seeds) - 1, 0, 0, 0, 0, 0), told)
            self.assertEqual(d["upload_ahead"], len(seeds) - 1)
            self.assertFalse(Gated.together.broken)
            self.assertEqual(len(ahead.workers.workers), 2)
            self.assertNotEqual(Gated.where[1], Gated.where[2])
            # Guessed, the two after the last seed are being prepared; told, none after it.
            self.assertEqual([j[1][1] for j in ahead.jobs], [8, 9] if not told else [])
            nwt._AHEAD.drop()

    def test_a_skip_or_a_return_drops_what_does_not_follow(self):
        """A request that skips one prepared (told or guessed) takes its own and has the skipped one
        thrown away; one that goes back has every prepared one thrown away and is prepared in line,
        after which guessing rests until a run of seeds again. Nothing of a case thrown away is kept;
        the answers are the in-line ones."""
        self.depth2()
        Gated.reset(True)
        guessed = [0, 2, 3, 1, 2, 3, 4]
        told = [(0, [1, 2]), (1, [3, 4]), (3, [4, 5]), (0, [1, 2]), (1, [2, False]), (2, False)]
        r = nw.Runner(Gated.both(), name="gated 1")
        want = self.gated_answers(r, guessed) + [self.gated_answers(r, [s])[0] for s, _ in told]
        nwt.PREPARE_AHEAD = "thread"
        ahead = self.fresh_ahead()
        r = nw.Runner(Gated.both(), name="gated 1")
        dropped, got = [], []

        def ask(seed, up=None):
            jobs = list(ahead.jobs)
            before = dict(nwt.STATS)
            a = r.trial("gated.fwd", "f32", seed, None, 1 + seed % 2, up)
            a.pop("kernel_us")
            got.append(a)
            gone = [j for j in jobs if j not in ahead.jobs and not (j[1][1] == seed)]
            dropped.extend(j[2] for j in gone)
            d = {k: nwt.STATS[k] - before[k] for k in before}
            return (d["ahead_hits"], d["ahead_misses"], d["ahead_dropped"]), sorted(j[1][1] for j in ahead.jobs)

        # guessed: 0 prepares 1, 2; 2 skips 1 (dropped), prepares 3, 4; 3 keeps 4, prepares 5; 1 goes
        # back (4, 5 dropped; guessing rests); 2 follows 1 (in line, prepares 3, 4); 3 and 4 taken.
        steps = [ask(s) for s in guessed]
        self.assertEqual(steps, [((0, 0, 0), [1, 2]), ((1, 0, 1), [3, 4]), ((1, 0, 0), [4, 5]), ((0, 1, 2), []),
                                 ((0, 0, 0), [3, 4]), ((1, 0, 0), [4, 5]), ((1, 0, 0), [5, 6])])
        ahead.drop()
        dropped.extend(j[2] for j in ahead.jobs)
        # told: 1 is told 3, 4 next (2 dropped); 3 is told 4, 5 (4 kept); back to 0 (4, 5 dropped: a
        # miss, told 1, 2: prepared, told requests never rest); 1 and 2 taken, none after 2.
        steps = [ask(s, [("gated.fwd", "f32", t, None) if t is not False else False for t in up] if up else up)
                 for s, up in told]
        self.assertEqual(steps, [((0, 0, 0), [1, 2]), ((1, 0, 1), [3, 4]), ((1, 0, 0), [4, 5]), ((0, 1, 2), [1, 2]),
                                 ((1, 0, 0), [2]), ((1, 0, 0), [])])
        self.assertEqual(got, want)
        self.assertGreaterEqual(len(dropped), 6)
        for h in dropped:
            self.assertTrue(h.done.wait(120))
            self.assertIsNone(h.case)

    def test_a_case_dropped_mid_make_is_not_waited_for(self):
        """Both workers held in make_case (seeds 1 and 2), a request for seed 5: both thrown away,
        the trial answered without waiting for them; the next requests queue behind them on the
        workers and are taken once the gate opens; nothing of the dropped cases is kept."""
        self.depth2()
        Gated.reset(True)
        r = nw.Runner(Gated.both(), name="gated 1")
        want = self.gated_answers(r, [0, 5, 6, 7])
        nwt.PREPARE_AHEAD = "thread"
        ahead = self.fresh_ahead()
        Gated.reset()
        r = nw.Runner(Gated.both(), name="gated 1")
        got = self.gated_answers(r, [0])
        self.assertTrue(Gated.wait_inside(2))  # seeds 1 and 2 at the gate, on two workers
        held = [j[2] for j in ahead.jobs]
        self.assertEqual(sorted(Gated.inside), [1, 2])
        before = dict(nwt.STATS)
        # Seed 5, told 6 and 7 next: not waited for (they are still at the gate)
        a = r.trial("gated.fwd", "f32", 5, None, 2, [("gated.fwd", "f32", 6, None), ("gated.fwd", "f32", 7, None)])
        a.pop("kernel_us")
        got.append(a)
        self.assertEqual([h.done.is_set() for h in held], [False, False])
        self.assertEqual([h.dropped for h in held], [True, True])
        self.assertEqual([j[1][1] for j in ahead.jobs], [6, 7])
        Gated.gate.set()
        got += self.gated_answers(r, [6, 7])
        self.assertEqual(got, want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertEqual((d["ahead_misses"], d["ahead_dropped"], d["ahead_hits"], d["ahead_late"]), (1, 2, 2, 0))
        for h in held:
            self.assertTrue(h.done.wait(120))
            self.assertIsNone(h.case)
        ahead.drop()
        for h in [j for j in ahead.workers.workers]:
            h.last.done.wait(120)
        import gc

        gc.collect()
        made = {Gated.inside[i]: Gated.made[i] for i in range(len(Gated.inside))}
        self.assertEqual((made[1](), made[2]()), (None, None))

    def test_a_late_case_with_two_workers(self):
        """Deadlines with two workers: a case later than AHEAD_TIMEOUT_S is prepared in line, every
        worker is given up (one line on stderr), the other request prepared for is thrown away (not
        waited for), and every trial after it is prepared in line; the workers end once the check's
        code returns."""
        self.depth2()
        Gated.reset(True)
        r = nw.Runner(Gated.both(), name="gated 1")
        want = self.gated_answers(r, [0, 1, 2, 3])
        nwt.PREPARE_AHEAD = "thread"
        ahead = self.fresh_ahead()
        Gated.reset()
        r = nw.Runner(Gated.both(), name="gated 1")
        got = self.gated_answers(r, [0])
        self.assertTrue(Gated.wait_inside(2))
        held = [j[2] for j in ahead.jobs]
        nwt.AHEAD_TIMEOUT_S = 0.05  # (both wait at the gate until it opens: late whatever the machine)
        before = dict(nwt.STATS)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            got += self.gated_answers(r, [1, 2, 3])
        self.assertEqual(got, want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertEqual((d["ahead_late"], d["ahead_hits"], d["ahead_in_line"]), (1, 0, 1))
        self.assertEqual(len(err.getvalue().splitlines()), 1, err.getvalue())
        self.assertIn("given up", err.getvalue())
        self.assertFalse(ahead.workers.alive)
        self.assertEqual((ahead.jobs, [h.dropped for h in held]), ([], [True, True]))
        Gated.gate.set()
        for w in ahead.workers.workers:
            w.thread.join(120)
            self.assertFalse(w.thread.is_alive())

    def test_the_thread_makes_cases_as_in_line(self):
        """A make_case that raises on the thread has its case made in line; a case is made under
        the trial thread's own torch settings (gradient mode, thread count)."""
        nwt.BATCH_ALL = True
        reqs = [("failsahead.fwd", "f32", s, None, 1) for s in range(6)] + [
            ("settings.fwd", "bf16", s, None, 2) for s in range(6)]
        checks = FailsAhead.both() + [Settings()]

        def run(mode):
            nwt.PREPARE_AHEAD, nwt.GRAPHS = mode, False
            threads = torch.get_num_threads()
            torch.set_num_threads(threads + 1)
            try:
                with torch.no_grad():
                    return self.answers(nw.Runner(checks, name="planted 1"), reqs)
            finally:
                torch.set_num_threads(threads)

        want = run(False)
        self.assertEqual(want[-1]["case"]["digest"], want[-1]["case"]["digest"])
        self.fresh_ahead()
        before = dict(nwt.STATS)
        self.assertEqual(run("thread"), want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        # (after the miss from one check to the other, guessing rests for one request)
        self.assertEqual((d["ahead_in_line"], d["ahead_hits"], d["ahead_off"]), (5, 4, 0))

    def test_a_helper_that_dies_leaves_trials_in_line(self):
        reqs = self.requests()[:40]
        want = self.in_line(reqs)
        nwt.PREPARE_AHEAD, nwt.GRAPHS = "process", False
        r = nw.Runner(self.checks, name="planted 1")
        helper = self.start_helper(r)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            got = self.answers(r, reqs[:10])
            helper.proc.kill()
            helper.proc.wait(60)  # (a process with torch takes a while to be torn down on a busy machine)
            got += self.answers(r, reqs[10:])
        self.assertEqual(got, want)
        self.assertEqual(helper.state, "dead")
        self.assertEqual(len(err.getvalue().splitlines()), 1, err.getvalue())
        self.assertIn("prepared in line", err.getvalue())

    def fresh_ahead(self):
        """A new _Ahead (no helper yet) for this test, the module's back after it."""
        saved, nwt._AHEAD = nwt._AHEAD, nwt._Ahead()
        mine = nwt._AHEAD

        def back():
            for h in mine.helpers:
                h.close()
            nwt._AHEAD = saved
        self.addCleanup(back)
        return mine

    def test_a_case_that_is_not_the_in_line_one_turns_the_helper_off(self):
        """The contract broken, as a reviewer found it: a module global set at run time (as under a
        script's main guard: the helper, which imports the module, never sees it), a class
        attribute set at run time (the helper gets it with the check) and an attribute changed in
        place between two trials. The answers are the in-line ones; the check whose case from the
        helper differed has the helper turned off, with one line on stderr; the one changed in
        place has that case prepared in line (its new state goes to the helper)."""
        nwt.BATCH_ALL = True
        self.addCleanup(setattr, Configured, "scale", 1.0)
        self.addCleanup(SETTINGS.update, {"scale": 1.0})

        def run(mode):
            nwt.PREPARE_AHEAD, nwt.GRAPHS = mode, False
            checks = Configured.both() + Resized.both() + Planted.both()
            r = nw.Runner(checks, name="configured 1")
            if mode == "process":
                self.start_helper(r)
            Configured.scale = SETTINGS["scale"] = 3.0
            got = []
            for c in checks:
                for seed in range(12):
                    if seed == 6 and hasattr(c, "rows"):
                        c.rows[0] = 3  # in place, within a run of seeds
                    got += self.answers(r, [(c.name, "f32", seed, None, 1)])
            Configured.scale = SETTINGS["scale"] = 1.0
            return got

        want = run(False)
        for mode in ("thread", "process"):
            before = dict(nwt.STATS)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                got = run(mode)
            self.assertEqual(got, want, mode)
            d = {k: nwt.STATS[k] - before[k] for k in before}
            self.assertGreater(d["ahead_stale"], 0, mode)
            self.assertGreater(d["ahead_hits"], 0, mode)
            lines = err.getvalue().splitlines()
            if mode == "process":
                self.assertEqual(nwt._AHEAD.off, {"configured.fwd", "configured.bwd"})
                self.assertEqual(len(lines), 2, lines)
                self.assertIn("differed from the same case prepared in line", lines[0])
            else:  # one process: the class attribute is the same; the change in place is seen
                self.assertEqual((nwt._AHEAD.off, lines), (set(), []))
            nwt._AHEAD.drop()
            nwt._AHEAD.off.clear()

    def test_a_one_trial_run_starts_no_helper(self):
        nwt.PREPARE_AHEAD, nwt.GRAPHS = "process", False
        ahead = self.fresh_ahead()
        r = nw.Runner(self.checks, name="planted 1")
        for seed in (5, 5, 2, 0):  # a repro's runs of one seed, out-of-order probes
            r.trial("planted.fwd", "f32", seed, None, 1)
            self.assertIsNone(ahead.helper)
        r.trial("planted.fwd", "f32", 1, None, 1)  # the second of two consecutive seeds
        self.assertIsNotNone(ahead.helper)

    @unittest.skipUnless(sys.platform.startswith("linux"), "reads /proc")
    def test_the_helpers_process(self):
        """It sees no GPU, ignores SIGINT, takes no check that holds a tensor off the CPU, is stopped
        when it does not start in time, and a frame it stalls in the middle of is not waited for."""
        nwt.PREPARE_AHEAD, nwt.GRAPHS = "process", False
        self.fresh_ahead()
        helper = self.start_helper(nw.Runner(self.checks, name="planted 1"))
        pid = helper.proc.pid
        with open("/proc/%d/environ" % pid, "rb") as f:
            self.assertIn(b"CUDA_VISIBLE_DEVICES=", f.read().split(b"\0"))
        with open("/proc/%d/status" % pid) as f:
            ign = [int(x.split()[1], 16) for x in f if x.startswith("SigIgn:")][0]
        self.assertTrue(ign & (1 << 1), "SIGINT not ignored")
        c = Planted()
        c.table = torch.zeros(2)
        self.assertIsNotNone(nwt._check_state(c))
        c.table = torch.zeros(2, device="meta")  # (a CUDA tensor, where there is no GPU)
        self.assertIsNone(nwt._check_state(c))
        saved = nwt.HELPER_START_S
        self.addCleanup(setattr, nwt, "HELPER_START_S", saved)
        nwt.HELPER_START_S = 0.0
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            late = nwt._Helper()
            self.assertFalse(late.ready())
        self.assertEqual(late.state, "dead")
        self.assertIn("did not start in 0 s", err.getvalue())
        rfd, wfd = os.pipe()
        self.addCleanup(os.close, rfd)
        self.addCleanup(os.close, wfd)
        os.write(wfd, nwt._FRAME.pack(100) + bytes(10))  # 10 bytes of a frame of 100, then nothing
        with self.assertRaises(TimeoutError):
            nwt._read_frame(rfd, time.perf_counter() + 0.2)

    def test_settings_from_the_environment(self):
        """An unknown NUMWATCH_PREPARE_AHEAD prepares in line, a malformed NUMWATCH_HELPER_WAIT_S
        waits as by default: each says so on stderr, neither fails the import."""
        code = ("import sys; sys.path.insert(0, %r); from numwatch_runner import torchcheck as t; "
                "print(t.PREPARE_AHEAD, t.HELPER_WAIT_S, t._ahead_mode('cuda'))" % HERE)
        env = dict(os.environ, NUMWATCH_PREPARE_AHEAD="1", NUMWATCH_HELPER_WAIT_S="soon", CUDA_VISIBLE_DEVICES="",
                   PYTHONDONTWRITEBYTECODE="1")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual((out.returncode, out.stdout), (0, "False None None\n"), out.stderr)
        self.assertEqual(len(out.stderr.splitlines()), 2, out.stderr)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            for v, want in (("process", "process"), (" Thread ", "thread"), ("0", False), ("", None), (None, None),
                            ("off", False), ("1", False), ("yes", False)):
                self.assertEqual(repr(nwt._parse_prepare_ahead(v)), repr(want), v)  # (False is not None)
            # Unset: helper processes on a GPU, in line on the CPU; off or in the helper: in line.
            saved = nwt.PREPARE_AHEAD
            try:
                for v, cuda, cpu in ((None, "process", None), (False, None, None), ("process", "process", "process"),
                                     ("thread", "thread", "thread")):
                    nwt.PREPARE_AHEAD = v
                    self.assertEqual((nwt._ahead_mode("cuda"), nwt._ahead_mode("cpu")), (cuda, cpu), v)
            finally:
                nwt.PREPARE_AHEAD = saved
            for v, want in (("2.5", 2.5), ("0", 0.0), (None, None), ("", None), ("-1", None), ("nan", None),
                            ("inf", None)):
                self.assertEqual(nwt._parse_wait_s(v), want, v)
            for v, want in (("1", 1), (" 3 ", 3), ("8", 8), (None, 2), ("", 2), ("0", 2), ("9", 2), ("two", 2)):
                self.assertEqual(nwt._parse_depth(v), want, v)
        self.assertEqual(len(err.getvalue().splitlines()), 8, err.getvalue())

    def graphed(self, impl=None):
        nwt.BATCH_ALL, nwt.GRAPHS = True, None
        nwt._GRAPH_IMPL = impl or nwt._EmulatedGraph
        nwt.PREPARE_AHEAD = False
        r = nw.Runner(self.checks, name="planted 1")
        return [self.answers(r, self.requests()) for _ in range(3)]

    def test_graphs_give_the_same_answers(self):
        nwt.BATCH_ALL = True
        want = self.in_line()
        before = dict(nwt.STATS)
        for got in self.graphed():
            self.assertEqual(got, want)
        d = {k: nwt.STATS[k] - before[k] for k in before}
        self.assertGreater(d["graph_captures"], 5)
        self.assertGreater(d["graph_verified"], d["graph_captures"])
        self.assertGreater(d["graph_replays"], 2 * d["graph_verified"])  # trusted replays, unchecked
        self.assertEqual((d["graph_off"], nwt._GRAPHS.off), (0, set()))
        # A trusted graph's trial reads once, as an eager one.
        r = nw.Runner(self.checks, name="planted 1")
        for _ in range(1 + nwt.GRAPH_VERIFY):  # captured, checked
            r.trial("planted.bwd", "f32", 0, None, 1)
        reads, replays = nwt.HOST_READS[0], nwt.STATS["graph_replays"]
        r.trial("planted.bwd", "f32", 0, None, 1)
        self.assertEqual((nwt.HOST_READS[0] - reads, nwt.STATS["graph_replays"] - replays), (1, 1))

    def test_graphs_that_disagree_or_fail_are_turned_off(self):
        nwt.BATCH_ALL = True
        want = self.in_line()

        class Wrong(nwt._EmulatedGraph):
            def replay(self):
                super().replay()
                self.out[0] += 1  # one value off

        class Fails(nwt._EmulatedGraph):
            def capture(self, fn):
                raise RuntimeError("operation not permitted when stream is capturing")

        class MakesConstants(nwt._EmulatedGraph):
            def capture(self, fn):
                nwt._CONST.clear()  # a constant made during the capture: never to be used
                return super().capture(fn)

        for impl in (Wrong, Fails, MakesConstants):
            nwt._GRAPHS.__init__()
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                for got in self.graphed(impl):
                    self.assertEqual(got, want, impl.__name__)
            self.assertEqual(nwt._GRAPHS.off, {c.name for c in self.checks}, impl.__name__)
            lines = err.getvalue().splitlines()
            self.assertEqual(len(lines), len(self.checks), lines)  # one line a check
            self.assertIn("metric graphs off for this check", lines[0])

    def test_graphs_out_of_memory_drop_every_graph(self):
        """Out of device memory in a capture or a replay: every graph dropped, graphs off for the
        process with one line, the trial measured eagerly (never an error answer, never fatal,
        though the message says "CUDA error")."""
        nwt.BATCH_ALL = True
        want = self.in_line()
        oom = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)

        class OnCapture(nwt._EmulatedGraph):
            def capture(self, fn):
                raise RuntimeError("CUDA error: out of memory")

        class OnReplay(nwt._EmulatedGraph):
            replays = 0

            def replay(self):
                OnReplay.replays += 1
                if OnReplay.replays == 5:
                    raise oom("CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 79.15 GiB total capacity)")
                super().replay()

        for impl in (OnCapture, OnReplay):
            nwt._GRAPHS.__init__()
            before = dict(nwt.STATS)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                for got in self.graphed(impl):
                    self.assertEqual(got, want, impl.__name__)
            d = {k: nwt.STATS[k] - before[k] for k in before}
            lines = err.getvalue().splitlines()
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("out of device memory in a metric graph", lines[0])
            self.assertTrue(nwt._GRAPHS.dropped)
            self.assertEqual((len(nwt._GRAPHS.cache), nwt._GRAPHS.nbytes, nwt._GRAPHS.off), (0, 0, set()))
            self.assertEqual((d["graphs_dropped"], d["graph_off"]), (1, 0))
            self.assertFalse(nwt._graphs_on("cpu"))
            replays = nwt.STATS["graph_replays"]
            self.graphed(impl)
            self.assertEqual(nwt.STATS["graph_replays"], replays)  # off for the process

    def test_graphs_fatal_errors_stay_fatal(self):
        """A sticky CUDA error in a replay is the trial's fatal error (the device context is gone),
        not "metric graphs off"; a capture's own error turns them off for the check."""
        nwt.BATCH_ALL, nwt.GRAPHS, nwt.PREPARE_AHEAD = True, None, False

        class Sticky(nwt._EmulatedGraph):
            def replay(self):
                raise RuntimeError("CUDA error: an illegal memory access was encountered")

        class Invalidated(nwt._EmulatedGraph):
            def capture(self, fn):
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

        nwt._GRAPH_IMPL = Sticky
        r = nw.Runner(self.checks, name="planted 1")
        r.trial("planted.fwd", "f32", 0, None, 1)  # seen once: eagerly
        with self.assertRaises(nw.FatalError):
            r.trial("planted.fwd", "f32", 0, None, 1)
        self.assertEqual(nwt._GRAPHS.off, set())
        nwt._GRAPHS.__init__()
        nwt._GRAPH_IMPL = Invalidated
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            for _ in range(2):
                r.trial("planted.fwd", "f32", 0, None, 1)
        self.assertEqual(nwt._GRAPHS.off, {"planted.fwd"})
        self.assertIn("metric graphs off for this check", err.getvalue())

    def test_graphs_within_their_memory_budget(self):
        """No graph larger than GRAPH_BYTES_MAX is captured; together they stay within it."""
        nwt.BATCH_ALL = True
        want = self.in_line()
        self.addCleanup(setattr, nwt, "GRAPH_BYTES_MAX", nwt.GRAPH_BYTES_MAX)
        self.graphed()
        sizes = sorted(g.nbytes for g in nwt._GRAPHS.cache.values())
        self.assertGreater(len(sizes), 2)
        for budget, captured in ((sizes[0] - 1, False), (sizes[-1], True)):
            nwt._GRAPHS.__init__()
            nwt.GRAPH_BYTES_MAX = budget
            before = nwt.STATS["graph_captures"]
            for got in self.graphed():
                self.assertEqual(got, want, budget)
                self.assertLessEqual(nwt._GRAPHS.nbytes, budget)
            self.assertEqual(nwt.STATS["graph_captures"] > before, captured, budget)
            self.assertEqual(bool(nwt._GRAPHS.too_big), budget < sizes[-1])
            self.assertEqual(nwt._GRAPHS.off, set())

    def test_everything_at_once(self):
        nwt.BATCH_ALL = True
        want = self.in_line()
        nwt.PREPARE_AHEAD, nwt.GRAPHS, nwt._GRAPH_IMPL = "thread", None, nwt._EmulatedGraph
        r = nw.Runner(self.checks, name="planted 1")
        for _ in range(2):
            self.assertEqual(self.answers(r, self.requests()), want)


@unittest.skipIf(torch is None, "torch is not installed")
class HostReadsTest(unittest.TestCase):
    """A trial waits for the device once: on a GPU each device-to-host read (.item(), .tolist(),
    float(t), bool(t), .cpu(), ...) stalls the host until the device is idle, and a few of them
    per trial cost more than the kernels of a small op. Counted on the CPU by instrumenting the
    tensor methods that read values: only the generator (CPU tensors by design) may call them."""

    READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")

    def setUp(self):
        self.stray = collections.Counter()
        allowed = {getattr(f, "__func__", f).__code__ for f in vars(nwt.Gen).values()
                   if hasattr(getattr(f, "__func__", f), "__code__")}
        allowed |= {nwt.case_digest.__code__, nwt._host.__code__}
        for m in self.READS:
            orig = getattr(torch.Tensor, m)

            def counted(t, *a, _orig=orig, _m=m, **k):
                code = sys._getframe(1).f_code
                if code not in allowed:
                    self.stray["%s in %s" % (_m, code.co_name)] += 1
                return _orig(t, *a, **k)
            setattr(torch.Tensor, m, counted)
            self.addCleanup(setattr, torch.Tensor, m, orig)

    def test_one_read_per_trial(self):
        r = planted_runner()
        try:
            for together in (None, True):  # the CPU's way, and the GPU's (torchcheck.BATCH_ALL)
                nwt.BATCH_ALL = together
                for check in ("planted.fwd", "planted.bwd"):
                    for family in ("ok", "scaled", "nan", "unwritten", "canary", "kink", "view"):
                        for dtype, repeats in (("f32", 1), ("bf16", 3)):
                            before = nwt.HOST_READS[0]
                            r.trial(check, dtype, seed_of(family), None, repeats)
                            what = "%s %s %s x%d %s" % (check, family, dtype, repeats, together)
                            self.assertEqual(nwt.HOST_READS[0] - before, 1, what)
                            self.assertEqual(dict(self.stray), {}, what)
        finally:
            nwt.BATCH_ALL = None

    def test_floor_scales_stay_on_the_device(self):
        class Scaled(Planted):
            def floor_scales(self, case, inputs, douts):
                return {"dx": inputs["x"].abs().max() * 1e3} if douts is not None else {}

        class ScaledFloat(Planted):  # the same scale through float(): a read of its own
            def floor_scales(self, case, inputs, douts):
                return {"dx": float(inputs["x"].abs().max()) * 1e3} if douts is not None else {}

        before = nwt.HOST_READS[0]
        a = nw.Runner(Scaled.both(), name="scaled 1").trial("planted.bwd", "f32", seed_of("ok"), None, 2)
        self.assertEqual((nwt.HOST_READS[0] - before, dict(self.stray)), (1, {}))
        b = nw.Runner(ScaledFloat.both(), name="scaled 1").trial("planted.bwd", "f32", seed_of("ok"), None, 2)
        self.assertEqual(dict(self.stray), {"__float__ in floor_scales": 1})
        a.pop("kernel_us"), b.pop("kernel_us")
        self.assertEqual(a, b)
        # The scale reached the budget: its floor, 4 eps(f32) x 1000 max|x|, outweighs the plain error.
        c = planted_runner().trial("planted.bwd", "f32", seed_of("ok"), None, 2)
        self.assertGreater(a["tensors"][0]["budget"], 100 * c["tensors"][0]["budget"])
        self.assertEqual(a["tensors"][1], c["tensors"][1])  # dw: no scale


@unittest.skipIf(torch is None, "torch is not installed")
class RunnerProcessTest(unittest.TestCase):
    """The torch runner as numwatchd and a person run it."""

    def test_protocol_and_command_line(self):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", NUMWATCH_PROTOCOL="1", CUDA_VISIBLE_DEVICES="")
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "planted")
            with open(script, "w") as f:
                f.write(RUNNER_SCRIPT % HERE)
            reqs = [{"op": "hello", "protocol": 1},
                    {"op": "trial", "id": 1, "check": "planted.bwd", "dtype": "bf16", "seed": seed_of("dtail"),
                     "repeats": 2, "family": None},
                    {"op": "bye"}]
            out = subprocess.run([sys.executable, script], input="".join(json.dumps(r) + "\n" for r in reqs),
                                 env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            hello, trial, bye = [strict_json(line) for line in out.stdout.splitlines()]
            self.assertEqual(hello["device"]["backend"], "host")
            self.assertEqual((trial["id"], trial["verdict"]), (1, "fail"))
            self.assertEqual(bye, {"op": "bye"})
            # The repro command line: exit 1 on a failing seed, 0 on a passing one, 2 on bad usage.
            cmd = [sys.executable, script, "--check", "planted.bwd", "--dtype", "bf16", "--seed"]
            out = subprocess.run(cmd + [str(seed_of("dtail")), "--runs", "2"], env=env, capture_output=True,
                                 text=True, timeout=120)
            self.assertEqual(out.returncode, 1, out.stderr)
            self.assertEqual(len(out.stdout.splitlines()), 2)
            self.assertIn("2 of 2 runs failed", out.stderr)
            out = subprocess.run(cmd + ["0"], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            out = subprocess.run(cmd + ["0", "--runs", "x"], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 2)

    def test_prepared_ahead_by_the_helper_process(self):
        """A runner whose trials are prepared by its helper process answers as one that prepares
        them in line, on a clean stdout; a script without the main guard (the helper would run the
        runner) has them prepared in line, with one line on stderr."""
        reqs = [{"op": "trial", "id": i, "check": c, "dtype": d, "seed": s, "repeats": 2}
                for i, (c, d, s) in enumerate([(c, d, s) for c in ("planted.fwd", "planted.bwd")
                                               for d in ("f32", "bf16") for s in list(range(40)) + [3, 4]])
                if Planted.families[s % len(Planted.families)] != "fatal"]
        text = "".join(json.dumps(r) + "\n" for r in reqs + [{"op": "bye"}])
        answers = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, src in (("guarded", RUNNER_SCRIPT_GUARDED), ("unguarded", RUNNER_SCRIPT)):
                script = os.path.join(tmp, name)
                with open(script, "w") as f:
                    f.write(src % HERE)
                for ahead in ("0", "process", "thread"):
                    # (every case from the helper once it started, however busy the machine)
                    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", NUMWATCH_PROTOCOL="1", CUDA_VISIBLE_DEVICES="",
                               NUMWATCH_PREPARE_AHEAD=ahead, OMP_NUM_THREADS="1", NUMWATCH_TORCH_STATS="1",
                               NUMWATCH_HELPER_WAIT_S="120")
                    out = subprocess.run([sys.executable, script], input=text, env=env, capture_output=True,
                                         text=True, timeout=600)
                    self.assertEqual(out.returncode, 0, out.stderr)
                    got = [strict_json(line) for line in out.stdout.splitlines()]
                    for a in got:
                        a.pop("kernel_us", None)
                    answers[name, ahead] = got
                    helper_lines = [x for x in out.stderr.splitlines() if "prepares trials ahead" in x]
                    stats = [x for x in out.stderr.splitlines() if x.startswith("numwatch-runner: torchcheck: {")]
                    self.assertEqual(len(stats), 1, out.stderr)
                    hits = int(stats[0].split("'ahead_hits': ")[1].split(",")[0])
                    if ahead == "0" or name == "guarded":
                        self.assertEqual(helper_lines, [], out.stderr)
                    else:  # (unless the run ended before the helper said it could not start)
                        self.assertLessEqual(len(helper_lines), 1, out.stderr)
                        self.assertTrue(all("did not start" in x for x in helper_lines), helper_lines)
                    if (ahead == "process" and name == "guarded") or ahead == "thread":
                        self.assertGreater(hits, len(reqs) // 2, stats)
                    else:
                        self.assertEqual(hits, 0, (name, ahead, stats))
        want = answers["guarded", "0"]
        self.assertEqual(len(want), len(reqs) + 1)
        for key, got in answers.items():
            self.assertEqual(got, want, key)

    def test_command_line_prepared_ahead_by_a_thread(self):
        """The command line tells each trial the next one (--count, --runs, the next dtype): with a
        thread every trial but the first is prepared ahead, with the in-line answers; a runner whose
        thread is held in a check's code still exits at once."""
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "planted")
            with open(script, "w") as f:
                f.write(RUNNER_SCRIPT % HERE)
            out = {}
            for ahead in ("0", "thread"):
                env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
                           NUMWATCH_PREPARE_AHEAD=ahead, NUMWATCH_TORCH_STATS="1")
                p = subprocess.run([sys.executable, script, "--check", "planted.bwd,planted.fwd", "--dtype", "all",
                                    "--seed", "0", "--count", "6", "--runs", "3"],
                                   env=env, capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 1, p.stderr)  # (families that fail)
                answers = [strict_json(line) for line in p.stdout.splitlines()]
                for a in answers:
                    a.pop("kernel_us", None)
                out[ahead] = answers
                stats = [x for x in p.stderr.splitlines() if x.startswith("numwatch-runner: torchcheck: {")]
                self.assertEqual(len(stats), 1, p.stderr)
                if ahead == "thread":
                    st = ast.literal_eval(stats[0].split(": ", 2)[2])
                    self.assertEqual((st["ahead_hits"], st["ahead_misses"], st["ahead_in_line"]),
                                     (len(answers) - 1, 0, 0), st)
            self.assertEqual(len(out["0"]), 2 * 2 * 6 * 3)
            self.assertEqual(out["thread"], out["0"])
            # Seeds 1 (and 2) prepared ahead wait in make_case (an hour), one worker each: bye still ends
            # the runner.
            with open(script, "w") as f:
                f.write(GATED_SCRIPT % HERE)
            reqs = [{"op": "trial", "id": 1, "check": "gated.fwd", "dtype": "f32", "seed": 0, "repeats": 1},
                    {"op": "bye"}]
            for depth in ("1", "2"):
                env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", NUMWATCH_PROTOCOL="1", CUDA_VISIBLE_DEVICES="",
                           NUMWATCH_PREPARE_AHEAD="thread", OMP_NUM_THREADS="1", NUMWATCH_PREPARE_AHEAD_DEPTH=depth)
                p = subprocess.run([sys.executable, script], input="".join(json.dumps(r) + "\n" for r in reqs),
                                   env=env, capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual([strict_json(x)["op"] for x in p.stdout.splitlines()], ["trial", "bye"])
                self.assertIn("%s at the gate" % depth, p.stderr)


#: A runner of Gated whose make_case, on the threads that prepare ahead, waits an hour at its gate;
#: bye is answered once every worker (AHEAD_DEPTH of them) waits there.
GATED_SCRIPT = """import sys, threading
sys.path.insert(0, %r)
import test_torchcheck as t
import numwatch_runner as nw
t.Gated.reset()
t.Gated.gate_s = 3600.0

class Runner(nw.Runner):
    def answer(self, req, upcoming=None):
        if req.get("op") == "bye" and t.Gated.wait_inside(t.nwt.AHEAD_DEPTH, 600):
            print("%%d at the gate" %% len(t.Gated.inside), file=sys.stderr, flush=True)
        return nw.Runner.answer(self, req, upcoming)

sys.exit(Runner(t.Gated.both(), name="gated 1").run())
"""

#: The first two uniforms of Gen("softmax.fwd", "f32", 0), as torch 1.13's CPU generator draws them.
PINNED_UNIFORMS = [0.26637278883658677, 0.14514112268252177]

if __name__ == "__main__":
    unittest.main()
