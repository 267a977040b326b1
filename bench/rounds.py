"""Each system in a process of its own, the order alternating over rounds, every
process with empty on-disk caches (lazyjit's, and Inductor's FX graph and kernel
caches, which would make later rounds' first calls warm): the runner of the
real-size step benches (bench/real_size_memory.py, bench/unet_step.py).

A worker is the bench script itself with `--worker SYSTEM` and the flags given;
it prints one line `RESULT <json>`. `run_rounds` returns each system's results
(one per round that did not fail, a failure printed with its stderr) and the load
average before the first round and after each.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_rounds(script, systems, rounds, flags, env_for=None, progress=None):
    """script: the bench's path; flags: ["--name=value", ...] for every worker;
    env_for(system): extra environment variables; progress(round, system, result)
    after each worker."""
    runs = {s: [] for s in systems}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for s in (systems if r % 2 == 0 else systems[::-1]):
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, LAZYJIT_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
                env.update(env_for(s) if env_for else {})
                p = subprocess.run([sys.executable, script, "--worker", s] + flags, capture_output=True, text=True,
                                   env=env)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{s}: failed (rc {p.returncode})\n{p.stderr[-3000:]}", file=sys.stderr)
                continue
            res = json.loads(line[0][7:])
            res["load"] = os.getloadavg()[0]
            runs[s].append(res)
            if progress:
                progress(r, s, res)
        loads.append(os.getloadavg()[0])
    return runs, loads


def add_common_args(ap, systems, steps):
    """The flags every step bench has: which systems, how many rounds, steps a
    process, threads, where the raw results go, and the worker's own flag."""
    ap.add_argument("--systems", default=",".join(systems))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=steps, help="steps per process, the first (cold) included")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)


def summarize(systems, runs, medians, diff, extra=None):
    """One row a system (`failed` where no round succeeded): the medians over
    rounds of the keys in `medians`; `step_ms`, the median of the processes'
    median steps; `diff_key` = the largest difference between the first round's
    `values_key` list and eager's (diff = (diff_key, values_key)); the GEMM
    floor's fields of the first round; and extra(system, results) merged in."""
    from gemm_floor import FIELDS
    diff_key, values_key = diff
    eager = runs.get("eager") and runs["eager"][0][values_key]
    rows = []
    for s in systems:
        if not runs[s]:
            rows.append({"system": s, "failed": True})
            continue
        row = {"system": s, **{k: statistics.median(r[k] for r in runs[s]) for k in medians},
               "step_ms": statistics.median(statistics.median(r["step_ms"]) for r in runs[s]),
               diff_key: max(abs(a - b) for a, b in zip(runs[s][0][values_key], eager)) if eager else None,
               **{k: runs[s][0].get(k) for k in FIELDS}}
        row.update(extra(s, runs[s]) if extra else {})
        rows.append(row)
    return rows


def report(args, loads, rows, runs, table, drop=()):
    """Prints table(vars(args), loads, rows); with --out, writes the raw results,
    less each result's keys in `drop` (values only the rows needed)."""
    print("\n" + "\n".join(table(vars(args), loads, rows)))
    if args.out:
        kept = {s: [{k: v for k, v in r.items() if k not in drop} for r in rs] for s, rs in runs.items()}
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "loads": loads, "rows": rows, "runs": kept}, f, indent=1)
