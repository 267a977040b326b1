"""Before/after: the bench's lazyjit workloads for two builds of lazyjit, side by
side in one run, alternating builds per round so machine noise hits both alike.

    .venv/bin/python bench/ab.py --base /path/to/other/checkout [--rounds 3] [--only a,b1]

Each build is a checkout whose python/ holds a built lazyjit (its own _C and
lib). Every round runs `bench/run.py --systems eager,lazyjit` once per build, each
workload in its own process (as the bench always does); the table gives, per
workload, the median over rounds of each build's median ms, and after/before.
Eager is measured in every round too, as the noise reference.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_run(checkout: Path, only: str, out: Path, threads):
    env = dict(os.environ, PYTHONPATH=str(checkout / "python"))
    cmd = [sys.executable, str(REPO / "bench" / "run.py"), "--systems", "eager,lazyjit", "--no-triad",
           "--no-tracing", "--out", str(out)]
    if only:
        cmd += ["--only", only]
    if threads:
        cmd += ["--threads", str(threads)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.with_suffix(".json").read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="checkout with the 'before' build")
    ap.add_argument("--new", default=str(REPO), help="checkout with the 'after' build (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "ab.md"))
    a = ap.parse_args()
    builds = {"before": Path(a.base).resolve(), "after": Path(a.new).resolve()}
    ms = {}  # (build, system, workload) -> [median per round]
    with tempfile.TemporaryDirectory(prefix="lazyjit-ab-") as tmp:
        for r in range(a.rounds):
            for name, checkout in (list(builds.items()) if r % 2 == 0 else list(builds.items())[::-1]):
                print(f"[ab] round {r + 1}/{a.rounds}: {name}", file=sys.stderr, flush=True)
                res = one_run(checkout, a.only, Path(tmp) / f"{name}-{r}", a.threads)
                for wk, wr in res["workloads"].items():
                    for system, sr in wr.get("systems", {}).items():
                        if sr.get("median_ms"):
                            ms.setdefault((name, system, wk), []).append(sr["median_ms"])
    workloads = sorted({wk for (_, _, wk) in ms})
    lines = [f"before: {builds['before']} · after: {builds['after']} · {a.rounds} rounds, alternating",
             "", "| workload | eager ms (before runs) | eager ms (after runs) | lazyjit before ms | lazyjit after ms"
             " | after/before | lazyjit before, per round | lazyjit after, per round |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    med = lambda k: statistics.median(ms[k]) if k in ms else None
    for wk in workloads:
        eb, ea = med(("before", "eager", wk)), med(("after", "eager", wk))
        lb, la = med(("before", "lazyjit", wk)), med(("after", "lazyjit", wk))
        f = lambda x: "–" if x is None else f"{x:.3g}"
        ratio = f"{la / lb:.2f}" if la and lb else "–"
        rounds = lambda k: "/".join(f(x) for x in ms.get(k, []))
        lines.append(f"| {wk} | {f(eb)} | {f(ea)} | {f(lb)} | {f(la)} | {ratio} | {rounds(('before', 'lazyjit', wk))} |"
                     f" {rounds(('after', 'lazyjit', wk))} |")
    text = "\n".join(lines)
    Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
