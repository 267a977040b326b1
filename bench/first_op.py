"""The first call of common ops in a fresh process: eager vs the lazyjit device.

    PYTHONPATH=python .venv/bin/python bench/first_op.py [--runs 3] [--only bmm,cumsum]

lazyjit records an op by running it on meta tensors for its shapes, and most of
PyTorch's meta kernels are Python: the first one a process runs imports sympy or
torch._dynamo (0.5-2.3 s). This measures, per op, the first call (the op's line and
its read-back with .cpu()) in a fresh process for each of three systems, alternating
them over --runs rounds (medians), and whether the process imported sympy or
torch._dynamo by then. lazyjit runs with LAZYJIT_CACHE=off (no disk hit), twice:

  first step    the default (LAZYJIT_BACKGROUND_COMPILE on): what a user sees. The
                graph misses every cache, so it runs op by op through ATen while its
                program compiles on the worker thread: the compile is NOT in this time.
  cold compile  LAZYJIT_BACKGROUND_COMPILE=off: the sync waits for the compile, so
                record + compile + run are all in this time.

The counters (compiles, LLVM compiles, compile ms, graphs run op by op while
compiling) are read from lazyjit.metrics() after lazyjit.wait_for_compiles(), so
that a compile still running on the worker thread is counted, not raced.
Writes bench/results/first_op.{json,md}; the markdown keeps what follows a
`<!-- notes -->` line of the file it replaces.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
if str(REPO / "bench") not in sys.path:  # loaded by path (tests/python/test_bench_first_op.py)
    sys.path.insert(0, str(REPO / "bench"))
from host import build_stamp, loadavg, run_built  # noqa: E402
NOTES_MARK = "<!-- notes -->"

# name -> the op's line, on x [8, 16], q [1, 2, 4, 8], i (int64 [2]), t (int64 targets [8])
OPS = {
    "mul": "x * 2",
    "softmax": "torch.softmax(x, -1)",
    "matmul (bmm)": "q @ q.transpose(-1, -2)",
    "scaled_dot_product_attention": "F.scaled_dot_product_attention(q, q, q, is_causal=True)",
    "masked_fill": "x.masked_fill(x > 0, -1e9)",
    "add of an expanded tensor": "x[:1].expand(8, 16) + x",
    "transposed mul": "x.t() * x.t()",
    "cumsum": "x.cumsum(-1)",
    "argmax": "x.argmax(-1)",
    "topk": "x.topk(3, -1).values",
    "sort": "x.sort(-1).values",
    "var_mean": "torch.var_mean(x, -1)[0]",
    "cross_entropy": "F.cross_entropy(x, t)",
    "index (x[i])": "x[i]",
    "gather": "torch.gather(x, 1, t[:, None].clamp(max=15))",
    "amax": "x.amax(-1)",
    "any": "(x > 0).any()",
    "norm": "x.norm(dim=-1)",
    "bitwise and of masks": "(x > 0) & (x < 1)",
    "flip": "x.flip(0)",
    "logsumexp": "torch.logsumexp(x, -1)",
    "arange": "torch.arange(8, device=x.device)",
}

# system -> (device, LAZYJIT_BACKGROUND_COMPILE); "cpu" is eager
SYSTEMS = {"cpu": ("cpu", None), "lazyjit": ("lazyjit", "on"), "lazyjit_cold": ("lazyjit", "off")}

# The counters below are read after lazyjit.wait_for_compiles(): with the background
# compile on, the first step returns before its program is compiled.
WORKER = r"""
import json, sys, time, torch
import torch.nn.functional as F
dev, line = sys.argv[1], sys.argv[2]
if dev == "lazyjit":
    import lazyjit
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 16, generator=g).to(dev)
q = torch.randn(1, 2, 4, 8, generator=g).to(dev)
i = torch.tensor([1, 3]).to(dev)
t = torch.randint(0, 16, (8,), generator=g).to(dev)
t0 = time.perf_counter()
out = eval(line).cpu()
ms = (time.perf_counter() - t0) * 1e3
r = {"ms": ms, "sympy": "sympy" in sys.modules, "dynamo": "torch._dynamo" in sys.modules}
if dev == "lazyjit":
    r["waited_for"] = lazyjit.wait_for_compiles()
    m = lazyjit.metrics()
    r.update({k: m[k] for k in ("compiles", "llvm_compiles", "background_syncs", "syncs", "compile_ms")})
print(json.dumps(r))
"""


def one(system: str, line: str) -> dict:
    """One fresh process: `system` is a key of SYSTEMS (or "lazyjit"/"cpu")."""
    dev, background = SYSTEMS[system]
    env = {k: v for k, v in os.environ.items() if k != "LAZYJIT_BACKGROUND_COMPILE"}
    env.update(PYTHONPATH=str(REPO / "python"), LAZYJIT_CACHE="off")
    if background:
        env["LAZYJIT_BACKGROUND_COMPILE"] = background
    p, stamp = run_built([sys.executable, "-c", WORKER, dev, line], env=env, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{system} {line!r}: {p.stderr[-2000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]), build=stamp)


def _counts(xs: list) -> str:
    """A counter's value over rounds: one number when every round agrees."""
    xs = sorted(set(xs))
    return "–" if not xs else str(xs[0]) if len(xs) == 1 else "/".join(map(str, xs))


