"""The first call of common ops in a fresh process: eager vs the lazyjit device.

    PYTHONPATH=python .venv/bin/python bench/first_op.py [--runs 3] [--only bmm,cumsum]

lazyjit records an op by running it on meta tensors for its shapes, and most of
PyTorch's meta kernels are Python: the first one a process runs imports sympy or
torch._dynamo (0.5-2.3 s). This measures, per op, the first call (record, compile,
run, read back with .cpu()) in a fresh process for each system, alternating the
systems over --runs rounds (medians), and whether the process imported sympy or
torch._dynamo by then. lazyjit runs with LAZYJIT_CACHE=off (a cold compile is part
of its first call). Writes bench/results/first_op.{json,md}.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"

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

WORKER = r"""
import json, sys, time, torch
import torch.nn.functional as F
dev, line = sys.argv[1], sys.argv[2]
if dev == "lazyjit":
    import lazyjit  # noqa: F401
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 16, generator=g).to(dev)
q = torch.randn(1, 2, 4, 8, generator=g).to(dev)
i = torch.tensor([1, 3]).to(dev)
t = torch.randint(0, 16, (8,), generator=g).to(dev)
t0 = time.perf_counter()
out = eval(line).cpu()
ms = (time.perf_counter() - t0) * 1e3
print(json.dumps({"ms": ms, "sympy": "sympy" in sys.modules, "dynamo": "torch._dynamo" in sys.modules}))
"""


def one(system: str, line: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), LAZYJIT_CACHE="off")
    p = subprocess.run([sys.executable, "-c", WORKER, system, line], env=env, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{system} {line!r}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="comma-separated op names (see OPS)")
    ap.add_argument("--out", default=str(RESULTS / "first_op"))
    args = ap.parse_args()
    names = [n for n in OPS if not args.only or n in args.only.split(",")]
    rows = {}
    for name in names:
        got = {"cpu": [], "lazyjit": []}
        imports = {}
        for _ in range(args.runs):
            for system in ("cpu", "lazyjit"):
                r = one(system, OPS[name])
                got[system].append(r["ms"])
                imports[system] = [k for k in ("sympy", "dynamo") if r[k]]
        rows[name] = {"line": OPS[name], "eager_ms": statistics.median(got["cpu"]),
                      "lazyjit_ms": statistics.median(got["lazyjit"]), "lazyjit_imports": imports["lazyjit"],
                      "eager_imports": imports["cpu"]}
        print(f"{name:32s} eager {rows[name]['eager_ms']:8.1f} ms  lazyjit {rows[name]['lazyjit_ms']:8.1f} ms  "
              f"imports {','.join(imports['lazyjit']) or '-'}", flush=True)
    load = os.getloadavg()[0]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "runs": args.runs, "load": load}, indent=1))
    lines = ["# First call of an op in a fresh process", "",
             f"- Date: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}; "
             f"{args.runs} rounds, each system in a fresh process per op, alternating; medians; "
             f"load average at the end {load:.2f}",
             "- First call = the op's line and `.cpu()` (lazyjit: record, cold compile, run; "
             "LAZYJIT_CACHE=off); `x` [8, 16], `q` [1, 2, 4, 8] float32; imports = what the lazyjit "
             "process had imported by then (sympy, torch._dynamo): what the Python meta kernels cost once.",
             "", "| op | line | eager ms | lazyjit ms | lazyjit imported |", "|---|---|---:|---:|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | `{r['line']}` | {r['eager_ms']:.1f} | {r['lazyjit_ms']:.1f} | "
                     f"{', '.join(r['lazyjit_imports']) or '–'} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
