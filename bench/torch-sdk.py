#!/usr/bin/env python3
"""bench/torch-sdk.py: the torch SDK's trial rate against a plain pytest-style loop, and how busy
several runners keep a GPU (issue 15's figure; the numbers go to docs/benchmarks.md).

1. Rate. For each check of the example's suite (kernels/python/examples/fusedops_checks.py;
   attention and rmsnorm by default, forward and backward) and dtype, N seeds through the SDK
   (runner.trial(): inputs from the seed, float64 reference, same-dtype plain program, both
   passes, every metric, digest, case digest, `repeats` kernel runs) against the loop a test
   suite would write for the same shapes: torch.randn inputs on the device, the kernel (and
   autograd for a backward), the reference in float64, torch.testing.assert_close. Both start
   after a warm-up (module load, and the plain loop over the timed seeds once, so that every
   Triton specialisation the shapes need is compiled before either side is timed). The SDK is
   timed as --sides says: sdk, as a runner on the device runs it by default (on a GPU: the next
   two seeds prepared ahead, each by a helper process, the metrics replayed from CUDA graphs; on
   the CPU in line); process, the same on the CPU too; thread, prepared ahead by two worker
   threads with graphs (the default before the helpers); depth1, the next seed only, by one
   worker thread, with graphs; graphs, prepared in line with graphs; inline, no fast path. Each side is timed --rounds times in turn,
   the best rate of each kept. Prints a markdown table: trials/s of each and the ratios (the SDK's
   full contract should keep at least 0.8x the plain loop's rate).

2. GPU busy fraction. K runner processes (the checks' command line, --count seeds each) on one
   GPU at once, for K in --slots, while nvidia-smi samples utilization.gpu every 100 ms: the
   mean over the run, and the trials per second of all K together.

3. Verify (--verify N, before the rates): for every check x dtype of the suite, N seeds at repeats
   1 and 2 answered with the fast paths on (the helper and graphs twice: the second pass replays
   the graphs the first captured; two worker threads and graphs, as a GPU runner by default,
   guessing the next two seeds, and told them, as the command line does; one worker told the next
   ones) and in line (twice: seeds
   whose in-line answers differ are left out), every field compared but kernel_us (the thread's
   passes upload each case from the worker thread: UPLOAD_AHEAD); exits 1 on any difference, if no
   case went up from the worker where inputs go up as one image (a GPU, --emulate-graphs), if the SDK turned its graphs off for a check (an error or a disagreement, which it
   logs on stderr), or preparing ahead off for a check (a case that differed from the in-line
   one), if a case prepared ahead was late past its deadline, if fewer than two worker threads
   prepared cases, or if its helper process is not serving at the end.

usage (a GPU host with torch 2.x and Triton 3.x, from the numwatch tree):
    python3 bench/torch-sdk.py --seeds 500 --slots 1,2,4,8
    python3 bench/torch-sdk.py --verify 40 --seeds 100 --slots 0        # check the fast paths, then the rates
    python3 bench/torch-sdk.py --ops 20                                  # operations and launches a trial
    NUMWATCH_PREPARE_AHEAD=process python3 bench/torch-sdk.py --device cpu --emulate-graphs --verify 5 --slots 0 --seeds 5
    python3 bench/torch-sdk.py --device cpu --seeds 20 --slots 0     # a quick run without a GPU
    python3 bench/torch-sdk.py --profile 50 --checks attention.bwd --dtypes f32   # where a trial goes
    python3 bench/torch-sdk.py --device cpu --ops 20       # torch operations per trial (what a GPU's time is)
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SDK = os.path.join(ROOT, "kernels", "python")
EXAMPLES = os.path.join(SDK, "examples")


def setup(device):
    os.environ["NUMWATCH_TORCH_DEVICE"] = device
    sys.path[:0] = [SDK, EXAMPLES, os.path.join(EXAMPLES, "fusedops")]
    import fusedops_checks  # noqa: F401  (imports torch, the SDK and the library)
    return fusedops_checks


def sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plain_trial(torch, check, dtype, seed, device):
    """What a test suite writes: the SDK's case only for the shape, torch.randn data on the
    device, the kernel, a float64 reference, assert_close with torch's default tolerances."""
    from numwatch_runner import torchcheck as nwt

    fams = list(check.families)
    fam = fams[seed % len(fams)]
    case = check.make_case(nwt.Gen(check.name, dtype, seed, seed // len(fams), fam), fam, dtype)
    case.family, case.dtype, case.seed, case.device = fam, dtype, seed, device
    td = nwt.TORCH_DTYPES[dtype]
    g = torch.Generator(device=device).manual_seed(seed)
    inputs = {}
    for k, v in case.inputs.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            t = torch.randn(tuple(v.shape), generator=g, device=device, dtype=td)
            inputs[k] = t.requires_grad_(check.backward and k in check.grads)
        else:
            inputs[k] = v
    ref_in = {k: (v.detach().double().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v)
              for k, v in inputs.items()}
    out = check.kernel(case, **inputs)
    ref = check.reference(case, **ref_in)
    ok = True
    try:
        if check.backward:
            dy = torch.randn(tuple(out.shape), generator=g, device=device, dtype=td)
            gk = torch.autograd.grad(out, [inputs[k] for k in check.grads], dy)
            gr = torch.autograd.grad(ref, [ref_in[k] for k in check.grads], dy.double())
            for a, b in zip(gk, gr):
                torch.testing.assert_close(a, b.to(td))
        else:
            torch.testing.assert_close(out.detach(), ref.detach().to(td))
    except AssertionError:
        ok = False
    sync(torch, device)
    return ok


def rate(fn, seeds, warm=5, times=None):
    """Trials per second of fn over seeds 0..N-1 (after warm trials of other seeds); times: the
    SDK's TIMES (torchcheck), returned with the rate as their change over the timed trials."""
    for s in range(warm):
        fn(10**6 + s)
    before = dict(times) if times is not None else None
    t0 = time.perf_counter()
    for s in range(seeds):
        fn(s)
    r = seeds / (time.perf_counter() - t0)
    if times is None:
        return r
    return r, (dict(times), before)


#: The columns of the breakdown of an SDK trial's wall time on its thread (torchcheck.TIMES).
TIME_COLS = ("trial", "case_wait", "case_in_line", "ahead", "upload", "staging_sync", "programs", "kernel",
             "metrics", "replay", "capture", "read", "event_sync", "digest_wait", "rest", "worker")


#: The SDK's ways of running a trial the rates compare: (label, PREPARE_AHEAD, GRAPHS), None for
#: the SDK's default (on a GPU: the next seed prepared ahead by a thread, metrics replayed from
#: graphs; on the CPU: in line, no graphs).
SIDES = {"sdk": ("SDK", None, None), "graphs": ("SDK, graphs only", False, None),
         "process": ("SDK, helpers + graphs", "process", None), "thread": ("SDK, threads + graphs", "thread", None),
         "depth1": ("SDK, one worker + graphs", "thread", None, 1), "inline": ("SDK in line", False, False)}


@contextlib.contextmanager
def mode(nwt, ahead=None, graphs=None, depth=None):
    """The SDK's fast paths as given while on (None: the SDK's default; depth: how many requests
    worker threads prepare at once)."""
    saved = nwt.PREPARE_AHEAD, nwt.GRAPHS, nwt.AHEAD_DEPTH
    nwt.PREPARE_AHEAD = ahead if ahead is not None else saved[0]
    nwt.GRAPHS = graphs if graphs is not None else saved[1]
    nwt.AHEAD_DEPTH = depth if depth is not None else saved[2]
    try:
        yield
    finally:
        nwt.PREPARE_AHEAD, nwt.GRAPHS, nwt.AHEAD_DEPTH = saved


def in_line(nwt):
    return mode(nwt, False, False)


def wait_helper(nwt, runner, name, dtype):
    """Starts the SDK's helper process (if trials are prepared ahead by one: two consecutive seeds
    start it) and waits until it serves, so that no timing pays its start (importing torch and the
    checks: seconds)."""
    if nwt._ahead_mode(nwt.DEVICE) != "process":
        return
    runner.trial(name, dtype, 0, None, 1)
    runner.trial(name, dtype, 1, None, 1)
    t0 = time.time()
    for h in nwt._AHEAD.helpers:
        while h.state == "starting" and not h.ready() and time.time() - t0 < 120:
            time.sleep(0.05)
    print("(the helpers that prepare trials ahead: %s after %.1f s)" % (
        ", ".join(h.state for h in nwt._AHEAD.helpers) or "none", time.time() - t0), file=sys.stderr, flush=True)


def bench_rates(fc, device, names, dtypes, seeds, repeats, rounds, sides):
    import torch

    import numwatch_runner as nw
    from numwatch_runner import torchcheck as nwt

    runner = nw.Runner(fc.checks(), name="bench")
    by_name = {c.name: c for c in fc.checks()}
    sdk_sides = [x for x in sides if x != "plain"]
    cols = [SIDES[x][0] for x in sdk_sides]
    print("| check | dtype | %s | plain loop trials/s | %s |" % (
        " | ".join("%s trials/s" % c for c in cols), " | ".join("%s / plain" % c for c in cols)))
    print("| --- | --- |%s" % (" ---: |" * (2 * len(cols) + 1)))
    breakdown = []
    for name in names:
        for dtype in dtypes:
            c = by_name[name]
            fns = {}
            for side in sdk_sides:
                def fn(seed, _m=SIDES[side]):
                    with mode(nwt, *_m[1:]):
                        runner.trial(name, dtype, seed, None, repeats)
                fns[side] = fn
            fns["plain"] = lambda seed: plain_trial(torch, c, dtype, seed, device)

            # Untimed first: the plain loop over the timed seeds. The kernel meets every shape of
            # the run here, so neither side's timing pays a Triton compilation (or a cache load)
            # for a new specialisation: the side timed first used to pay them all.
            for s in range(seeds):
                fns["plain"](s)
            for side in ("process", "sdk"):  # (the SDK's default on a GPU: helper processes)
                if side in sdk_sides:
                    with mode(nwt, *SIDES[side][1:]):
                        wait_helper(nwt, runner, name, dtype)
            best, spent = {}, {}
            for _ in range(rounds):  # in turn, the best of each: a host's speed drifts during a run
                for side in sdk_sides + ["plain"]:
                    if side == "plain":
                        r = rate(fns[side], seeds)
                    else:
                        r, t = rate(fns[side], seeds, times=nwt.TIMES)
                        if r > best.get(side, 0.0):
                            spent[side] = nwt.times_per_trial(*t)
                    best[side] = max(best.get(side, 0.0), r)
            print("| %s | %s | %s | %.1f | %s |" % (
                name, dtype, " | ".join("%.1f" % best[x] for x in sdk_sides), best["plain"],
                " | ".join("%.2f" % (best[x] / best["plain"]) for x in sdk_sides)), flush=True)
            plain_us = 1e6 / best["plain"]
            for side in sdk_sides:
                t = spent.get(side) or {}
                breakdown.append("| %s | %s | %s | %.0f | %s |" % (
                    name, dtype, SIDES[side][0], plain_us, " | ".join("%.1f" % t.get(k, 0.0) for k in TIME_COLS)))
    if breakdown:
        # Where an SDK trial's wall time goes on its thread (the round of its best rate), against
        # the plain loop's whole trial: the waits (for the case prepared ahead, at the GPU's sync
        # points: the staging buffer, the one read, the timing events), the host's launches of each
        # part, and the rest (the SDK's own Python); worker: a case's preparation on the worker thread.
        print("\nus a trial on the SDK trial's own thread (torchcheck.TIMES; the round of the best rate):\n")
        print("| check | dtype | side | plain loop trial | %s |" % " | ".join(TIME_COLS))
        print("| --- | --- | --- |%s" % (" ---: |" * (len(TIME_COLS) + 1)))
        print("\n".join(breakdown), flush=True)


def verify(fc, names, dtypes, seeds):
    """The fast paths against the in-line trial: every check x dtype (names/dtypes: None for all),
    seeds 0..N-1 at repeats 1 and 2: prepared ahead by the helper process with graphs (twice: the
    second pass replays the graphs the first captured), by a thread with graphs, and in line
    (twice: a seed whose in-line answers differ has a kernel that is not deterministic, and is
    counted apart, not compared); every field compared but kernel_us. Returns the exit status."""
    import numwatch_runner as nw
    from numwatch_runner import torchcheck as nwt

    checks = fc.checks()
    runner = nw.Runner(checks, name="bench")
    with mode(nwt, "process"):
        wait_helper(nwt, runner, checks[0].name, checks[0].dtypes[0])
    stats0 = dict(nwt.STATS)
    wait0, nwt.HELPER_WAIT_S = nwt.HELPER_WAIT_S, 60.0  # every case it can make from the helper, to check them
    bad = trials = flaky = 0
    # (ahead, graphs, told the next requests, depth): the helper twice; threads two requests ahead (the
    # default), guessing them and told them; one thread told them
    depth = max(2, nwt.AHEAD_DEPTH)
    passes = (("process", None, False, None), ("process", None, False, None), ("thread", None, False, depth),
              ("thread", None, True, depth), ("thread", None, True, 1))
    print("| check | dtype | repeats | fast trials compared | differences | seeds not deterministic in line |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    for c in checks:
        if names and c.name not in names:
            continue
        for dtype in c.dtypes:
            if dtypes and dtype not in dtypes:
                continue
            for repeats in (1, 2):
                def run(s, foresee=False):
                    nxt = None
                    if foresee:  # (as the command line tells them: the next ones, a False after the last)
                        nxt = [(c.name, dtype, t, None) for t in range(s + 1, min(s + 1 + depth, seeds))]
                        nxt += [False] if len(nxt) < depth else []
                    a = runner.trial(c.name, dtype, s, None, repeats, nxt)
                    a.pop("kernel_us", None)
                    return a
                fast = []
                for ahead, graphs, foresee, dp in passes:
                    with mode(nwt, ahead, graphs, dp):
                        fast.append([run(s, foresee) for s in range(seeds)])
                with in_line(nwt):
                    slow = [run(s) for s in range(seeds)]
                    again = [run(s) for s in range(seeds)]
                unsure = {s for s in range(seeds) if slow[s] != again[s]}
                diffs = []
                for p, answers in enumerate(fast):
                    for s, (a, b) in enumerate(zip(answers, slow)):
                        if a != b and s not in unsure:
                            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                            diffs.append("pass %d seed %d: %s" % (p + 1, s, ",".join(keys)))
                            if len(diffs) == 1:
                                print("fast:    %s\nin line: %s" % (a, b), file=sys.stderr)
                trials += len(passes) * (seeds - len(unsure))
                bad += len(diffs)
                flaky += len(unsure)
                print("| %s | %s | %d | %d | %s | %d |" % (
                    c.name, dtype, repeats, len(passes) * (seeds - len(unsure)),
                    "; ".join(diffs[:3]) + (" ..." if len(diffs) > 3 else "") if diffs else "none", len(unsure)),
                    flush=True)
    nwt.HELPER_WAIT_S = wait0
    d = {k: nwt.STATS[k] - stats0.get(k, 0) for k in nwt.STATS}
    helper = nwt._AHEAD.helper
    print("\nverify: %d fast trials compared with in-line ones, %d differences (%d seeds left out: their "
          "in-line answers differ); prepared ahead: %d taken (%d also prepared in line and compared), %d "
          "prepared in line (the helper late, or unable), %d late past the thread's deadline, %d misses, %d changed "
          "checks, %d output gradients drawn ahead, %d uploaded by the worker thread, %d checks turned it off%s "
          "(helper: %s); "
          "graphs: %d captured, %d replays (%d checked against the eager measurement), %d checks turned graphs "
          "off%s" % (
              trials, bad, flaky, d["ahead_hits"], d["ahead_verified"], d["ahead_in_line"], d["ahead_late"],
              d["ahead_misses"],
              d["ahead_stale"], d["douts_ahead"], d["upload_ahead"], d["ahead_off"],
              " (%s)" % ", ".join(sorted(nwt._AHEAD.off)) if nwt._AHEAD.off else "", helper.state if helper else "none", d["graph_captures"], d["graph_replays"], d["graph_verified"],
              d["graph_off"], " (%s)" % ", ".join(sorted(nwt._GRAPHS.off)) if nwt._GRAPHS.off else ""), flush=True)
    # (where a trial's inputs go up as one image, the worker's upload of them must have been used,
    # and the helpers' shared memory)
    no_upload = nwt.UPLOAD_AHEAD and nwt._together(nwt.DEVICE) and not d["upload_ahead"]
    if no_upload:
        print("verify: no case was uploaded by the worker thread", flush=True)
    print("verify: %d cases from the helpers through shared memory (%d copied up straight from it)" % (
        d["ahead_shared"], d["shared_uploads"]), flush=True)
    if nwt._together(nwt.DEVICE) and not d["ahead_shared"]:
        print("verify: no case came through the memory shared with the helpers", flush=True)
        no_upload = True
    if any(h.state != "ready" for h in nwt._AHEAD.helpers):
        print("verify: helpers not serving: %s" % ", ".join(h.state for h in nwt._AHEAD.helpers), flush=True)
        no_upload = True
    # (two requests prepared at once: as many workers as that)
    workers = len(nwt._AHEAD.workers.workers) if nwt._AHEAD.workers is not None else 0
    print("verify: %d worker threads, %d cases thrown away (a request skipped or gone back)" % (
        workers, d["ahead_dropped"]), flush=True)
    if workers < depth:
        print("verify: fewer than %d worker threads prepared cases" % depth, flush=True)
    return 1 if bad or d["graph_off"] or d["ahead_off"] or d["ahead_late"] or no_upload or workers < depth or (
        helper is not None and helper.state != "ready") else 0


class Sampler(threading.Thread):
    """nvidia-smi's utilization.gpu of one GPU every 100 ms."""

    def __init__(self, gpu):
        super().__init__(daemon=True)
        self.p = subprocess.Popen(["nvidia-smi", "-i", str(gpu), "--query-gpu=utilization.gpu",
                                   "--format=csv,noheader,nounits", "-lms", "100"],
                                  stdout=subprocess.PIPE, text=True)
        self.samples = []

    def run(self):
        for line in self.p.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def stop(self):
        self.p.terminate()
        self.p.wait(10)


def bench_busy(slots, gpu, check, dtype, count):
    print("\n| runners on GPU %d | trials | seconds | trials/s | GPU busy (mean utilization.gpu) |" % gpu)
    print("| ---: | ---: | ---: | ---: | ---: |")
    env = dict(os.environ, PYTHONPATH=SDK, CUDA_VISIBLE_DEVICES=str(gpu), PYTHONDONTWRITEBYTECODE="1")
    env.pop("NUMWATCH_TORCH_DEVICE", None)
    with tempfile.TemporaryDirectory() as tmp:
        # A build directory as numwatchd makes one: the checks beside the library.
        os.symlink(os.path.join(EXAMPLES, "fusedops", "fusedops"), os.path.join(tmp, "fusedops"))
        os.symlink(os.path.join(EXAMPLES, "fusedops_checks.py"), os.path.join(tmp, "fusedops_checks.py"))
        for k in slots:
            sampler = Sampler(gpu)
            sampler.start()
            t0 = time.perf_counter()
            procs = [subprocess.Popen([sys.executable, "fusedops_checks.py", "--check", check, "--dtype", dtype,
                                       "--seed", str(i * count), "--count", str(count), "--summary"],
                                      cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for i in range(k)]
            for p in procs:
                p.wait()
            sec = time.perf_counter() - t0
            sampler.stop()
            busy = statistics.mean(sampler.samples) if sampler.samples else float("nan")
            print("| %d | %d | %.1f | %.1f | %.0f%% |" % (k, k * count, sec, k * count / sec, busy), flush=True)


def profile(fc, device, names, dtypes, seeds, repeats):
    """Where a trial's time goes, for each check x dtype: the SDK's Python functions (cProfile,
    cumulative) and both sides' torch operators (torch.profiler, self CPU time), over the same seeds."""
    import cProfile
    import io
    import pstats

    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    import numwatch_runner as nw

    runner = nw.Runner(fc.checks(), name="bench")
    by_name = {c.name: c for c in fc.checks()}
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    for name in names:
        for dtype in dtypes:
            c = by_name[name]
            sides = {"sdk": lambda s: runner.trial(name, dtype, s, None, repeats),
                     "plain": lambda s: plain_trial(torch, c, dtype, s, device)}
            for s in range(seeds):  # warm-up: every Triton specialisation compiled
                sides["plain"](s)
                sides["sdk"](s)
            for side, fn in sides.items():
                sync(torch, device)
                t0 = time.perf_counter()
                for s in range(seeds):
                    fn(s)
                sync(torch, device)
                per = (time.perf_counter() - t0) / seeds * 1e6
                print("\n## %s %s %s: %.0f us a trial\n" % (name, dtype, side, per))
                prof = cProfile.Profile()
                prof.enable()
                for s in range(seeds):
                    fn(s)
                prof.disable()
                for key, n in (("cumulative", 40), ("tottime", 40)):
                    out = io.StringIO()
                    pstats.Stats(prof, stream=out).sort_stats(key).print_stats(n)
                    print("```\n" + out.getvalue()[-8000:] + "\n```")
                with tprofile(activities=acts) as p:
                    for s in range(seeds):
                        fn(s)
                    sync(torch, device)
                print("```\n" + p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25,
                                                         max_name_column_width=40) + "\n```", flush=True)


#: Operators that launch nothing: views, allocations, no-op conversions (counted as metadata).
META_OPS = {"aten::view", "aten::empty", "aten::reshape", "aten::select", "aten::slice", "aten::expand",
            "aten::transpose", "aten::t", "aten::detach", "aten::alias", "aten::unsqueeze", "aten::squeeze",
            "aten::permute", "aten::resize_", "aten::empty_strided", "aten::_local_scalar_dense", "aten::item",
            "aten::lift_fresh", "aten::set_", "aten::result_type", "aten::is_nonzero", "aten::_unsafe_view",
            "aten::unbind", "aten::narrow", "aten::resolve_conj", "aten::resolve_neg", "aten::is_same_size",
            "aten::view_as", "aten::expand_as", "aten::empty_like", "aten::split", "aten::chunk",
            "aten::split_with_sizes", "aten::flatten", "aten::unflatten", "aten::numpy_T", "aten::lift",
            "aten::_has_compatible_shallow_copy_type", "aten::record_stream"}
#: The CUDA runtime's kernel launches, as the profiler names them.
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def ops(fc, device, names, dtypes, seeds, repeats):
    """Torch operations per trial of each side (torch.profiler over N seeds): the top-level operator
    calls (from Python or the autograd engine into the dispatcher) that compute (on a GPU each
    launches one kernel or more) and those that only make views or allocate, the case generation
    (make_case, on the CPU, the same on both sides: counted apart), and on a GPU the kernel launches.
    A GPU runs these checks a few microseconds a kernel: a trial's time is its count of operations.
    The SDK is counted as it runs on a GPU (torchcheck.BATCH_ALL) also with --device cpu."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as tprofile

    import numwatch_runner as nw
    from numwatch_runner import torchcheck as nwt

    nwt.BATCH_ALL = True  # a trial's outputs measured together, as on a GPU (on the CPU too: the count to see)
    checks = fc.checks()
    for cls in {type(c) for c in checks}:
        def make_case(self, *a, _f=cls.make_case, **k):
            with record_function("bench::make_case"):
                return _f(self, *a, **k)
        cls.make_case = make_case
    if nwt._GRAPH_IMPL is not None:  # --emulate-graphs: a replay counts as the one launch it is on a GPU
        def replay(self, _f=nwt._GRAPH_IMPL.replay):
            with record_function("bench::graph_replay"):
                return _f(self)
        nwt._GRAPH_IMPL.replay = replay
    runner = nw.Runner(checks, name="bench")
    by_name = {c.name: c for c in checks}
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])

    def count(fn):
        def trial(s):
            with record_function("bench::trial"):
                fn(s)
        for _ in range(2):  # warm-up: caches filled, Triton specialisations compiled, graphs captured
            for s in range(seeds):
                trial(s)
        with tprofile(activities=acts) as p:
            for s in range(seeds):
                trial(s)
            sync(torch, device)
        events = p.events()
        # The trial's own thread: the path a trial waits on (a worker thread's, preparing the next
        # seed meanwhile, is not; torch 1.13 does not record it at all).
        main = collections.Counter(e.thread for e in events if e.name == "bench::trial").most_common(1)[0][0]
        n = collections.Counter()
        for e in events:
            if e.name in LAUNCHES:
                n["launches"] += 1
            if e.thread != main:
                continue
            if e.name == "bench::graph_replay":
                n["compute"] += 1
                continue
            if not e.name.startswith("aten::") or e.name in ("aten::as_strided", "aten::_reshape_alias"):
                continue  # (children of views, which the profiler sometimes leaves unnested)
            q, top, gen = e.cpu_parent, True, False
            while q is not None:
                top = top and not q.name.startswith("aten::") and q.name != "bench::graph_replay"
                gen = gen or q.name == "bench::make_case"
                q = q.cpu_parent
            if top:
                meta = e.name in META_OPS or (e.name in ("aten::to", "aten::contiguous") and not any(
                    c.name in ("aten::_to_copy", "aten::copy_", "aten::clone") for c in e.cpu_children))
                n[("make_case " if gen else "") + ("metadata" if meta else "compute")] += 1
        return {k: v / seeds for k, v in n.items()}

    gpu = device.startswith("cuda")
    sides = ("SDK", "SDK in line", "plain")
    head = " | ".join("%s compute | %s metadata%s" % (x, x, " | %s launches" % x if gpu else "") for x in sides)
    print("| check | dtype | %s | make_case compute / metadata (trial's thread: SDK, in line, plain) |" % head)
    print("| --- | --- |%s ---: |" % (" ---: |" * (9 if gpu else 6)))
    for name in names:
        for dtype in dtypes:
            c = by_name[name]

            def inline(seed):
                with in_line(nwt):
                    runner.trial(name, dtype, seed, None, repeats)

            wait_helper(nwt, runner, name, dtype)
            res = [count(lambda seed: runner.trial(name, dtype, seed, None, repeats)), count(inline),
                   count(lambda seed: plain_trial(torch, c, dtype, seed, device))]
            cols = []
            for r in res:
                cols += [r.get("compute", 0), r.get("metadata", 0)] + ([r.get("launches", 0)] if gpu else [])
            print("| %s | %s | %s | %s |" % (name, dtype, " | ".join("%.0f" % v for v in cols), ", ".join(
                "%.0f / %.0f" % (r.get("make_case compute", 0), r.get("make_case metadata", 0)) for r in res)),
                  flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--checks", default="attention.fwd,attention.bwd,rmsnorm.fwd,rmsnorm.bwd")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--seeds", type=int, default=500, help="seeds per check x dtype for the rates")
    ap.add_argument("--repeats", type=int, default=1, help="kernel runs per SDK trial (numwatchd sends 2 by default)")
    ap.add_argument("--slots", default="1,2,4,8", help="runner counts for the busy fraction (0: skip it)")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--busy-check", default="attention.bwd")
    ap.add_argument("--busy-dtype", default="bf16")
    ap.add_argument("--busy-count", type=int, default=300, help="seeds per runner for the busy fraction")
    ap.add_argument("--ops", type=int, default=0, metavar="N",
                    help="instead of the figures: torch operations per trial over N seeds (SDK and plain loop)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="instead of the figures: profile N seeds of each check x dtype (SDK and plain loop)")
    ap.add_argument("--rounds", type=int, default=2, help="rate rounds: each side timed in turn, the best kept")
    ap.add_argument("--sides", default="sdk,graphs,inline,plain",
                    help="what the rates time: sdk (the SDK's defaults: on a GPU two requests prepared ahead by "
                    "helper processes, graphs; on the CPU in line), process (prepared ahead by helper processes, "
                    "graphs), thread (by worker threads, graphs), depth1 (one request ahead, by one worker, "
                    "graphs), graphs (prepared in line, graphs), inline (no fast path), plain (the plain loop)")
    ap.add_argument("--verify", type=int, default=0, metavar="N",
                    help="first: N seeds of every check x dtype with the fast paths (the helper process, "
                    "worker threads guessing or told the next requests, graphs) and in line, compared (exit 1 on a "
                    "difference)")
    ap.add_argument("--emulate-graphs", action="store_true",
                    help="the SDK's graph path on the CPU too (each replay runs the captured operations again)")
    ap.add_argument("--switch-interval", type=float, default=None, metavar="S",
                    help="the interpreter's thread switch interval (sys.setswitchinterval; 0.005 by default): "
                    "how long a thread that wants the GIL waits before it asks the holder to let go")
    a = ap.parse_args()
    if a.switch_interval is not None:
        sys.setswitchinterval(a.switch_interval)
    fc = setup(a.device)
    import torch

    import fusedops
    from numwatch_runner import torchcheck as nwt

    if a.emulate_graphs:  # (graphs measure a trial's outputs together, as a GPU does: BATCH_ALL)
        nwt._GRAPH_IMPL, nwt.BATCH_ALL = nwt._EmulatedGraph, True

    print("torch-sdk bench: %s, torch %s, fusedops backend %s, %s; the SDK's defaults: prepared ahead %s, graphs %s; "
          "switch interval %g s" % (
        a.device if a.device == "cpu" else torch.cuda.get_device_name(0), torch.__version__, fusedops.BACKEND,
        time.strftime("%Y-%m-%d"), nwt._ahead_mode(nwt.DEVICE) or "in line",
        ("emulated" if nwt._GRAPH_IMPL else "on") if nwt._graphs_on(nwt.DEVICE) else "off", sys.getswitchinterval()))
    print()
    rc = 0
    if a.verify:
        rc = verify(fc, None, None, a.verify)
        print()
    if a.profile:
        profile(fc, a.device, a.checks.split(","), a.dtypes.split(","), a.profile, a.repeats)
        return rc
    if a.ops:
        ops(fc, a.device, a.checks.split(","), a.dtypes.split(","), a.ops, a.repeats)
        return rc
    if a.seeds > 0:
        sides = [x for x in a.sides.split(",") if x in SIDES] + ["plain"]
        bench_rates(fc, a.device, a.checks.split(","), a.dtypes.split(","), a.seeds, a.repeats, a.rounds, sides)
    slots = [int(s) for s in a.slots.split(",") if int(s) > 0]
    if slots and a.device != "cpu":
        bench_busy(slots, a.gpu, a.busy_check, a.busy_dtype, a.busy_count)
    return rc


if __name__ == "__main__":
    sys.exit(main())
