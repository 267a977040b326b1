"""Measurement: the machine's bandwidth (triad), lazyjit's per-op tracing cost, one
system's timed steps on a workload (``run_system``), the worker process that runs
systems on a workload (``worker``), and the parent's side: one worker process per
system and round, samples pooled (``run_workload``). bench/run.py is the command line.
"""
from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from workloads import (COMPILE_BACKENDS, DEVICE_SYSTEMS, LAZYJIT_BACKEND_SYSTEMS, LAZYJIT_SYSTEMS, MiB,
                       REPO, Workload, _short_error, compare, compare_train, import_lazyjit,
                       make_workload, to_cpu)

# the command line the parent runs each worker process with (--worker)
RUN_PY = Path(__file__).resolve().with_name("run.py")


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in tb[-4:]]
    return " <- ".join(reversed(frames))


def rss_kib() -> tuple[int, int]:
    """(current RSS, peak RSS since the last reset) in KiB, from /proc/self/status."""
    txt = Path("/proc/self/status").read_text()
    cur = int(re.search(r"VmRSS:\s+(\d+)", txt).group(1))
    hwm = int(re.search(r"VmHWM:\s+(\d+)", txt).group(1))
    return cur, hwm


def reset_peak_rss() -> bool:
    """Resets the kernel's peak-RSS counter (Linux >= 4.0); ru_maxrss follows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def median(xs):
    return statistics.median(xs) if xs else None


# --------------------------------------------------------------------------------------
# Machine bandwidth: STREAM-like triad a = b + s*c
# --------------------------------------------------------------------------------------

def triad_bandwidth(n: int, reps: int) -> dict:
    """Best-of-reps GB/s for a = b + s*c (3 arrays x 4 bytes x n, STREAM counting: no
    write-allocate traffic), with 1 thread and with all torch threads."""
    b = torch.rand(n)
    c = torch.rand(n)
    a = torch.empty(n)
    s = 3.0
    all_threads = torch.get_num_threads()
    out = {"array_elems": n, "array_mib": 4 * n / MiB, "reps": reps}
    for label, nt in (("1_thread", 1), ("all_threads", all_threads)):
        torch.set_num_threads(nt)
        best = float("inf")
        torch.add(b, c, alpha=s, out=a)  # touch / warm
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.add(b, c, alpha=s, out=a)
            best = min(best, time.perf_counter() - t0)
        out[f"gbps_{label}"] = 3 * 4 * n / best / 1e9
        out[f"threads_{label}"] = nt
    torch.set_num_threads(all_threads)
    torch.testing.assert_close(a, b + s * c)
    out["gbps_best"] = max(out["gbps_1_thread"], out["gbps_all_threads"])
    return out


# --------------------------------------------------------------------------------------
# lazyjit tracing cost per op
# --------------------------------------------------------------------------------------

def tracing_cost(ops_per_rep: int, reps: int) -> dict:
    """Records `ops_per_rep` small elementwise ops (on a 16-element tensor) without
    syncing, `reps` times. The same loop on eager CPU tensors (Python + dispatcher + a
    16-element kernel) is the baseline: lazyjit − eager approximates what recording
    costs beyond PyTorch's own per-op overhead. (The meta device is no baseline: many of
    its kernels are Python decompositions, slower than eager.)"""
    lazyjit = import_lazyjit()

    def loop(x):
        for i in range(ops_per_rep // 4):
            x = x * 1.0001
            x = x + 0.5
            x = torch.tanh(x)
            x = x - 0.25
        return x

    res = {"ops_per_rep": ops_per_rep, "reps": reps}
    for dev in ("cpu", "lazyjit"):
        x0 = torch.randn(16).to(dev)
        if dev == "lazyjit":
            lazyjit.sync()
        times, traced = [], []
        for r in range(reps + 1):
            before = lazyjit.metrics()["ops_traced"] if dev == "lazyjit" else 0
            t0 = time.perf_counter()
            y = loop(x0)
            t1 = time.perf_counter()
            if dev == "lazyjit":
                traced.append(lazyjit.metrics()["ops_traced"] - before)
                ts = time.perf_counter()
                lazyjit.sync()
                sync_s = time.perf_counter() - ts
                if r == 0:
                    res["lazyjit_first_sync_ms"] = 1e3 * sync_s  # compile of the chain
                else:
                    res.setdefault("lazyjit_sync_ms", []).append(1e3 * sync_s)
            if r > 0:  # rep 0 is warm-up
                times.append(t1 - t0)
            del y
        res[f"{dev}_us_per_op"] = 1e6 * median(times) / ops_per_rep
        if dev == "lazyjit":
            res["lazyjit_ops_traced_per_rep"] = median(traced)
    res["lazyjit_sync_ms"] = median(res.get("lazyjit_sync_ms", []))
    res["lazyjit_minus_eager_us_per_op"] = res["lazyjit_us_per_op"] - res["cpu_us_per_op"]
    return res


# --------------------------------------------------------------------------------------
# Worker: one workload, three systems
# --------------------------------------------------------------------------------------

def _lz_metrics_delta(a: dict, b: dict) -> dict:
    d = {k: b[k] - a[k] for k in ("ops_traced", "compiles", "cache_hits", "cache_misses",
                                   "syncs", "graphs_executed", "step_ops") if k in a}
    for t in ("compile", "execute"):
        ta, tb = a["timings"].get(t, {}), b["timings"].get(t, {})
        d[f"{t}_ms"] = tb.get("total_ms", 0.0) - ta.get("total_ms", 0.0)
        d[f"{t}_count"] = tb.get("count", 0) - ta.get("count", 0)
    fa, fb = a.get("fallbacks", {}) or {}, b.get("fallbacks", {}) or {}
    d["fallbacks"] = {k: fb[k] - fa.get(k, 0) for k in fb if fb[k] - fa.get(k, 0)}
    return d


def _dynamo_counters() -> dict:
    """Dynamo's graph-break and unique-graph counters (0 if Dynamo was never imported)."""
    if "torch._dynamo" not in sys.modules:
        return {"graph_breaks": 0, "unique_graphs": 0}
    from torch._dynamo.utils import counters
    return {"graph_breaks": sum(counters["graph_break"].values()),
            "unique_graphs": counters["stats"]["unique_graphs"]}


