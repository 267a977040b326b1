"""lazyjit's GPU bench (issue 43, "Bench"): the CPU bench's workloads on CUDA against
CUDA eager, Inductor (default and "reduce-overhead") and torch.compile(backend="lazyjit"),
with the lazyjit device route (LAZYJIT_TARGET=cuda, tensors moved to the lazyjit
device, lazyjit.sync() after each call).

    PYTHONPATH=python python bench/gpu_bench.py --budget 200   # on a GPU machine
    PYTHONPATH=python python bench/gpu_bench.py --dry-run       # here: CPU, tiny sizes

Each system runs in a worker process of its own (the lazyjit target is chosen per
process by LAZYJIT_TARGET; Inductor's and lazyjit's threads never share one). The
workers start together, then take one workload at a time from this process, in
the order of gpu_workloads.schedule(): eager and the systems the issue's done-when
names first, the rest after, so that a time budget (--budget, or
LAZYJIT_GPU_BENCH_BUDGET_S) cuts the least needed; a pair that does not fit is
"skipped: time budget". Eager's outputs are the reference every other system is
compared with. Writes bench/results/gpu.{md,json} (--out) and prints the markdown.

--dry-run (= --device cpu) runs the same code on the CPU, tiny sizes, wall timers
instead of CUDA events, without the systems that need CUDA, and writes into a
temporary directory: the script's logic, tested by tests/python/test_bench_gpu_script.py.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))

from gpu_workloads import CUDA_ONLY_SYSTEMS, GPU_WORKLOADS, SYSTEMS, schedule  # noqa: E402
from workloads import REPO, RESULTS_DIR, select_workloads  # noqa: E402

DEFAULT_BUDGET_S = 200.0
# (warm-up steps, least timed samples, most timed samples, least seconds of samples)
SETTINGS = {"cuda": (3, 10, 30, 0.5), "cpu": (2, 3, 3, 0.0)}
STARTUP_S = 90.0   # at most, for a worker to import torch, lazyjit and transformers
MIN_PAIR_S = 5.0   # a pair is not started with less of the budget left


class Worker:
    """A process running one system (gpu_measure.worker_main): commands go to its
    stdin, answers come back as JSON lines on a pipe of their own (its stdout and
    stderr, where libraries print, go to a log file)."""

    def __init__(self, system: str, device: str, tmp: Path):
        self.system, self.device, self.tmp = system, device, tmp
        self.proc = None
        self.starts = 0
        self.info = None
        self.start_error = None
        self.progress = None

    def start(self) -> None:
        self.starts += 1
        self.log = self.tmp / f"worker-{self.system}-{self.starts}.log"
        r, w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
        env["LAZYJIT_TARGET"] = self.device
        env["LAZYJIT_BACKGROUND_COMPILE"] = "off"  # the first call is the cold compile
        # empty caches: every first call is a cold compile
        env["LAZYJIT_CACHE_DIR"] = str(self.tmp / f"lazyjit-cache-{self.system}")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(self.tmp / f"inductor-cache-{self.system}")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", self.system,
                 "--device", self.device, "--result-fd", str(w)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(w,),
                env=env, text=True, cwd=str(REPO), start_new_session=True)
        os.close(w)
        self.fd, self.buf = r, b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _read(self, deadline: float):
        """The next JSON line, or "timeout", or "eof" (the process ended)."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return "timeout"
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return "eof"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def wait_ready(self, deadline: float) -> bool:
        t0 = time.monotonic()
        msg = self._read(deadline)
        if isinstance(msg, dict) and msg.get("ready"):
            self.info = msg["info"]
            return True
        self.start_error = (msg.get("error") if isinstance(msg, dict) else
                            f"not ready after {time.monotonic() - t0:.0f} s ({msg})")
        self.start_error += "; log: " + self.log_tail(400)
        self.kill()
        return False

    def run(self, cmd: dict, deadline: float):
        """The result of one command, or "timeout" / "eof"."""
        self.progress = None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = self._read(deadline)
            if not isinstance(msg, dict):
                return msg
            if "progress" in msg:
                self.progress = msg["progress"]
            elif "result" in msg:
                return msg["result"]

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def close_stdin(self) -> None:
        """Tells the worker to exit once its current command is done."""
        if self.proc is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def stop(self) -> None:
        """Ends the worker: stdin closed (it finishes and exits), killed after 10 s."""
        if self.proc is None:
            return
        self.close_stdin()
        try:
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def kill(self) -> None:
        """Kills the worker's process group (it and Inductor's compile workers)."""
        if self.proc is None:
            return
        self.close_stdin()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        os.close(self.fd)
        self.proc = None


