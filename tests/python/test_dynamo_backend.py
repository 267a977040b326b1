"""torch.compile(fn, backend="lazyjit") (python/lazyjit/dynamo.py, tracer/capture.h):
what a captured graph does with its arguments, eager as the oracle."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import lazyjit
import lazyjit.dynamo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compiled(fn):
    return torch.compile(fn, backend="lazyjit")


def mlp_and_copy(width, hidden, out):
    """A Linear-GELU-Linear model and an equal copy of it (the eager reference)."""
    torch.manual_seed(0)
    m, ref = (torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, out))
              for _ in range(2))
    ref.load_state_dict(m.state_dict())
    return m, ref


def test_backend_is_found_without_importing_lazyjit():
    # The torch_dynamo_backends entry point (pyproject.toml) names it; the
    # subprocess never imports lazyjit itself.
    code = ("import sys, torch\n"
            "f = torch.compile(lambda x: (x * 2).sin(), backend='lazyjit')\n"
            "x = torch.randn(3, 5)\n"
            "assert torch.allclose(f(x), (x * 2).sin())\n"
            "import lazyjit.dynamo\n"
            "assert lazyjit.dynamo.stats()['calls'] == 1, lazyjit.dynamo.stats()\n"
            "print('ok', 'lazyjit' in torch._dynamo.list_backends())\n")
    r = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=300,
                       env={**os.environ, "LAZYJIT_CACHE": "off"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", "True"]


def test_runs_from_the_program_after_one_capture():
    def f(x, y):
        return (x * 2 + y).relu().sum(-1), torch.tanh(x) * y

    f_c = compiled(f)
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    before = lazyjit.metrics()["ops_traced"]
    for _ in range(4):
        for got, want in zip(f_c(x, y), f(x, y)):
            torch.testing.assert_close(got, want)
    s = lazyjit.dynamo.stats()
    assert (s["graphs"], s["captures"], s["calls"], s["eager_graphs"]) == (1, 1, 4, 0)
    # Recorded once, at the capture; the calls record nothing.
    traced = lazyjit.metrics()["ops_traced"] - before
    f_c(x, y)
    assert lazyjit.metrics()["ops_traced"] - before == traced


def test_in_place_op_on_an_argument_is_written_back():
    def f(x, y):
        x.add_(1)
        y[0].mul_(3)
        return x * y

    args = [torch.randn(4, 4), torch.randn(4, 4)]
    want_args = [a.clone() for a in args]
    got = compiled(f)(*args)
    want = f(*want_args)
    torch.testing.assert_close(got, want)
    for a, w in zip(args, want_args):
        torch.testing.assert_close(a, w)


def test_views_of_arguments_alias_them_as_in_eager():
    def f(x):
        return x.t(), x[1:], x * 2

    x = torch.randn(4, 5)
    t, tail, doubled = compiled(f)(x)
    assert t.data_ptr() == x.data_ptr() and t.stride() == (1, 5)
    assert tail.data_ptr() == x[1:].data_ptr()
    x.zero_()
    assert t.abs().sum() == 0 and doubled.abs().sum() > 0


def test_strided_expanded_and_offset_arguments():
    f = compiled(lambda x, b, s: (x + b).exp() * s)
    x = torch.randn(5, 3).t()                   # transposed
    b = torch.randn(5).expand(3, 5)             # stride 0
    s = torch.randn(10, 5)[2:5]                 # storage offset
    torch.testing.assert_close(f(x, b, s), (x + b).exp() * s)
    # Other strides for the same sizes: captured again, still right.
    x2 = torch.randn(3, 5)
    torch.testing.assert_close(f(x2, b, s), (x2 + b).exp() * s)
    assert lazyjit.dynamo.stats()["captures"] == 2


def test_dropout_draws_anew_on_every_call():
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5))
    m_c = compiled(m)
    x = torch.randn(128, 64)
    with torch.no_grad():
        a, b = m_c(x), m_c(x)
        kept = m[0](x) * 2  # what survives dropout is scaled by 1 / (1 - p)
    assert not torch.equal(a == 0, b == 0)
    for out in (a, b):
        zero = (out == 0).float().mean().item()
        assert 0.45 < zero < 0.55, zero
        torch.testing.assert_close(out[out != 0], kept[out != 0])


def test_value_needed_while_recording_runs_through_aten():
    # An output shape that depends on values (a boolean mask) needs the values
    # while the graph is recorded.
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    try:
        def f(x):
            return x[x > 0].sum() * x

        x = torch.randn(4, 4)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = compiled(f)(x)
        torch.testing.assert_close(got, f(x))
        s = lazyjit.dynamo.stats()
        assert s["eager_graphs"] == 1
        assert "needs a tensor's value while the graph is recorded" in s["eager_reasons"][0]
        assert "test_dynamo_backend.py" in s["eager_reasons"][0]
        assert any("runs through ATen op by op" in str(x.message) for x in w)
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False


def test_item_of_a_graph_value_is_captured():
    # AOTAutograd turns the .item() read into tensor ops: nothing runs through ATen.
    torch._dynamo.config.capture_scalar_outputs = True
    try:
        def f(x):
            return x * x.sum().item()

        x = torch.randn(4, 4)
        torch.testing.assert_close(compiled(f)(x), f(x))
        assert lazyjit.dynamo.stats()["eager_graphs"] == 0
    finally:
        torch._dynamo.config.capture_scalar_outputs = False


def test_failing_op_raises_eagers_error():
    f = compiled(lambda x, i: x[i] * 2)
    with pytest.raises(IndexError, match="out of bounds"):
        f(torch.randn(4), torch.tensor([7]))
    # The program is kept: its data was bad, not its code.
    torch.testing.assert_close(f(torch.arange(4.0), torch.tensor([3])), torch.tensor([6.0]))


def test_tensors_on_the_lazyjit_device_are_recorded_on_it():
    x = torch.randn(4, 4)
    got = compiled(lambda t: t.sin() * 2)(x.to("lazyjit"))
    assert got.device.type == "lazyjit"
    torch.testing.assert_close(got.cpu(), x.sin() * 2)


def test_training_compiles_forward_and_backward_once():
    m, ref = mlp_and_copy(16, 32, 4)
    m_c = compiled(m)
    opt, opt_ref = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        for model, o in ((m_c, opt), (ref, opt_ref)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            o.step()
            if model is m_c:
                got = loss.item()
            else:
                torch.testing.assert_close(got, loss.item())
        if step == 0:
            after_first = (lazyjit.dynamo.stats()["captures"], lazyjit.metrics()["compiles"])
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    s = lazyjit.dynamo.stats()
    assert s["graphs"] == 2 and s["captures"] == 2 and s["eager_graphs"] == 0  # a forward and a backward
    assert (s["captures"], lazyjit.metrics()["compiles"]) == after_first


def test_new_batch_sizes_need_no_llvm_work():
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    mlp_c = compiled(mlp)
    llvm = []
    binds = lazyjit.metrics()["shape_binds"]
    with torch.no_grad():
        for n in [2, 3, 5, 8, 13, 21, 34]:
            x = torch.randn(n, 16)
            torch.testing.assert_close(mlp_c(x), mlp(x))
            llvm.append(lazyjit.metrics()["llvm_compiles"])
    # Dynamo marks the batch dim dynamic at the second size; lazyjit's kernels
    # are shape-generic from then on.
    assert llvm[2:] == [llvm[1]] * (len(llvm) - 2), llvm
    assert lazyjit.dynamo.stats()["graphs"] <= 2
    # lazyjit's own compiles are explained under Dynamo's compile id; its
    # programs then bind to each new size (no compile).
    ours = [r for r in lazyjit.explain_recompiles() if r["site"].startswith("torch.compile [")]
    assert ours, lazyjit.explain_recompiles()
    assert lazyjit.metrics()["shape_binds"] - binds >= 4, lazyjit.metrics()


def _decode_step(cache, x, w):
    """A decode step's shape pattern: a cache one row longer each call."""
    cache = torch.cat([cache, x @ w], dim=0)
    return torch.softmax(cache @ x.t(), dim=0).t() @ cache, cache


