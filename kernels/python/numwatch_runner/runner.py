"""The runner: protocol v1 (docs/protocol.md) on stdin/stdout, or trials from the command line.

    runner = Runner([MyCheck()], name="mylib-runner 0.1")
    sys.exit(runner.run())          # no arguments: serve the daemon; else the CLI

Protocol behaviour, beyond what version 1 requires:

- Exactly one answer line per request line, flushed at once. A blank line is
  no request and gets no answer.
- A line that is not JSON, or a JSON value without a string "op", is answered
  {"op":null,"error":"not json: ..."} (or "request has no string 'op'") and the
  runner goes on; so is a request line over 1 MiB ("request line too long").
  numwatchd never sends such lines: this keeps a person typing requests by
  hand in step. The C runners (kernels/sdk) answer the same.
- A trial that cannot run (unknown check, dtype or family, bad seed or repeats,
  an exception in the check or the kernel) is answered with "verdict":"error",
  "fatal":false, and the traceback goes to stderr. FatalError from the check
  answers "fatal":true; the runner then exits with status 1.
- stdout is reserved for answers: the protocol stream is a private duplicate of
  file descriptor 1, and descriptor 1 itself (print(), C extensions, CUDA
  libraries) is pointed at stderr.
"""
import argparse
import hashlib
import json
import math
import os
import platform
import statistics
import struct
import sys
import time
import traceback

from .check import CHECKS_MAX, TENSORS_MAX, Case, valid_shape, valid_token, numel
from .dtypes import round_list
from .metrics import POISON, compare, finite_or_none, is_poison
from .rng import GEN_VERSION, Rng

PROTOCOL = 1
#: Longest line either side may send, without its "\n" (NW_PROTO_LINE_MAX).
LINE_MAX = 1048576
#: Most repeats a trial may ask for.
REPEATS_MAX = 1000
#: Error texts are cut here (numwatchd keeps 1023 bytes).
ERROR_MAX = 1000
#: How many of the requests after a trial the command line tells it (a check that prepares trials
#: ahead prepares as many of them as it prepares at once: torchcheck.AHEAD_DEPTH).
UPCOMING = 8


class FatalError(Exception):
    """Raise from a check when the device context is unusable (a sticky CUDA
    error): the trial is answered with "fatal":true and the runner exits."""


class TrialError(Exception):
    """A trial that cannot run, answered with "verdict":"error" (not fatal)."""


def _text(s):
    """s as text that any JSON decoder takes: valid UTF-8, no NUL, bounded."""
    s = str(s).encode("utf-8", "replace").decode("utf-8").replace("\x00", "\\0")
    return s if len(s) <= ERROR_MAX else s[: ERROR_MAX - 3] + "..."


def encode(obj):
    """One compact protocol line (without "\\n"); refuses NaN and infinities."""
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))


def _flatten(v):
    if hasattr(v, "detach"):  # a torch tensor: to host float64 values
        v = v.detach().reshape(-1).double().cpu()
    if hasattr(v, "tolist"):  # torch, numpy, array.array
        v = v.tolist()
    out = []
    stack = [iter(v)]
    while stack:
        for x in stack[-1]:
            if isinstance(x, (list, tuple)):
                stack.append(iter(x))
                break
            out.append(x)
        else:
            stack.pop()
    return out


