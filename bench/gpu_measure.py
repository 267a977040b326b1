"""The GPU bench's measurement, run inside a worker process that holds one system:
the timers (CUDA events and host wall time, or wall time alone on the dry run's
CPU), one system's steps on one workload (``measure``), the device-to-device copy
the bandwidth is shown against (``copy_bandwidth``), and the worker's loop
(``worker_main``), which takes one workload at a time from the parent
(bench/gpu_bench.py) and answers with its result.
"""
from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from gpu_workloads import COMPILE_ARGS, compare_checkpoint, compare_outputs, make_gpu_workload
from workloads import _short_error, import_lazyjit, to_cpu


class EventTimer:
    """A sample's GPU time from CUDA events on the current stream (the one lazyjit
    launches on), and its wall time: perf_counter around the step and a
    torch.cuda.synchronize()."""
    kind = "cuda_events"

    def sync(self):
        torch.cuda.synchronize()

    def time(self, fn) -> tuple[float, float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        return start.elapsed_time(end), 1e3 * wall


class WallTimer:
    """The dry run's: no CUDA, so no events; the GPU time is None."""
    kind = "wall"

    def sync(self):
        pass

    def time(self, fn) -> tuple[None, float]:
        t0 = time.perf_counter()
        fn()
        return None, 1e3 * (time.perf_counter() - t0)


def _median(xs):
    return statistics.median(xs) if xs else None


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(tb[-4:]))


def _samples(timer, step, calls: int, runs: int, min_time_s: float, max_runs: int,
             deadline: float) -> dict:
    """Timed samples of `calls` back-to-back calls: at least `runs` (3 once past the
    deadline), more up to `max_runs` until `min_time_s` of wall time; per call."""
    gpu, wall = [], []
    while True:
        g, w = timer.time(step)
        gpu.append(None if g is None else g / calls)
        wall.append(w / calls)
        n, spent = len(wall), sum(wall) * calls / 1e3
        late = time.monotonic() > deadline
        if n >= max_runs or (n >= runs and spent >= min_time_s) or (late and n >= 3):
            break
    out = {"wall_ms": wall, "median_wall_ms": _median(wall), "runs": len(wall),
           "stopped_by_deadline": late and len(wall) < runs}
    if gpu[0] is not None:
        out["gpu_ms"] = gpu
        out["median_gpu_ms"] = _median(gpu)
    return out