def _compile_stats(lazyjit) -> dict:
    """lazyjit.dynamo.stats() + the compile counters of lazyjit.metrics()."""
    from lazyjit import dynamo as lzd
    st = lzd.stats()
    m = lazyjit.metrics()
    for k in ("compiles", "llvm_compiles", "kernel_hits", "disk_hits", "cache_hits",
              "cache_misses"):
        if isinstance(m.get(k), int):
            st[k] = m[k]
    st["compile_ms"] = m["timings"].get("compile", {}).get("total_ms", 0.0)
    return st


def _compile_stats_delta(a: dict, b: dict) -> dict:
    d = {k: b[k] - a[k] for k in b if k != "eager_reasons" and k in a}
    d["eager_reasons"] = b["eager_reasons"][len(a["eager_reasons"]):]
    return d


def _fresh_lazyjit_caches(lazyjit) -> None:
    """Empties lazyjit's in-memory program/kernel caches and this worker's on-disk cache
    directory, so that torch.compile(backend="lazyjit")'s first call is a cold compile
    (the lazyjit device system ran before it in this process, on the same graphs). The
    directory is only emptied when it is the scratch one the bench's parent made for this
    worker (LAZYJIT_BENCH_SCRATCH_CACHE_DIR), never a user's cache."""
    lazyjit.clear_cache()
    d = os.environ.get("LAZYJIT_CACHE_DIR")
    if d and d == os.environ.get("LAZYJIT_BENCH_SCRATCH_CACHE_DIR") and Path(d).is_dir():
        import shutil
        for child in Path(d).iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def run_system(wl: Workload, system: str, warmup: int, runs: int, min_time_s: float = 0.0,
               max_runs: int = 50) -> tuple[dict, object, object]:
    """_run_system under the workload's settings (Workload.settings)."""
    with wl.settings():
        return _run_system(wl, system, warmup, runs, min_time_s, max_runs)


