"""GEMM epilogues on the CPU target: is the gemm_epilogue pass's rewrite
(lowering/gemm_epilogue.h) slower than oneDNN's GEMM plus a fused kernel?

Each case runs in its own process, pass on and pass off, medians of several
timed steps after lazyjit.wait_for_compiles():
    .venv/bin/python bench/gemm_epilogue.py
Cases: a [512,1024] x [1024,4096] Linear then relu, then erf GELU (the one the
CPU's _addmm_activation computes), and x @ w + r (a residual, [512,4096]).
Pass on: LAZYJIT_TEST_GEMM_EPILOGUE=all (every rewrite on the CPU too); off:
LAZYJIT_DISABLE_PASSES=gemm_epilogue.
"""
import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time, torch, torch.nn.functional as F, lazyjit
torch.manual_seed(0)
case = sys.argv[1]
x = torch.randn(512, 1024).to("lazyjit")
w = (torch.randn(4096, 1024) / 32).to("lazyjit")
b = torch.randn(4096).to("lazyjit")
r = torch.randn(512, 4096).to("lazyjit")
wt = (torch.randn(1024, 4096) / 32).to("lazyjit")
def step():
    if case == "relu": y = F.relu(F.linear(x, w, b))
    elif case == "gelu": y = F.gelu(F.linear(x, w, b))
    else: y = x @ wt + r
    return y.cpu()
for _ in range(3): step()
lazyjit.wait_for_compiles()
for _ in range(3): step()
ts = []
for _ in range(15):
    t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(ts) * 1e3))
"""


def run(case, on):
    env = dict(os.environ, LAZYJIT_CACHE="off")
    if on:
        env["LAZYJIT_TEST_GEMM_EPILOGUE"] = "all"
    else:
        env["LAZYJIT_DISABLE_PASSES"] = "gemm_epilogue"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.path.join(root, "python")
    out = subprocess.run([sys.executable, "-c", CHILD, case], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    reps = int(os.environ.get("LAZYJIT_BENCH_REPS", "3"))
    print("case      pass off ms   pass on ms   on/off")
    for case in ("relu", "gelu", "residual"):
        off = sorted(run(case, False) for _ in range(reps))[reps // 2]
        on = sorted(run(case, True) for _ in range(reps))[reps // 2]
        print(f"{case:9} {off:11.2f} {on:12.2f} {on / off:8.2f}")


if __name__ == "__main__":
    main()