def render(doc: dict, notes: str = "") -> str:
    lines = ["# First call of an op in a fresh process", "",
             f"- Date: {doc['date']}; {doc['runs']} rounds, each system in a fresh process per op, "
             "alternating; medians.",
             f"- Host: {doc['host']}. Load average (/proc/loadavg, 1/5/15 min) at start {doc['load_start']}, "
             f"at end {doc['load_end']}. lazyjit library (build) mtimes seen: {', '.join(doc['builds'])}.",
             "- First call = the op's line and `.cpu()`, timed (`x` [8, 16], `q` [1, 2, 4, 8] float32; "
             "the inputs' copies to the device are in the same graph); lazyjit with LAZYJIT_CACHE=off.",
             "- **lazyjit first step**: the default, LAZYJIT_BACKGROUND_COMPILE on: what a user sees. The "
             "graph misses every cache and runs op by op through ATen while its program compiles on the "
             "worker thread; the compile is *not* in this time.",
             "- **lazyjit cold compile**: LAZYJIT_BACKGROUND_COMPILE=off in that process: the sync waits "
             "for the compile; record + compile + run.",
             "- Counters from `lazyjit.metrics()` after `lazyjit.wait_for_compiles()` (a compile still "
             "running on the worker is counted, not raced): *llvm compiles* (kernels generated; "
             "first-step process / cold-compile process when they differ), *compile ms* (the cold "
             "process's `compile_ms`), *op by op* (`background_syncs` of the first-step process: graphs "
             "run op by op while their program compiled). Several values over the rounds are shown "
             "`a/b`. imported = what the lazyjit processes had imported by then (sympy, torch._dynamo): "
             "what the Python meta kernels cost once.",
             "", "| op | line | eager ms | lazyjit first step ms | lazyjit cold compile ms | compile ms | "
             "llvm compiles | op by op | lazyjit imported |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, r in doc["rows"].items():
        llvm = _counts(r["llvm_compiles"]["lazyjit"])
        if r["llvm_compiles"]["lazyjit"] != r["llvm_compiles"]["lazyjit_cold"]:
            llvm += " / " + _counts(r["llvm_compiles"]["lazyjit_cold"])
        lines.append(f"| {name} | `{r['line']}` | {r['eager_ms']:.1f} | {r['first_step_ms']:.1f} | "
                     f"{r['cold_compile_ms']:.1f} | {r['compile_ms']:.1f} | {llvm} | "
                     f"{_counts(r['background_syncs'])} | {', '.join(r['lazyjit_imports']) or '–'} |")
    text = "\n".join(lines) + "\n"
    return text + ("\n" + NOTES_MARK + "\n" + notes if notes else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="comma-separated op names (see OPS)")
    ap.add_argument("--out", default=str(RESULTS / "first_op"))
    ap.add_argument("--host", default="not described (--host)",
                    help="how the host was used during the run, e.g. shared with builds (written to the header)")
    args = ap.parse_args()
    names = [n for n in OPS if not args.only or n in args.only.split(",")]
    load_start = loadavg()
    rows = {}
    for name in names:
        got = {s: [] for s in SYSTEMS}
        imports = set()
        for _ in range(args.runs):
            for system in SYSTEMS:
                got[system].append(one(system, OPS[name]))
                if system != "cpu":
                    imports |= {k for k in ("sympy", "dynamo") if got[system][-1][k]}
        med = lambda s, k="ms": statistics.median(r[k] for r in got[s])  # noqa: E731
        rows[name] = {"line": OPS[name], "eager_ms": med("cpu"), "first_step_ms": med("lazyjit"),
                      "cold_compile_ms": med("lazyjit_cold"), "compile_ms": med("lazyjit_cold", "compile_ms"),
                      "llvm_compiles": {s: [r["llvm_compiles"] for r in got[s]] for s in ("lazyjit", "lazyjit_cold")},
                      "background_syncs": [r["background_syncs"] for r in got["lazyjit"]],
                      "lazyjit_imports": [k for k in ("sympy", "dynamo") if k in imports],
                      "samples": got}
        r = rows[name]
        print(f"{name:32s} eager {r['eager_ms']:8.1f} ms  first step {r['first_step_ms']:8.1f} ms  "
              f"cold compile {r['cold_compile_ms']:8.1f} ms  llvm {_counts(r['llvm_compiles']['lazyjit'])}  "
              f"imports {','.join(r['lazyjit_imports']) or '-'}", flush=True)
    builds = sorted({r["build"] for g in rows.values() for rs in g["samples"].values() for r in rs
                     if "build" in r} - {"?"}) or [build_stamp()]
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "runs": args.runs,
           "host": args.host, "load_start": load_start, "load_end": loadavg(), "builds": builds, "rows": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    md = out.with_suffix(".md")
    old = md.read_text() if md.exists() else ""
    notes = old.split(NOTES_MARK + "\n", 1)[1] if NOTES_MARK + "\n" in old else ""
    md.write_text(render(doc, notes))


if __name__ == "__main__":
    main()
