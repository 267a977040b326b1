"""GEMMs the bench's workloads run, three ways side by side: ATen's mm/addmm
(MKL on the x86 wheels: what eager and Inductor without freezing call), oneDNN's
inner product on plain layouts (mkldnn::_linear_pointwise: what lazyjit's
compiled programs call from a few million multiply-adds, executor/gemm.h), and
oneDNN with the weight packed once (the extra a cache of packed weights would
buy). Medians of --runs calls per shape, the three interleaved per round.

    .venv/bin/python bench/gemm.py [--runs 30] [--rounds 3] [--out bench/results/gemm]
"""
import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

# (label, M, K, N, layout): mm(a [M,K], b [K,N]); layout of b (or a) as the graph has it.
SHAPES = [
    ("d q/k/v/o proj", 256, 512, 512, "x @ W^T"),
    ("d gate/up proj", 256, 512, 1376, "x @ W^T"),
    ("d down proj", 256, 1376, 512, "x @ W^T"),
    ("e fc1 forward", 256, 1024, 4096, "x @ W^T"),
    ("e fc2 forward", 256, 4096, 1024, "x @ W^T"),
    ("e fc2 input grad", 256, 1024, 4096, "g @ W"),
    ("e fc1 weight grad", 4096, 256, 1024, "g^T @ x"),
    ("decode gate proj", 1, 256, 688, "x @ W^T"),
    ("decode lm head", 1, 256, 1000, "x @ W^T"),
]


def operands(m, k, n, layout, g):
    if layout == "x @ W^T":
        return torch.randn(m, k, generator=g), torch.randn(n, k, generator=g).t()
    if layout == "g @ W":
        return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    return torch.randn(k, m, generator=g).t(), torch.randn(k, n, generator=g)  # g^T @ x


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
    rows = []
    for label, m, k, n, layout in SHAPES:
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
                     "onednn_path": m * k * n >= (1 << 23) and layout != "g^T @ x", "max_abs_diff": err, **{f"{k2}_us": v for k2, v in med.items()}})
        print(f"{label:22s} {m}x{k}x{n} {layout:8s} mm {med['aten_mm']:9.1f} us  oneDNN {med['onednn']:9.1f} "
              f"({med['aten_mm'] / med['onednn']:.2f}x)  packed {med['onednn_packed']:9.1f} "
              f"({med['aten_mm'] / med['onednn_packed']:.2f}x)", flush=True)
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
             "(`bench/gemm.py`). lazyjit's compiled programs take the oneDNN column where "
             "'lazyjit uses oneDNN' says yes (M·K·N ≥ 2²³ and mat1 "
             "row-major: a column-major mat1, g^T @ x, stays ATen's).", "",
             "| GEMM | M×K×N | layout | ATen mm µs | oneDNN µs | packed µs | mm/oneDNN | mm/packed | lazyjit uses oneDNN | max abs diff |",
             "|---|---|---|---:|---:|---:|---:|---:|:-:|---:|"]
        for r in rows:
            L.append(f"| {r['shape']} | {r['m']}×{r['k']}×{r['n']} | {r['layout']} | {r['aten_mm_us']:.1f} | "
                     f"{r['onednn_us']:.1f} | {r['onednn_packed_us']:.1f} | {r['aten_mm_us'] / r['onednn_us']:.2f}× | "
                     f"{r['aten_mm_us'] / r['onednn_packed_us']:.2f}× | {'yes' if r['onednn_path'] else 'no'} | "
                     f"{r['max_abs_diff']:.2g} |")
        out.with_suffix(".md").write_text("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
