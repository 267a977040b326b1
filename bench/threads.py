"""Threads running separate models against the same work run one after another.

Each of N workers trains its own small MLP (forward, MSE loss, backward, SGD
step, loss.item()) for S steps. `threads` runs the workers in N Python threads
at once, `sequential` runs them one after another in one thread; each mode runs
in a fresh process (empty compile cache, on-disk cache off), so the compiles
counted are the mode's own.

    PYTHONPATH=python .venv/bin/python bench/threads.py [--workers 4] [--steps 200]

Prints, per mode, the wall time of all workers, each worker's last loss (the
same in both modes) and lazyjit's counters.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time


def make(seed):
    """A worker's model and data, made on the CPU before any thread starts."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    return model, torch.randn(16, 32), torch.randn(16, 32)


def worker(made, steps, losses):
    import torch

    model, x, y = made
    model, x, y = model.to("lazyjit"), x.to("lazyjit"), y.to("lazyjit")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())


def run_mode(mode, workers, steps):
    import lazyjit

    results = [[] for _ in range(workers)]
    made = [make(i) for i in range(workers)]
    start = time.perf_counter()
    if mode == "threads":
        ts = [threading.Thread(target=worker, args=(made[i], steps, results[i])) for i in range(workers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    else:
        for i in range(workers):
            worker(made[i], steps, results[i])
    seconds = time.perf_counter() - start
    m = lazyjit.metrics()
    return {"mode": mode, "seconds": round(seconds, 2), "last_losses": [r[-1] for r in results],
            **{k: m[k] for k in ("compiles", "cache_hits", "graphs_executed", "syncs")}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--worker-mode", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker_mode:
        print(json.dumps(run_mode(a.worker_mode, a.workers, a.steps)))
        return
    env = dict(os.environ, LAZYJIT_CACHE="off")
    for mode in ("sequential", "threads"):
        out = subprocess.run([sys.executable, __file__, "--worker-mode", mode, "--workers", str(a.workers),
                              "--steps", str(a.steps)], env=env, check=True, capture_output=True, text=True)
        print(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
