"""`lazyjit-cache ls` on a 1,000-entry cache (issue 11's target: under 100 ms, median).

Builds the cache synthetically: one real entry (written by an MLP run with
LAZYJIT_CACHE=on) copied 1,000 times under different keys. Keys are only file
names, so nothing inside the copies changes; ls reads each file's header and
manifest as it would a real cache's. Writes bench/results/cache_tool.md.

  python bench/cache_tool_ls.py [--tool build/lazyjit-cache] [--runs 10]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
import torch, lazyjit
m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).to("lazyjit")
with torch.no_grad():
    m(torch.randn(8, 16).to("lazyjit")).cpu()
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "lazyjit-cache"))
    ap.add_argument("--python-dir", default=os.path.join(ROOT, "python"))
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "cache_tool.md"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        seed = os.path.join(tmp, "seed")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
        env.update(PYTHONPATH=args.python_dir, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=seed)
        subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True)
        src_dir = os.path.join(seed, "v1", "entries")
        src = os.path.join(src_dir, sorted(f for f in os.listdir(src_dir) if f.endswith(".ljc"))[0])

        cache = os.path.join(tmp, "big")
        entries = os.path.join(cache, "v1", "entries")
        os.makedirs(entries, mode=0o700)
        for sub in ("locks", "tmp", "quarantine"):
            os.makedirs(os.path.join(cache, "v1", sub), mode=0o700)
        for i in range(args.entries):
            key = f"{i:032x}-{i * 2654435761 % 2**64:016x}-3110f6bc"
            shutil.copyfile(src, os.path.join(entries, key + ".ljc"))
        entry_bytes = os.path.getsize(src)

        cmd = [args.tool, "ls", "--dir", cache]
        subprocess.run(cmd, check=True, capture_output=True)  # warm the page cache
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            times.append((time.perf_counter() - t0) * 1000)
        assert len(out.splitlines()) == args.entries + 1
        json_times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run(cmd + ["--json"], check=True, capture_output=True)
            json_times.append((time.perf_counter() - t0) * 1000)

    med, jmed = statistics.median(times), statistics.median(json_times)
    verdict = "meets" if med < 100 else "MISSES"
    text = f"""# lazyjit-cache ls on a {args.entries}-entry cache

`python bench/cache_tool_ls.py` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, warm page cache;
each entry a copy of one real MLP program entry, {entry_bytes} bytes, under its own key).

| command | median of {args.runs} | min | max |
|---|---|---|---|
| `lazyjit-cache ls` | {med:.1f} ms | {min(times):.1f} ms | {max(times):.1f} ms |
| `lazyjit-cache ls --json` | {jmed:.1f} ms | {min(json_times):.1f} ms | {max(json_times):.1f} ms |

Target (issue 11): under 100 ms for `ls` — {verdict} it.
"""
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
