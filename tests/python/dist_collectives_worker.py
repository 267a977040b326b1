"""One rank of tests/python/test_distributed_collectives.py, started by torchrun (2
processes, Gloo on loopback, init_process_group("cpu:gloo,lazyjit:lazyjit")). Writes
what it saw to OUTDIR/rank<R>.json; the test compares.

    python -m torch.distributed.run --nproc_per_node=2 ... dist_collectives_worker.py OUTDIR [PART ...]

Parts: rooted (scatter, gather, reduce, send/recv, all_to_all), coalesced (coalesced
all-gathers and reduce-scatters, AVG), functional (torch.distributed's functional
collectives), program (collectives inside one program, compiles of a warm step),
errors, dtensor (distribute_tensor -> op -> redistribute -> full_tensor; a tensor-
parallel MLP). Every result on lazyjit tensors is compared with the same collective
on CPU tensors over Gloo in the same process: each rank against its own CPU run,
never against the other rank.
"""
import os
import sys
import traceback
import warnings

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


def counters():
    m = lazyjit.metrics()
    return {k: m[k] for k in ("compiles", "graphs_executed", "syncs", "cache_misses")} | {
        "collectives": sum(v["count"] for v in lazyjit.distributed.collectives().values())}


def delta(a, b):
    return {k: b[k] - a[k] for k in a}


def same(a, b, tol=0.0):
    """True, or a string saying how a (lazyjit's, read back) and b (CPU's) differ."""
    if isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            r = same(x, y, tol)
            if r is not True:
                return f"[{i}]: {r}"
        return True if len(a) == len(b) else f"{len(a)} results against {len(b)}"
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
    ok = torch.equal(a, b) if tol == 0 else torch.allclose(a, b, rtol=tol, atol=tol)
    return True if ok else f"{a.tolist()} against {b.tolist()}"


def both(fn):
    """fn(mk) once with mk making lazyjit tensors and once CPU ones: (lazyjit's, CPU's)."""
    lz = fn(lambda t: t.clone().to(DEV))
    cp = fn(lambda t: t.clone())
    return lz, cp


def base(rank, *shape):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32).reshape(shape) * (rank + 1) - 3)


