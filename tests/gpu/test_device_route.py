"""The device route under the CUDA target: tensors moved to lazyjit keep their
elements in GPU memory (PyTorch's CUDA caching allocator), programs and the
ops that run at once (step mode, data-dependent ops) run on that memory, and
reads (.cpu(), .item(), printing, .to("cuda")) copy from it, device to device
where the destination is a GPU. CUDA eager is the oracle."""
import copy
import inspect
import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.nn.functional as F

from gpu_shared import ROOT, assert_close, kernels_only

L = "lazyjit"
DEV = "cuda"


def _line_after():
    return inspect.currentframe().f_back.f_lineno + 1


def _profiled(fn):
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    return out, prof


def _copies(fn):
    """fn's result and the memcpy activities the GPU ran while it ran (their
    names, as CUDA's profiler gives them: "Memcpy HtoD (Pageable -> Device)",
    "Memcpy DtoD (Device -> Device)", ...)."""
    out, prof = _profiled(fn)
    names = [e.name for e in prof.events() if e.name.startswith("Memcpy ")]  # the GPU's, not cudaMemcpy calls
    return out, names


def _copied_bytes(fn):
    """fn's result, the memcpy activities' names, and the bytes they moved per
    kind ({"HtoD": n, ...}; None when the profiler's trace gives no byte
    counts). How many activities one copy is, is the driver's business (a
    pageable copy may be staged in chunks); the bytes are what a copy
    moved, on any driver."""
    out, prof = _profiled(fn)
    names = [e.name for e in prof.events() if e.name.startswith("Memcpy ")]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    copies = [e for e in events if str(e.get("name", "")).startswith("Memcpy ") and e.get("ph") == "X"]
    if not copies or any(not isinstance(e.get("args", {}).get("bytes"), int) for e in copies):
        return out, names, None
    moved = {}
    for e in copies:
        for k in ("HtoD", "DtoH", "DtoD"):
            if f"Memcpy {k}" in e["name"]:
                moved[k] = moved.get(k, 0) + e["args"]["bytes"]
    return out, names, moved


def _kinds(names):
    return {k for k in ("HtoD", "DtoH", "DtoD") for n in names if f"Memcpy {k}" in n}


def _profiler_sees_copies():
    _, names = _copies(lambda: torch.ones(1024).to(DEV))
    if not names:
        pytest.skip("CUDA's profiler records no memcpy here (no CUPTI)")


# ---- where the data lives -------------------------------------------------------


def test_materialized_data_is_gpu_memory_from_the_caching_allocator(lazyjit):
    n = 1 << 22
    x = torch.randn(n)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    xl = x.to(L)                              # a CPU tensor's data, copied to the GPU
    z = torch.zeros(n, device=L)              # a fill of fresh memory: data, made on the GPU
    y = xl * 2 + z
    lazyjit.sync()                            # y's result: GPU memory
    grown = torch.cuda.memory_allocated() - before
    assert grown >= 3 * n * 4, grown
    assert torch.equal(y.cpu(), x * 2)


def test_cpu_to_lazyjit_and_back_round_trips_every_dtype(lazyjit):
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
               torch.uint8, torch.bool):
        x = (torch.randn(33, 17) * 50).to(dt)
        assert torch.equal(x.to(L).cpu(), x), dt
        t = x.t()                              # not contiguous: copied as laid out
        assert torch.equal(t.to(L).cpu(), t), dt


def test_cpu_to_lazyjit_is_one_host_to_device_copy(lazyjit):
    _profiler_sees_copies()
    x = torch.randn(1 << 20)
    xl, names, moved = _copied_bytes(lambda: x.to(L))
    assert _kinds(names) == {"HtoD"}, names          # into the data on the GPU, no copy there after
    assert moved is None or moved == {"HtoD": x.nbytes}, (moved, names)  # the data crossed once
    assert torch.equal(xl.cpu(), x)


