"""FSDP2 (fully_shard per decoder layer and at the root, AdamW) on a small transformers
Llama, two ranks over Gloo on the loopback (tests/python/fsdp2_worker.py under torchrun):
each rank's lazyjit run against the same FSDP2 run on CPU tensors in that rank's own
process, never against the other rank.

Tolerances, from the runs' float32 arithmetic. The step-1 gradients of the two runs
differ by at most 3.2e-8 (values up to 0.085: the order of sums in fused kernels and
reductions); the losses, by at most 1.9e-6 of about 4.9 over the 5 steps (4e-7 relative;
rtol 1e-5 leaves a margin). AdamW's first update is lr * g / (|g| + eps), about lr * sign(g),
for any |g| far above eps = 1e-8: an element whose gradient is rounding noise around 0
(|g| < 1e-7) moves by lr one way on the CPU and the other on lazyjit, and its later
gradients differ by up to 2e-5. So the parameters are held to atol lr / 10 = 1e-4 for
all but a few elements (measured: 2 of 90,432), which may differ by up to the 2 * lr
per step two AdamW runs can drift apart (measured: 4.2e-3, one embedding element). A
collective that reduced the wrong values would move whole shards. Adam's update hides
the gradients' scale (an average reduced as a sum moves the parameters alike), so the
optimizer's first moments, which carry it, are compared too: atol 1e-5 (measured
2.1e-6; a sum instead of an average doubles values of up to 1.5e-2).
"""
import os
import socket
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import fsdp2_worker  # noqa: E402

STEPS = 5


def _run(out, *args, env=None):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LAZYJIT_CACHE="off", OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR", **(env or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={port}", os.path.join(HERE, "fsdp2_worker.py"), str(out),
           "--steps", str(STEPS), *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-6000:]
    return [{d: torch.load(out / f"rank{r}_{d}.pt") for d in ("cpu", "lazyjit")} for r in range(2)]


def _assert_rank_equals_its_cpu_run(rank, cpu, lazy):
    lr = fsdp2_worker.LR
    torch.testing.assert_close(lazy["losses"], cpu["losses"], rtol=1e-5, atol=0,
                               msg=lambda m: f"rank {rank}'s losses: {m}")
    assert cpu["params"].keys() == lazy["params"].keys()
    far, total = [], 0
    for name, want in cpu["params"].items():
        diff = (lazy["params"][name] - want).abs()
        total += diff.numel()
        far += [(name, d) for d in diff[diff > lr / 10].tolist()]
        assert diff.max() <= 2 * lr * STEPS, f"rank {rank}: {name} differs by {diff.max():.3g}"
        torch.testing.assert_close(lazy["exp_avg"][name], cpu["exp_avg"][name], rtol=0, atol=1e-5,
                                   msg=lambda m: f"rank {rank}'s AdamW exp_avg of {name}: {m}")
    assert len(far) <= total // 10000, f"rank {rank}: {len(far)} of {total} parameters differ by over lr/10: {far[:8]}"


def _steps(counters):
    """Each step's counters: the differences between the totals after it and before it."""
    before = dict.fromkeys(counters[0], 0)
    out = []
    for c in counters:
        out.append({k: c[k] - before[k] for k in c})
        before = c
    return out


def test_fsdp2_llama_matches_cpu_on_each_rank_and_warm_steps_compile_nothing(tmp_path):
    # A new graph's compile in the foreground: a compile started in the background
    # at steps 1 and 2 finishes in whatever step is running then (an MLP's finished
    # at step 6 on the 2-core machine), where it would count as that step's.
    ranks = _run(tmp_path, env={"LAZYJIT_BACKGROUND_COMPILE": "off"})
    for rank, run in enumerate(ranks):
        _assert_rank_equals_its_cpu_run(rank, run["cpu"], run["lazyjit"])
        steps = _steps(run["lazyjit"]["counters"])
        # Step 1 and step 2 (AdamW's state exists from step 1 on) are new graphs.
        assert [s["cache_misses"] for s in steps] == [1, 1, 0, 0, 0], steps
        for i, s in enumerate(steps[3:], start=4):
            assert s["compiles"] == 0 and s["llvm_compiles"] == 0, f"rank {rank} compiled at step {i}: {s}"
        for i, s in enumerate(steps[2:], start=3):
            # One sync (the loss read back) and one program: forward, FSDP2's
            # all-gathers and reduce-scatters, backward and AdamW.
            assert s["syncs"] == 1 and s["graphs_executed"] == 1 and s["cache_hits"] == 1, (rank, i, s)


def test_fsdp2_llama_under_torch_compile_matches_cpu(tmp_path):
    """torch.compile(backend="lazyjit") of the FSDP2 model: FSDP2's hooks split the
    forward into graphs, one of which makes Llama's causal mask from factories alone."""
    ranks = _run(tmp_path, "--compile", env={"LAZYJIT_BACKGROUND_COMPILE": "off"})
    for rank, run in enumerate(ranks):
        _assert_rank_equals_its_cpu_run(rank, run["cpu"], run["lazyjit"])
        steps = _steps(run["lazyjit"]["counters"])
        assert all(s["compiles"] == 0 for s in steps[3:]), steps
