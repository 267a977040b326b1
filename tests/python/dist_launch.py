"""Runs a worker script on WORLD ranks with torchrun on the loopback (Gloo) and
returns what each rank wrote to OUT/rank<r>.json: the launcher the distributed
tests share (test_distributed.py, test_distributed_collectives.py)."""
import json
import os
import socket
import subprocess
import sys

from conftest import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, out, parts=(), env_extra=None, timeout=300):
    """Each rank runs `worker` (a file in tests/python) with `out` and `parts` as
    arguments; a rank that wrote nothing or reported an error fails the caller,
    as does a run longer than `timeout` seconds."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LAZYJIT_CACHE="off",
               OMP_NUM_THREADS="1", LAZYJIT_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               TORCH_CPP_LOG_LEVEL="ERROR")
    env.pop("LAZYJIT_TEST_DIST_BACKEND", None)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", os.path.join(HERE, worker),
           str(out), *parts]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    results = []
    for r in range(WORLD):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote nothing\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
        results.append(json.loads(path.read_text()))
    for r in results:
        assert "error" not in r, r["error"]
    assert p.returncode == 0, p.stderr[-6000:]
    return results
