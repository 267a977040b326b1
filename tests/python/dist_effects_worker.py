"""One rank of tests/python/test_distributed_effects.py, started by torchrun (2
processes, Gloo on loopback, init_process_group("cpu:gloo,lazyjit:lazyjit") with a
30 s timeout, so that a collective paired with the wrong one fails instead of
hanging for 30 minutes). Writes what it saw to OUTDIR/rank<R>.json.

    python -m torch.distributed.run --nproc_per_node=2 ... dist_effects_worker.py OUTDIR [CASE ...]

Each case is a program that ranks run differently: one rank drops the result of a
collective (never reads it, or raises before it does), or mixes point-to-point ops
and barriers on lazyjit tensors with ones on CPU tensors. Each runs twice, on lazyjit
tensors and then on CPU tensors (the oracle, over Gloo), and each rank compares its
own two results. The part of each case run on CPU tensors in both runs (the peer's
side of a send, a barrier) is the same code.
"""
import os
import sys
import time
import warnings
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as fc  # noqa: E402

import lazyjit  # noqa: E402
from dist_rank import run_rank  # noqa: E402

DEV = "lazyjit"
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)


def same(a, b):
    """True, or a string saying how a (lazyjit's, read back) and b (CPU's) differ."""
    if len(a) != len(b):
        return f"{len(a)} results against {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            return f"[{i}]: {x.tolist()} against {y.tolist()}"
    return True


def lazy(t):
    return t.clone().to(DEV)


def cpu(t):
    return t.clone()


def base(rank, *shape):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(shape) * (rank + 1) - 3


# ---- Results one rank drops ---------------------------------------------------
# Each op issues one collective on tensors made by mk and returns its results; rank 0
# reads them, rank 1 drops them. After each, every rank all-reduces and reads a
# "gradient": it must pair with the other rank's gradient, not with the dropped one.

def op_all_reduce(mk, rank, world, step):
    m = mk(torch.tensor([float(rank + 1)])) * 10  # the log_metric
    dist.all_reduce(m)
    return [m]


def op_all_reduce_async(mk, rank, world, step):
    m = mk(base(rank, 3)) + step
    dist.all_reduce(m, async_op=True).wait()
    return [m]


def op_all_gather(mk, rank, world, step):
    outs = [mk(torch.zeros(3)) for _ in range(world)]
    dist.all_gather(outs, mk(base(rank, 3)) + step)
    return outs


def op_all_gather_into_tensor(mk, rank, world, step):
    o = mk(torch.zeros(world * 2, 3))
    dist.all_gather_into_tensor(o, mk(base(rank, 2, 3)) + step)
    return [o]


def op_reduce_scatter(mk, rank, world, step):
    o = mk(torch.zeros(3))
    dist.reduce_scatter(o, [mk(base(rank, 3)) + 10 * i + step for i in range(world)])
    return [o]


def op_reduce_scatter_tensor(mk, rank, world, step):
    o = mk(torch.zeros(2, 3))
    dist.reduce_scatter_tensor(o, mk(base(rank, world * 2, 3)) + step)
    return [o]


def op_broadcast(mk, rank, world, step):
    t = mk(base(rank, 4)) + step
    dist.broadcast(t, src=1)  # rank 1, the source, drops it
    return [t]


def op_all_to_all_single(mk, rank, world, step):
    o = mk(torch.zeros(world * 2, 2))
    dist.all_to_all_single(o, mk(base(rank, world * 2, 2)) + step)
    return [o]


def op_all_to_all(mk, rank, world, step):
    ins = [mk(base(rank, 2)) + 100 * p + step for p in range(world)]
    outs = [mk(torch.zeros(2)) for _ in range(world)]
    if outs[0].device.type == DEV:
        dist.all_to_all(outs, ins)
    else:  # Gloo on CPU has no list form: the same exchange as one all_to_all_single
        o = torch.zeros(world * 2)
        dist.all_to_all_single(o, torch.cat(ins))
        outs = list(o.split(2))
    return outs