def test_a_cuda_tensor_moved_to_lazyjit_is_copied_device_to_device(lazyjit):
    _profiler_sees_copies()
    c = torch.randn(1 << 20, device=DEV)
    cl, names = _copies(lambda: c.to(L))
    assert _kinds(names) == {"DtoD"}, names          # not through the host
    assert torch.equal(cl.to(DEV), c)
    # Into part of a storage too (a graph input made on the GPU).
    l = torch.zeros(4, 1 << 18, device=L)
    lazyjit.sync()
    _, names = _copies(lambda: l[1].copy_(c[: 1 << 18]))
    assert "HtoD" not in _kinds(names) and "DtoH" not in _kinds(names), names
    want = torch.zeros(4, 1 << 18, device=DEV)
    want[1] = c[: 1 << 18]
    assert torch.equal(l.to(DEV), want)


def test_lazyjit_to_cuda_is_device_to_device(lazyjit):
    _profiler_sees_copies()
    c = torch.randn(1 << 20, device=DEV)
    y = c.to(L) * 3 + 1
    lazyjit.sync()                                    # materialized: the copy alone is profiled
    got, names = _copies(lambda: y.to(DEV))
    assert _kinds(names) == {"DtoD"}, names
    assert got.device == torch.device(DEV, torch.cuda.current_device())
    assert_close(got, c * 3 + 1)
    # Pending values too: the sync's program, then the copy, no host hop.
    got, names = _copies(lambda: (y - 1).exp().to(DEV))
    assert "DtoH" not in _kinds(names), names
    assert_close(got, ((c * 3 + 1) - 1).exp(), rtol=2e-6, atol=1e-6)


def test_lazyjit_to_cpu_is_one_device_to_host_copy(lazyjit):
    _profiler_sees_copies()
    c = torch.randn(1 << 20, device=DEV)
    y = c.to(L) * 2
    lazyjit.sync()
    got, names, moved = _copied_bytes(lambda: y.cpu())
    assert _kinds(names) == {"DtoH"}, names
    assert moved is None or moved == {"DtoH": y.nbytes}, (moved, names)  # the data crossed once
    assert torch.equal(got, (c * 2).cpu())


def test_pinned_host_memory_is_page_locked_and_copies_to_lazyjit(lazyjit):
    x = torch.randn(1 << 20).pin_memory()
    assert x.is_pinned()
    _profiler_sees_copies()
    xl, names, moved = _copied_bytes(lambda: x.to(L, non_blocking=True))
    # Straight from the page-locked memory: no pageable staging copy. (What
    # the profiler calls the source depends on how the host allocator pinned
    # it, "Pinned" for cudaHostAlloc; never "Pageable".)
    assert _kinds(names) == {"HtoD"} and not any("Pageable" in n for n in names), names
    assert moved is None or moved == {"HtoD": x.nbytes}, (moved, names)
    assert torch.equal(xl.cpu(), x)


@kernels_only
def test_item_printing_and_bool_read_the_gpu_data(lazyjit):
    torch.manual_seed(0)
    c = torch.randn(1000, device=DEV)
    l = c.to(L)
    s = (l * 2).sum()
    want = (c * 2).sum()
    assert s.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-4)
    assert int((l > 0).sum()) == int((c > 0).sum())
    assert bool((l.abs() >= 0).all())
    t = torch.tensor([1.5, -2.25], device=DEV).to(L) * 2
    text = repr(t)
    assert "3.0000" in text and "-4.5000" in text and "lazyjit" in text, text


@kernels_only
def test_a_scalar_read_apart_from_a_pending_graph(lazyjit):
    c, m = torch.randn(256, 256, device=DEV), torch.rand(64, device=DEV) + 0.1
    big = (c.to(L) * 3).tanh()                      # pending, not read yet
    ok = (m.to(L) > 0).all()
    assert bool(ok) is True                         # the small part runs apart, on the GPU
    assert_close(big.to(DEV), (c * 3).tanh(), rtol=2e-6, atol=1e-6)