def _run_system(wl: Workload, system: str, warmup: int, runs: int, min_time_s: float = 0.0,
                max_runs: int = 50) -> tuple[dict, object, object]:
    """Returns (result, first-call output on CPU, (last output, compare-state) on CPU).

    For a training workload (``wl.train``) the third element is taken after the first
    call and the warm-up steps instead, a step count every system runs alike (the number
    of timed steps adapts to speed): the last warm-up step's output and the parameters
    then, so that a step that does not update the parameters shows as a mismatch.

    Systems: eager; lazyjit (the device: a step is the call, which records, then
    lazyjit.sync()); inductor / lazyjit_compile (torch.compile(fn, backend=...) on CPU
    tensors; a training step compiles the module and optimizer.step separately);
    lazyjit_device_compile (torch.compile(fn, backend="lazyjit") on the device: the
    workload built for "lazyjit" as the lazyjit system's, then compiled as
    lazyjit_compile's; each call followed by lazyjit.sync(); timed after
    lazyjit.wait_for_compiles() following the warm-up).
    A workload with ``calls`` > 1 runs that many calls per warm-up step and timed sample;
    times are reported per call."""
    on_device = system in DEVICE_SYSTEMS
    backend = COMPILE_BACKENDS.get(system)
    lazyjit = import_lazyjit() if system in LAZYJIT_SYSTEMS else None
    dev = lazyjit if on_device else None  # the device system: sync after each call
    device = "lazyjit" if on_device else "cpu"
    calls = wl.calls
    res = {"system": system, "calls_per_sample": calls}
    if backend:
        import torch._dynamo as dynamo
        dynamo.reset()  # cold first call; no cache entries of another backend
        if system in LAZYJIT_BACKEND_SYSTEMS:
            _fresh_lazyjit_caches(lazyjit)
        dyn0 = _dynamo_counters()
    cs0 = _compile_stats(lazyjit) if system in LAZYJIT_BACKEND_SYSTEMS else None
    t_build = time.perf_counter()
    if backend and wl.compiles_itself:
        built = wl.build(device, compile_backend=backend)
        fn, args = built
    else:
        built = wl.build(device)
        fn, args = built
        if backend:
            fn = torch.compile(fn, backend=backend)
    if dev is not None:
        dev.sync()  # materialize the inputs/weights copied to the device
    res["build_s"] = time.perf_counter() - t_build

    grad_ctx = torch.no_grad if wl.no_grad else torch.enable_grad
    split = [0.0, 0.0]  # lazyjit device: (trace s, sync s) summed over the last step's calls

    def step(n=calls):
        split[:] = [0.0, 0.0]
        out = None
        with grad_ctx():
            for _ in range(n):
                out = None
                if dev is None:
                    out = fn(*args)
                    continue
                t0 = time.perf_counter()
                out = fn(*args)
                t1 = time.perf_counter()
                dev.sync()
                split[0] += t1 - t0
                split[1] += time.perf_counter() - t1
        return out

    m0 = dev.metrics() if dev else None
    t0 = time.perf_counter()
    out = step(1)  # the first call: one call, compile included
    res["first_call_ms"] = 1e3 * (time.perf_counter() - t0)
    first = to_cpu(out)
    del out
    m1 = dev.metrics() if dev else None
    cs1 = _compile_stats(lazyjit) if cs0 is not None else None
    warm_ms = []
    warm_out = first
    for i in range(warmup):
        if dev is not None and i == warmup - 1 and hasattr(dev, "wait_for_compiles"):
            # Programs compile in the background while their graphs run op by op
            # (LAZYJIT_BACKGROUND_COMPILE): the last warm-up step runs them compiled.
            dev.wait_for_compiles()
        tw = time.perf_counter()
        out = step()
        warm_ms.append(1e3 * (time.perf_counter() - tw) / calls)
        if wl.train:
            warm_out = to_cpu(out)
        del out
    if backend and on_device:
        # captures the warm-up made may still be compiling: the timed steps run compiled
        dev.wait_for_compiles()
    res["warmup_ms"] = warm_ms
    if wl.train:  # the checkpoint every system reaches after the same steps
        checkpoint = (warm_out, to_cpu(wl.state_to_compare(built)))
    m2 = dev.metrics() if dev else None
    cs2 = _compile_stats(lazyjit) if cs0 is not None else None
    # timed samples: at least `runs`, and more (up to max_runs) until min_time_s of
    # measured time, so that short steps get enough samples on a noisy machine
    times, per_step = [], []  # times: per call (sample time / calls)
    cpu_times = []  # the process's CPU time per call (all its threads): what a busy machine disturbs least
    measured = 0.0
    out = None
    while len(times) < runs or (measured < min_time_s and len(times) < max_runs):
        out = None
        mb = dev.metrics() if dev else None  # metrics reads stay outside the timing
        c0 = time.process_time()
        t0 = time.perf_counter()
        out = step()
        dt = time.perf_counter() - t0
        cpu_times.append((time.process_time() - c0) / calls)
        measured += dt
        times.append(dt / calls)
        if dev:
            d = _lz_metrics_delta(mb, dev.metrics())
            d = {k: (v / calls if isinstance(v, (int, float)) else v) for k, v in d.items()}
            d["trace_ms"], d["sync_ms"] = 1e3 * split[0] / calls, 1e3 * split[1] / calls
            per_step.append(d)
    m3 = dev.metrics() if dev else None
    cs3 = _compile_stats(lazyjit) if cs0 is not None else None
    if wl.train:
        last, state = checkpoint
        res["checked_after_steps"] = 1 + warmup
    else:
        last = to_cpu(out)
        state = to_cpu(wl.state_to_compare(built))
    res["times_ms"] = [1e3 * t for t in times]
    res["median_ms"] = 1e3 * median(times)
    res["min_ms"] = 1e3 * min(times)
    res["cpu_median_ms"] = 1e3 * median(cpu_times)
    res["warmup"] = warmup
    res["runs"] = len(times)
    res["measured_s"] = measured
    if backend:
        dyn = _dynamo_counters()
        res["dynamo"] = {k: dyn[k] - dyn0[k] for k in dyn}
    if cs0 is not None:
        n_calls = len(times) * calls
        lc = {"build_and_first": _compile_stats_delta(cs0, cs1),
              "warmup": _compile_stats_delta(cs1, cs2),
              "steady": _compile_stats_delta(cs2, cs3),
              "total": _compile_stats_delta(cs0, cs3)}
        lc["steady_calls_per_call"] = lc["steady"]["calls"] / n_calls
        lc["steady_device_calls_per_call"] = lc["steady"].get("device_calls", 0) / n_calls
        # A graph lazyjit could not capture runs through ATen (dynamo.py; on the
        # device: recorded op by op): that is a failure of this system even though the
        # output is right.
        lc["eager_fallback"] = lc["total"]["eager_graphs"] > 0
        # on the device, the calls must be device calls (captured programs on the
        # lazyjit tensors' data), not CPU-tensor calls
        lc["no_lazyjit_calls"] = lc["steady"]["device_calls" if on_device else "calls"] == 0
        # the counters of torch.compile(backend="lazyjit"), on CPU tensors or the device
        res["lazyjit_compile"] = lc
    if dev is not None:
        n = len(times)
        res["lazyjit_first"] = _lz_metrics_delta(m0, m1)
        res["lazyjit_warmup"] = _lz_metrics_delta(m1, m2)
        steady = _lz_metrics_delta(m2, m3)
        res["lazyjit_steady"] = steady
        med = lambda k: median([d[k] for d in per_step])  # noqa: E731
        nc = n * calls
        ps = {
            "ops_traced": steady["ops_traced"] / nc,
            "trace_ms": med("trace_ms"),
            "sync_ms": med("sync_ms"),
            "execute_ms": med("execute_ms"),
            # what a sync costs beyond running the compiled program: cache lookup,
            # binding, launch (+ any steady-state compile)
            "sync_overhead_ms": median([d["sync_ms"] - d["execute_ms"] for d in per_step]),
            "compile_ms": steady["compile_ms"] / nc,
            "compiles": steady["compiles"] / nc,
            "graphs_executed": steady["graphs_executed"] / nc,
            "syncs": steady["syncs"] / nc,
        }
        ps["trace_us_per_op"] = 1e3 * ps["trace_ms"] / ps["ops_traced"] if ps["ops_traced"] else None
        res["lazyjit_per_step"] = ps
    return res, first, (last, state)