def op_functional_all_reduce(mk, rank, world, step):
    return [fc.wait_tensor(fc.all_reduce(mk(base(rank, 3)) + step, "sum", dist.group.WORLD))]


def op_send_recv(mk, rank, world, step):
    # Rank 0 receives and reads; rank 1 sends (nothing to read).
    if rank == 1:
        dist.send(mk(base(rank, 3)) + step, dst=0)
        return []
    r = mk(torch.zeros(3))
    dist.recv(r, src=1)
    return [r]


def op_recv_dropped(mk, rank, world, step):
    # Rank 1 receives and never reads what came; rank 0 sends.
    if rank == 0:
        dist.send(mk(base(rank, 3)) + step, dst=1)
        return []
    r = mk(torch.zeros(3))
    dist.recv(r, src=0)
    return [r]


DROPPED = {name[3:]: fn for name, fn in list(globals().items()) if name.startswith("op_")}


def dropped_by_rank_1(op, rank, world):
    def program(mk):
        seen = []
        for step in range(3):
            res = op(mk, rank, world, step)
            if rank == 0:
                seen += [r.cpu() for r in res]
            del res
            g = mk(torch.tensor([float(rank + 1 + step)]))
            dist.all_reduce(g)
            seen.append(g.cpu())
        return seen
    return program


def raise_and_catch(mk, rank, world):
    """Rank 1 raises after its all_reduce, before reading it, and catches."""
    def metric():
        m = mk(base(rank, 3)) * 2
        dist.all_reduce(m)
        if rank == 1:
            raise ValueError("no metric on rank 1")
        return m
    seen = []
    for step in range(3):
        try:
            seen.append(metric().cpu())
        except ValueError:
            pass
        g = mk(torch.tensor([float(rank + 1 + step)]))
        dist.all_reduce(g)
        seen.append(g.cpu())
    return seen


def equal_all_reduces(mk, rank, world):
    """Rank 0 all-reduces two equal values (x * 1, twice), rank 1 two different ones:
    two collectives on each rank, which no graph pass may merge into one."""
    x = mk(base(rank, 3))
    a = x * 1
    dist.all_reduce(a)
    b = x * 1 if rank == 0 else x * 2
    dist.all_reduce(b)
    return [a.cpu(), b.cpu()]


def equal_functional_all_reduces(mk, rank, world):
    """The same, with the functional all_reduce of one tensor, twice on rank 0: two
    nodes with the same operand and attributes."""
    x = mk(base(rank, 3))
    a = fc.wait_tensor(fc.all_reduce(x, "sum", dist.group.WORLD))
    b = fc.wait_tensor(fc.all_reduce(x if rank == 0 else x * 2, "sum", dist.group.WORLD))
    return [a.cpu(), b.cpu()]


# ---- Point-to-point ops and barriers against CPU tensors --------------------------
# mk makes rank 0's tensors (lazyjit's, then the CPU oracle's); rank 1 runs on CPU
# tensors in both runs, so it blocks where eager blocks.

def isend_wait_then_cpu_recv(mk, rank, world):
    """Rank 0: isend(...).wait(), then a receive; rank 1 receives and sends on CPU
    tensors. Eager's wait() returns once the data is sent."""
    if rank == 0:
        dist.isend(mk(base(0, 4)) + 1, 1).wait()
        b = torch.zeros(4)
        dist.recv(b, 1)
        return [b]
    a = torch.zeros(4)
    dist.recv(a, 0)
    dist.send(a * 2, 0)
    return [a]


def isend_wait_then_barrier(mk, rank, world):
    """Rank 0: isend(...).wait() then barrier(); rank 1: a receive on CPU tensors,
    then barrier()."""
    if rank == 0:
        dist.isend(mk(base(0, 4)) * 3, 1).wait()
        dist.barrier()
        return []
    a = torch.zeros(4)
    dist.recv(a, 0)
    dist.barrier()
    return [a]