def test_storage_paths_fresh_memory_resize_and_reinterpreting_views(lazyjit):
    # Fresh memory written in part: the rest is zeros made on the GPU.
    t = torch.empty(8, device=L)
    t[2:] = 1.0
    assert torch.equal(t[2:].to(DEV), torch.ones(6, device=DEV))
    # Writes into parts of a storage, from the CPU, from the GPU, recorded.
    c = torch.zeros(6, 5, device=DEV)
    l = c.to(L)
    src = torch.arange(10.0).reshape(2, 5)
    l[1:3] = src
    c[1:3] = src.to(DEV)
    l[4] = torch.ones(5, device=DEV)
    c[4] = 1
    l.t()[0].fill_(7)
    c.t()[0].fill_(7)
    assert torch.equal(l.to(DEV), c)
    # resize_ grows the data on the GPU, keeping the elements.
    r = torch.arange(4.0, device=DEV).to(L)
    r.resize_(10)
    assert r.shape == (10,) and torch.equal(r[:4].cpu(), torch.arange(4.0))
    # A view of another dtype over the same bytes.
    f = torch.randn(16, device=DEV)
    assert torch.equal(f.to(L).view(torch.int32).to(DEV), f.view(torch.int32))


def test_sparse_tensors_round_trip(lazyjit):
    d = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    sl = d.to_sparse().to(L)
    assert torch.equal(sl.to_dense().to(DEV), d.to(DEV))


def test_a_cuda_tensor_in_a_lazyjit_op_is_eagers_device_error(lazyjit):
    l = torch.ones(3, device=L)
    with pytest.raises(RuntimeError, match="same device"):
        l + torch.ones(3, device=DEV)
    # A 0-d CPU tensor is a scalar, as with CUDA.
    assert torch.equal((l * torch.tensor(2.0)).to(DEV), torch.full((3,), 2.0, device=DEV))


# ---- models -----------------------------------------------------------------------


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                               torch.nn.Linear(256, 10))


def test_moving_a_cuda_model_to_lazyjit_copies_device_to_device(lazyjit):
    _profiler_sees_copies()
    model = _mlp().to(DEV)
    lm, names = _copies(lambda: copy.deepcopy(model).to(L))
    assert _kinds(names) == {"DtoD"}, names
    for p, q in zip(lm.parameters(), model.parameters()):
        assert p.device.type == L and torch.equal(p.detach().to(DEV), q.detach())


