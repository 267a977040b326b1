"""torch.lazyjit as a device module (python/lazyjit/device_module.py) and the
generic torch.Stream / torch.Event / torch.accelerator streams on the lazyjit
device (tracer/streams.h), against torch.cuda's contract: an event's query()
is False until the work recorded before it has run and True after its
synchronize(); work under a stream equals eager; bad device ordinals raise;
FSDP2 finds everything it calls."""
import os
import re
import subprocess
import sys
import threading
import time

import pytest
import torch

import lazyjit
from conftest import ROOT

LJ = torch.lazyjit if hasattr(torch, "lazyjit") else None


def _syncs():
    return lazyjit.metrics()["syncs"]


def _pending():
    lazyjit.sync()
    x = torch.randn(64, 64)
    y = (x.to("lazyjit") @ x.to("lazyjit")).relu() * 2  # recorded, not run
    return x, y


def _check(x, y):
    torch.testing.assert_close(y.cpu(), (x @ x).relu() * 2)


def test_event_query_is_false_until_synchronize_runs_the_work():
    x, y = _pending()
    e = torch.lazyjit.Event()
    e.record()
    assert not e.query()
    before = _syncs()
    e.synchronize()
    assert _syncs() == before + 1  # the synchronize ran the recorded work
    assert e.query()
    before = _syncs()
    _check(x, y)  # nothing left to run
    assert _syncs() == before


def test_an_event_with_nothing_pending_is_reached_at_once():
    lazyjit.sync()
    e = torch.lazyjit.Event()
    e.record()
    assert e.query()
    assert torch.lazyjit.Event().query()  # never recorded: as torch.cuda.Event


def test_an_event_is_reached_by_any_sync_and_stays_so_while_later_work_is_recorded():
    x, y = _pending()
    e = torch.lazyjit.current_stream().record_event()
    _check(x, y)  # an implicit sync runs the graph e marks
    z = y + 1  # a new graph: not e's
    assert e.query()
    e2 = torch.lazyjit.Event()
    e2.record()
    assert not e2.query()
    torch.testing.assert_close(z.cpu(), (x @ x).relu() * 2 + 1)
    assert e2.query()


def test_recording_an_event_changes_nothing_in_the_program():
    x = torch.randn(32, 32).to("lazyjit")

    def step(mark):
        y = (x @ x).relu()
        if mark:
            e = torch.lazyjit.Event()
            base = torch.lazyjit.memory_allocated()
            e.record()
            assert torch.lazyjit.memory_allocated() == base
        return (y * 2).sum(0).cpu()

    want = step(False)
    lazyjit.wait_for_compiles()
    step(False)
    before = lazyjit.metrics()
    torch.testing.assert_close(step(True), want)
    after = lazyjit.metrics()
    assert (after["compiles"], after["cache_misses"]) == (before["compiles"], before["cache_misses"])


def test_an_event_another_thread_recorded_is_synchronized_from_this_one():
    seen = {}

    def work():
        seen["x"] = torch.randn(16, 16)
        seen["y"] = seen["x"].to("lazyjit") * 5
        seen["e"] = torch.lazyjit.Event()
        seen["e"].record()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not seen["e"].query()
    seen["e"].synchronize()
    assert seen["e"].query()
    torch.testing.assert_close(seen["y"].cpu(), seen["x"] * 5)


def test_device_synchronize_runs_all_recorded_work():
    x, y = _pending()
    e = torch.lazyjit.Event()
    e.record()
    assert not torch.lazyjit.current_stream().query()
    before = _syncs()
    torch.lazyjit.synchronize()
    assert _syncs() == before + 1
    assert e.query() and torch.lazyjit.current_stream().query()
    before = _syncs()
    _check(x, y)
    assert _syncs() == before


def test_work_under_a_stream_equals_eager_and_the_stream_is_current_there():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    want = model(x)
    lz = model.to("lazyjit")
    default = torch.lazyjit.current_stream()
    s = torch.lazyjit.Stream()
    assert s != default and isinstance(s, torch.Stream)
    with torch.lazyjit.stream(s):
        assert torch.lazyjit.current_stream() == s
        assert torch.accelerator.current_stream() == s
        got = lz(x.to("lazyjit"))
    assert torch.lazyjit.current_stream() == default == torch.lazyjit.default_stream()
    torch.testing.assert_close(got.cpu(), want)
    with torch.lazyjit.stream(None):  # as torch.cuda.stream(None): nothing changes
        assert torch.lazyjit.current_stream() == default


