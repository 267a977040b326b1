"""A rank's side of the distributed tests (tests/python/dist_launch.py starts
them): runs the named parts of a worker module, writes what they recorded to
OUTDIR/rank<r>.json, and leaves without interpreter shutdown."""
import json
import os
import sys
import traceback

import torch.distributed as dist


def run_rank(namespace, outdir, parts, backend="cpu:gloo,lazyjit:lazyjit", finish=None, timeout=None):
    """Calls namespace["part_<p>"](rank, world, out) for each part, then `finish()`
    when given; `out` goes to the rank's file even when a part raises. `timeout`:
    the process group's (a timedelta; c10d's default, 30 minutes, when None)."""
    if timeout is None:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "world": world}
    try:
        for p in parts:
            namespace[f"part_{p}"](rank, world, out)
        if finish is not None:
            finish()
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
        raise
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(out, f, indent=1, default=str)
    dist.destroy_process_group()
    # No interpreter shutdown: a Gloo worker thread may still be dropping the last
    # reference to a finished work (a barrier holds the works before it; here the
    # eager CPU all_reduces the comparisons made) whose tensors are Python objects.
    # If that happens while Python finalizes, the thread dies taking the GIL and the
    # process aborts, "terminate called without an active exception" (1 run in 4
    # under load; core: ProcessGroupGloo::runLoop -> ~AsyncBarrierWork ->
    # ~AsyncAllreduceWork -> TensorImpl::decref_pyobject -> take_gil -> pthread_exit).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