@kernels_only
def test_mlp_forward_backward_and_training_match_cuda_eager(lazyjit):
    torch.manual_seed(0)
    model = _mlp().to(DEV)
    ref = copy.deepcopy(model)
    lm = copy.deepcopy(model).to(L)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt_l = torch.optim.SGD(lm.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = torch.randn(32, 64, device=DEV), torch.randint(0, 10, (32,), device=DEV)
        out_r = ref(x)
        loss_r = F.cross_entropy(out_r, y)
        opt_r.zero_grad()
        loss_r.backward()
        out_l = lm(x.to(L))
        loss_l = F.cross_entropy(out_l, y.to(L))
        opt_l.zero_grad()
        loss_l.backward()
        if step == 0:
            assert_close(out_l.detach().to(DEV), out_r.detach(), rtol=1e-5, atol=1e-5)
            for p, q in zip(lm.parameters(), ref.parameters()):
                assert_close(p.grad.to(DEV), q.grad, rtol=1e-4, atol=1e-5)
        opt_r.step()
        opt_l.step()
        assert_close(loss_l.detach().to(DEV), loss_r.detach(), rtol=1e-4, atol=1e-5)
    for p, q in zip(lm.parameters(), ref.parameters()):
        assert_close(p.detach().to(DEV), q.detach(), rtol=1e-4, atol=1e-5)


# ---- ops that run at once ---------------------------------------------------------


def test_step_mode_runs_each_op_on_the_gpu(lazyjit):
    torch.manual_seed(0)
    x, w = torch.randn(64, 128, device=DEV), torch.randn(128, 32, device=DEV)
    names, outs = [], []
    h = lazyjit.add_op_hook(lambda n, i, o: (names.append(n), outs.append(o)))
    try:
        with lazyjit.step_mode():
            xl, wl = x.to(L), w.to(L)
            before = lazyjit.metrics()
            y = F.gelu(xl @ wl).softmax(-1)
            after = lazyjit.metrics()
    finally:
        h.remove()
    assert after["step_ops"] - before["step_ops"] >= 3
    assert after["compiles"] == before["compiles"]
    # CUDA eager's kernels on the same data: the same bits.
    assert torch.equal(y.to(DEV), F.gelu(x @ w).softmax(-1))
    assert "aten::mm" in names and "aten::gelu" in names, names
    mm_out = outs[names.index("aten::mm")][0]
    assert torch.equal(mm_out.to(DEV), x @ w)


def test_step_mode_in_place_ops_and_views(lazyjit):
    c = torch.randn(4, 6, device=DEV)
    with lazyjit.step_mode():
        d = c.to(L)
        d.t()[1:3].mul_(-1)
        d[::2].add_(10)
    e = c.clone()
    e.t()[1:3].mul_(-1)
    e[::2].add_(10)
    assert torch.equal(d.to(DEV), e)


def test_data_dependent_ops_run_at_once_on_the_gpu(lazyjit):
    torch.manual_seed(0)
    c = torch.randn(50, 40, device=DEV)
    l = c.to(L)
    assert torch.equal(torch.nonzero(l > 0.5).to(DEV), torch.nonzero(c > 0.5))
    assert torch.equal(l[l > 1].to(DEV), c[c > 1])
    assert torch.equal(torch.unique(l.round()).to(DEV), torch.unique(c.round()))


def test_random_draws_are_cuda_eager_draws(lazyjit):
    torch.manual_seed(0)
    a, b = torch.rand(1000, device=L), torch.randn(7, 9, device=L)
    torch.manual_seed(0)
    c, d = torch.rand(1000, device=DEV), torch.randn(7, 9, device=DEV)
    assert torch.equal(a.to(DEV), c) and torch.equal(b.to(DEV), d)


def test_dropout_draws_on_the_gpu_and_scales_what_it_keeps(lazyjit):
    x = torch.randn(256, 256, device=DEV)
    torch.manual_seed(1)
    first = F.dropout(x.to(L), 0.5, training=True).to(DEV)
    torch.manual_seed(1)
    again = F.dropout(x.to(L), 0.5, training=True).to(DEV)
    assert torch.equal(first, again)                 # seeded: the CUDA generator's draws
    kept = first != 0
    assert 0.45 < kept.float().mean().item() < 0.55
    assert_close(first[kept], x[kept] * 2)


# ---- debugging: NaN pinning and the compiled-vs-eager check ------------------------


@pytest.fixture
def nans(lazyjit):
    lazyjit.debug_nans(True)
    yield
    lazyjit.debug_nans(False)


@kernels_only
def test_a_nan_is_pinned_to_its_op_and_line(lazyjit, nans):
    torch.manual_seed(0)
    w, x = torch.randn(8, 8, device=DEV), torch.randn(4, 8, device=DEV)
    wl, xl = w.to(L), x.to(L)
    h = torch.tanh(xl @ wl) * 2
    at = _line_after()
    y = torch.log(h - 0.5) + 1
    z = (y * 3).sum(-1)
    with pytest.raises(RuntimeError) as e:
        z.cpu()
    msg = str(e.value)
    assert "lazyjit.debug_nans" in msg and "log (op #" in msg and f"test_device_route.py:{at}" in msg, msg
    assert "its inputs: [4, 8] Float" in msg and " 0 NaN, 0 Inf" in msg.split("its inputs:")[1], msg
    # The tensors keep what was computed: CUDA eager's values, NaN included.
    want = ((torch.log(torch.tanh(x @ w) * 2 - 0.5) + 1) * 3).sum(-1)
    torch.testing.assert_close(z.to(DEV), want, equal_nan=True, rtol=1e-5, atol=1e-5)


@kernels_only
def test_nan_checks_on_gpu_inputs_and_finite_results(lazyjit, nans):
    x = torch.tensor([1.0, float("nan")], device=DEV)
    with pytest.raises(RuntimeError, match="graph input 0 already holds one"):
        (x.to(L) * 2).cpu()
    y = torch.randn(16, 16, device=DEV)
    assert_close((torch.tanh(y.to(L)) @ y.to(L)).to(DEV), torch.tanh(y) @ y, rtol=1e-5, atol=1e-5)
    lazyjit.debug_nans(False)
    assert torch.isnan((torch.zeros(3, device=DEV).to(L) / 0).to(DEV)).all()


@pytest.fixture
def check(lazyjit, tmp_path):
    lazyjit.check_graphs(True, str(tmp_path / "repro"))
    yield tmp_path / "repro"
    lazyjit.check_graphs(False)


@kernels_only
def test_the_check_against_cuda_eager_raises_no_false_alarm(lazyjit, check):
    torch.manual_seed(0)
    x, w = torch.randn(32, 64, device=DEV), torch.randn(64, 64, device=DEV)
    xl, wl = x.to(L), w.to(L)

    def f(x, w):
        h = torch.tanh(x @ w) * 0.5 + torch.sigmoid(x)
        return (h.softmax(-1) * 3).sum(-1), F.layer_norm(h, (64,)), (h * h).amax(-1), h.exp().mean(0)

    for got, want in zip(f(xl, wl), f(x, w)):
        assert_close(got.to(DEV), want, rtol=1e-5, atol=1e-5)
    model = _mlp().to(DEV)
    lm = copy.deepcopy(model).to(L)
    F.cross_entropy(lm(xl), torch.randint(0, 10, (32,), device=DEV).to(L)).backward()
    lazyjit.sync()
    assert not check.exists(), list(check.iterdir())


_FAULT_SCRIPT = r'''
import sys, torch, lazyjit
torch.manual_seed(0)
x = torch.rand(4, 16) + 0.5
y = torch.rand(4, 16) + 0.5
xl, yl = x.to("cuda").to("lazyjit"), y.to("cuda").to("lazyjit")
def f(x, y):
    return (x * y + 1).exp()
try:
    got = f(xl, yl).cpu()
except RuntimeError as e:
    print("RAISED", e)
    sys.exit(3)
want = f(x.cuda(), y.cuda()).cpu()
print("MATCH" if torch.allclose(got.double(), want.double(), rtol=1e-4, atol=1e-5) else "WRONG")
'''


def _run_fault(tmp_path, check, fault):
    path = tmp_path / "fault_mul.py"
    path.write_text(_FAULT_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LAZYJIT_CACHE="off", LAZYJIT_TARGET="cuda")
    env.pop("LAZYJIT_FAULT", None)
    env.pop("LAZYJIT_CHECK", None)
    if fault:
        env["LAZYJIT_FAULT"] = "mul"
    if check:
        env["LAZYJIT_CHECK"] = "1"
    return subprocess.run([sys.executable, str(path)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def test_a_planted_fault_in_a_gpu_kernel_is_found_and_its_gpu_inputs_written(tmp_path):
    p = _run_fault(tmp_path, check=False, fault=True)
    assert p.returncode == 0 and "WRONG" in p.stdout, (p.stdout, p.stderr[-3000:])  # the fault is real
    p = _run_fault(tmp_path, check=True, fault=False)
    assert p.returncode == 0 and "MATCH" in p.stdout, (p.stdout, p.stderr[-3000:])
    assert not (tmp_path / "lazyjit_repro").exists()
    p = _run_fault(tmp_path, check=True, fault=True)
    assert p.returncode == 3, (p.stdout, p.stderr[-3000:])
    msg = p.stdout
    assert "lazyjit.check" in msg and "mul (op #" in msg and "differs from eager" in msg, msg
    dirs = list((tmp_path / "lazyjit_repro").iterdir())
    assert len(dirs) == 1 and str(dirs[0]) in msg, (dirs, msg)
    # The repro's inputs are the GPU data, copied to the host.
    torch.manual_seed(0)
    x = torch.rand(4, 16) + 0.5
    y = torch.rand(4, 16) + 0.5
    inputs = sorted(dirs[0].glob("input*.bin"))
    assert len(inputs) == 2, inputs
    got = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.float32).reshape(4, 16) for f in inputs]
    assert any(torch.equal(g, x) for g in got) and any(torch.equal(g, y) for g in got)