def test_waiting_on_an_event_or_a_stream_orders_later_work_after_it():
    x = torch.randn(32, 32)
    side, other = torch.lazyjit.Stream(priority=-1), torch.lazyjit.Stream()
    with torch.lazyjit.stream(side):
        a = x.to("lazyjit") * 3
        a.add_(1)
        done = side.record_event()
    other.wait_event(done)
    with torch.lazyjit.stream(other):
        b = a @ a  # reads a after its in-place add
    torch.lazyjit.current_stream().wait_stream(other)
    c = b.sum(0)
    torch.testing.assert_close(c.cpu(), ((x * 3 + 1) @ (x * 3 + 1)).sum(0))
    assert done.query()


def test_elapsed_time_is_the_time_between_the_points():
    lazyjit.sync()
    start, end = torch.lazyjit.Event(enable_timing=True), torch.lazyjit.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()  # nothing pending: reached now
    t1 = time.perf_counter()
    x = torch.randn(256, 256).to("lazyjit")
    for _ in range(20):
        x = torch.tanh(x @ x)
    end.record()
    t2 = time.perf_counter()
    torch.lazyjit.synchronize()  # runs the work and times end when it finishes
    t3 = time.perf_counter()
    assert (t2 - t1) * 1e3 <= start.elapsed_time(end) <= (t3 - t0) * 1e3


def test_elapsed_time_refuses_untimed_events_and_untimed_syncs():
    a, b = torch.lazyjit.Event(), torch.lazyjit.Event()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    x, y = _pending()
    start, end = torch.lazyjit.Event(enable_timing=True), torch.lazyjit.Event(enable_timing=True)
    start.record()
    end.record()
    _check(x, y)  # runs the work at a sync that does not note the time
    with pytest.raises(RuntimeError, match="did not note its time"):
        start.elapsed_time(end)


def test_one_device_and_bad_ordinals_raise():
    assert torch.lazyjit.device_count() == 1 and torch.lazyjit.current_device() == 0
    assert torch.lazyjit.is_available()
    torch.lazyjit.set_device(0)
    torch.lazyjit.set_device("lazyjit:0")
    for bad in (1, "lazyjit:1", torch.device("lazyjit", 2)):
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.lazyjit.set_device(bad)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        with torch.lazyjit.device(1):
            pass
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.accelerator.set_device_index(1)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.Stream(device="lazyjit:1")
    with pytest.raises(ValueError, match="lazyjit"):
        torch.lazyjit.set_device("cpu")
    assert torch.lazyjit.current_device() == 0


# Issue 56, defect 9: set_device(1) raised, but these returned normally.
_TAKE_A_DEVICE = {
    "torch.accelerator.synchronize": torch.accelerator.synchronize,
    "torch.accelerator.memory_allocated": torch.accelerator.memory_allocated,
    "torch.accelerator.max_memory_allocated": torch.accelerator.max_memory_allocated,
    "torch.accelerator.memory_reserved": torch.accelerator.memory_reserved,
    "torch.accelerator.memory_stats": torch.accelerator.memory_stats,
    "torch.accelerator.reset_peak_memory_stats": torch.accelerator.reset_peak_memory_stats,
    "torch.accelerator.reset_accumulated_memory_stats": torch.accelerator.reset_accumulated_memory_stats,
    "torch.accelerator.get_memory_info": torch.accelerator.get_memory_info,
    "torch.accelerator.current_stream": torch.accelerator.current_stream,
}
for _name in ("synchronize", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
              "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "mem_get_info",
              "current_stream", "default_stream", "get_rng_state", "set_device", "Stream"):
    _TAKE_A_DEVICE["torch.lazyjit." + _name] = getattr(torch.lazyjit, _name) if LJ else None


