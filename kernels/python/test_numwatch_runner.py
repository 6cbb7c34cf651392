"""Self-test of the Python runner SDK and the example runner.

    cd kernels/python && python3 -m unittest -v

Standard library only. NW_SOAK_SEEDS=2000 runs that many seeds per check x
dtype of the example (the default, 60, keeps the whole file near 10 s).
"""
import contextlib
import io
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import example_runner  # noqa: E402
import numwatch_runner as nw  # noqa: E402
from numwatch_runner.metrics import POISON  # noqa: E402

SOAK_SEEDS = int(os.environ.get("NW_SOAK_SEEDS", "60"))
# The marker of the odd-tail handling in pylib.py that the planted bug deletes
# (tests/integration/python_runner.sh deletes the same two lines with sed).
TAIL_MARK = "# the odd element left after the pairs"


# ---- a check with planted bugs, chosen by family -----------------------------------------


class Planted(nw.Check):
    """y = 2x + 1. Each family plants one kind of wrong result."""

    name = "planted.fwd"
    dtypes = ("f32", "bf16")
    families = ("ok", "scaled", "nan", "unwritten", "canary", "kink", "raise", "fatal", "print", "racy")
    tail_width = 8
    calls = 0

    def make_case(self, rng, family, dtype):
        n = 8 * rng.randint(1, 8) + rng.randint(1, 7)
        return nw.Case([n], {"x": rng.normals(n, dtype=dtype)}, {"y": [n]})

    def reference(self, case):
        if case.family == "kink":
            case.exclude["y"] = [0]
        return {"y": [2.0 * v + 1.0 for v in case["x"]]}

    def plain(self, case, dtype):
        return {"y": nw.round_list([2.0 * v + 1.0 for v in case["x"]], dtype)}

    def kernel(self, case, dtype, out):
        fam, y, x = case.family, out["y"], case["x"]
        for i, v in enumerate(x):
            y[i] = 2.0 * v + 1.0
        if fam == "scaled":  # a 25% error: far over a few eps even in bf16
            y[3] *= 1.25
        elif fam == "nan":
            y[5] = math.nan
        elif fam == "unwritten":
            y[len(x) - 1] = POISON
        elif fam == "canary":
            y.append(0.0)
        elif fam == "kink":
            y[0] += 100.0  # excluded: counted, not failed
        elif fam == "raise":
            raise ValueError("planted exception")
        elif fam == "fatal":
            raise nw.FatalError("illegal address (planted)")
        elif fam == "print":
            print("stray print from the library")
            sys.stdout.flush()
            os.write(1, b"stray write to fd 1\n")
        elif fam == "racy":  # every other run one ulp off: within tolerance, but not deterministic
            Planted.calls += 1
            if Planted.calls % 2:
                y[0] = nw.round_value(y[0], dtype) * (1.0 + 2.0 * nw.EPS[dtype])


class Fixed(nw.Check):
    """A check with a fixed tolerance instead of the plain program."""

    name = "fixed.fwd"
    dtypes = ("f32",)
    families = ("near", "far")
    atol = 1e-3
    rtol = 1e-3

    def make_case(self, rng, family, dtype):
        return nw.Case([4], {"x": rng.normals(4, dtype=dtype)}, {"y": [4]})

    def reference(self, case):
        return {"y": list(case["x"])}

    def kernel(self, case, dtype, out):
        d = 5e-4 if case.family == "near" else 5e-2
        out["y"][:] = [v + d for v in case["x"]]


def planted_runner():
    return nw.Runner([Planted(), Fixed()], name="planted 1")


RUNNER_SCRIPT = """import sys
sys.path.insert(0, %r)
import test_numwatch_runner as t
sys.exit(t.planted_runner().run())
"""


def family_seed(check, family):
    return list(check.families).index(family)


