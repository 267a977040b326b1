"""GEMMs the bench's workloads run, three ways side by side: ATen's mm/addmm
(MKL on the x86 wheels: what eager and Inductor without freezing call), oneDNN's
inner product on plain layouts (mkldnn::_linear_pointwise: what lazyjit's
compiled programs call from a few million multiply-adds, executor/gemm.h), and
oneDNN with the weight packed once (the extra a cache of packed weights would
buy). Medians of --runs calls per shape, the three interleaved per round.

    .venv/bin/python bench/gemm.py [--runs 30] [--rounds 3] [--out bench/results/gemm]

The "lazyjit ran" column is read from what ran, not from executor/gemm.cpp's rule:
a separate process (so that lazyjit's runtime is not in the timing process) runs
each shape's GEMM on the lazyjit device, in the same layout, as a compiled program
(after lazyjit.wait_for_compiles(): the observed run is not an op-by-op one while
the program compiles) and reads how many calls lazyjit.metrics()["timings"]
counted under "onednn gemm" and "small gemm" in that run. ATen's mm has no count
of its own: "ATen mm" means a compiled program ran (graphs_executed +1, no
background or eager sync) and neither fast path counted a call.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent

# (label, M, K, N, layout): mm(a [M,K], b [K,N]); layout of b (or a) as the graph has it.
SHAPES = [
    ("d q/k/v/o proj", 256, 512, 512, "x @ W^T"),
    ("d gate/up proj", 256, 512, 1376, "x @ W^T"),
    ("d down proj", 256, 1376, 512, "x @ W^T"),
    ("e fc1 forward", 256, 1024, 4096, "x @ W^T"),
    ("e fc2 forward", 256, 4096, 1024, "x @ W^T"),
    ("e fc2 input grad", 256, 1024, 4096, "g @ W"),
    ("e fc1 weight grad", 4096, 256, 1024, "g^T @ x"),
    ("t qkv weight grad", 2304, 512, 768, "g^T @ x"),
    ("t fc weight grad", 3072, 512, 768, "g^T @ x"),
    ("t fc2 weight grad", 768, 512, 3072, "g^T @ x"),
    ("t lm_head weight grad", 50257, 512, 768, "g^T @ x"),
    ("decode gate proj", 1, 256, 688, "x @ W^T"),
    ("decode lm head", 1, 256, 1000, "x @ W^T"),
]


def operands(m, k, n, layout, g):
    if layout == "x @ W^T":
        return torch.randn(m, k, generator=g), torch.randn(n, k, generator=g).t()
    if layout == "g @ W":
        return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    return torch.randn(k, m, generator=g).t(), torch.randn(k, n, generator=g)  # g^T @ x


# Runs each shape of argv[1] (JSON: [[m, k, n, layout], ...]) on the lazyjit device and
# prints, per shape, the GEMM path its compiled program took (see the docstring).
PROBE = r"""
import json, sys, torch, lazyjit
dev = "lazyjit"

def counts():
    m = lazyjit.metrics()
    t = m["timings"]
    return {"onednn": t.get("onednn gemm", {}).get("count", 0), "small": t.get("small gemm", {}).get("count", 0),
            "graphs": m["graphs_executed"], "background_syncs": m["background_syncs"],
            "op_by_op_syncs": m["op_by_op_syncs"], "step_ops": m["step_ops"]}

g = torch.Generator().manual_seed(0)
out = []
for m, k, n, layout in json.loads(sys.argv[1]):
    if layout == "x @ W^T":
        a, b = torch.randn(m, k, generator=g).to(dev), torch.randn(n, k, generator=g).to(dev).t()
    elif layout == "g @ W":
        a, b = torch.randn(m, k, generator=g).to(dev), torch.randn(k, n, generator=g).to(dev)
    else:  # g^T @ x
        a, b = torch.randn(k, m, generator=g).to(dev).t(), torch.randn(k, n, generator=g).to(dev)
    lazyjit.sync()
    (a @ b).cpu()                # compiles (in the background: this run is op by op)
    lazyjit.wait_for_compiles()
    c0 = counts()
    y = (a @ b).cpu()            # the observed run: the compiled program
    c1 = counts()
    d = {key: c1[key] - c0[key] for key in c0}
    compiled = d["graphs"] >= 1 and d["background_syncs"] == 0 and d["op_by_op_syncs"] == 0 and d["step_ops"] == 0
    path = ("oneDNN" if d["onednn"] else "small GEMM" if d["small"] else "ATen mm" if compiled
            else "not compiled")
    err = (y - a.cpu() @ b.cpu()).abs().max().item()
    out.append({"path": path, "compiled": compiled, "counts": d, "max_abs_diff_vs_mm": err})