def test_every_size_of_a_growing_cache_is_captured_once():
    # 40 lengths (a generate's steps), each captured on its first call; the
    # second pass finds all of them, however many sizes were captured.
    step = torch.compile(_decode_step, backend="lazyjit", dynamic=True)  # one Dynamo graph
    w = torch.randn(8, 8)
    x = torch.randn(1, 8)
    start = torch.randn(2, 8)

    def generate():
        cache = start
        for _ in range(40):
            out, new = step(cache, x, w)
            want_out, want_new = _decode_step(cache, x, w)
            torch.testing.assert_close(out, want_out)
            torch.testing.assert_close(new, want_new)
            cache = new

    generate()
    first = lazyjit.dynamo.stats()
    assert (first["graphs"], first["captures"], first["eager_graphs"]) == (1, 40, 0), first
    generate()
    second = lazyjit.dynamo.stats()
    assert second["captures"] == first["captures"], (first, second)
    assert second["calls"] - first["calls"] == 40, (first, second)


def test_captures_past_the_limit_drop_the_least_recently_used(monkeypatch):
    monkeypatch.setattr(lazyjit.dynamo, "MAX_CAPTURES", 3)
    graphs = []  # the LazyjitGraph objects torch.compile makes
    init = lazyjit.dynamo.LazyjitGraph.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        graphs.append(self)

    monkeypatch.setattr(lazyjit.dynamo.LazyjitGraph, "__init__", recording_init)
    step = torch.compile(_decode_step, backend="lazyjit", dynamic=True)
    w, x = torch.randn(8, 8), torch.randn(1, 8)
    caches = [torch.randn(n, 8) for n in (2, 3, 4, 5)]

    def run(cache):
        out, new = step(cache, x, w)
        want_out, want_new = _decode_step(cache, x, w)
        torch.testing.assert_close(out, want_out)
        torch.testing.assert_close(new, want_new)

    for c in caches:
        run(c)
    assert [(len(g.programs), len(g.templates)) for g in graphs] == [(3, 3)]
    s = lazyjit.dynamo.stats()
    run(caches[-1])  # the most recent: still there
    assert lazyjit.dynamo.stats()["captures"] == s["captures"]
    run(caches[0])  # the least recently used, dropped for the fourth: captured again
    assert lazyjit.dynamo.stats()["captures"] == s["captures"] + 1
    run(caches[1])  # dropped for that one, as the least recently used then
    assert lazyjit.dynamo.stats()["captures"] == s["captures"] + 2
    run(caches[-1])  # used more recently than the two it made room for: kept
    assert lazyjit.dynamo.stats()["captures"] == s["captures"] + 2
    assert [(len(g.programs), len(g.templates)) for g in graphs] == [(3, 3)]