def isend_barrier_then_wait(mk, rank, world):
    """Rank 0: isend, then barrier(), then wait(); the send is in flight during the
    barrier, and rank 1 receives it (on CPU tensors) before its barrier."""
    if rank == 0:
        w = dist.isend(mk(base(0, 4)) - 5, 1)
        dist.barrier()
        w.wait()
        return []
    a = torch.zeros(4)
    dist.recv(a, 0)
    dist.barrier()
    return [a]


def irecv_wait_then_cpu_send(mk, rank, world):
    """Rank 1 receives into lazyjit tensors (irecv(...).wait()) before it sends on
    CPU tensors; rank 0 sends, then receives, on CPU tensors."""
    if rank == 1:
        b = mk(torch.zeros(4))
        dist.irecv(b, 0).wait()
        dist.send(torch.full((4,), 7.0), 0)
        return [b.cpu()]
    dist.send(base(0, 4) + 2, 1)
    c = torch.zeros(4)
    dist.recv(c, 1)
    return [c]


def batch_isend_irecv_then_cpu(mk, rank, world):
    """batch_isend_irecv on lazyjit tensors, its works waited for, then an exchange of
    CPU tensors in the other direction that rank 1 starts with a receive."""
    peer = 1 - rank
    a = mk(base(rank, 3) + 1)
    b = mk(torch.zeros(3))
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, b, peer)]):
        w.wait()
    c = torch.zeros(2)
    if rank == 0:
        dist.send(torch.ones(2) * 4, 1)
        dist.recv(c, 1)
    else:
        dist.recv(c, 0)
        dist.send(c + 1, 0)
    return [b.cpu(), c]


def collective_then_barrier(mk, rank, world):
    """Rank 0 all-reduces and reads nothing before barrier() and an all_reduce of CPU
    tensors; rank 1 reads its all_reduce first. The barrier runs rank 0's first."""
    m = mk(base(rank, 3))
    dist.all_reduce(m)
    seen = []
    if rank == 1:
        seen.append(m.cpu())
    dist.barrier()
    c = base(rank, 2) + 1
    dist.all_reduce(c)
    seen.append(c)
    if rank == 0:
        seen.append(m.cpu())
    return seen


CASES = {
    **{f"dropped_{name}": (lambda op: lambda mk, rank, world: dropped_by_rank_1(op, rank, world)(mk))(op)
       for name, op in DROPPED.items()},
    "raise_and_catch": raise_and_catch,
    "equal_all_reduces": equal_all_reduces,
    "equal_functional_all_reduces": equal_functional_all_reduces,
    "isend_wait_then_cpu_recv": isend_wait_then_cpu_recv,
    "isend_wait_then_barrier": isend_wait_then_barrier,
    "isend_barrier_then_wait": isend_barrier_then_wait,
    "irecv_wait_then_cpu_send": irecv_wait_then_cpu_send,
    "batch_isend_irecv_then_cpu": batch_isend_irecv_then_cpu,
    "collective_then_barrier": collective_then_barrier,
}


def make_part(name, fn):
    def part(rank, world, out):
        t0 = time.monotonic()
        lz = fn(lazy, rank, world)
        lazyjit.sync()
        dist.barrier()  # the lazyjit run is over on both ranks before the oracle's
        cp = fn(cpu, rank, world)
        dist.barrier()
        out[name] = same(lz, cp)
        out[name + "_seconds"] = round(time.monotonic() - t0, 2)
    return part


for _name, _fn in CASES.items():
    globals()[f"part_{_name}"] = make_part(_name, _fn)


def main():
    parts = sys.argv[2:] or list(CASES)
    run_rank(globals(), sys.argv[1], parts, timeout=timedelta(seconds=30))


if __name__ == "__main__":
    main()