print(json.dumps(out))
"""


def lazyjit_paths(shapes):
    """The GEMM path lazyjit's compiled program took for each (m, k, n, layout), observed."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), LAZYJIT_CACHE="off")
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(shapes)], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"lazyjit probe failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def time_us(fn, runs):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="write <out>.json and <out>.md")
    a = ap.parse_args()
    lp = torch.ops.mkldnn._linear_pointwise
    g = torch.Generator().manual_seed(0)
    ran = lazyjit_paths([[m, k, n, layout] for _, m, k, n, layout in SHAPES])
    rows = []
    for (label, m, k, n, layout), lz in zip(SHAPES, ran):
        x, b = operands(m, k, n, layout, g)
        w = b.t()  # [n, k], a view
        packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), m)
        ways = {"aten_mm": lambda: torch.mm(x, b),
                "onednn": lambda: lp(x, w, None, "none", [], None),
                "onednn_packed": lambda: lp(x, packed, None, "none", [], None)}
        err = (lp(x, w, None, "none", [], None) - torch.mm(x, b)).abs().max().item()
        samples = {k2: [] for k2 in ways}
        for r in range(a.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for way in order:
                samples[way].append(time_us(ways[way], a.runs))
        med = {k2: statistics.median(v) for k2, v in samples.items()}
        rows.append({"shape": label, "m": m, "k": k, "n": n, "layout": layout, "macs": m * k * n,
                     "lazyjit_gemm": lz["path"], "onednn_path": lz["path"] == "oneDNN", "lazyjit_counts": lz["counts"],
                     "lazyjit_max_abs_diff": lz["max_abs_diff_vs_mm"], "max_abs_diff": err, **{f"{k2}_us": v for k2, v in med.items()}})
        print(f"{label:22s} {m}x{k}x{n} {layout:8s} mm {med['aten_mm']:9.1f} us  oneDNN {med['onednn']:9.1f} "
              f"({med['aten_mm'] / med['onednn']:.2f}x)  packed {med['onednn_packed']:9.1f} "
              f"({med['aten_mm'] / med['onednn_packed']:.2f}x)  lazyjit ran {lz['path']}", flush=True)
    if a.out:
        out = Path(a.out)
        cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                    if l.startswith("model name")), "?")
        flags = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")), "") + " "
        isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f" {f} " in flags]
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu": cpu, "isa": isa, "threads": torch.get_num_threads(),
                "torch": torch.__version__, "load_1min": os.getloadavg()[0], "runs": a.runs, "rounds": a.rounds}
        out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        L = [f"# GEMMs: ATen's mm (MKL) vs oneDNN ({meta['date']})", "",
             f"CPU {cpu} (ISA {', '.join(isa) or 'none of avx2, avx512f'}), {meta['threads']} threads, torch {meta['torch']}, load {meta['load_1min']:.2f}; "
             f"median µs of {a.runs} calls, median over {a.rounds} interleaved rounds "
             "(`bench/gemm.py`). 'lazyjit ran' is observed, not the rule copied: the path the GEMM "
             "took when lazyjit ran it as a compiled program, read from `lazyjit.metrics()[\"timings\"]` "
             "(`onednn gemm`, `small gemm` calls counted in that run); ATen's mm has no count of its own: "
             "'ATen mm' = a compiled program ran and neither fast path counted a call.", "",
             "| GEMM | M×K×N | layout | ATen mm µs | oneDNN µs | packed µs | mm/oneDNN | mm/packed | lazyjit ran | max abs diff |",
             "|---|---|---|---:|---:|---:|---:|---:|:-:|---:|"]
        for r in rows:
            L.append(f"| {r['shape']} | {r['m']}×{r['k']}×{r['n']} | {r['layout']} | {r['aten_mm_us']:.1f} | "
                     f"{r['onednn_us']:.1f} | {r['onednn_packed_us']:.1f} | {r['aten_mm_us'] / r['onednn_us']:.2f}× | "
                     f"{r['aten_mm_us'] / r['onednn_packed_us']:.2f}× | {r['lazyjit_gemm']} | "
                     f"{r['max_abs_diff']:.2g} |")
        out.with_suffix(".md").write_text("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
