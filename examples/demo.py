"""lazyjit demo: an MLP block (linear, GELU, residual, layer norm) run in eager
PyTorch and on the lazyjit device for several steps.

Step 1 records the block and, its graph being new, runs it op by op through
ATen while its program compiles on a worker thread (no step waits for LLVM).
The demo then waits for that compile (lazyjit.wait_for_compiles()), outside
the timed region, so that from step 2 on each step runs the compiled program:
step 2 takes it from the compile, later steps find it in the compile cache. A
second run of the demo loads the program from the on-disk cache at step 1.
The table says how each step ran, and the last line compares the steps that ran
the program with eager.
"""
import statistics
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


# How a step's sync ran (lazyjit.last_sync(), a key of metrics()["syncs_by_how"]), in the table's words.
RAN_AS = {
    "op_by_op_while_compiling": "op by op (compiling)",
    "compiled_in_background": "program (just compiled)",
    "cache_hit": "program (cache hit)",
    "loaded_from_disk": "program (disk load)",
    "loaded_from_remote": "program (remote load)",
    "compiled": "program (compiled now)",
    "bound_to_new_sizes": "program (bound to sizes)",
    "op_by_op_past_recompile_limit": "op by op (recompile limit)",
}


def main(steps: int = 8, batch: int = 256, width: int = 256) -> None:
    torch.manual_seed(0)
    eager = MLPBlock(width)
    lazy = MLPBlock(width)
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to("lazyjit")
    inputs = [torch.randn(batch, width) for _ in range(steps)]
    lazyjit.reset_metrics()
    print(f"MLP block, batch {batch}, width {width}")
    print(f"{'step':>4} {'eager ms':>9} {'lazyjit ms':>10} {'max |diff|':>11} {'match':>5}  {'lazyjit ran':<24}"
          f"{'compiles':>8} {'cache hits':>10}")
    all_match = True
    program_ms, eager_ms = [], []
    for step, x in enumerate(inputs, 1):
        before = lazyjit.metrics()
        t0 = time.perf_counter()
        with torch.no_grad():
            want = eager(x)
        t1 = time.perf_counter()
        with torch.no_grad():
            got = lazy(x.to("lazyjit")).cpu()  # .cpu() is the sync point
        t2 = time.perf_counter()
        lazyjit.wait_for_compiles()  # untimed: a compile started by this step finishes here
        after = lazyjit.metrics()
        ran = RAN_AS.get(lazyjit.last_sync(), lazyjit.last_sync())
        diff = (got - want).abs().max().item()
        match = torch.allclose(got, want, rtol=1e-4, atol=1e-5)
        all_match &= match
        if ran.startswith("program (cache hit)"):
            program_ms.append(1e3 * (t2 - t1))
            eager_ms.append(1e3 * (t1 - t0))
        print(f"{step:>4} {1e3 * (t1 - t0):>9.2f} {1e3 * (t2 - t1):>10.2f} {diff:>11.2e} "
              f"{'yes' if match else 'NO':>5}  {ran:<24}{after['compiles'] - before['compiles']:>8} "
              f"{after['cache_hits'] - before['cache_hits']:>10}")
    m = lazyjit.metrics()
    print("lazyjit syncs by how they ran: "
          + ", ".join(f"{k} {v}" for k, v in m["syncs_by_how"].items() if v))
    print(f"lazyjit: {m['ops_traced']} ops traced, {m['syncs']} syncs; {m['compiles']} compiles "
          f"({m['llvm_compiles']} LLVM kernels, {m['compile_ms']:.1f} ms), {m['disk_hits']} disk loads, "
          f"{m['cache_hits']} cache hits")
    if program_ms:
        e, p = statistics.median(eager_ms), statistics.median(program_ms)
        print(f"steps served from the cache: median {p:.2f} ms on lazyjit, {e:.2f} ms eager "
              f"(eager / lazyjit {e / p:.2f}x; one process, both timed in it, {len(program_ms)} steps)")
    print(("results match eager" if all_match else "RESULTS DIFFER FROM EAGER")
          + " (lazyjit.metrics_report() has every counter, sync site and timing)")
    if not all_match:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
