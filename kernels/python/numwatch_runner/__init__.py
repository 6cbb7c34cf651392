"""numwatch_runner: write a numwatch runner (protocol v1) in pure Python.

    import numwatch_runner as nw

    class ScaleFwd(nw.Check):
        name = "scale.fwd"
        dtypes = ("f32", "bf16")
        families = ("aligned", "tail")

        def make_case(self, rng, family, dtype):
            n = 8 * rng.randint(1, 64) + (rng.randint(1, 7) if family == "tail" else 0)
            return nw.Case([n], {"x": rng.normals(n, dtype=dtype)}, {"y": [n]})

        def reference(self, case):
            return {"y": [2.5 * v for v in case["x"]]}

        def plain(self, case, dtype):
            return {"y": nw.round_list([2.5 * v for v in case["x"]], dtype)}

        def kernel(self, case, dtype, out):
            mylib.scale(case["x"], 2.5, out["y"])

    if __name__ == "__main__":
        sys.exit(nw.main([ScaleFwd()], name="mylib-runner 0.1"))

See README.md next to this package, and docs/protocol.md for the protocol.
Standard library only; Python >= 3.8. Checks on torch tensors, run on the
runner's GPU: numwatch_runner.torchcheck (imported on demand: it needs torch).
"""
from .check import Case, Check, check, numel
from .dtypes import DTYPES, EPS, MAX, TINY, round_exact, round_list, round_value, ulp_distance
from .metrics import POISON, compare, is_poison
from .rng import GEN_VERSION, Rng
from .runner import LINE_MAX, PROTOCOL, FatalError, Runner, TrialError, encode, main, take_stdout

__version__ = "0.1.0"

__all__ = [
    "Case", "Check", "check", "numel",
    "DTYPES", "EPS", "MAX", "TINY", "round_exact", "round_list", "round_value", "ulp_distance",
    "POISON", "compare", "is_poison",
    "GEN_VERSION", "Rng",
    "LINE_MAX", "PROTOCOL", "FatalError", "Runner", "TrialError", "encode", "main", "take_stdout",
]
