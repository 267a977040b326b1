"""lazyjit benchmark: eager PyTorch vs lazyjit (the device) vs torch.compile(backend="inductor")
vs torch.compile(backend="lazyjit") on CPU tensors and on the lazyjit device.

    bash bench/run.sh            # full run, writes bench/results/latest.{json,md}
    bash bench/run.sh --quick    # smoke test: small sizes, few runs

Each system runs each workload in a subprocess of its own (``--worker NAME``), one
after another (eager, lazyjit, inductor, lazyjit_compile, lazyjit_device_compile
(``--systems`` picks them); ``--rounds N`` alternates
them N times and pools the timed samples), on identical, seeded inputs and weights:
ATen's OpenMP threads, Inductor's and lazyjit's TBB workers never share a process.
Eager's outputs are saved for the others' workers, which check theirs against them
with ``torch.testing.assert_close`` and measure their own peak resident memory. The parent
process measures the machine's memory bandwidth (a STREAM-like triad) and
lazyjit's per-op tracing cost, collects everything and writes the JSON and the
markdown table. See bench/README.md for what each number means.

The workload definitions (``WORKLOADS``, ``make_workload``) are importable without
running anything; tests/python/test_bench_workloads.py uses them at tiny sizes.
"""
# The code is split: workloads.py (the workloads, targets, output comparison),
# measure.py (triad, tracing cost, the timed steps, the worker and parent processes),
# report.py (machine info, summary, markdown); this file is the command line and
# re-exports their names, so bench/run.py stays the module to import.
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_BENCH = str(Path(__file__).resolve().parent)
if _BENCH not in sys.path:  # loaded by path (tests, other bench scripts): find the modules beside it
    sys.path.insert(0, _BENCH)

import torch  # noqa: E402

from workloads import *  # noqa: E402,F401,F403  (re-exported: WORKLOADS, make_workload, MLPBlock, ...)
from workloads import (LLAMA_ATTN, MiB, REPO, RESULTS_DIR, SYSTEMS, WORKLOADS, _flatten, select_workloads,  # noqa: E402,F401
                       _short_error)
from measure import *  # noqa: E402,F401,F403  (re-exported: run_system, worker, triad_bandwidth, ...)
from measure import (_compile_stats, _compile_stats_delta, _dynamo_counters,  # noqa: E402,F401
                     _fresh_lazyjit_caches, _lz_metrics_delta, _run_system, _where, run_workload,
                     tracing_cost, triad_bandwidth, worker)
from report import *  # noqa: E402,F401,F403  (re-exported: summarize, render_markdown, machine_info, ...)
from report import _corr, _f, _ms, machine_info, render_markdown, summarize  # noqa: E402,F401


SCALES = {  # scale -> (warmup, runs, min_time_s, triad elems, triad reps, trace ops, trace reps)
    "full": (3, 10, 2.0, 64 * MiB, 20, 400, 10),
    "quick": (1, 5, 0.0, 8 * MiB, 5, 100, 3),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: small sizes, 1 warm-up + 5 runs")
    ap.add_argument("--only", default="",
                    help="comma-separated workload keys or prefixes (e.g. a,b1,d)")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="comma-separated subset of " + ",".join(SYSTEMS) + " (eager is the "
                         "reference for correctness; lazyjit_compile = "
                         "torch.compile(backend=\"lazyjit\") on CPU tensors; "
                         "lazyjit_device_compile = torch.compile(backend=\"lazyjit\") on "
                         "the lazyjit device, each call followed by lazyjit.sync())")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--min-time", type=float, default=None,
                    help="keep timing past --runs until this many seconds were measured "
                         "(up to --max-runs); more samples for short steps")
    ap.add_argument("--max-runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads in the workers (default: torch's default)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per workload process")
    ap.add_argument("--out", default=None,
                    help="output path stem (default bench/results/latest, or "
                         "bench/results/quick with --quick)")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="only re-render the markdown next to an existing results JSON")
    ap.add_argument("--no-triad", action="store_true")
    ap.add_argument("--no-tracing", action="store_true")
    # internal
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-ref", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=1,
                    help="passes over the systems, each system in its own process every pass, "
                         "alternating; timed samples pooled (default 1)")
    ap.add_argument("--load", action="store_true",
                    help="a competing load: one process spinning on one core during the "
                         "workloads (not during the triad and tracing measurements)")
    ap.add_argument("--scale", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    args.scale = args.scale or ("quick" if args.quick else "full")
    warmup, runs, min_time, triad_n, triad_reps, trace_ops, trace_reps = SCALES[args.scale]
    args.min_time = min_time if args.min_time is None else args.min_time
    args.warmup = warmup if args.warmup is None else args.warmup
    args.runs = runs if args.runs is None else args.runs
    args.systems = [s for s in args.systems.split(",") if s]
    for s in args.systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}")

    if args.render:
        jp = Path(args.render)
        jp.with_suffix(".md").write_text(render_markdown(json.loads(jp.read_text())) + "\n")
        return 0
    if args.worker:
        worker(args.worker, args.scale, args.warmup, args.runs, args.systems,
               Path(args.worker_out), args.threads, args.min_time, args.max_runs,
               Path(args.worker_ref) if args.worker_ref else None)
        return 0

    keys = select_workloads(ap, args.only, WORKLOADS)

    t_start = time.perf_counter()
    results = {"machine": machine_info(),
               "config": {"scale": args.scale, "warmup": args.warmup, "runs": args.runs,
                          "systems": args.systems, "workloads": keys,
                          "min_time_s": args.min_time, "max_runs": args.max_runs,
                          "llama_attn": LLAMA_ATTN, "threads": args.threads,
                          "competing_load": "one process spinning on one core" if args.load else None},
               "workloads": {}}
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_triad:
        print("[bench] triad bandwidth ...", file=sys.stderr, flush=True)
        results["triad"] = triad_bandwidth(triad_n, triad_reps)
        print(f"[bench] triad: {results['triad']['gbps_best']:.1f} GB/s", file=sys.stderr,
              flush=True)
    if not args.no_tracing and "lazyjit" in args.systems:
        print("[bench] lazyjit tracing cost ...", file=sys.stderr, flush=True)
        try:
            results["tracing"] = tracing_cost(trace_ops, trace_reps)
        except Exception as e:
            results["tracing"] = {"error": _short_error(e)}
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.load else None
    try:
        with tempfile.TemporaryDirectory(prefix="lazyjit-bench-") as tmp:
            for key in keys:
                results["workloads"][key] = run_workload(key, args, Path(tmp))
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    results["total_wall_s"] = time.perf_counter() - t_start
    results["machine"]["loadavg_end"] = os.getloadavg()
    summarize(results)

    stem = Path(args.out) if args.out else RESULTS_DIR / ("quick" if args.quick else "latest")
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = render_markdown(results)
    md_path.write_text(md + "\n")
    print(md)
    print(f"\n[bench] wrote {json_path.relative_to(REPO) if json_path.is_relative_to(REPO) else json_path}"
          f" and {md_path.name} in {results['total_wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