def run_pairs(pairs, workers: dict, args, tmp: Path, end: float, results: dict, save) -> None:
    """Runs the (workload, system) pairs in order within the budget that ends at
    `end`, each result into results["workloads"][key]["systems"], save() after each."""
    warmup, runs, max_runs, min_time = SETTINGS[args.device]
    for key, system in pairs:
        out = results["workloads"][key]["systems"]
        out[system] = run_pair(key, system, workers[system], args, tmp, end,
                               {"warmup": warmup, "runs": runs, "max_runs": max_runs,
                                "min_time_s": min_time})
        save()


def run_pair(key: str, system: str, w: Worker, args, tmp: Path, end: float, settings: dict) -> dict:
    """One system on one workload in its worker, within what is left of the budget
    and the pair cap; a worker that broke is started again first."""
    left = end - time.monotonic()
    if left < MIN_PAIR_S:
        return {"system": system, "skipped": "time budget"}
    if w.start_error:
        return {"system": system, "error": "worker did not start: " + w.start_error}
    if not w.alive():  # it exited after an error that broke its CUDA context
        w.start()
        if not w.wait_ready(min(end, time.monotonic() + STARTUP_S)):
            return {"system": system, "error": "worker did not restart: " + w.start_error}
        left = end - time.monotonic()
    seconds = min(left, args.pair_cap)
    print(f"[gpu_bench] {key}: {system} (at most {seconds:.0f} s) ...", file=sys.stderr, flush=True)
    cmd = {"key": key, "scale": args.scale, "ref": str(tmp / f"{key}.eager.pt"),
           "seconds": max(1.0, seconds - 10.0), **settings}  # timed samples stop early past it
    t0 = time.monotonic()
    res = w.run(cmd, t0 + seconds)
    if res == "timeout":
        during = w.progress or "start"
        w.kill()
        why = "time budget" if seconds >= left else f"the pair cap of {args.pair_cap:.0f} s"
        res = {"system": system, "skipped": f"{why}: stopped after {seconds:.0f} s, during {during}"}
    elif res == "eof":
        res = {"system": system, "error": f"worker exited (status {w.proc.wait()}) during "
               f"{w.progress or 'start'}; log: {w.log_tail(600)}"}
        w.kill()
    state = res.get("skipped") or ("error" if res.get("error") else "done")
    print(f"[gpu_bench] {key}: {system}: {state} in {time.monotonic() - t0:.1f} s",
          file=sys.stderr, flush=True)
    return res


def new_results(keys, pairs, systems, args, notes) -> dict:
    """The results' skeleton: the machine, the settings, an empty entry per workload."""
    from report import machine_info
    warmup, runs, max_runs, min_time = SETTINGS[args.device]
    mi = machine_info()
    results = {
        "meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                 **{k: mi.get(k) for k in ("git_commit", "cpu_model", "cpus_available", "python")}},
        "device": args.device, "scale": args.scale,
        "timer": "cuda_events" if args.device == "cuda" else "wall",
        "budget_s": args.budget, "notes": notes,
        "config": {"warmup": warmup, "runs": runs, "max_runs": max_runs, "min_time_s": min_time,
                   "pair_cap_s": args.pair_cap, "systems": systems, "order": pairs},
        "workloads": {}}
    for key in keys:
        wl = GPU_WORKLOADS[key](args.scale)
        results["workloads"][key] = {"description": wl.describe(), "bytes_moved": wl.bytes_moved(),
                                     "calls_per_sample": wl.calls, "systems": {}}
    return results


def save(results: dict, stem: Path, t_start: float) -> str:
    """Writes STEM.json and STEM.md as they stand (after every pair: a run cut short
    still leaves what it measured); returns the markdown."""
    from gpu_report import render_markdown, summarize
    results["total_wall_s"] = time.monotonic() - t_start
    summarize(results)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = render_markdown(results)
    stem.with_suffix(".md").write_text(md + "\n")
    return md