def worker(key: str, scale: str, warmup: int, runs: int, systems: list[str], out_path: Path,
           threads: int | None, min_time_s: float = 0.0, max_runs: int = 50,
           ref_path: Path | None = None) -> None:
    """Runs `systems` on workload `key` in this process. With `ref_path`, eager's
    first and last outputs are saved there (when eager runs here) or compared with
    (when it ran in another process): the parent runs each system in a process of
    its own, so ATen's OpenMP threads, Inductor's and lazyjit's TBB workers never
    share one."""
    if threads:
        torch.set_num_threads(threads)
    import_error = None
    if any(s in LAZYJIT_SYSTEMS for s in systems):
        # Import before anything else runs: the autograd engine sizes its per-device
        # queues at the first backward(), so a device registered after an eager
        # backward cannot run backward (INTERNAL ASSERT in engine.cpp).
        try:
            import_lazyjit()
        except Exception as e:
            import_error = _short_error(e)
    wl = make_workload(key, scale)
    result = {"workload": key, "description": wl.describe(), "scale": scale,
              "bytes_moved": wl.bytes_moved(), "systems": {},
              "torch_threads": torch.get_num_threads()}

    def flush():
        out_path.write_text(json.dumps(result, indent=1, default=str))

    ref_first = ref_last = None
    if ref_path is not None and "eager" not in systems and ref_path.exists():
        ref_first, ref_last = torch.load(ref_path, weights_only=False)
    for system in systems:
        can_reset = reset_peak_rss()
        rss_before, _ = rss_kib()
        print(f"[bench] {key}: {system} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            if system in LAZYJIT_SYSTEMS and import_error:
                raise ImportError(import_error)
            res, first, last = run_system(wl, system, warmup, runs, min_time_s, max_runs)
        except Exception as e:
            res = {"system": system, "error": _short_error(e), "error_where": _where(e)}
            first = last = None
            print(f"[bench] {key}: {system} FAILED: {res['error'][:300]}", file=sys.stderr,
                  flush=True)
        res["wall_s"] = time.perf_counter() - t0
        res["loadavg_1min_after"] = os.getloadavg()[0]
        _, peak = rss_kib()
        res["rss_before_mib"] = rss_before / 1024
        res["peak_rss_mib"] = peak / 1024
        res["peak_rss_delta_mib"] = (peak - rss_before) / 1024
        res["peak_rss_separate"] = can_reset
        res["ru_maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if first is not None:
            if system == "eager":
                ref_first, ref_last = first, last
                if ref_path is not None:
                    torch.save((first, last), ref_path)
            elif ref_first is not None:
                c_first = compare(first, ref_first, **wl.tolerance)
                # last = (output, state): for a training step after the first call and
                # the warm-up steps (the same count for every system; the number of
                # timed steps adapts to speed), the parameters included
                c_last = (compare_train(last, ref_last) if wl.train
                          else compare(last, ref_last, **wl.tolerance))
                res["correct"] = c_first["ok"] and c_last["ok"]
                res["max_abs_diff"] = max(c_first["max_abs_diff"], c_last["max_abs_diff"])
                res["correct_error"] = c_first["error"] or c_last["error"]
        lc = res.get("lazyjit_compile")
        if lc and (lc["eager_fallback"] or lc["no_lazyjit_calls"]):
            why = ("graphs run through ATen (eager fallback): "
                   + "; ".join(lc["total"]["eager_reasons"]) if lc["eager_fallback"]
                   else "no captured lazyjit program ran in the timed steps")
            res["failed"] = why
            print(f"[bench] {key}: {system} FAILED: {why[:300]}", file=sys.stderr, flush=True)
        if wl.bytes_moved() and res.get("median_ms"):
            res["gbps"] = wl.bytes_moved() / (res["median_ms"] / 1e3) / 1e9
        result["systems"][system] = res
        flush()
        del first, last
    flush()


# --------------------------------------------------------------------------------------
# Parent: one worker process per system and round
# --------------------------------------------------------------------------------------

def run_workload(key, args, tmpdir: Path) -> dict:
    """Each system in a process of its own, eager first (its outputs are the
    reference the others are checked against); with --rounds N, N such passes,
    alternating the systems, and each system's timed samples pooled."""
    merged = None
    ref = tmpdir / f"{key}.eager-ref.pt"
    for rnd in range(args.rounds):
        for system in args.systems:
            r = run_worker_subprocess(key, args, tmpdir, [system], ref, tag=f"{system}-{rnd}")
            if merged is None:
                merged = {k: v for k, v in r.items() if k != "systems"}
                merged["systems"] = {}
                merged["worker_wall_s"] = 0.0
            else:
                merged["worker_wall_s"] += r.get("worker_wall_s", 0.0)
                for k in ("worker_error", "worker_log_tail"):
                    if k in r:
                        merged[k] = r[k]
            for name, sr in r.get("systems", {}).items():
                if name not in merged["systems"] or "error" in merged["systems"][name]:
                    merged["systems"][name] = sr
                    continue
                pooled = merged["systems"][name]
                if "times_ms" in pooled and "times_ms" in sr:
                    pooled["times_ms"] = pooled["times_ms"] + sr["times_ms"]
                    pooled["median_ms"] = median(pooled["times_ms"])
                    pooled["min_ms"] = min(pooled.get("min_ms", float("inf")), sr.get("min_ms", float("inf")))
                    pooled["runs"] = len(pooled["times_ms"])
                    pooled["rounds"] = pooled.get("rounds", 1) + 1
                if sr.get("correct") is False or sr.get("failed"):
                    for k in ("correct", "failed", "correct_error", "max_abs_diff"):
                        if k in sr:
                            pooled[k] = sr[k]
    return merged


def run_worker_subprocess(key, args, tmpdir: Path, systems=None, ref: Path | None = None,
                          tag: str = "") -> dict:
    systems = systems or args.systems
    out = tmpdir / f"{key}{'.' + tag if tag else ''}.json"
    cmd = [sys.executable, str(RUN_PY), "--worker", key,
           "--worker-out", str(out), "--warmup", str(args.warmup), "--runs", str(args.runs),
           "--systems", ",".join(systems), "--scale", args.scale,
           "--min-time", str(args.min_time), "--max-runs", str(args.max_runs)]
    if ref is not None:
        cmd += ["--worker-ref", str(ref)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ)
    # a fresh Inductor cache per workload: "first call" is a cold compile, not a
    # cache hit from an earlier bench run
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmpdir / f"inductor-cache-{key}{'-' + tag if tag else ''}")
    # likewise lazyjit's on-disk cache: "1st call" is a cold compile
    env["LAZYJIT_CACHE_DIR"] = str(tmpdir / f"lazyjit-cache-{key}{'-' + tag if tag else ''}")
    # ... which the worker empties again before lazyjit_compile (run_system)
    env["LAZYJIT_BENCH_SCRATCH_CACHE_DIR"] = env["LAZYJIT_CACHE_DIR"]
    env.setdefault("PYTHONPATH", str(REPO / "python"))
    t0 = time.perf_counter()
    err = None
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=args.timeout)
        log = p.stdout
        if p.returncode != 0:
            err = f"worker exited with status {p.returncode}"
    except subprocess.TimeoutExpired as e:
        log = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"worker timed out after {args.timeout} s"
    sys.stderr.write("".join(l + "\n" for l in log.splitlines() if l.startswith("[bench]")))
    result = json.loads(out.read_text()) if out.exists() else {"workload": key, "systems": {}}
    result["worker_wall_s"] = time.perf_counter() - t0
    if err:
        # the system that was running when the worker died gets the error
        done = set(result.get("systems", {}))
        for s in systems:
            if s not in done:
                result["systems"][s] = {"system": s, "error": err,
                                        "log_tail": log[-2000:]}
                break
        result["worker_error"] = err
        result["worker_log_tail"] = log[-4000:]
    return result