class Proc:
    """A runner subprocess driven line by line."""

    def __init__(self, argv, env=None):
        e = dict(os.environ, NUMWATCH_PROTOCOL="1", CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
        e.update(env or {})
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=HERE, env=e)

    def ask(self, obj):
        line = obj if isinstance(obj, (bytes, str)) else json.dumps(obj, separators=(",", ":"))
        if isinstance(line, str):
            line = line.encode()
        self.p.stdin.write(line + b"\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        return json.loads(out) if out else None

    def kill(self):
        """Idempotent cleanup for a test that failed midway."""
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(30)
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            f.close()

    def close(self):
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        rest = self.p.stdout.read()
        err = self.p.stderr.read()
        rc = self.p.wait(30)
        self.kill()
        return rc, rest, err


def strict_json(text):
    """json.loads that refuses NaN/Infinity tokens, as numwatchd does."""
    def bad(tok):
        raise ValueError("non-JSON token %s" % tok)
    return json.loads(text, parse_constant=bad)


class DtypeTest(unittest.TestCase):
    def test_fast_rounding_matches_exact(self):
        rng = random.Random(7)
        vals = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e-8, -3e-39, 3.4e38, 3.5e38, 1e300, math.inf, -math.inf]
        vals += [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-24, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11]
        vals += [rng.uniform(-1, 1) * 2.0 ** rng.randint(-150, 130) for _ in range(20000)]
        # bf16 midpoints after a float32 rounding: where rounding twice goes wrong.
        vals += [(1.0 + 2.0**-8) + 2.0**-30, (1.0 + 2.0**-8) - 2.0**-30, 1.0 + 2.0**-8 + 2.0**-25]
        for dt in ("f32", "f16", "bf16"):
            fast = nw.round_list(vals, dt)
            for v, f in zip(vals, fast):
                e = nw.round_exact(v, dt)
                self.assertTrue(f == e or (f != f and e != e), "%s: %r -> %r, exact %r" % (dt, v, f, e))
                self.assertEqual(nw.round_value(v, dt), f)
        self.assertEqual(nw.round_value(65520.0, "f16"), math.inf)
        self.assertEqual(nw.round_value(65519.0, "f16"), 65504.0)
        self.assertEqual(nw.round_value(1.0 + 2.0**-8, "bf16"), 1.0)  # tie to even
        self.assertEqual(nw.round_value(1.0 + 3 * 2.0**-8, "bf16"), 1.0 + 2.0**-6)
        self.assertEqual(nw.round_value(1.0 + 2.0**-8 + 2.0**-30, "bf16"), 1.0 + 2.0**-7)
        self.assertTrue(math.isnan(nw.round_value(math.nan, "bf16")))
        self.assertEqual(nw.ulp_distance(1.0, 1.0 + 2.0**-22, "f32"), 2)
        self.assertIsNone(nw.ulp_distance(1.0, math.inf, "f32"))