def test_cpu_devices_inside_the_graph_stay_in_the_program():
    # transformers' GPT-2 moves position embeddings with .to(device) inside forward.
    def f(x):
        y = (x * 2).to("cpu") + torch.ones(3, device="cpu")
        return y.cpu().exp() + torch.arange(3, device=torch.device("cpu"))

    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(f)(x), f(x))
    assert lazyjit.dynamo.stats()["eager_graphs"] == 0


@pytest.mark.parametrize("opt_class", [torch.optim.AdamW, torch.optim.SGD])
def test_compiled_optimizer_step_updates_parameters_and_state(opt_class):
    # Dynamo hands an optimizer's parameters and state to the backend as
    # attributes of its graph, updated in place: they are bound on each call.
    torch.manual_seed(0)
    models = [torch.nn.Linear(8, 8) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    kw = {"lr": 0.05, "momentum": 0.9} if opt_class is torch.optim.SGD else {"lr": 0.05}
    opts = [opt_class(m.parameters(), **kw) for m in models]
    w0 = models[0].weight.detach().clone()
    step = compiled(opts[0].step)
    for _ in range(3):
        x = torch.randn(4, 8)
        for m, o, do_step in ((models[0], opts[0], step), (models[1], opts[1], opts[1].step)):
            o.zero_grad()
            m(x).square().sum().backward()
            do_step()
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q)
    assert (models[0].weight - w0).abs().max() > 1e-3
    for k, v in opts[1].state[models[1].weight].items():
        torch.testing.assert_close(opts[0].state[models[0].weight][k], v)
    assert lazyjit.dynamo.stats()["eager_graphs"] == 0


def test_big_results_of_library_steps_reuse_their_pages_across_steps():
    # A compiled backward returns fresh weight gradients (a GEMM, an ATen
    # library step) every step. While a program runs, ATen's big allocations come
    # from lazyjit's buffer pool (executor/buffer_pool.h), so each step reuses
    # the pages the last step's gradients freed instead of faulting in new ones
    # (glibc trimmed and regrew its heap every step: ~10k faults per step of
    # bench e).
    import resource
    m, ref = mlp_and_copy(512, 2048, 512)
    m_c = compiled(m)
    x, y = torch.randn(64, 512), torch.randn(64, 512)
    faults = []
    for step in range(6):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        m_c.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(m_c(x), y).backward()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    ref.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(ref(x), y).backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    # Two 4 MiB weight gradients: ~2,000 pages a step when faulted anew.
    grad_pages = sum(p.numel() * 4 for p in m.parameters()) // 4096
    assert max(faults[3:]) < grad_pages // 4, (faults, grad_pages)
    assert lazyjit.dynamo.stats()["eager_graphs"] == 0