def case_digest(case):
    """BLAKE2b (16 hex digits) of what a list check generated: the shape, each
    input's name and float64 bytes (other values by repr) and the parameters.
    The daemon pairs a seed across commits only while this stays the same."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr(list(case.shape)).encode("utf-8"))
    for name in sorted(case.inputs):
        v = case.inputs[name]
        h.update(b"\0i" + name.encode("utf-8") + b"\0")
        if isinstance(v, list) and all(isinstance(x, float) for x in v):
            h.update(struct.pack("<%dd" % len(v), *v))
        else:
            h.update(repr(v).encode("utf-8"))
    for name in sorted(case.params):
        h.update(b"\0p" + name.encode("utf-8") + b"\0" + repr(case.params[name]).encode("utf-8"))
    return h.hexdigest()


def _read_output(name, value, n, dtype):
    """An output as written by the kernel: (values rounded to dtype, unwritten
    mask, canary count, digest bytes)."""
    vals = value if isinstance(value, list) else _flatten(value)
    canary = max(0, len(vals) - n)
    raw = list(vals[:n])
    unwritten = [False] * n
    missing = n - len(raw)  # a list that shrank: its lost elements were never written
    for i in range(len(raw), n):
        unwritten[i] = True
    raw.extend([POISON] * missing)
    floats = []
    for i, v in enumerate(raw):
        if is_poison(v):
            unwritten[i] = True
            floats.append(0.0)
            continue
        try:
            floats.append(float(v))
        except (TypeError, ValueError):
            raise TrialError("output '%s' element %d is not a number: %r" % (name, i, v)) from None
    got = round_list(floats, dtype)
    for i in range(n):
        if unwritten[i]:
            got[i] = POISON
    data = struct.pack("<%dd" % n, *got) if n else b""
    return got, unwritten, canary, data


class Runner:
    """A protocol-v1 runner serving a list of checks.

    name:   the hello's "runner" text ("mylib-runner 0.3.1")
    device: the hello's "device" object, or a function returning it (called at
            each hello; an exception there answers the hello with "error", for
            "no usable device"). Default: {"backend": "host", "name": ...}.
    repro:  the hello's "repro": the command line that runs one trial of this
            runner outside numwatch, with {check}, {dtype}, {seed} and {runs}
            ("python3 -m mylib.checks --check {check} --dtype {dtype} --seed
            {seed} --runs {runs}"); numwatch prints it filled in. None: numwatch
            prints the runner's path in the build directory with --check,
            --dtype and --seed.
    """

    def __init__(self, checks, name="numwatch-python-runner", device=None, repro=None):
        self.checks = {}
        self.order = []
        self.name = name
        self.device = device
        if repro is not None and (not isinstance(repro, str) or "{seed}" not in repro
                                  or any(ord(c) < 0x20 or ord(c) == 0x7F for c in repro)
                                  or len(repro.encode("utf-8")) > 1023):
            raise ValueError("repro must be one line of at most 1023 bytes with {seed} in it")
        self.repro = repro
        for c in checks:
            self.add(c)

    def add(self, check):
        check.validate()
        if check.name in self.checks:
            raise ValueError("check %r declared twice" % check.name)
        if len(self.order) >= CHECKS_MAX:
            raise ValueError("more than %d checks" % CHECKS_MAX)
        self.checks[check.name] = check
        self.order.append(check.name)
        return check

    # ---- answers -------------------------------------------------------------

    def _device(self):
        if callable(self.device):
            return self.device()
        if self.device is not None:
            return dict(self.device)
        return {
            "backend": "host",
            "name": "%s (Python %s)" % (platform.machine() or "cpu", platform.python_version()),
        }

    def hello(self):
        try:
            device = self._device()
        except Exception as e:  # the runner cannot serve: say why, with no checks
            traceback.print_exc(file=sys.stderr)
            return {"op": "hello", "protocol": PROTOCOL, "runner": _text(self.name), "error": _text(e)}
        hello = {
            "op": "hello",
            "protocol": PROTOCOL,
            "runner": _text(self.name),
            "device": device,
            "checks": [self.checks[n].declaration() for n in self.order],
            "gen": GEN_VERSION,
            # Requests are lines read in order from a buffered stream: the daemon may send the
            # next trial while this one runs, and hides its own turnaround behind it (issue 18).
            "pipeline": 2,
        }
        if self.repro:
            hello["repro"] = self.repro
        return hello

    def _request(self, check, dtype, seed, family, repeats=1):
        """A trial request checked: (the check, its family, the seed's index), or TrialError."""
        c = self.checks.get(check) if isinstance(check, str) else None
        if c is None:
            raise TrialError("unknown check '%.64s'" % (check,))
        if dtype not in c.dtypes:
            raise TrialError("dtype '%.64s' is not declared by check '%s'" % (dtype, c.name))
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64:
            raise TrialError("field 'seed' must be an integer from 0 to 2^64-1")
        if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= REPEATS_MAX:
            raise TrialError("field 'repeats' must be 1..%d" % REPEATS_MAX)
        fams = list(c.families)
        if family is None:
            fam = fams[seed % len(fams)]
        elif family in fams:
            fam = family
        else:
            raise TrialError("unknown family '%.64s' for check '%s'" % (family, c.name))
        return c, fam, seed // len(fams)

    def _upcoming(self, upcoming):
        """The request after this one as a torch check takes it, (check, (dtype, seed, family, index,
        named)), or False: none, or one that will not run (its own answer says why). A list of
        requests: a list of those, up to the first False (then False itself)."""
        if isinstance(upcoming, list):
            out = []
            for u in upcoming:
                out.append(self._upcoming(u))
                if out[-1] is False:
                    break
            return out if out and out[0] is not False else False
        if not upcoming:
            return False
        check, dtype, seed, family = upcoming
        try:
            c, fam, index = self._request(check, dtype, seed, family)
        except TrialError:
            return False
        return (c, (dtype, seed, fam, index, family is not None)) if hasattr(c, "run_trial") else False

    def trial(self, check, dtype, seed, family=None, repeats=1, upcoming=None):
        """Runs one trial; returns the answer's fields after "op" and "id".

        upcoming: the request that follows this one, (check, dtype, seed, family), when the
        caller knows it, or False when it knows there is none (a check that prepares the next
        trial while this one runs prepares that one; None: it may guess the next seed); or a list
        of the requests that follow, in order, a False after the last when none follow it.
        Raises TrialError or FatalError for an error answer.
        """
        c, fam, index = self._request(check, dtype, seed, family, repeats)
        if hasattr(c, "run_trial"):  # a check that runs the whole trial itself (torchcheck.TorchCheck)
            nxt = {} if upcoming is None else {"upcoming": self._upcoming(upcoming)}
            return c.run_trial(dtype, seed, fam, index, repeats, family is not None, **nxt)

        rng = Rng(c.name, dtype, seed, index, fam)
        case = c.make_case(rng, fam, dtype)
        if not isinstance(case, Case):
            raise TrialError("%s: make_case() returned %r, not a Case" % (c.name, type(case).__name__))
        case.family, case.dtype, case.seed, case.index = fam, dtype, seed, index
        if not valid_shape(case.shape):
            raise TrialError("%s: case shape %r is not a list of at most 8 counts" % (c.name, case.shape))
        outs = list(case.outputs.items())
        if not 1 <= len(outs) <= TENSORS_MAX:
            raise TrialError("%s: a case needs 1 to %d outputs" % (c.name, TENSORS_MAX))
        for oname, oshape in outs:
            if not valid_token(oname) or not valid_shape(oshape):
                raise TrialError("%s: bad output %r with shape %r" % (c.name, oname, oshape))

        ref = c.reference(case)
        fixed = c.atol is not None
        plains = []
        if not fixed:
            p = c.plain(case, dtype)
            plains = list(p) if isinstance(p, (list, tuple)) else [p]
            if not plains:
                raise TrialError("%s: plain() returned no program" % c.name)
        sizes = {}
        for oname, oshape in outs:
            n = numel(oshape)
            sizes[oname] = n
            if oname not in ref or len(ref[oname]) != n:
                raise TrialError("%s: reference() must give %d values for '%s'" % (c.name, n, oname))
            for p in plains:
                if oname not in p or len(p[oname]) != n:
                    raise TrialError("%s: plain() must give %d values for '%s'" % (c.name, n, oname))

        first = None
        digest = None
        differ = 0
        times = []
        for _ in range(repeats):
            out = {oname: [POISON] * sizes[oname] for oname, _ in outs}
            t0 = time.perf_counter_ns()
            c.kernel(case, dtype, out)
            t1 = time.perf_counter_ns()
            times.append((t1 - t0) / 1000.0)
            h = hashlib.blake2b(digest_size=8)
            read = {}
            for oname, _ in outs:
                if oname not in out:
                    raise TrialError("%s: the kernel removed output '%s'" % (c.name, oname))
                got, unwritten, canary, data = _read_output(oname, out[oname], sizes[oname], dtype)
                read[oname] = (got, unwritten, canary)
                h.update(oname.encode("utf-8") + b"\0" + data)
            d = h.hexdigest()
            if first is None:
                first, digest = read, d
            elif d != digest:
                differ += 1

        tensors = []
        for oname, oshape in outs:
            got, unwritten, canary = first[oname]
            excl = case.exclude.get(oname)
            if excl is not None:
                excl = list(excl)
                if excl and all(isinstance(e, bool) for e in excl):  # a mask rather than indices
                    excl = [i for i, e in enumerate(excl) if e]
            t = compare(
                oname,
                dtype,
                got,
                [float(v) for v in ref[oname]],
                [[float(v) for v in p[oname]] for p in plains],
                shape=oshape,
                factor=c.budget_factor,
                floor_eps=c.floor_eps,
                floor_scale=case.floor_scale.get(oname),
                atol=c.atol,
                rtol=c.rtol,
                unwritten=unwritten,
                exclude=set(excl) if excl is not None else None,
                canary=canary,
                tail_width=c.tail_width,
            )
            tensors.append(t)
        failed = any([t.pop("failed") for t in tensors])  # a list: every tensor loses the key
        ratios = [t["ratio"] for t in tensors]
        ratio = None if any(r is None for r in ratios) else max(ratios)
        return {
            "verdict": "fail" if failed else "pass",
            "case": {"family": fam, "shape": list(case.shape), "gen": GEN_VERSION, "digest": case_digest(case)},
            "ratio": ratio,
            "tensors": tensors,
            "digest": digest,
            "digests_differ": differ,
            "kernel_us": finite_or_none(statistics.median(times)),
        }

    def _answer_trial(self, req, upcoming=None):
        rid = req.get("id")
        try:
            for k in ("check", "dtype"):
                if not isinstance(req.get(k), str):
                    raise TrialError("missing field '%s'" % k)
            if req.get("seed") is None:
                raise TrialError("missing field 'seed'")
            repeats = req.get("repeats")
            family = req.get("family")
            if family is not None and not isinstance(family, str):
                raise TrialError("field 'family' must be a string or null")
            res = self.trial(req["check"], req["dtype"], req["seed"], family, 1 if repeats is None else repeats,
                             upcoming)
        except FatalError as e:
            traceback.print_exc(file=sys.stderr)
            return {"op": "trial", "id": rid, "verdict": "error", "error": _text(str(e) or "fatal error"), "fatal": True}
        except TrialError as e:
            return {"op": "trial", "id": rid, "verdict": "error", "error": _text(e), "fatal": False}
        except Exception as e:  # the check or the kernel raised: an answer, not a crash
            traceback.print_exc(file=sys.stderr)
            msg = "%s: %s: %s" % (req.get("check"), type(e).__name__, e)
            return {"op": "trial", "id": rid, "verdict": "error", "error": _text(msg), "fatal": False}
        answer = {"op": "trial", "id": rid}
        answer.update(res)
        return answer

    def answer(self, req, upcoming=None):
        """The answer to one decoded request. Returns (answer, quit). upcoming: as for trial()."""
        if not isinstance(req, dict) or not isinstance(req.get("op"), str):
            return {"op": None, "error": "request has no string 'op'"}, False
        op = req["op"]
        if op == "hello":
            return self.hello(), False
        if op == "trial":
            a = self._answer_trial(req, upcoming)
            return a, a.get("fatal") is True
        if op == "bye":
            return {"op": "bye"}, True
        return {"op": op, "error": "unknown op"}, False

    def answer_line(self, line, upcoming=None):
        """The answer line (str, no "\\n") to one request line (bytes or str,
        without its "\\n"). Returns (line, quit, fatal). upcoming: as for trial()."""
        try:
            if isinstance(line, bytes):
                line = line.decode("utf-8")
            req = json.loads(line)
        except (UnicodeDecodeError, ValueError) as e:
            return encode({"op": None, "error": _text("not json: %s" % e)}), False, False
        ans, quit = self.answer(req, upcoming)
        try:
            text = encode(ans)
        except (ValueError, TypeError) as e:  # a NaN or an odd object slipped into the answer
            traceback.print_exc(file=sys.stderr)
            ans = {"op": ans.get("op"), "error": _text("cannot encode the answer: %s" % e)}
            if ans["op"] == "trial":
                ans = {"op": "trial", "id": req.get("id"), "verdict": "error", "error": ans["error"], "fatal": False}
            text = encode(ans)
        if len(text.encode("utf-8")) > LINE_MAX:
            ans = {"op": ans.get("op"), "error": "answer longer than %d bytes" % LINE_MAX}
            if ans["op"] == "trial":
                ans = {"op": "trial", "id": req.get("id"), "verdict": "error", "error": ans["error"], "fatal": False}
            text = encode(ans)
        fatal = isinstance(ans, dict) and ans.get("fatal") is True
        return text, quit, fatal

    # ---- the protocol loop -------------------------------------------------------

    def serve(self, stdin=None, stdout=None):
        """Serves requests until "bye", end of input or a fatal error.

        stdin/stdout: binary streams; by default the process's, with file
        descriptor 1 redirected to stderr (see the module's docstring).
        Returns the exit status: 0, or 1 after a fatal error or a lost daemon.
        """
        infile = stdin if stdin is not None else sys.stdin.buffer
        proto = stdout if stdout is not None else take_stdout()
        while True:
            line = infile.readline(LINE_MAX + 1)
            if not line:
                return 0
            if len(line) > LINE_MAX and not line.endswith(b"\n"):
                while True:  # drop the rest of the overlong line
                    rest = infile.readline(65536)
                    if not rest or rest.endswith(b"\n"):
                        break
                print("numwatch-runner: request longer than %d bytes" % LINE_MAX, file=sys.stderr)
                text, quit, fatal = encode({"op": None, "error": "request line too long"}), False, False
            else:
                line = line.rstrip(b"\n").rstrip(b"\r")
                if not line.strip():
                    continue  # a blank line is no request
                text, quit, fatal = self.answer_line(line)
            try:
                proto.write(text.encode("utf-8") + b"\n")
                proto.flush()
            except (BrokenPipeError, OSError) as e:
                print("numwatch-runner: cannot write answer: %s" % e, file=sys.stderr)
                return 1
            if fatal:
                print("numwatch-runner: device context lost, exiting", file=sys.stderr)
                return 1
            if quit:
                return 0

    # ---- the command line ----------------------------------------------------------

    def cli(self, argv):
        """The human command line. Returns the exit status: 0 every trial
        passed, 1 a trial failed, 2 an error answer or bad usage."""
        p = argparse.ArgumentParser(
            prog=os.path.basename(sys.argv[0]) or "runner",
            description="Without arguments: speak numwatch protocol v1 on stdin/stdout. "
            "With --check/--dtype/--seed: run seeds SEED..SEED+COUNT-1 and print one "
            "answer line each, exactly what the daemon would receive.",
        )
        p.add_argument("--check", help="a check name, a comma-separated list, or 'all'")
        p.add_argument("--dtype", help="a dtype, a comma-separated list, or 'all' (the check's dtypes)")
        p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
        p.add_argument("--family", help="run this family instead of the seed's")
        p.add_argument("--repeats", type=int, default=1, help="kernel runs per trial (default 1)")
        p.add_argument("--count", type=int, default=1, help="number of consecutive seeds (default 1)")
        p.add_argument("--runs", type=int, default=1,
                       help="run each seed this many times (a failure that shows on some runs only); "
                       "prints every answer, then on stderr how many runs failed")
        p.add_argument("--list", action="store_true", help="print the hello answer")
        p.add_argument("--summary", action="store_true", help="print a summary per check x dtype instead of answers")
        try:
            a = p.parse_args(argv)
        except SystemExit as e:
            return 0 if e.code == 0 else 2
        out = take_stdout()

        def emit(s):
            out.write(s.encode("utf-8") + b"\n")
            out.flush()

        if a.list:
            emit(encode(self.hello()))
            return 0
        if not a.check or not a.dtype:
            print("%s: --check and --dtype are required (or --list)" % p.prog, file=sys.stderr)
            return 2
        if a.seed < 0 or a.count < 1 or a.runs < 1:
            print("%s: --seed must be >= 0, --count and --runs >= 1" % p.prog, file=sys.stderr)
            return 2
        names = self.order if a.check == "all" else a.check.split(",")
        pairs = []
        for name in names:
            c = self.checks.get(name)
            pairs += [(name, d) for d in ((list(c.dtypes) if c else ["-"]) if a.dtype == "all" else a.dtype.split(","))]
        runs = a.count * a.runs  # of each pair: seed after seed, each a.runs times in a row
        rc = 0
        for k, (name, dtype) in enumerate(pairs):
            stats = {"pass": 0, "fail": 0, "error": 0, "differ": 0}
            worst = (None, None)
            failing = []
            for i in range(runs):
                seed = a.seed + i // a.runs
                req = {"op": "trial", "id": seed, "check": name, "dtype": dtype, "seed": seed,
                       "repeats": a.repeats, "family": a.family}
                # The requests after this one, known here: a check may prepare them meanwhile.
                upcoming = []
                for j in range(i + 1, i + 1 + UPCOMING):
                    kk, jj = k + j // runs, j % runs
                    if kk >= len(pairs):
                        upcoming.append(False)
                        break
                    upcoming.append(pairs[kk] + (a.seed + jj // a.runs, a.family))
                text, _, fatal = self.answer_line(encode(req), upcoming)
                ans = json.loads(text)
                v = ans.get("verdict")
                stats[v] = stats.get(v, 0) + 1
                stats["differ"] += 1 if ans.get("digests_differ") else 0
                if v == "fail":
                    rc = max(rc, 1)
                    if seed not in failing:
                        failing.append(seed)
                elif v != "pass":
                    rc = 2
                r = ans.get("ratio")
                if v == "fail" and r is None:
                    r = math.inf
                if r is not None and (worst[0] is None or r > worst[0]):
                    worst = (r, seed)
                if not a.summary:
                    emit(text)
                if fatal:
                    return 2
            if a.runs > 1:
                print("%s %s seeds %d..%d, %d runs each: %d of %d runs failed" % (
                    name, dtype, a.seed, a.seed + a.count - 1, a.runs, stats["fail"],
                    a.runs * a.count), file=sys.stderr)
            if a.summary:
                emit("%-16s %-5s seeds %d..%d: %d pass, %d fail, %d error, %d with differing digests; "
                     "worst ratio %s (seed %s)%s" % (
                    name, dtype, a.seed, a.seed + a.count - 1, stats["pass"], stats["fail"], stats["error"],
                    stats["differ"],
                    "%.3g" % worst[0] if worst[0] is not None else "-", worst[1],
                    "; failing seeds %s" % failing[:20] if failing else ""))
        return rc

    def run(self, argv=None):
        """No arguments: serve the protocol; otherwise the command line."""
        argv = sys.argv[1:] if argv is None else list(argv)
        try:
            if not argv:
                return self.serve()
            return self.cli(argv)
        except KeyboardInterrupt:
            return 130


_proto_stream = None


def take_stdout():
    """A private binary stream on the process's stdout, with file descriptor 1
    (and sys.stdout) pointed at stderr, so that nothing the library prints can
    reach the protocol stream. Idempotent."""
    global _proto_stream
    if _proto_stream is None:
        try:
            sys.stdout.flush()
        except Exception:
            pass
        fd = os.dup(1)
        os.dup2(2, 1)
        _proto_stream = os.fdopen(fd, "wb")
        sys.stdout = sys.stderr
    return _proto_stream


def main(checks, name="numwatch-python-runner", device=None, argv=None, repro=None):
    """Builds a Runner and runs it; returns the exit status for sys.exit()."""
    return Runner(checks, name=name, device=device, repro=repro).run(argv)