class GeneratorTest(unittest.TestCase):
    def test_deterministic_and_seed_dependent(self):
        c = example_runner.RmsnormBwd()
        a = c.make_case(nw.Rng(c.name, "f16", 12345, 2469), "tail", "f16")
        b = c.make_case(nw.Rng(c.name, "f16", 12345, 2469), "tail", "f16")
        d = c.make_case(nw.Rng(c.name, "f16", 12346, 2469), "tail", "f16")
        self.assertEqual((a.shape, a.inputs), (b.shape, b.inputs))
        self.assertNotEqual(a.inputs, d.inputs)
        # Pinned draws: a change to the generator must bump GEN_VERSION.
        r = nw.Rng("x.fwd", "f32", 0)
        self.assertEqual(nw.rng.stream_key("x.fwd", "f32", 0), 68783195871349150514653161988585520453)
        self.assertEqual([r.randint(0, 999), r.uniform(), r.normal()], [471, 0.9498274871120354, -0.850540461157835])
        self.assertEqual(nw.GEN_VERSION, 1)

    def test_inputs_are_stored_in_the_dtype(self):
        for dt in ("f16", "bf16"):
            case = example_runner.RmsnormFwd().make_case(nw.Rng("rmsnorm.fwd", dt, 3, 0), "extreme", dt)
            self.assertEqual(case["x"], nw.round_list(case["x"], dt))

    def test_families_covered_by_consecutive_seeds(self):
        r = example_runner.RUNNER
        for name in r.order:
            c = r.checks[name]
            n = len(c.families)
            seen = [r.trial(name, "f32", s, None, 1)["case"]["family"] for s in range(n)]
            self.assertEqual(seen, list(c.families), name)
            self.assertEqual(r.trial(name, "f32", n + 2, None, 1)["case"]["family"], c.families[2])

    def test_family_override_gives_the_same_case(self):
        r = example_runner.RUNNER
        a = r.trial("rmsnorm.fwd", "bf16", 11, None, 1)  # seed 11 of 5 families: "tail"
        b = r.trial("rmsnorm.fwd", "bf16", 11, "tail", 1)
        c = r.trial("rmsnorm.fwd", "bf16", 11, "extreme", 1)
        self.assertEqual(a["case"], b["case"])
        self.assertEqual(a["digest"], b["digest"])
        self.assertEqual(c["case"]["family"], "extreme")

    def test_tiny_family_sweeps_empty_and_small_shapes(self):
        r = example_runner.RUNNER
        n = len(r.checks["rmsnorm.bwd"].families)
        tiny = list(r.checks["rmsnorm.bwd"].families).index("tiny")
        shapes = {tuple(r.trial("rmsnorm.bwd", "bf16", tiny + n * k, None, 1)["case"]["shape"]) for k in range(85)}
        self.assertEqual(shapes, {(rows, cols) for rows in range(5) for cols in range(17)})


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.r = planted_runner()
        self.c = self.r.checks["planted.fwd"]

    def trial(self, family, dtype="f32", repeats=1, check="planted.fwd"):
        c = self.r.checks[check]
        return self.r.trial(check, dtype, family_seed(c, family), None, repeats)

    def test_correct_result_passes(self):
        for dt in ("f32", "bf16"):
            t = self.trial("ok", dt, repeats=3)
            self.assertEqual(t["verdict"], "pass", t)
            self.assertLessEqual(t["ratio"], 1.0)
            self.assertEqual(t["digests_differ"], 0)
            self.assertEqual(len(t["digest"]), 16)
            self.assertGreater(t["kernel_us"], 0)
            self.assertEqual(t["tensors"][0]["max_ulp"] is None, dt != "f32")

    def test_ratio_over_one_fails(self):
        t = self.trial("scaled")
        y = t["tensors"][0]
        self.assertEqual(t["verdict"], "fail")
        self.assertGreater(t["ratio"], 1.0)
        self.assertEqual(y["worst"], [3])
        self.assertEqual((y["nonfinite"], y["unwritten"], y["canary"]), (0, 0, 0))

    def test_nan_where_reference_is_finite_fails(self):
        t = self.trial("nan", "bf16")
        y = t["tensors"][0]
        self.assertEqual(t["verdict"], "fail")
        self.assertEqual((y["nonfinite"], y["ref_nonfinite"], y["mismatch"]), (1, 0, 1))
        self.assertEqual(y["worst"], [5])
        self.assertLessEqual(y["ratio"], 1.0)  # the error elsewhere is fine: 95% close is no pass

    def test_unwritten_element_fails_and_is_a_tail(self):
        t = self.trial("unwritten")
        y = t["tensors"][0]
        n = t["case"]["shape"][0]
        self.assertEqual(t["verdict"], "fail")
        self.assertEqual((y["unwritten"], y["nonfinite"]), (1, 0))
        self.assertEqual(y["worst"], [n - 1])
        self.assertTrue(y["tail"])  # n is not a multiple of 8: the last element is in the tail tile

    def test_untouched_output_is_all_unwritten(self):
        c = nw.check("idle.fwd", make_case=lambda rng, f, d: nw.Case([3], {}, {"y": [3]}),
                     reference=lambda case: {"y": [1.0, 2.0, 3.0]}, plain=lambda case, d: {"y": [1.0, 2.0, 3.0]},
                     kernel=lambda case, d, out: None)
        t = nw.Runner([c]).trial("idle.fwd", "f32", 0)
        self.assertEqual((t["verdict"], t["tensors"][0]["unwritten"]), ("fail", 3))

    def test_accumulating_into_the_poison_is_unwritten(self):
        def kernel(case, d, out):  # bug 3 of PRODUCT.md: an accumulator never initialised
            for i in range(3):
                out["y"][i] += 1.0
            out["y"][2] = math.nan  # a NaN of its own: non-finite, not unwritten

        c = nw.check("acc.fwd", make_case=lambda rng, f, d: nw.Case([3], {}, {"y": [3]}),
                     reference=lambda case: {"y": [1.0, 1.0, 1.0]}, plain=lambda case, d: {"y": [1.0, 1.0, 1.0]},
                     kernel=kernel)
        t = nw.Runner([c]).trial("acc.fwd", "f32", 0)
        y = t["tensors"][0]
        self.assertEqual((t["verdict"], y["unwritten"], y["nonfinite"], y["mismatch"]), ("fail", 2, 1, 1))
        self.assertNotIn("failed", y)

    def test_write_outside_the_tensor_breaks_the_canary(self):
        t = self.trial("canary")
        self.assertEqual(t["verdict"], "fail")
        self.assertEqual(t["tensors"][0]["canary"], 1)

    def test_excluded_elements_are_counted_not_failed(self):
        t = self.trial("kink")
        self.assertEqual(t["verdict"], "pass", t)
        self.assertEqual(t["tensors"][0]["excluded"], 1)

    def test_fixed_tolerance(self):
        near = self.trial("near", check="fixed.fwd")
        far = self.trial("far", check="fixed.fwd")
        self.assertEqual(near["verdict"], "pass")
        self.assertIsNone(near["tensors"][0]["plain_max_abs"])
        self.assertEqual(far["verdict"], "fail")
        self.assertGreater(far["ratio"], 10)

    def test_repeats_reveal_non_determinism(self):
        t = self.trial("racy", repeats=4)
        self.assertEqual(t["verdict"], "pass", t)
        self.assertEqual(t["digests_differ"], 2)  # runs 2 and 4 differ from run 1
        self.assertEqual(self.trial("ok", repeats=4)["digests_differ"], 0)

    def test_infinite_error_is_null_never_nan(self):
        c = nw.check("inf.fwd", make_case=lambda rng, f, d: nw.Case([2], {}, {"y": [2]}),
                     reference=lambda case: {"y": [1e308, 1.0]}, plain=lambda case, d: {"y": [1e308, 1.0]},
                     kernel=lambda case, d, out: out["y"].__setitem__(slice(None), [-1e308, 1.0]),
                     dtypes=("f64",))
        r = nw.Runner([c])
        text, _, _ = r.answer_line(b'{"op":"trial","id":1,"check":"inf.fwd","dtype":"f64","seed":0}')
        a = strict_json(text)
        self.assertEqual(a["verdict"], "fail")
        self.assertIsNone(a["ratio"])
        self.assertIsNone(a["tensors"][0]["max_abs"])

    def test_declarations_are_validated(self):
        bad = [dict(name="no spaces.fwd"), dict(name="x" * 64), dict(name="a.fwd", dtypes=("f8",)),
               dict(name="a.fwd", families=("a", "a")), dict(name="a.fwd", families=())]
        for attrs in bad:
            name = attrs.pop("name")
            with self.assertRaises(ValueError, msg=name):
                nw.check(name, make_case=None, reference=None, kernel=None, **attrs)
        with self.assertRaises(ValueError):
            nw.Runner([Planted(), Planted()])


