"""lazyjit demo: an MLP block (linear, GELU, residual, layer norm) run in eager
PyTorch and on the lazyjit device for several steps.

Step 1 traces, compiles and runs; later steps trace the same graph, hit the
compile cache and run the cached program.
"""
import time

import torch

import lazyjit


class MLPBlock(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x), approximate="tanh")
        return self.norm(x + self.fc2(h))


def main(steps: int = 5, batch: int = 256, width: int = 256) -> None:
    torch.manual_seed(0)
    eager = MLPBlock(width)
    lazy = MLPBlock(width)
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to("lazyjit")
    inputs = [torch.randn(batch, width) for _ in range(steps)]
    lazyjit.reset_metrics()
    print(f"MLP block, batch {batch}, width {width}")
    print(f"{'step':>4} {'eager ms':>9} {'lazyjit ms':>10} {'max |diff|':>11} {'match':>5} "
          f"{'compiles':>8} {'disk loads':>10} {'cache hits':>10}")
    all_match = True
    for step, x in enumerate(inputs, 1):
        before = lazyjit.metrics()
        t0 = time.perf_counter()
        with torch.no_grad():
            want = eager(x)
        t1 = time.perf_counter()
        with torch.no_grad():
            got = lazy(x.to("lazyjit")).cpu()  # .cpu() is the sync point
        t2 = time.perf_counter()
        after = lazyjit.metrics()
        diff = (got - want).abs().max().item()
        match = torch.allclose(got, want, rtol=1e-4, atol=1e-5)
        all_match &= match
        print(f"{step:>4} {1e3 * (t1 - t0):>9.2f} {1e3 * (t2 - t1):>10.2f} {diff:>11.2e} "
              f"{'yes' if match else 'NO':>5} {after['compiles'] - before['compiles']:>8} "
              f"{after['disk_hits'] - before['disk_hits']:>10} {after['cache_hits'] - before['cache_hits']:>10}")
    m = lazyjit.metrics()
    print(f"lazyjit: {m['ops_traced']} ops traced, {m['syncs']} syncs; {m['compiles']} compiles "
          f"({m['llvm_compiles']} LLVM kernels, {m['compile_ms']:.1f} ms), {m['disk_hits']} disk loads, "
          f"{m['cache_hits']} cache hits")
    print(("results match eager" if all_match else "RESULTS DIFFER FROM EAGER")
          + " (lazyjit.metrics_report() has every counter, sync site and timing)")
    if not all_match:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