def _in_place_cases():
    # (function of (x, y) that updates x in place, stored in place?)
    def scale(x, y):  # the update's kernel reads x only for the new x
        x.mul_(0.5).add_(y)
        return None

    def read_before(x, y):  # the old x is read too: in place only if its kernel comes first
        z = (x * 3).sum()
        x.add_(y)
        return z

    def read_old_after(x, y):  # the old x is read by a step after the update: copied
        old = x.clone()
        x.add_(1)
        return torch.mm(old, y)

    def read_new_after(x, y):  # what is read after is the new value: in place
        x.add_(y)
        return x * 2

    def reduction_reads(x, y):  # a row reduction over x beside its update
        s = x.softmax(-1)
        x.sub_(y)
        return s

    return [(scale, True), (read_before, None), (read_old_after, False), (read_new_after, True),
            (reduction_reads, None)]


@pytest.mark.parametrize("fn,in_place", _in_place_cases(), ids=lambda c: getattr(c, "__name__", str(c)))
def test_in_place_updates_of_arguments_are_computed_where_they_lie(fn, in_place):
    # An optimizer step's updates are stored straight into the argument by their
    # kernel (executor/store_in_place.h) when nothing after reads the old
    # values; otherwise copied in after the run. Either way, eager's results,
    # the caller's own memory, and a bumped version counter.
    f_c = compiled(fn)
    for step in range(3):
        x, y = torch.randn(64, 64), torch.randn(64, 64)
        x_ref = x.clone()
        want = fn(x_ref, y)
        ptr, version = x.data_ptr(), x._version
        before = lazyjit.metrics()["argument_copies"]
        got = f_c(x, y)
        copies = lazyjit.metrics()["argument_copies"] - before
        torch.testing.assert_close(x, x_ref)
        if want is not None:
            torch.testing.assert_close(got, want)
        assert x.data_ptr() == ptr and x._version > version
        if in_place is not None and step > 0:
            assert copies == (0 if in_place else 1)
    assert lazyjit.dynamo.stats()["eager_graphs"] == 0


def test_compiled_adamw_updates_parameters_and_state_in_place():
    torch.manual_seed(0)
    models = [torch.nn.Linear(256, 128) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=0.01) for m in models]
    step = compiled(opts[0].step)
    x = torch.randn(32, 256)
    for i in range(3):
        for m, o, do_step in ((models[0], opts[0], step), (models[1], opts[1], opts[1].step)):
            o.zero_grad()
            m(x).square().mean().backward()
            if i == 2 and do_step is step:
                ptrs = [p.data_ptr() for p in m.parameters()]
                state = [t.data_ptr() for p in m.parameters() for t in opts[0].state[p].values()]
                before = lazyjit.metrics()["argument_copies"]
            do_step()
    assert lazyjit.metrics()["argument_copies"] - before <= 2  # the two step counters at most
    assert [p.data_ptr() for p in models[0].parameters()] == ptrs
    assert [t.data_ptr() for p in models[0].parameters() for t in opts[0].state[p].values()] == state
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q)
        for k, v in opts[1].state[q].items():
            torch.testing.assert_close(opts[0].state[p][k], v)


def test_an_update_before_a_failing_op_is_kept_as_in_eager():
    # Eager doubles x, then raises at the index; the compiled call does the
    # same, with x's version counter bumped.
    def f(x, idx):
        x.mul_(2)
        return x[idx] + 1

    f_c = compiled(f)
    x = torch.randn(4096)
    f_c(x.clone(), torch.tensor([1]))  # captured with a valid index
    x0 = x.clone()
    with pytest.raises(IndexError):
        f(x0, torch.tensor([5000]))
    version = x._version
    with pytest.raises(IndexError):
        f_c(x, torch.tensor([5000]))
    torch.testing.assert_close(x, x0)
    assert x._version > version


def test_a_graph_without_tensor_arguments_makes_its_tensors_where_eager_does():
    """A graph of factories only (Llama's causal mask, after FSDP2's hooks split the
    forward) has no argument that says where it runs: its tensors go where its
    factories put them. The mask came back on the CPU, and the next graph, on the
    device, failed: "Tensor device mismatch"."""
    def mask(n):
        i = torch.arange(n, device="lazyjit")
        return torch.where(i[None, :] <= i[:, None], 0.0, float("-inf")), torch.arange(3)

    for n in (4, 4):
        got, on_cpu = compiled(mask)(n)
        want, want_cpu = mask(n)
        assert got.device == want.device and on_cpu.device == want_cpu.device
        torch.testing.assert_close(got.cpu(), want.cpu())
        torch.testing.assert_close(on_cpu, want_cpu)
