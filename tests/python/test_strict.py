"""Strict regions (lazyjit.strict()): a hot loop that must stay compiled raises at
the first implicit sync, eager fallback or compile inside it, naming what and
where, before anything runs; the tensors stay pending and compute as eager's."""
import inspect

import pytest
import torch

import lazyjit
from conftest import DEV


def step(x, w):
    return torch.tanh(x @ w) * 2 + 1


def next_line():
    return inspect.currentframe().f_back.f_lineno + 1


def test_a_warm_step_with_an_explicit_sync_runs_silently(fresh):
    w = torch.randn(8, 8)
    wl = w.to(DEV)
    x = torch.randn(4, 8)
    step(x.to(DEV), wl).cpu()  # compiled outside the region
    with lazyjit.strict():
        y = step(x.to(DEV), wl)
        lazyjit.sync()
    torch.testing.assert_close(y.cpu(), step(x, w))


def test_an_implicit_sync_raises_and_loses_nothing(fresh):
    w, x = torch.randn(8, 8), torch.randn(4, 8)
    y = step(x.to(DEV), w.to(DEV))
    with lazyjit.strict():
        at = next_line() + 1  # the line inside the pytest.raises block
        with pytest.raises(RuntimeError) as e:
            y.sum().item()
    msg = str(e.value)
    assert "implicit sync" in msg and f"test_strict.py:{at}" in msg, msg
    torch.testing.assert_close(y.cpu(), step(x, w))  # still pending, then computed


def test_an_eager_fallback_raises_naming_the_op(fresh):
    x = torch.tensor([0.0, 1.0, 0.0, 2.0]).to(DEV)
    lazyjit.sync()
    with lazyjit.strict():
        at = next_line() + 1
        with pytest.raises(RuntimeError) as e:
            torch.nonzero(x)
    msg = str(e.value)
    assert "nonzero" in msg and "eagerly" in msg and f"test_strict.py:{at}" in msg, msg
    assert torch.nonzero(x).cpu().tolist() == [[1], [3]]  # outside: runs


def sync_here():
    lazyjit.sync()  # one sync call site, whoever calls it


def test_a_compile_raises_with_its_explanation_and_loses_nothing(fresh):
    w = torch.randn(8, 8)
    wl = w.to(DEV)
    y4 = step(torch.randn(4, 8).to(DEV), wl)  # kept alive: a dead result compiles nothing
    sync_here()
    x = torch.randn(5, 8)  # a new batch size, marked static: a program to build
    with lazyjit.strict():
        xl = x.to(DEV)
        lazyjit.mark_static(xl, 0)
        y = step(xl, wl)
        with pytest.raises(RuntimeError) as e:
            sync_here()
    msg = str(e.value)
    assert "a compile in a strict region" in msg and "4 → 5" in msg, msg
    compiles = lazyjit.metrics()["compiles"]
    torch.testing.assert_close(y.cpu(), step(x, w))  # still pending; compiled now, outside
    assert lazyjit.metrics()["compiles"] == compiles + 1


def test_a_new_size_binds_inside_a_region(fresh):
    # Not a compile: the program of the first size, bound to the new one.
    w = torch.randn(8, 8)
    wl = w.to(DEV)
    step(torch.randn(4, 8).to(DEV), wl).cpu()
    x = torch.randn(5, 8)
    with lazyjit.strict():
        y = step(x.to(DEV), wl)
        sync_here()
    torch.testing.assert_close(y.cpu(), step(x, w))
    m = lazyjit.metrics()
    assert m["compiles"] == 1 and m["shape_binds"] == 1, m


def test_regions_nest_and_an_exception_inside_closes_them(fresh):
    x = torch.randn(3).to(DEV)
    with pytest.raises(ZeroDivisionError):
        with lazyjit.strict():
            with lazyjit.strict():
                1 / 0
    assert float((x * 0).sum().item()) == 0.0  # no region is left open
