"""What LAZYJIT_DEBUG_NANS=1 costs: the bench workloads of bench/run.py on lazyjit
with the NaN/Inf checks off and on (issue 12: "under 10%").

    PYTHONPATH=python .venv/bin/python bench/debug_cost.py            # -> bench/results/debug_nans.{md,json}
    PYTHONPATH=python .venv/bin/python bench/debug_cost.py --quick    # small sizes -> bench/results/debug_nans_quick.*
    #   --rounds N (default 5)  --only a,b1  --threads N  --out STEM

Each measurement is a fresh process (``--worker KEY`` with ``LAZYJIT_DEBUG_NANS`` set to
0 or 1: the switch is read once per process) that builds the workload with bench/run.py's
own definitions (``WORKLOADS``) and times it with bench/run.py's ``run_system``: warm-up
steps, then timed steady-state steps (workload call + ``lazyjit.sync()``), their median.
Per round, every workload runs off and on, in an order that alternates from round to
round, so slow drift of a shared machine hits both alike. The table shows, per workload,
the median over rounds of each process's median step time, and on / off.
No on-disk cache (``LAZYJIT_CACHE=off``): every process compiles what it runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("lazyjit_bench_run", _HERE / "run.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)

REPO = bench.REPO
RESULTS_DIR = bench.RESULTS_DIR
# scale -> (warm-up steps, timed steps at least, seconds measured at least, timed steps at most)
SCALES = {"full": (3, 10, 2.0, 50), "quick": (1, 5, 0.0, 5), "tiny": (1, 3, 0.0, 3)}
TARGET = 1.10  # the bound on on / off


def worker(key: str, scale: str, threads: int | None) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)
    bench.import_lazyjit()  # before any backward() (see bench/run.py's worker)
    warmup, runs, min_time, max_runs = SCALES[scale]
    wl = bench.make_workload(key, scale)
    res, _, _ = bench.run_system(wl, "lazyjit", warmup, runs, min_time, max_runs)
    keep = ("median_ms", "min_ms", "times_ms", "first_call_ms", "runs")
    out = {k: res[k] for k in keep}
    out["description"] = wl.describe()
    out["debug_nans"] = os.environ.get("LAZYJIT_DEBUG_NANS", "0")
    out["compiles_steady"] = res["lazyjit_per_step"]["compiles"]
    out["nan_probe"] = nan_probe()
    return out


def nan_probe() -> dict:
    """What the NaN checks did in this process, observed after the timed steps: a log
    of -1 on the lazyjit device. With the checks on, its sync raises naming the op
    (``caught``); off, the NaN comes back as a value (``nan_returned``)."""
    import torch

    x = torch.tensor([-1.0, 2.0]).to("lazyjit")
    try:
        got = torch.log(x).cpu()
    except RuntimeError as e:
        return {"caught": True, "nan_returned": False, "message": str(e).splitlines()[0][:300]}
    return {"caught": False, "nan_returned": bool(got.isnan().any()), "message": None}


def run_worker(key: str, nans: int, args) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", key, "--scale", args.scale]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ)
    env["LAZYJIT_DEBUG_NANS"] = str(nans)
    env["LAZYJIT_CACHE"] = "off"
    env.pop("LAZYJIT_DEBUG", None)  # level 4 would turn the checks on in both
    env.setdefault("PYTHONPATH", str(REPO / "python"))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stdout + p.stderr)[-3000:]
        raise RuntimeError(f"worker {key} LAZYJIT_DEBUG_NANS={nans} failed (status {p.returncode}):\n{tail}")
    return json.loads(lines[-1])


def render(results: dict) -> str:
    m, c = results["machine"], results["config"]
    lines = [
        "# Cost of LAZYJIT_DEBUG_NANS=1 (bench/debug_cost.py)",
        "",
        f"- date {m['date']}, commit {m['git_commit']}{' (dirty)' if m['git_dirty'] else ''}, "
        f"{m['cpu_model']}, {m['cpus_available']} CPUs, torch threads {m['torch_threads']}",
        f"- load average (1, 5, 15 min) at start {', '.join(f'{x:.2f}' for x in m['loadavg_start'])}, "
        f"at end {', '.join(f'{x:.2f}' for x in m['loadavg_end'])}",
        f"- scale `{c['scale']}`, {c['rounds']} rounds; per round each workload runs in two fresh "
        "processes (checks off, on; the order alternates by round); a process's time is the "
        "median of its timed steady-state steps (workload call + `lazyjit.sync()`, after "
        f"{c['warmup']} warm-up steps); the table shows medians over rounds",
        f"- command: `{c['command']}`",
        "",
        "| workload | off ms | on ms | on / off | rounds off (ms) | rounds on (ms) |",
        "|---|---:|---:|---:|---|---|",
    ]
    for key, r in results["workloads"].items():
        off = [x["median_ms"] for x in r["off"]]
        on = [x["median_ms"] for x in r["on"]]
        mo, mn = statistics.median(off), statistics.median(on)
        ratio = mn / mo
        flag = "" if ratio <= TARGET else " ✗"
        lines.append(f"| `{key}` | {mo:.3f} | {mn:.3f} | {ratio:.3f}{flag} | "
                     f"{', '.join(f'{x:.2f}' for x in off)} | {', '.join(f'{x:.2f}' for x in on)} |")
    lines += ["", f"Target: on / off ≤ {TARGET:.2f} (✗ marks a workload above it). What the check "
              "costs: generated kernels test every float32/float64 value as they store it (its "
              "exponent bits, OR-reduced in registers, one flag per kernel call: "
              "lowering::Plan::check_stores), so the outputs they write need no second read; "
              "the other outputs (library steps', half-precision ones) get one vectorized scan "
              "after the sync (runtime/debug_runs/nan_check.cpp). Only when a flag or the scan finds a NaN or "
              "Inf is the graph re-run op by op to name the op. With checks on, programs are "
              "compiled apart from unchecked ones (their own cache key). A scan of every output "
              "after the kernels, the first version, cost 12-47% on the memory-bound steps "
              "(`a_gelu`, `b1`, `b2`): one more read of what they had just written."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, fewer steps")
    ap.add_argument("--only", default="", help="comma-separated workload keys or prefixes (e.g. a,b1,d)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in the workers")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per worker process")
    ap.add_argument("--out", default=None, help="output path stem (default bench/results/debug_nans[_quick])")
    ap.add_argument("--scale", default=None, help=argparse.SUPPRESS)  # also: tiny (the tests)
    ap.add_argument("--render", default=None, metavar="JSON", help="only re-render the markdown next to a results JSON")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.render:
        jp = Path(args.render)
        jp.with_suffix(".md").write_text(render(json.loads(jp.read_text())) + "\n")
        return 0
    args.scale = args.scale or ("quick" if args.quick else "full")
    if args.worker:
        print(json.dumps(worker(args.worker, args.scale, args.threads)), flush=True)
        return 0

    keys = list(bench.WORKLOADS)
    if args.only:
        want = [w.strip() for w in args.only.split(",") if w.strip()]
        keys = [k for k in keys if any(k == w or k.startswith(w) for w in want)]
        if not keys:
            ap.error(f"--only {args.only!r} matches no workload; have {list(bench.WORKLOADS)}")
    command = "PYTHONPATH=python .venv/bin/python bench/debug_cost.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    results = {"machine": bench.machine_info(),
               "config": {"scale": args.scale, "rounds": args.rounds, "warmup": SCALES[args.scale][0],
                          "threads": args.threads, "workloads": keys, "command": command.strip()},
               "workloads": {k: {"off": [], "on": []} for k in keys}}
    t0 = time.perf_counter()
    for rnd in range(args.rounds):
        for i, key in enumerate(keys):
            order = (0, 1) if (rnd + i) % 2 == 0 else (1, 0)
            for nans in order:
                r = run_worker(key, nans, args)
                results["workloads"][key]["on" if nans else "off"].append(r)
                print(f"[debug_cost] round {rnd + 1}/{args.rounds} {key} LAZYJIT_DEBUG_NANS={nans}: "
                      f"{r['median_ms']:.3f} ms", file=sys.stderr, flush=True)
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["total_wall_s"] = time.perf_counter() - t0
    stem = Path(args.out) if args.out else RESULTS_DIR / ("debug_nans_quick" if args.quick else "debug_nans")
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = render(results)
    stem.with_suffix(".md").write_text(md + "\n")
    print(md)
    print(f"\n[debug_cost] wrote {stem.with_suffix('.md')} in {results['total_wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