class ProtocolTest(unittest.TestCase):
    def answer(self, runner, obj):
        text, quit, fatal = runner.answer_line(json.dumps(obj))
        return strict_json(text)

    def test_answers_in_process(self):
        r = planted_runner()
        err = io.StringIO()  # the planted exception's traceback goes to stderr: keep it out of the report
        quiet = contextlib.redirect_stderr(err)
        quiet.__enter__()
        self.addCleanup(quiet.__exit__, None, None, None)
        h = self.answer(r, {"op": "hello", "protocol": 1})
        self.assertEqual((h["op"], h["protocol"]), ("hello", 1))
        self.assertEqual([c["check"] for c in h["checks"]], ["planted.fwd", "fixed.fwd"])
        self.assertEqual(h["device"]["backend"], "host")
        self.assertEqual(self.answer(r, {"op": "profile", "id": 4}), {"op": "profile", "error": "unknown op"})
        e = self.answer(r, {"op": "trial", "id": 3, "check": "planted.fwd", "dtype": "f64", "seed": 2})
        self.assertEqual((e["id"], e["verdict"], e["fatal"]), (3, "error", False))
        self.assertIn("dtype 'f64' is not declared", e["error"])
        for req, msg in (({"check": "nope.fwd", "dtype": "f32", "seed": 0}, "unknown check"),
                         ({"check": "planted.fwd", "dtype": "f32", "seed": -1}, "seed"),
                         ({"check": "planted.fwd", "dtype": "f32", "seed": 0, "repeats": 0}, "repeats"),
                         ({"check": "planted.fwd", "dtype": "f32", "seed": 0, "family": "zz"}, "unknown family"),
                         ({"check": "planted.fwd", "dtype": "f32"}, "missing field 'seed'")):
            a = self.answer(r, dict(req, op="trial", id=9))
            self.assertEqual((a["verdict"], a["id"]), ("error", 9))
            self.assertIn(msg, a["error"])
        a = self.answer(r, {"op": "trial", "id": 5, "check": "planted.fwd", "dtype": "f32", "seed": 6})
        self.assertEqual((a["verdict"], a["fatal"]), ("error", False))  # "raise"
        self.assertIn("ValueError: planted exception", a["error"])
        self.assertIn("Traceback", err.getvalue())
        text, quit, fatal = r.answer_line(b"{not json")
        self.assertFalse(quit or fatal)
        a = strict_json(text)
        self.assertIsNone(a["op"])
        self.assertIn("not json", a["error"])
        self.assertIn("no string 'op'", strict_json(r.answer_line(b"[1,2]")[0])["error"])
        self.assertEqual(r.answer_line(b'{"op":"bye"}')[:2], ('{"op":"bye"}', True))

    def test_round_trip_through_a_subprocess(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "planted-runner")
            with open(script, "w") as f:
                f.write(RUNNER_SCRIPT % HERE)
            p = Proc([sys.executable, script])
            self.addCleanup(p.kill)
            h = p.ask({"op": "hello", "protocol": 1})
            self.assertEqual(h["runner"], "planted 1")
            fams = Planted.families
            seen = []
            for seed, fam in enumerate(fams):
                if fam == "fatal":
                    continue
                a = p.ask({"op": "trial", "id": 100 + seed, "check": "planted.fwd", "dtype": "bf16", "seed": seed,
                           "repeats": 2, "family": None})
                self.assertEqual(a["id"], 100 + seed)
                seen.append((fam, a["verdict"]))
            self.assertEqual(seen, [("ok", "pass"), ("scaled", "fail"), ("nan", "fail"), ("unwritten", "fail"),
                                    ("canary", "fail"), ("kink", "pass"), ("raise", "error"), ("print", "pass"),
                                    ("racy", "pass")])
            self.assertEqual(p.ask({"op": "profile", "id": 1}), {"op": "profile", "error": "unknown op"})
            self.assertIn("not json", p.ask(b"this is not json {")["error"])
            # A blank line is no request: the next answer is the hello's.
            self.assertEqual(p.ask(b"\n" + b'{"op":"hello","protocol":1}')["op"], "hello")
            big = b'{"op":"trial","pad":"' + b"x" * nw.LINE_MAX + b'"}'
            self.assertEqual(p.ask(big), {"op": None, "error": "request line too long"})
            self.assertEqual(p.ask({"op": "hello", "protocol": 1})["op"], "hello")
            self.assertEqual(p.ask({"op": "bye"}), {"op": "bye"})
            rc, rest, err = p.close()
            self.assertEqual((rc, rest), (0, b""))
            # What the library printed went to stderr, not into the protocol stream.
            self.assertIn(b"stray print from the library", err)
            self.assertIn(b"stray write to fd 1", err)
            self.assertIn(b"ValueError: planted exception", err)

    def test_fatal_error_answers_then_exits(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "planted-runner")
            with open(script, "w") as f:
                f.write(RUNNER_SCRIPT % HERE)
            p = Proc([sys.executable, script])
            self.addCleanup(p.kill)
            p.ask({"op": "hello", "protocol": 1})
            seed = family_seed(Planted, "fatal")
            a = p.ask({"op": "trial", "id": 7, "check": "planted.fwd", "dtype": "f32", "seed": seed})
            self.assertEqual((a["verdict"], a["fatal"], a["id"]), ("error", True, 7))
            self.assertIn("illegal address", a["error"])
            rc, rest, _ = p.close()
            self.assertEqual((rc, rest), (1, b""))

    def test_every_line_is_strict_protocol_json(self):
        p = Proc([sys.executable, os.path.join(HERE, "example_runner.py")])
        self.addCleanup(p.kill)
        h = p.ask({"op": "hello", "protocol": 1})
        self.assertEqual(h["gen"], nw.GEN_VERSION)
        for seed in range(10):
            line_obj = {"op": "trial", "id": seed, "check": "rmsnorm.bwd", "dtype": "f16", "seed": seed, "repeats": 2}
            p.p.stdin.write((json.dumps(line_obj) + "\n").encode())
            p.p.stdin.flush()
            raw = p.p.stdout.readline()
            self.assertLessEqual(len(raw), nw.LINE_MAX + 1)
            a = strict_json(raw)
            self.assertEqual(a["verdict"], "pass")
            self.assertEqual(len(a["tensors"]), 2)
            for t in a["tensors"]:
                for k in ("nonfinite", "ref_nonfinite", "unwritten", "canary", "excluded"):
                    self.assertIsInstance(t[k], int)
        p.ask({"op": "bye"})
        self.assertEqual(p.close()[0], 0)

    def test_pipeline_requests_waiting_are_answered_in_order(self):
        """The hello declares "pipeline": 2; requests written before the answers come are each
        answered once, in order (the daemon writes the next trial while one runs, issue 18)."""
        p = Proc([sys.executable, os.path.join(HERE, "example_runner.py")])
        self.addCleanup(p.kill)
        self.assertEqual(p.ask({"op": "hello", "protocol": 1})["pipeline"], 2)
        reqs = [{"op": "trial", "id": 40 + seed, "check": "rmsnorm.fwd", "dtype": "f32", "seed": seed}
                for seed in range(3)]
        p.p.stdin.write("".join(json.dumps(r) + "\n" for r in reqs).encode())
        p.p.stdin.flush()
        ids = [strict_json(p.p.stdout.readline())["id"] for _ in reqs]
        self.assertEqual(ids, [40, 41, 42])
        p.ask({"op": "bye"})
        self.assertEqual(p.close()[0], 0)

    def test_command_line(self):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        out = subprocess.run([sys.executable, "-m", "numwatch_runner.example", "--check", "rmsnorm.fwd", "--dtype",
                              "bf16", "--seed", "42"], cwd=HERE, env=env, capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        a = strict_json(out.stdout)
        self.assertEqual((a["op"], a["id"], a["verdict"]), ("trial", 42, "pass"))
        out = subprocess.run([sys.executable, "example_runner.py", "--check", "nope.fwd", "--dtype", "f32"],
                             cwd=HERE, env=env, capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown check", strict_json(out.stdout)["error"])
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "planted-runner")
            with open(script, "w") as f:
                f.write(RUNNER_SCRIPT % HERE)
            out = subprocess.run([sys.executable, script, "--check", "planted.fwd", "--dtype", "f32", "--seed", "0",
                                  "--count", "4", "--summary"], env=env, capture_output=True, timeout=60)
            self.assertEqual(out.returncode, 1)  # seeds 1..3 plant failures
            self.assertIn(b"1 pass, 3 fail, 0 error, 0 with differing digests", out.stdout)


class CaseDigestReproRunsTest(unittest.TestCase):
    """case.digest (the daemon pairs seeds by it), hello's repro template, --runs."""

    def test_case_digest_follows_the_inputs(self):
        r = planted_runner()
        a = r.trial("planted.fwd", "f32", 0, None, 1)["case"]["digest"]
        self.assertRegex(a, "^[0-9a-f]{16}$")
        self.assertEqual(a, r.trial("planted.fwd", "f32", 0, None, 2)["case"]["digest"])
        self.assertNotEqual(a, r.trial("planted.fwd", "f32", 10, None, 1)["case"]["digest"])
        self.assertNotEqual(a, r.trial("planted.fwd", "bf16", 0, None, 1)["case"]["digest"])
        case = nw.Case([2], {"x": [1.0, 2.0]}, {"y": [2]}, {"eps": 1e-6})
        other = nw.Case([2], {"x": [1.0, 2.0]}, {"y": [2]}, {"eps": 1e-5})
        self.assertNotEqual(nw.runner.case_digest(case), nw.runner.case_digest(other))

    def test_repro_template_in_hello(self):
        self.assertNotIn("repro", planted_runner().hello())
        tpl = "python3 -m mylib.checks --check {check} --dtype {dtype} --seed {seed} --runs {runs}"
        r = nw.Runner([Planted()], name="p", repro=tpl)
        self.assertEqual(r.hello()["repro"], tpl)
        for bad in ("no seed here", "--seed {seed}\nrm -rf /", "x" * 1100 + "{seed}"):
            with self.assertRaises(ValueError):
                nw.Runner([Planted()], repro=bad)

    def test_runs_repeat_one_seed(self):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "planted-runner")
            with open(script, "w") as f:
                f.write(RUNNER_SCRIPT % HERE)
            fam = family_seed(Planted(), "scaled")
            out = subprocess.run([sys.executable, script, "--check", "planted.fwd", "--dtype", "f32", "--seed",
                                  str(fam), "--runs", "3"], env=env, capture_output=True, timeout=60)
            self.assertEqual(out.returncode, 1, out.stderr)
            answers = [strict_json(line) for line in out.stdout.splitlines()]
            self.assertEqual([a["verdict"] for a in answers], ["fail"] * 3)
            self.assertIn(b"3 of 3 runs failed", out.stderr)
            out = subprocess.run([sys.executable, script, "--check", "planted.fwd", "--dtype", "f32", "--seed", "0",
                                  "--runs", "0"], env=env, capture_output=True, timeout=60)
            self.assertEqual(out.returncode, 2)