def copy_bandwidth(nbytes_moved: int, device: str, timer, calls: int, runs: int) -> dict:
    """A device-to-device copy moving `nbytes_moved` (half read, half written, float32),
    timed like the workloads: the bound their bandwidth is shown against."""
    n = max(1, nbytes_moved // 8)
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    timer.sync()
    s = _samples(timer, lambda: [dst.copy_(src) for _ in range(calls)], calls, runs, 0.0, runs,
                 float("inf"))
    ms = s.get("median_gpu_ms") or s["median_wall_ms"]
    return {"bytes": 8 * n, "ms": ms, "gbps": 8 * n / (ms / 1e3) / 1e9, "timer": timer.kind}


def _lazyjit_compile_stats(lazyjit) -> dict:
    from lazyjit import dynamo as lzd
    st = lzd.stats()
    st["compile_ms"] = lazyjit.metrics()["timings"].get("compile", {}).get("total_ms", 0.0)
    return st


def measure(wl, system: str, device: str, timer, warmup: int, runs: int, min_time_s: float,
            max_runs: int, deadline: float, progress) -> tuple[dict, object, object]:
    """One system's steps on a workload: the first call (a cold compile included, host
    wall time, synchronized), `warmup` steps, then timed samples. Returns (result,
    first output, last output or a training step's checkpoint), outputs on the CPU.

    The device route (system "lazyjit") builds on the lazyjit device and syncs after
    each call, as bench/measure.py does on the CPU; the compiled systems wrap the
    workload with torch.compile(**COMPILE_ARGS[system]) on `device` tensors."""
    on_lazyjit = system == "lazyjit"
    lazyjit = import_lazyjit() if system in ("lazyjit", "lazyjit_compile") else None
    compile_args = COMPILE_ARGS.get(system)
    compile_fn = None
    if compile_args:
        import torch._dynamo as dynamo
        dynamo.reset()  # no graphs of the last workload
        compile_fn = lambda f: torch.compile(f, **compile_args)  # noqa: E731
    cudagraphs = compile_args is not None and compile_args.get("mode") == "reduce-overhead"
    calls = wl.calls
    res = {"system": system, "calls_per_sample": calls, "timer": timer.kind}
    stats0 = _lazyjit_compile_stats(lazyjit) if system == "lazyjit_compile" else None
    compile_ms0 = (lazyjit.metrics()["timings"].get("compile", {}).get("total_ms", 0.0)
                   if on_lazyjit else None)

    progress("build")
    t0 = time.perf_counter()
    built = wl.build_for("lazyjit" if on_lazyjit else device, compile_fn)
    fn, args = built
    if on_lazyjit:
        lazyjit.sync()  # the inputs and weights copied to the device
    timer.sync()
    res["build_s"] = time.perf_counter() - t0
    grad_ctx = torch.no_grad if wl.no_grad else torch.enable_grad
    last = [None]

    def step(n=calls):
        with grad_ctx():
            for _ in range(n):
                last[0] = None
                if cudagraphs:  # a new step: outputs of the last replay may be overwritten
                    torch.compiler.cudagraph_mark_step_begin()
                last[0] = fn(*args)
                if on_lazyjit:
                    lazyjit.sync()

    progress("first call (cold compile)")
    t0 = time.perf_counter()
    step(1)
    timer.sync()
    res["first_call_ms"] = 1e3 * (time.perf_counter() - t0)
    first = to_cpu(last[0])
    progress("warm-up")
    checkpoint_out = first
    for _ in range(warmup):
        step()
        if wl.train:
            checkpoint_out = to_cpu(last[0])
    timer.sync()
    # A training step is compared after the first call and the warm-up steps, a count
    # every system runs (the number of timed samples adapts to speed).
    checkpoint = (checkpoint_out, to_cpu(wl.state_to_compare(built))) if wl.train else None
    progress("timed")
    res.update(_samples(timer, step, calls, runs, min_time_s, max_runs, deadline))
    res["warmup"] = warmup
    out = checkpoint if wl.train else to_cpu(last[0])
    if stats0 is not None:
        st = _lazyjit_compile_stats(lazyjit)
        res["lazyjit_compile"] = {"graphs": st["graphs"] - stats0["graphs"],
                                  "captures": st["captures"] - stats0["captures"],
                                  "calls": st["calls"] - stats0["calls"],
                                  "eager_graphs": st["eager_graphs"] - stats0["eager_graphs"],
                                  "eager_reasons": st["eager_reasons"][len(stats0["eager_reasons"]):],
                                  "compile_ms": st["compile_ms"] - stats0["compile_ms"]}
        if res["lazyjit_compile"]["eager_graphs"]:
            res["failed"] = ("graphs ran through ATen (eager fallback): "
                             + "; ".join(res["lazyjit_compile"]["eager_reasons"])[:600])
        elif not res["lazyjit_compile"]["calls"]:
            res["failed"] = "no captured lazyjit program ran"
    if on_lazyjit:
        m = lazyjit.metrics()
        res["lazyjit_compile_ms"] = m["timings"].get("compile", {}).get("total_ms", 0.0) - compile_ms0
        res["lazyjit_fallbacks"] = m.get("fallbacks")
    return res, first, out


def run_one(cmd: dict, system: str, device: str, timer, progress) -> dict:
    """One workload for this worker's system, as the parent asked (cmd): measure it,
    then save (eager) or compare against (the others) the reference outputs. Never raises."""
    key = cmd["key"]
    wl = make_gpu_workload(key, cmd["scale"])
    res = {"system": system}
    t0 = time.perf_counter()
    first = out = None
    try:
        with wl.settings():
            r, first, out = measure(wl, system, device, timer, cmd["warmup"], cmd["runs"],
                                    cmd["min_time_s"], cmd["max_runs"],
                                    time.monotonic() + cmd["seconds"], progress)
        res.update(r)
        ref = Path(cmd["ref"])
        if system == "eager":
            torch.save((first, out), ref)
            if wl.bytes_moved():
                progress("copy bandwidth")
                res["copy"] = copy_bandwidth(wl.bytes_moved(), device, timer, wl.calls, cmd["runs"])
        elif ref.exists():
            want_first, want_out = torch.load(ref, weights_only=False)
            a = compare_outputs(first, want_first, device=device)
            b = (compare_checkpoint(out, want_out, device) if wl.train
                 else compare_outputs(out, want_out, device=device))
            res["match"] = a["ok"] and b["ok"]
            res["max_abs_diff"] = max(a["max_abs_diff"], b["max_abs_diff"])
            res["match_error"] = a["error"] or b["error"]
        else:
            res["match"] = None  # eager did not run: nothing to compare with
    except Exception as e:
        res.update(error=_short_error(e), error_where=_where(e))
    res["wall_s"] = time.perf_counter() - t0
    if wl.bytes_moved():
        ms = res.get("median_gpu_ms") or res.get("median_wall_ms")
        if ms:
            res["gbps"] = wl.bytes_moved() / (ms / 1e3) / 1e9
    del first, out
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return res


def _device_healthy(device: str) -> bool:
    """False after a sticky CUDA error (an illegal address poisons the context)."""
    if device != "cuda":
        return True
    try:
        torch.cuda.synchronize()
        return torch.ones(4, device="cuda").sum().item() == 4
    except Exception:
        return False


def worker_main(system: str, device: str, result_fd: int) -> int:
    """The worker: reports "ready" with what it runs on, then runs one JSON command a
    line from stdin until stdin closes, each answered with a JSON line on result_fd
    ({"progress": ...} lines while it runs, then {"result": ...}). Exits after an
    error that leaves the CUDA context unusable; the parent starts another."""
    out = os.fdopen(result_fd, "w", buffering=1)

    def send(obj):
        out.write(json.dumps(obj, default=str) + "\n")
        out.flush()

    info = {"system": system, "pid": os.getpid(), "torch": torch.__version__}
    try:
        if system in ("lazyjit", "lazyjit_compile"):
            # before any backward: the autograd engine sizes its device queues at the
            # first one (bench/measure.py's worker)
            lazyjit = import_lazyjit(retries=1)
            info["lazyjit_target"] = lazyjit.target()
        if device == "cuda":
            torch.ones(1, device="cuda").sum().item()
            info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                        capability=".".join(map(str, torch.cuda.get_device_capability())))
        import transformers
        info["transformers"] = transformers.__version__
    except Exception as e:
        send({"ready": False, "error": _short_error(e), "error_where": _where(e)})
        return 2
    send({"ready": True, "info": info})
    timer = EventTimer() if device == "cuda" else WallTimer()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        res = run_one(cmd, system, device, timer, lambda what: send({"progress": what}))
        send({"result": res})
        if res.get("error") and not _device_healthy(device):
            return 3
    return 0
