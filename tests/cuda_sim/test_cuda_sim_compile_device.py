"""torch.compile(backend="lazyjit") on lazyjit tensors under cuda-sim: each call
runs the captured program's CUDA kernels on the simulated GPU, with nothing
recorded op by op (python/lazyjit/dynamo.py, tracer/device_call.h); CPU eager is
the oracle."""
import torch

import lazyjit
import lazyjit.dynamo

from conftest import DEV, launches


def test_a_compiled_graph_on_the_device_launches_its_kernels_and_records_nothing():
    torch._dynamo.reset()
    lazyjit.dynamo.reset_stats()

    def f(x, w, b):
        h = torch.nn.functional.gelu(x @ w + b)
        return (h * torch.sigmoid(h)).sum(-1), h.tanh()

    f_c = torch.compile(f, backend="lazyjit")
    x, w, b = torch.randn(8, 32), torch.randn(32, 32), torch.randn(32)
    xl, wl, bl = x.to(DEV), w.to(DEV), b.to(DEV)
    want = f(x, w, b)
    for got, ref in zip(f_c(xl, wl, bl), want):
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-5)
    lazyjit.sync()
    traced, launched = lazyjit.metrics()["ops_traced"], launches()
    for _ in range(3):
        got = f_c(xl, wl, bl)
    assert lazyjit.metrics()["ops_traced"] == traced  # before: 8 ops recorded a call
    assert launches() > launched  # the program's kernels ran on the simulated GPU
    for g, ref in zip(got, want):
        assert g.device.type == DEV
        torch.testing.assert_close(g.cpu(), ref, rtol=1e-4, atol=1e-5)
    s = lazyjit.dynamo.stats()
    assert s["captures"] == 1 and s["device_calls"] == 4 and s["eager_graphs"] == 0, s
    torch._dynamo.reset()


def test_pending_inputs_and_in_place_updates_on_the_simulated_gpu():
    torch._dynamo.reset()

    def f(x, acc):
        acc.add_(x.exp())
        return acc * 2

    f_c = torch.compile(f, backend="lazyjit")
    x = torch.randn(64)
    acc, accl = torch.zeros(64), torch.zeros(64).to(DEV)
    for step in range(3):
        xl = x.to(DEV) * step          # pending at the call
        seen = accl + 0                # reads acc before the call writes it
        got = f_c(xl, accl)
        want_seen = acc + 0
        want = f(x * step, acc)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(accl.cpu(), acc, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(seen.cpu(), want_seen, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def test_small_ops_around_a_compiled_call_run_at_once_on_the_devices_data():
    # Eager around compiled programs (tracer/record_op.cpp's at_once): under
    # cuda-sim too, the loop around the call runs at once, nothing recorded.
    torch._dynamo.reset()
    lazyjit.sync()
    f_c = torch.compile(lambda x: torch.tanh(x) * 2, backend="lazyjit")
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0))
    y = f_c(x.to(DEV))
    m0 = lazyjit.metrics()
    scores = torch.where(torch.isin(torch.arange(1000, device=DEV), torch.tensor([3, 7], device=DEV)),
                         torch.full((), -1.0, device=DEV), y)
    best = scores.argmax(-1)
    done = (best == 3).any().item()
    m1 = lazyjit.metrics()
    assert m1["ops_at_once"] - m0["ops_at_once"] >= 5, (m0["ops_at_once"], m1["ops_at_once"])
    assert m1["syncs"] == m0["syncs"]
    yr = torch.tanh(x) * 2
    want = torch.where(torch.isin(torch.arange(1000), torch.tensor([3, 7])), torch.full((), -1.0), yr).argmax(-1)
    assert best.cpu().tolist() == want.tolist() and done == bool((want == 3).any())
    torch._dynamo.reset()
