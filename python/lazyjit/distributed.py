"""torch.distributed on lazyjit tensors: the ``lazyjit`` c10d backend.

After ``import lazyjit``::

    dist.init_process_group("cpu:gloo,lazyjit:lazyjit")   # or "lazyjit"
    t = torch.ones(4, device="lazyjit")
    dist.all_reduce(t)            # recorded into the graph, not run
    print(t.cpu())                # the sync runs the program; Gloo runs the collective in it

A collective on lazyjit tensors is a node of the graph being recorded (a
library step, ``lazyjit_c10d::all_reduce`` and friends, tracer/collectives.cpp)
whose CPU kernel runs PyTorch's functional collective on the group's Gloo
backend when the program runs, then waits for it. The work before and after it
stays in one compiled program; programs run their collectives in recorded
order, which is the same on every rank when every rank runs the same code.

The process group this backend makes holds Gloo for CPU tensors (and for the
transport of lazyjit collectives) and the lazyjit backend for the lazyjit
device: c10d's eager API (``all_reduce``, ``all_gather``,
``all_gather_into_tensor``, ``reduce_scatter``, ``reduce_scatter_tensor``,
``broadcast``, ``scatter``, ``gather``, ``reduce``, ``all_to_all``,
``all_to_all_single``, ``send``/``recv``, coalesced calls, ``barrier``),
DistributedDataParallel's reducer and DTensor reach it; so do the functional
collectives (``torch.distributed._functional_collectives``) on lazyjit
tensors. A collective or point-to-point op is never dead code: it runs at the
next sync, in the order the program issued it, whether or not its result is
read, so a rank that drops a result still pairs with the others
(docs/distributed.md). A collective's Work returns complete: its tensors hold
pending values of the graph, and reading one syncs as reading any lazyjit
tensor does. Waiting for a send's or a receive's Work runs it, as for CPU
tensors. ``barrier()``, ``monitored_barrier()`` and
``destroy_process_group()`` first run what was recorded when it holds a
collective (a plain ``barrier()`` then goes to Gloo, which c10d picks for it).
"""
from __future__ import annotations

import functools

import torch

__all__ = ["collectives", "collective_wait_ms"]


def _create_backend(store, rank, size, timeout):
    # c10d's helper takes a ProcessGroup returned by a backend's creator as the
    # group itself (for every device): it gets Gloo for the CPU and lazyjit's
    # backend (C++, installed through a custom op) for the lazyjit device.
    from torch._C._distributed_c10d import PrefixStore, ProcessGroup, ProcessGroupGloo

    pg = ProcessGroup(store, rank, size)
    gloo = ProcessGroupGloo(PrefixStore("gloo/", store), rank, size, timeout=timeout)
    gloo._set_sequence_number_for_group()
    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, gloo)
    pg._set_default_backend(ProcessGroup.BackendType.GLOO)
    torch.ops.lazyjit_c10d.install_backend(pg.boxed())
    return pg


def _fix_ddp_buckets(ddp) -> None:
    """DDP's buckets on lazyjit are final from construction on.

    Without ``find_unused_parameters`` DDP puts every gradient in one bucket
    for the first step and rebuilds its buckets once, before step 2's forward,
    in the order step 1's gradients arrived. The bucket layout is part of the
    step's program (where each gradient is copied in and out of its bucket,
    which all_reduce covers), so on lazyjit that rebuild makes step 2 a new
    program to compile. lazyjit asks DDP's reducer to rebuild right away,
    before step 1, with DDP's own size limits (a first bucket of 1 MiB, then
    ``bucket_cap_mb``) over the parameters in their order; rank 0's layout is
    broadcast as in the rebuild DDP would make. Step 1's program is then every
    step's program. The cost: the buckets follow the parameters' order, not
    the order their gradients arrive, so a program starts its all_reduces once
    the first bucket's last gradient (that of the first parameters, computed
    last) is ready, instead of while the backward computes the rest."""
    reducer = getattr(ddp, "reducer", None)  # none when every parameter's all_reduce is delayed
    first = next((p for p in ddp.module.parameters() if p.requires_grad), None)
    if reducer is None or getattr(ddp, "_use_python_reducer", False) or first is None \
            or first.device.type != "lazyjit":
        return
    reducer._push_all_rebuilt_params()  # nothing when DDP would not rebuild (find_unused_parameters)
    if reducer._rebuild_buckets():
        ddp._has_rebuilt_buckets = True


def _patch_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    if getattr(DDP.__init__, "_lazyjit", False):
        return
    init = DDP.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _fix_ddp_buckets(self)

    __init__._lazyjit = True
    DDP.__init__ = __init__


def _run_recorded_collectives() -> None:
    """Runs the pending graph when it holds a collective or a point-to-point op."""
    op = getattr(torch.ops.lazyjit_c10d, "run_recorded_collectives", None)
    if op is not None:  # absent: lazyjit's library did not load, so nothing was recorded
        op()


def _patch_barriers() -> None:
    """c10d sends a ``barrier()`` without ``device_ids`` (and every
    ``monitored_barrier()``) straight to the group's CPU backend, Gloo: the
    lazyjit backend never sees it. A collective or send recorded before it
    would then run after it, at the next sync: a peer blocked in a receive on
    CPU tensors, or waiting in a collective, would never see it. So these
    first run what was recorded (when it holds a collective), as do
    ``destroy_process_group()`` (the last chance for a collective nothing read)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name in ("barrier", "monitored_barrier", "destroy_process_group"):
        orig = getattr(c10d, name, None)
        if orig is None or getattr(orig, "_lazyjit", False):
            continue

        def make(orig):
            @functools.wraps(orig)
            def wrapper(*args, **kwargs):
                _run_recorded_collectives()
                return orig(*args, **kwargs)

            wrapper._lazyjit = True
            return wrapper

        w = make(orig)
        setattr(c10d, name, w)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, w)


def _register() -> None:
    import torch.distributed as dist

    if not dist.is_available() or "lazyjit" in dist.Backend.backend_list:  # registered once per process
        return
    dist.Backend.register_backend("lazyjit", _create_backend, devices=["lazyjit"])
    _patch_ddp()
    _patch_barriers()


def collectives() -> dict:
    """The collectives lazyjit programs ran in this process, by kind:
    ``{"all_reduce": {"count": n, "total_ms": ms, "max_ms": ms}, ...}`` (the
    timings ``collective <kind>`` of ``lazyjit.metrics()``). A program starts
    a collective and goes on with the steps that do not need its result; the
    time here is the time spent starting them (one run in step mode is waited
    for there); a step waits only for the collectives whose results it reads.
    ReduceOp.AVG is a sum in flight and a division by the group size in the
    graph."""
    from . import _C

    return {k[len("collective "):]: v for k, v in _C.metrics()["timings"].items()
            if k.startswith("collective ") and k != "collective wait"}


def collective_wait_ms() -> float:
    """Milliseconds programs spent waiting for collectives in flight (for the
    other ranks, and for Gloo), the timing ``collective wait``."""
    from . import _C

    return _C.metrics()["timings"].get("collective wait", {}).get("total_ms", 0.0)


try:
    _register()
except Exception as e:  # torch.distributed missing or broken: lazyjit works without it
    import warnings

    warnings.warn(f"lazyjit: the 'lazyjit' torch.distributed backend is not registered: {e}", stacklevel=2)