def part_rooted(rank, world, out):
    res = {}

    def scatter(mk):
        o = mk(torch.zeros(2, 3))
        ins = [mk(base(rank, 2, 3) + 10 * i) for i in range(world)] if rank == 1 else None
        dist.scatter(o, ins, src=1)
        return o.cpu()
    res["scatter"] = same(*both(scatter))

    def scatter_into_empty(mk):  # as DTensor does: the output is fresh from torch.empty
        o = torch.empty(4, device=DEV) if mk(torch.zeros(1)).device.type == DEV else torch.empty(4)
        ins = [mk(torch.full((4,), float(i + 1))) for i in range(world)] if rank == 0 else None
        dist.scatter(o, ins, src=0)
        return o.cpu()
    res["scatter_into_empty"] = same(*both(scatter_into_empty))

    def gather(mk):
        t = mk(base(rank, 3, 2))
        outs = [mk(torch.zeros(3, 2)) for _ in range(world)] if rank == 0 else None
        dist.gather(t, outs, dst=0)
        return [o.cpu() for o in outs] if outs else []
    res["gather"] = same(*both(gather))

    def reduce(op):
        def f(mk):
            t = mk(base(rank, 5))
            dist.reduce(t, dst=1, op=op)
            return t.cpu()
        return f
    for name, op in [("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("product", dist.ReduceOp.PRODUCT)]:
        lz, cp = both(reduce(op))
        # At the destination the reduction; elsewhere whatever Gloo left there (both ways).
        res[f"reduce_{name}"] = same(lz, cp)
    # lazyjit records AVG as a sum and a division; compared with the CPU's sum / world.
    t = base(rank, 5).to(DEV)
    dist.reduce(t, dst=1, op=dist.ReduceOp.AVG)
    c = base(rank, 5)
    dist.reduce(c, dst=1)
    res["reduce_avg"] = same(t, c / world) if rank == 1 else True

    def send_recv(mk):
        a = mk(base(rank, 4))
        b = mk(torch.zeros(4))
        if rank == 0:
            dist.send(a, dst=1)
            dist.recv(b, src=1)
        else:
            dist.recv(b, src=0)
            dist.send(a * 2, dst=0)
        return b.cpu()
    res["send_recv"] = same(*both(send_recv))

    def isend_irecv(mk):
        a = mk(base(rank, 3) + 1)
        b = mk(torch.zeros(3))
        peer = 1 - rank
        ops = [dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, b, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return b.cpu()
    res["batch_isend_irecv"] = same(*both(isend_irecv))

    def all_to_all_single(mk, in_splits, out_splits):
        rows = sum(in_splits)
        t = mk(base(rank, rows, 2))
        o = mk(torch.zeros(sum(out_splits), 2))
        dist.all_to_all_single(o, t, out_splits, in_splits)
        return o.cpu()
    res["all_to_all_single_even"] = same(*both(lambda mk: all_to_all_single(mk, [2, 2], [2, 2])))
    # Uneven: rank 0 sends 1 row to itself and 3 to rank 1; rank 1 sends 2 and 2.
    ins = [[1, 3], [2, 2]]
    outs = [[ins[0][rank], ins[1][rank]] for rank in range(world)]
    res["all_to_all_single_uneven"] = same(*both(lambda mk: all_to_all_single(mk, ins[rank], outs[rank])))

    # all_to_all of lists, each rank's tensors of other sizes: Gloo on CPU has no
    # list form, so the CPU side runs it as all_to_all_single over the flattened list.
    sizes = [[2, 3], [1, 4]]  # sizes[r][p]: what rank r sends to rank p
    ins_l = [base(rank, sizes[rank][p]) + 100 * p for p in range(world)]
    o = [torch.zeros(sizes[p][rank], device=DEV) for p in range(world)]
    dist.all_to_all(o, [t.to(DEV) for t in ins_l])
    oc = torch.zeros(sum(sizes[p][rank] for p in range(world)))
    dist.all_to_all_single(oc, torch.cat(ins_l), [sizes[p][rank] for p in range(world)], sizes[rank])
    res["all_to_all"] = same(torch.cat([x.cpu() for x in o]), oc)

    # Step mode runs each at once.
    lazyjit.sync()
    lazyjit.set_mode("step")
    try:
        res["step_mode"] = same(*both(lambda mk: [scatter(mk), *gather(mk), reduce(dist.ReduceOp.SUM)(mk),
                                                  send_recv(mk), all_to_all_single(mk, ins[rank], outs[rank])]))
    finally:
        lazyjit.set_mode("lazy")
    out["rooted"] = res


def part_coalesced(rank, world, out):
    res = {}
    g = dist.group.WORLD

    def gathers(mk, device):
        ins = [mk(base(rank, 2, 3)), mk(base(rank, 4) + 7)]
        outs = [mk(torch.zeros(2 * world, 3)), mk(torch.zeros(4 * world))]
        with dist._coalescing_manager(g, device=device, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        cm.wait()
        return [o.cpu() for o in outs]
    # Gloo has no start/end coalescing of its own: the CPU side takes the fast path
    # (device None: one allgather_into_tensor_coalesced call), lazyjit both.
    cp = gathers(lambda t: t.clone(), None)
    res["all_gather_into_tensor_coalesced"] = same(gathers(lambda t: t.clone().to(DEV), None), cp)
    res["all_gather_into_tensor_coalesced_device"] = same(gathers(lambda t: t.clone().to(DEV), torch.device(DEV)), cp)

    # reduce_scatter_tensor in a coalescing manager, SUM and AVG. Gloo on CPU has no
    # reduce_scatter_tensor of its own (nor AVG): the CPU side all-reduces with Gloo and
    # takes this rank's rows (divided by the group size for AVG).
    def scatters(op, device):
        ins = [base(rank, 2 * world, 3), base(rank, 4 * world) + 1]
        outs = [torch.zeros(2, 3, device=DEV), torch.zeros(4, device=DEV)]
        with dist._coalescing_manager(g, device=device, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i.to(DEV), op=op)
        cm.wait()
        want = []
        for i in ins:
            c = i.clone()
            dist.all_reduce(c)
            if op == dist.ReduceOp.AVG:
                c = c / world
            n = c.shape[0] // world
            want.append(c[rank * n:(rank + 1) * n])
        return same([o.cpu() for o in outs], want, tol=1e-6 if op == dist.ReduceOp.AVG else 0)
    res["reduce_scatter_tensor_coalesced_sum"] = scatters(dist.ReduceOp.SUM, None)
    res["reduce_scatter_tensor_coalesced_avg"] = scatters(dist.ReduceOp.AVG, None)
    res["reduce_scatter_tensor_coalesced_avg_device"] = scatters(dist.ReduceOp.AVG, torch.device(DEV))
    # The same through the ProcessGroup's coalesced calls, as FSDP2 may make them.
    ins = [base(rank, 2 * world) + 2, base(rank, 2 * world, 2)]
    outs = [torch.zeros(2, device=DEV), torch.zeros(2, 2, device=DEV)]
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    g.reduce_scatter_tensor_coalesced(outs, [i.to(DEV) for i in ins], opts).wait()
    want = []
    for i in ins:
        c = i.clone()
        dist.all_reduce(c)
        want.append((c / world)[rank * 2:(rank + 1) * 2])
    res["pg_reduce_scatter_tensor_coalesced_avg"] = same([o.cpu() for o in outs], want, tol=1e-6)

    # PREMUL_SUM(f), FSDP2's reduce op under a gradient divide factor: a sum of each
    # rank's t * f. Gloo has none: the CPU side all-reduces t * f.
    x = base(rank, 2 * world, 3)
    o = torch.zeros(2, 3, device=DEV)
    dist.reduce_scatter_tensor(o, x.to(DEV), op=dist._make_nccl_premul_sum(0.25))
    c = x * 0.25
    dist.all_reduce(c)
    res["reduce_scatter_tensor_premul_sum"] = same(o.cpu(), c[rank * 2:(rank + 1) * 2], tol=1e-6)
    t = x.to(DEV)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor(0.5)))
    c = x * 0.5
    dist.all_reduce(c)
    res["all_reduce_premul_sum_tensor_factor"] = same(t.cpu(), c, tol=1e-6)
    out["coalesced"] = res


def part_functional(rank, world, out):
    res = {}
    g = dist.group.WORLD
    name = g.group_name
    ops = torch.ops._c10d_functional
    # all_to_all_single, uneven splits (what DTensor's Shard(i) -> Shard(j) calls).
    ins = [[1, 3], [2, 2]]
    outs = [[ins[0][r], ins[1][r]] for r in range(world)]
    x = base(rank, 4, 2)
    lz = fc.all_to_all_single(x.to(DEV), outs[rank], ins[rank], g)
    cp = fc.all_to_all_single(x.clone(), outs[rank], ins[rank], g)
    res["all_to_all_single"] = same(fc.wait_tensor(lz), fc.wait_tensor(cp))
    # wait_tensor on the op itself.
    lz = ops.wait_tensor(ops.all_to_all_single(x.to(DEV), outs[rank], ins[rank], name))
    cp = ops.wait_tensor(ops.all_to_all_single(x.clone(), outs[rank], ins[rank], name))
    res["all_to_all_single_op"] = same(lz, cp)
    # Coalesced forms.
    xs = [base(rank, 2, 2), base(rank, 4) + 1]
    lz = ops.all_gather_into_tensor_coalesced([t.to(DEV) for t in xs], world, name)
    cp = ops.all_gather_into_tensor_coalesced([t.clone() for t in xs], world, name)
    res["all_gather_into_tensor_coalesced"] = same([ops.wait_tensor(t) for t in lz], [ops.wait_tensor(t) for t in cp])
    lz = ops.all_reduce_coalesced([t.to(DEV) for t in xs], "sum", name)
    cp = ops.all_reduce_coalesced([t.clone() for t in xs], "sum", name)
    res["all_reduce_coalesced"] = same([ops.wait_tensor(t) for t in lz], [ops.wait_tensor(t) for t in cp])
    # reduce_scatter (sum, avg), plain and coalesced: CPU's Gloo all_reduce, this rank's rows.
    ys = [base(rank, 2 * world, 2), base(rank, 4 * world) - 1]

    def rows(t, op):
        c = t.clone()
        dist.all_reduce(c)
        if op == "avg":
            c = c / world
        n = c.shape[0] // world
        return c[rank * n:(rank + 1) * n]
    for op in ("sum", "avg"):
        lz = fc.reduce_scatter_tensor(ys[0].to(DEV), op, 0, g)
        res[f"reduce_scatter_tensor_{op}"] = same(fc.wait_tensor(lz), rows(ys[0], op), tol=1e-6)
        lz = ops.reduce_scatter_tensor_coalesced([t.to(DEV) for t in ys], op, world, name)
        res[f"reduce_scatter_tensor_coalesced_{op}"] = same([ops.wait_tensor(t) for t in lz],
                                                            [rows(t, op) for t in ys], tol=1e-6)
    lz = fc.all_reduce(ys[1].to(DEV), "avg", g)
    c = ys[1].clone()
    dist.all_reduce(c)
    res["all_reduce_avg"] = same(fc.wait_tensor(lz), c / world, tol=1e-6)
    lz = fc.all_gather_tensor(ys[0].to(DEV), 0, g)
    res["all_gather_into_tensor"] = same(lz, fc.all_gather_tensor(ys[0].clone(), 0, g))
    out["functional"] = res


def part_program(rank, world, out):
    """Collectives inside one program: scatter, all_to_all_single, gather and reduce with
    work before and after them, one sync; the same again compiles nothing."""
    res = {}

    def step(mk):
        x = (mk(base(rank, 4, 2)) * 2).relu()
        o = mk(torch.zeros(4, 2))
        dist.scatter(o, [x + i for i in range(world)] if rank == 0 else None, src=0)
        a = torch.empty(4, 2, device=o.device)
        dist.all_to_all_single(a, o + 1)
        t = (a * 3).sum(1)
        outs = [torch.zeros(4, device=o.device) for _ in range(world)] if rank == 1 else None
        dist.gather(t, outs, dst=1)
        r = a.tanh()
        dist.reduce(r, dst=0)
        s = (r.sum() + (torch.stack(outs).sum() if outs else 0)).reshape(1)
        return s.cpu()
    lazyjit.sync()
    runs = []
    for _ in range(3):
        before = counters()
        v = step(lambda t: t.clone().to(DEV))
        runs.append(delta(before, counters()))
        lazyjit.wait_for_compiles()
    res["runs"] = runs
    res["value"] = same(v, step(lambda t: t.clone()), tol=1e-5)
    out["program"] = res


def part_dropped(rank, world, out):
    """Collectives whose results a rank drops before the sync that runs them: rank 1
    keeps nothing of its gather (it gets nothing), its reduce (not the destination) or
    its send once record() returns, then syncs an all_reduce. Each still runs, in order,
    on every rank (without that, rank 0's gather would pair with rank 1's all_reduce)."""
    def record(mk):
        x = mk(base(rank, 3)) * 2
        outs = [mk(torch.zeros(3)) for _ in range(world)] if rank == 0 else None
        dist.gather(x, outs, dst=0)
        y = x + 1
        dist.reduce(y, dst=0)
        r = mk(torch.zeros(2))
        if rank == 1:
            dist.send(mk(base(rank, 2)) - 1, dst=0)
        else:
            dist.recv(r, src=1)
        return [o.cpu() for o in outs] + [y.cpu(), r.cpu()] if rank == 0 else []

    def step(mk):
        kept = record(mk)
        z = mk(base(rank, 4))
        dist.all_reduce(z)
        return [z.cpu()] + kept
    lazyjit.sync()
    out["dropped"] = same(*both(step))


def part_errors(rank, world, out):
    errors = {}
    g = dist.group.WORLD
    for name, fn in [
        ("recv_any_source", lambda: dist.recv(torch.zeros(2, device=DEV))),
        ("isend_functional", lambda: torch.ops._c10d_functional.isend(torch.ones(2, device=DEV), 1 - rank, 0,
                                                                       g.group_name)),
        ("a2a_bad_splits", lambda: dist.all_to_all_single(torch.zeros(4, device=DEV), torch.ones(4, device=DEV),
                                                          [2, 2], [3, 3])),
        ("a2a_bad_output", lambda: dist.all_to_all_single(torch.zeros(5, device=DEV), torch.ones(4, device=DEV),
                                                          [2, 2], [2, 2])),
        ("a2a_functional_bad_splits", lambda: torch.ops._c10d_functional.all_to_all_single(
            torch.ones(4, device=DEV), [2, 2], [1, 2], g.group_name)),
    ]:
        try:
            fn()
            errors[name] = None
        except Exception as e:  # noqa: BLE001
            errors[name] = f"{type(e).__name__}: {e}".splitlines()[0]
    lazyjit.sync()
    out["errors"] = errors


def part_dtensor(rank, world, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    res = {}
    meshes = {d: init_device_mesh(d, (world,)) for d in ("cpu", DEV)}
    src = torch.arange(48, dtype=torch.float32).reshape(8, 6) / 7

    def round_trip(dev):
        d = distribute_tensor(src.clone().to(dev), meshes[dev], [Shard(0)])
        e = (d * 2 + 1).tanh()
        local = e.to_local().cpu()
        f = e.redistribute(meshes[dev], [Shard(1)])  # all_to_all
        r = f.redistribute(meshes[dev], [Replicate()])
        return local, f.to_local().cpu(), r.full_tensor().cpu()
    lazyjit.sync()
    before = counters()
    lz = round_trip(DEV)
    res["round_trip_counters"] = delta(before, counters())
    res["round_trip"] = same(lz, round_trip("cpu"), tol=1e-6)

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 6))

    def tp(dev):
        m = mlp().to(dev)
        m = parallelize_module(m, meshes[dev], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        x = (torch.arange(24, dtype=torch.float32).reshape(4, 6) / 5).to(dev)
        y = m(x)
        y.pow(2).sum().backward()
        return [y.cpu()] + [p.grad.to_local().cpu() for p in m.parameters()]
    try:
        res["tp_mlp"] = same(tp(DEV), tp("cpu"), tol=1e-5)
        tp(DEV)
        lazyjit.wait_for_compiles()  # a new graph's first runs go op by op while it compiles
        before = counters()
        tp(DEV)
        res["tp_warm_counters"] = delta(before, counters())
    except Exception:  # noqa: BLE001
        res["tp_mlp"] = traceback.format_exc()[-3000:]
    out["dtensor"] = res


def main():
    def finish():
        lazyjit.sync()
        dist.barrier()

    run_rank(globals(), sys.argv[1], sys.argv[2:], finish=finish)


if __name__ == "__main__":
    main()
