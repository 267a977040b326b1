"""The GPU elementwise chain of issue 42, side by side in one process on one
GPU: 10 x (y * 1.01 + 0.1).clamp_min(-1) (30 ops) on 64M float32 elements.

Columns (each a median of --reps timed runs after warm-up, CUDA events):
  eager     CUDA eager, op by op (30 kernels)
  lazyjit   torch.compile(backend="lazyjit") with LAZYJIT_TARGET=cuda: one
            LLVM-NVPTX kernel, run from the compiled program
  inductor  torch.compile (Triton), default mode
  copy      a device-to-device copy of the same bytes in and out, the bound
Also the bandwidth each reaches (bytes read + written / time) against copy's.

Run on a GPU machine: LAZYJIT_TARGET=cuda PYTHONPATH=python python bench/gpu_chain.py
(scripts/gpu_check.sh does). Prints a markdown table; --json FILE writes it too.
"""
import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("LAZYJIT_TARGET", "cuda")
os.environ.setdefault("LAZYJIT_CACHE", "off")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import torch  # noqa: E402


def chain(y):
    for _ in range(10):
        y = (y * 1.01 + 0.1).clamp_min(-1)
    return y


def time_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=64 << 20)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    import lazyjit  # noqa: F401  (registers the backend, with the CUDA target)

    x = torch.randn(a.elements, device="cuda")
    want = chain(x)
    lj = torch.compile(chain, backend="lazyjit")
    torch.testing.assert_close(lj(x), want)
    torch._dynamo.reset()
    ind = torch.compile(chain)
    torch.testing.assert_close(ind(x), want)
    dst = torch.empty_like(x)
    rows = {
        "eager": time_ms(lambda: chain(x), a.reps),
        "lazyjit": time_ms(lambda: lj(x), a.reps),
        "inductor": time_ms(lambda: ind(x), a.reps),
        "copy": time_ms(lambda: dst.copy_(x), a.reps),
    }
    nbytes = 2 * x.numel() * x.element_size()
    print(f"| {a.elements} float32, {torch.cuda.get_device_name()} | ms (median of {a.reps}) | GB/s | vs eager | vs inductor |")
    print("|---|---|---|---|---|")
    for k, ms in rows.items():
        print(f"| {k} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | {rows['eager'] / ms:.2f}x | {rows['inductor'] / ms:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"elements": a.elements, "ms": rows, "bytes": nbytes}, f, indent=1)


if __name__ == "__main__":
    main()