def run_all(workers: dict, keys, pairs, args, notes, tmp: Path, stem: Path, t_start: float) -> dict:
    """Starts the workers (together: their imports overlap), runs the pairs within the
    budget, returns the results."""
    end = t_start + args.budget
    for w in workers.values():
        w.start()
    results = new_results(keys, pairs, list(workers), args, notes)
    for w in workers.values():
        if not w.wait_ready(min(end, t_start + STARTUP_S)):
            print(f"[gpu_bench] {w.system}: worker did not start: {w.start_error}",
                  file=sys.stderr, flush=True)
    print(f"[gpu_bench] workers ready in {time.monotonic() - t_start:.1f} s", file=sys.stderr,
          flush=True)
    info = next((w.info for w in workers.values() if w.info), None) or {}
    results["meta"].update({k: info.get(k) for k in ("gpu", "cuda", "capability", "torch",
                                                     "transformers")})
    results["meta"]["workers"] = {s: w.info for s, w in workers.items()}
    run_pairs(pairs, workers, args, tmp, end, results, lambda: save(results, stem, t_start))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda: the bench; cpu: the dry run (tiny sizes, wall timers)")
    ap.add_argument("--dry-run", action="store_true", help="= --device cpu")
    ap.add_argument("--budget", type=float,
                    default=float(os.environ.get("LAZYJIT_GPU_BENCH_BUDGET_S", DEFAULT_BUDGET_S)),
                    help="seconds for the whole bench, worker start-up and cold compiles included "
                         f"(env LAZYJIT_GPU_BENCH_BUDGET_S; default {DEFAULT_BUDGET_S:.0f})")
    ap.add_argument("--pair-cap", type=float, default=100.0,
                    help="seconds one system may take on one workload, its cold compile included")
    ap.add_argument("--only", default="", help="comma-separated workload keys or prefixes (a,b1,g)")
    ap.add_argument("--systems", default="", help="comma-separated subset of " + ",".join(SYSTEMS))
    ap.add_argument("--out", default=None,
                    help="output stem: STEM.md and STEM.json (default bench/results/gpu; "
                         "the dry run: a temporary directory)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dry_run:
        args.device = "cpu"
    if args.worker:
        from gpu_measure import worker_main
        return worker_main(args.worker, args.device, args.result_fd)

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device here (torch.cuda.is_available() is False); --dry-run runs "
                 "the bench's code on the CPU")
    args.scale = "gpu" if args.device == "cuda" else "tiny"
    keys = select_workloads(ap, args.only, GPU_WORKLOADS)
    systems = [s for s in (args.systems.split(",") if args.systems else SYSTEMS) if s]
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; have {', '.join(SYSTEMS)}")
    notes = []
    if args.device == "cpu":
        dropped = [s for s in systems if s in CUDA_ONLY_SYSTEMS]
        systems = [s for s in systems if s not in CUDA_ONLY_SYSTEMS]
        notes.append("Dry run: no CUDA events (wall timers)" + "".join(
            f"; not run: {s} (needs CUDA: {CUDA_ONLY_SYSTEMS[s]})" for s in dropped))
    if systems[:1] != ["eager"] and "eager" in systems:
        systems = ["eager"] + [s for s in systems if s != "eager"]
    if "eager" not in systems:
        notes.append("eager not run: no reference, nothing compared")

    stem = Path(args.out) if args.out else (
        RESULTS_DIR / "gpu" if args.device == "cuda"
        else Path(tempfile.mkdtemp(prefix="lazyjit-gpu-bench-dry-")) / "gpu")
    if args.device == "cpu" and stem.resolve().parent == RESULTS_DIR.resolve():
        ap.error("a dry run does not write into bench/results/: its numbers are not the GPU's")

    from gpu_report import render_done_when
    t_start = time.monotonic()
    pairs = schedule(keys, systems)
    stem.parent.mkdir(parents=True, exist_ok=True)
    # run.sh's timeout ends this process with SIGTERM: the workers (sessions of their
    # own, so that a kill reaches Inductor's compile workers too) are killed with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="lazyjit-gpu-bench-") as tmp:
        workers = {s: Worker(s, args.device, Path(tmp)) for s in systems}
        try:
            results = run_all(workers, keys, pairs, args, notes, Path(tmp), stem, t_start)
        except BaseException:
            for w in workers.values():
                w.kill()
            raise
        for w in workers.values():  # all told first: they exit together
            w.close_stdin()
        for w in workers.values():
            w.stop()
    results["meta"]["worker_starts"] = {s: w.starts for s, w in workers.items()}
    print(save(results, stem, t_start))
    # last, for scripts/gpu_check.sh's summary (it keeps the bench log's last table lines)
    print("\n" + render_done_when(results))
    print(f"[gpu_bench] wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json').name} in "
          f"{results['total_wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
