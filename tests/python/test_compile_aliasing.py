"""torch.compile(backend="lazyjit") with arguments that are views of one buffer
(python/lazyjit/dynamo.py, tracer/capture.cpp): a write through one argument is
seen through the others, as in eager. Eager on copies of the same buffers is
the oracle; grad and no-grad paths both."""
import pytest
import torch

import lazyjit
import lazyjit.dynamo


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    lazyjit.dynamo.reset_stats()
    yield
    torch._dynamo.reset()


def add_then_read(x, y):
    x.add_(1)
    return y * 1


def add_and_mul(x, y):
    x.add_(1)
    y.mul_(2)


def add_mul_sum(x, y):
    x.add_(1)
    y.mul_(2)
    return x + y


def write_both_read_one(x, y):
    y.copy_(x * 3)
    x.sub_(1)
    return y.sum() + x.sum()


# (function, buffer size, how the arguments view the buffer)
CASES = [
    (add_then_read, 6, lambda a: (a[0:4], a[2:6])),
    (add_and_mul, 6, lambda a: (a[::2], a[1::2])),
    (add_and_mul, 6, lambda a: (a[0:4], a[2:6])),
    (add_mul_sum, 6, lambda a: (a.view(2, 3), a.view(3, 2).t())),
    (add_mul_sum, 12, lambda a: (a.view(3, 4)[:, 1:3], a.view(3, 4)[:, 2:4])),
    (write_both_read_one, 8, lambda a: (a[:4], a[4:])),  # disjoint views of one storage
    (write_both_read_one, 8, lambda a: (a[1:5], a[3:7])),
    (add_then_read, 6, lambda a: (a, a[1:3])),  # a base and its view
]


def _run(fn, size, views, compiled):
    base = torch.arange(float(size))
    out = compiled(*views(base))
    return out, base


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad_enabled"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_writes_through_aliased_views_match_eager(case, grad):
    fn, size, views = CASES[case]
    cf = torch.compile(fn, backend="lazyjit")
    with torch.set_grad_enabled(grad):
        for _ in range(3):  # the capture's call and the program's
            want, want_base = _run(fn, size, views, fn)
            got, got_base = _run(fn, size, views, cf)
            torch.testing.assert_close(got_base, want_base, rtol=0, atol=0)
            if want is not None:
                torch.testing.assert_close(got, want, rtol=0, atol=0)
            else:
                assert got is None


def test_aliasing_that_appears_after_the_capture_is_seen():
    # Captured for separate buffers (the program takes each as its own), then
    # called with views of one: the program cannot serve that call.
    cf = torch.compile(add_then_read, backend="lazyjit")
    with torch.no_grad():
        for _ in range(2):
            a, b = torch.zeros(6), torch.zeros(6)
            torch.testing.assert_close(cf(a[0:4], b[2:6]), torch.zeros(4))
        calls = lazyjit.dynamo.stats()["calls"]
        assert calls >= 1, lazyjit.dynamo.stats()
        a = torch.zeros(6)
        got = cf(a[0:4], a[2:6])
        torch.testing.assert_close(got, torch.tensor([1.0, 1.0, 0.0, 0.0]), rtol=0, atol=0)
        torch.testing.assert_close(a, torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0]), rtol=0, atol=0)
        assert lazyjit.dynamo.stats()["shared_memory_calls"] == 1, lazyjit.dynamo.stats()
        # Separate buffers again: served by the program.
        a, b = torch.zeros(6), torch.zeros(6)
        torch.testing.assert_close(cf(a[0:4], b[2:6]), torch.zeros(4))
        assert lazyjit.dynamo.stats()["calls"] == calls + 1, lazyjit.dynamo.stats()


def test_aliased_from_the_first_call_is_compiled():
    # Views of one buffer from the start: AOTAutograd's synthetic base makes
    # them views inside one graph, which lazyjit compiles and runs.
    cf = torch.compile(add_and_mul, backend="lazyjit")
    with torch.no_grad():
        for _ in range(3):
            want = torch.arange(6.0)
            add_and_mul(want[::2], want[1::2])
            got = torch.arange(6.0)
            cf(got[::2], got[1::2])
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    stats = lazyjit.dynamo.stats()
    assert stats["calls"] >= 2 and stats["eager_graphs"] == 0, stats


def test_read_only_views_of_one_buffer_stay_compiled():
    # Nothing written: sharing memory is harmless and the program serves it.
    def f(x, y):
        return x * 2 + y

    cf = torch.compile(f, backend="lazyjit")
    with torch.no_grad():
        for _ in range(3):
            a = torch.randn(8)
            torch.testing.assert_close(cf(a[:4], a[4:]), f(a[:4], a[4:]))
    stats = lazyjit.dynamo.stats()
    assert stats["calls"] == 3 and stats["shared_memory_calls"] == 0, stats


def test_optimizer_style_update_of_views_of_one_flat_buffer():
    # Parameters that are views of one flat buffer (as FSDP's flat params),
    # updated in place with grads that are views of another.
    flat = torch.randn(20)
    grads = torch.randn(20)
    ref = flat.clone()

    def step(p1, p2, g1, g2):
        p1.add_(g1, alpha=-0.1)
        p2.add_(g2, alpha=-0.1)
        return p1.sum() + p2.sum()

    cf = torch.compile(step, backend="lazyjit")
    with torch.no_grad():
        for _ in range(3):
            want = step(ref[:12], ref[8:], grads[:12], grads[8:])
            got = cf(flat[:12], flat[8:], grads[:12], grads[8:])
            torch.testing.assert_close(flat, ref, rtol=0, atol=0)
            torch.testing.assert_close(got, want)


def test_aliased_views_of_a_tensor_that_needs_grad():
    # The grad path (AOTAutograd): values and gradients as eager's.
    def f(x, y):
        x.mul_(2)
        return (y * y).sum()

    cf = torch.compile(f, backend="lazyjit")
    for _ in range(3):
        results = []
        for fn in (f, cf):
            leaf = torch.linspace(-1, 1, 8, requires_grad=True)
            base = leaf * 1.5
            loss = fn(base[0:5], base[3:8])
            loss.backward()
            results.append((loss.detach(), base.detach(), leaf.grad))
        for want, got in zip(*results):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