def broken_pylib():
    """pylib with the odd tail of long rows dropped (the planted regression)."""
    with open(os.path.join(HERE, "pylib.py")) as f:
        lines = f.read().splitlines(True)
    i = next(k for k, line in enumerate(lines) if TAIL_MARK in line)
    src = "".join(lines[:i] + lines[i + 2:])
    mod = types.ModuleType("pylib_broken")
    exec(compile(src, "pylib_broken.py", "exec"), mod.__dict__)
    return mod


class ExampleTest(unittest.TestCase):
    def test_correct_op_passes(self):
        r = example_runner.RUNNER
        for name in r.order:
            for dt in r.checks[name].dtypes:
                for seed in range(SOAK_SEEDS):
                    t = r.trial(name, dt, seed, None, 2)
                    self.assertEqual(t["verdict"], "pass", "%s %s seed %d: %s" % (name, dt, seed, t))
                    self.assertEqual(t["digests_differ"], 0)

    def test_planted_rare_shape_bug_is_caught_on_its_shapes_only(self):
        r = example_runner.RUNNER
        good = example_runner.pylib
        example_runner.pylib = broken_pylib()
        try:
            failing = {}
            for name in r.order:
                for seed in range(100):
                    t = r.trial(name, "f32", seed, None, 1)
                    rows, cols = t["case"]["shape"]
                    if t["verdict"] != "pass":
                        failing[(name, seed)] = cols
                        self.assertEqual(t["verdict"], "fail")
                        self.assertTrue(cols > pylib_long_row() and cols % 2 == 1, (name, seed, t))
        finally:
            example_runner.pylib = good
        for name in r.order:
            self.assertTrue(any(k[0] == name for k in failing), "%s: the planted bug went unseen" % name)


def pylib_long_row():
    return example_runner.pylib.LONG_ROW


if __name__ == "__main__":
    unittest.main()
