"""Llama's rotary embedding (apply_rotary_pos_emb on q and k: q * cos +
rotate_half(q) * sin, rotate_half's torch.cat included) on the lazyjit device,
per call with its sync, for one build or two side by side.

    .venv/bin/python bench/rotary.py [--base /path/to/other/checkout] [--rounds 5]

Each measurement is its own process (median of 300 calls after 2 s of warm-up
calls, by which time any background compile has finished); with --base, the two builds alternate per round, and the table gives each
build's median over rounds. q and k are [1, 8, S, 64] views transposed from
[1, S, 8, 64], as transformers' attention makes them; S = 256 (the bench's d
layer) and S = 1 (a decode step).
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CALL = r"""
import sys, time, statistics, torch, lazyjit
torch.manual_seed(0)
S = int(sys.argv[1])
def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)
def f(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
q = torch.randn(1, S, 8, 64).to("lazyjit").transpose(1, 2)
k = torch.randn(1, S, 8, 64).to("lazyjit").transpose(1, 2)
cos, sin = torch.randn(1, S, 64).to("lazyjit"), torch.randn(1, S, 64).to("lazyjit")
end = time.perf_counter() + 2  # warm-up: compiles, and any background compile, finish
while time.perf_counter() < end:
    a, b = f(q, k, cos, sin); lazyjit.sync()
ts = []
for _ in range(300):
    t = time.perf_counter(); a, b = f(q, k, cos, sin); lazyjit.sync(); ts.append(time.perf_counter() - t)
print(statistics.median(ts) * 1e3)
"""


def one(checkout: Path, seq: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(checkout / "python"))
    out = subprocess.run([sys.executable, "-c", CALL, str(seq)], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, default=None, help="another checkout with a built lazyjit")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    builds = [("before", a.base), ("after", REPO)] if a.base else [("this build", REPO)]
    rows = []
    for seq in (256, 1):
        ms = {name: [] for name, _ in builds}
        for _ in range(a.rounds):
            for name, path in builds:
                ms[name].append(one(path, seq))
        rows.append((seq, {n: statistics.median(v) for n, v in ms.items()}, ms))
    names = [n for n, _ in builds]
    print("| S | " + " | ".join(f"{n} ms" for n in names) + (" | after/before |" if a.base else " |"))
    print("|---:|" + "---:|" * (len(names) + (1 if a.base else 0)))
    for seq, med, ms in rows:
        cells = " | ".join(f"{med[n]:.3f} ({'/'.join(f'{x:.3f}' for x in ms[n])})" for n in names)
        print(f"| {seq} | {cells}" + (f" | {med['after'] / med['before']:.2f} |" if a.base else " |"))


if __name__ == "__main__":
    main()