@pytest.mark.parametrize("name", sorted(_TAKE_A_DEVICE))
def test_every_function_that_takes_a_device_refuses_a_bad_ordinal(name, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    fn = _TAKE_A_DEVICE[name]
    for good in (None, 0, "lazyjit:0", "lazyjit", torch.device("lazyjit", 0), torch.device("lazyjit")):
        fn(good)
    bads = [1, 7, "lazyjit:1", torch.device("lazyjit", 3)]
    if name.startswith("torch.lazyjit."):
        bads += [-2, 1000]
    for bad in bads:
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            fn(bad)


def test_set_rng_state_refuses_a_bad_ordinal():
    state = torch.lazyjit.get_rng_state()
    torch.lazyjit.set_rng_state(state, 0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.lazyjit.set_rng_state(state, 1)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.Generator(device="lazyjit:1")


# Issue 56, defect 8: it raised NotImplementedError ('aten::record_stream' from the 'CPU' backend).
def test_record_stream_takes_a_lazyjit_stream():
    x, y = _pending()
    s = torch.lazyjit.Stream()
    with torch.lazyjit.stream(s):
        z = y * 3
    assert z.record_stream(s) is None
    z.record_stream(torch.lazyjit.current_stream())
    y.record_stream(torch.Stream(device="lazyjit"))
    y[1:, ::2].record_stream(s)  # a view: its storage's
    torch.testing.assert_close(z.cpu(), (x @ x).relu() * 6)
    # As CUDA: a stream of another device, or one that was never made, is refused.
    with pytest.raises(RuntimeError, match="expected a lazyjit stream"):
        z.record_stream(torch.Stream(device="cpu"))
    with pytest.raises(RuntimeError, match="no stream with id"):
        z.record_stream(torch.Stream(stream_id=1 << 40, device_index=0, device_type=s.device_type))


def test_generic_stream_and_event_api():
    s1, s2 = torch.Stream(device="lazyjit"), torch.Stream(device="lazyjit")
    assert s1.device == torch.device("lazyjit", 0) and s1 != s2 and len({s1, s2, s1}) == 2
    with s1:
        assert torch.accelerator.current_stream() == s1
    assert torch.accelerator.current_stream() == torch.lazyjit.default_stream()
    x, y = _pending()
    e = torch.Event(device="lazyjit")
    e.record(s1)
    assert not e.query() and not s1.query()
    s2.wait_event(e)
    e.synchronize()
    assert e.query() and s1.query()
    _check(x, y)
    with pytest.raises(RuntimeError, match="no stream with id"):
        torch.accelerator.set_stream(torch.Stream(stream_id=1 << 40, device_index=0, device_type=s1.device_type))
    with pytest.raises(ValueError, match="between processes"):
        torch.lazyjit.Event(interprocess=True)


def test_memory_statistics_are_the_allocators():
    torch.lazyjit.reset_peak_memory_stats()
    base = torch.lazyjit.memory_allocated()
    assert base == torch.accelerator.memory_allocated()
    x = torch.empty(1000, 250, device="lazyjit")
    assert torch.lazyjit.memory_allocated() - base == 1_000_000
    assert torch.lazyjit.max_memory_allocated() >= base + 1_000_000
    assert torch.lazyjit.memory_stats()["allocated_bytes.all.current"] == torch.lazyjit.memory_allocated()
    assert torch.lazyjit.memory_reserved() == torch.accelerator.memory_reserved()
    del x
    torch.lazyjit.empty_cache()
    free, total = torch.lazyjit.mem_get_info()
    assert 0 < free <= total


def _fsdp2_calls():
    """Every attribute FSDP2 and DeviceMesh read from a device module, from their sources."""
    import torch.distributed.device_mesh as dm
    import torch.distributed.fsdp._fully_shard as fs
    d = os.path.dirname(fs.__file__)
    files = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".py")] + [dm.__file__]
    names = set()
    for f in files:
        names |= set(re.findall(r"device_handle\.(\w+)", open(f).read()))
    return names


def test_the_device_module_has_everything_fsdp2_calls():
    names = _fsdp2_calls()
    assert {"Stream", "Event", "current_stream", "stream", "current_device"} <= names
    mod = torch.get_device_module("lazyjit")
    assert mod is torch.lazyjit
    assert [n for n in sorted(names) if not hasattr(mod, n)] == []
    s = mod.Stream(priority=-1)
    assert isinstance(s, torch.Stream) and s.device.type == "lazyjit"
    assert mod.Event().record() is None  # as torch.cuda.Event.record


def test_fully_shard_trains_one_rank_as_eager():
    """FSDP2 on one rank (its all-gather and reduce-scatter are skipped or local):
    streams, events and the device module are all it needs of lazyjit."""
    script = r"""
import os, sys, torch, torch.distributed as dist
import lazyjit
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
dist.init_process_group("cpu:gloo,lazyjit:lazyjit", rank=0, world_size=1,
                        store=dist.HashStore())
torch.manual_seed(0)
ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
import copy
model = copy.deepcopy(ref).to("lazyjit")
mesh = init_device_mesh("lazyjit", (1,))
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
x = torch.randn(4, 8)
loss = model(x.to("lazyjit")).square().sum()
loss.backward()
want = ref(x).square().sum()
want.backward()
torch.testing.assert_close(loss.cpu(), want)
for p, q in zip(model.parameters(), ref.parameters()):
    torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad)
dist.destroy_process_group()
print("OK")
"""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LAZYJIT_CACHE="off",
               GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR", MASTER_ADDR="127.0.0.1")
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "OK" in p.stdout, p.stderr[-4000:]


def test_events_of_both_apis_mix():
    s = torch.lazyjit.Stream()
    e = torch.lazyjit.Event(enable_timing=True)
    assert isinstance(e, torch.lazyjit.Event) and isinstance(e, torch.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.lazyjit.Event)
    lazyjit.sync()
    e.record(s)
    g = torch.Event(device="lazyjit", enable_timing=True)
    g.record(torch.lazyjit.current_stream())
    assert g.elapsed_time(e) <= 0 <= e.elapsed_time(g)
    s.wait_event(g)


_FSDP2_TWO_RANKS = r"""
import copy, sys, torch, torch.distributed as dist
import lazyjit
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
dist.init_process_group("cpu:gloo,lazyjit:lazyjit")
rank = dist.get_rank()
torch.manual_seed(0)
ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
model = copy.deepcopy(ref).to("lazyjit")
mesh = init_device_mesh("lazyjit", (2,))
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
torch.manual_seed(1)
for step in range(3):
    x = torch.randn(8, 8)
    half = x[rank * 4:(rank + 1) * 4]
    loss = model(half.to("lazyjit")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    torch.testing.assert_close(loss.cpu(), ref(half).square().mean().detach())  # this rank's own loss
    # FSDP2 averages the ranks' gradients: the mean of the halves' losses on the CPU.
    want = sum(ref(x[r * 4:(r + 1) * 4]).square().mean() for r in range(2)) / 2
    want.backward()
    ref_opt.step()
    ref_opt.zero_grad()
for p, q in zip(model.parameters(), ref.parameters()):
    torch.testing.assert_close(p.full_tensor().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
dist.destroy_process_group()
open(f"{sys.argv[1]}/ok{rank}", "w").write("OK")  # a file per rank: the ranks' stdout may interleave
"""


def test_fully_shard_over_a_lazyjit_mesh_of_two_ranks_trains_as_the_cpu(tmp_path):
    """issue 52's first failure: FSDP2's first forward asked torch.lazyjit for Stream."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "fsdp2.py"
    script.write_text(_FSDP2_TWO_RANKS)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LAZYJIT_CACHE="off", OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", TORCH_CPP_LOG_LEVEL="ERROR")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={port}", str(script), str(tmp_path)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    done = [(tmp_path / f"ok{r}").exists() for r in range(2)]
    assert p.returncode == 0 and all(done), f"ranks done: {done}\n" + p.stdout[-2000:] + p.stderr[-4000:]


def test_tensors_on_a_device_index_lazyjit_lacks_raise_as_cuda_does(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for make in (lambda: torch.empty(2, device="lazyjit:1"), lambda: torch.ones(2).to("lazyjit:5"),
                 lambda: torch.empty_strided((2,), (1,), device="lazyjit:3")):
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            make()
    assert torch.empty(2, device="lazyjit:0").device == torch.device("lazyjit", 0)
