"""Seeded random fills into tensors of every layout draw the CPU's numbers, in
the CPU's order (docs/python.md: a seeded lazyjit generator draws what a seeded
generator where lazyjit keeps its data draws).

The CPU's kernels fill in memory order (TensorIterator orders the dimensions
by stride), and some pick another algorithm by layout: normal_ fills a
contiguous tensor of 16 or more elements in chunks of 16 and any other one
element by element, and bernoulli_ / exponential_ draw through a contiguous
temporary when the tensor is not contiguous. Each case runs the same program
on CPU tensors and on lazyjit tensors, seeded alike, and the results must be
equal: the filled view and the untouched rest of its base.
"""
import pytest
import torch

from conftest import DEV

FILLS = {
    "uniform_": lambda t, g: t.uniform_(generator=g),
    "uniform_(-2,3)": lambda t, g: t.uniform_(-2, 3, generator=g),
    "normal_": lambda t, g: t.normal_(generator=g),
    "normal_(1,2)": lambda t, g: t.normal_(1, 2, generator=g),
    "bernoulli_(0.3)": lambda t, g: t.bernoulli_(0.3, generator=g),
    "random_": lambda t, g: t.random_(generator=g),
    "random_(10)": lambda t, g: t.random_(10, generator=g),
    "random_(-5,10)": lambda t, g: t.random_(-5, 10, generator=g),
    "exponential_": lambda t, g: t.exponential_(generator=g),
    "log_normal_": lambda t, g: t.log_normal_(generator=g),
    "cauchy_": lambda t, g: t.cauchy_(generator=g),
    "geometric_(0.3)": lambda t, g: t.geometric_(0.3, generator=g),
}

# (base shape, base memory format, the view filled). Most hold 16 or more
# elements, where normal_ has its chunked path for contiguous tensors.
LAYOUTS = {
    "contiguous": ((5, 7), None, lambda b: b),
    "transpose": ((7, 5), None, lambda b: b.t()),
    "small transpose": ((3, 2), None, lambda b: b.t()),
    "step slice": ((40,), None, lambda b: b[::2]),
    "offset slice": ((50,), None, lambda b: b[3:23]),
    "column slice": ((6, 8), None, lambda b: b[:, 1:4]),
    "step rows": ((10, 6), None, lambda b: b[1::3]),
    "channels_last": ((2, 3, 4, 5), torch.channels_last, lambda b: b),
    "permute 3-D": ((3, 4, 5), None, lambda b: b.permute(2, 0, 1)),
    "permuted slice": ((4, 6, 5), None, lambda b: b.permute(1, 2, 0)[1:5, ::2]),
}

DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _base(shape, fmt, device):
    b = torch.zeros(shape, device=device)
    return b if fmt is None else b.contiguous(memory_format=fmt)


def _run(device, dtype, layout, fill, seed=0):
    shape, fmt, view = LAYOUTS[layout]
    base = _base(shape, fmt, device).to(dtype)
    if fmt is not None:
        base = base.contiguous(memory_format=fmt)
    g = torch.Generator(device).manual_seed(seed)
    v = view(base)
    FILLS[fill](v, g)
    return v.cpu(), base.cpu(), v.stride()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("fill", list(FILLS))
def test_seeded_fill_equals_cpu(fill, layout, dtype):
    v_cpu, base_cpu, stride_cpu = _run("cpu", dtype, layout, fill)
    v_lz, base_lz, stride_lz = _run(DEV, dtype, layout, fill)
    assert stride_lz == stride_cpu
    assert torch.equal(v_lz, v_cpu), f"{fill} on {layout} {dtype}:\nlazyjit {v_lz.flatten()[:6]}\ncpu     {v_cpu.flatten()[:6]}"
    assert torch.equal(base_lz, base_cpu)


def test_issue_transpose_uniform():
    # The issue's case: [.758, .279, .403, ...] before, the CPU's [.758, .403, .029, ...] now.
    g = torch.Generator(DEV).manual_seed(0)
    got = torch.empty(3, 2, device=DEV).t().uniform_(generator=g).cpu()
    want = torch.empty(3, 2).t().uniform_(generator=torch.Generator().manual_seed(0))
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("layout", ["transpose", "step slice", "column slice", "channels_last"])
def test_default_generator(layout):
    """torch.manual_seed seeds the generator lazyjit draws from without one."""
    shape, fmt, view = LAYOUTS[layout]
    out = []
    for device in ("cpu", DEV):
        torch.manual_seed(123)
        b = _base(shape, fmt, device)
        v = view(b)
        v.normal_()
        v.mul_(2).uniform_(0, v.numel())  # two draws in a row, with an op between
        w = view(_base(shape, fmt, device)).bernoulli_(0.5)
        out.append((v.cpu(), b.cpu(), w.cpu()))
    for lz, cpu in zip(out[1], out[0]):
        assert torch.equal(lz, cpu)


@pytest.mark.parametrize("fn", ["rand", "randn"])
def test_rand_out_non_contiguous(fn):
    res = []
    for device in ("cpu", DEV):
        out = torch.zeros(7, 5, device=device).t()
        getattr(torch, fn)(5, 7, out=out, generator=torch.Generator(device).manual_seed(5))
        res.append(out.cpu())
    assert res[0].stride() == res[1].stride()
    assert torch.equal(res[1], res[0])


def test_like_factories_channels_last():
    x = torch.zeros(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    res = []
    for t in (x, x.to(DEV)):
        torch.manual_seed(9)
        res.append([torch.randn_like(t).cpu(), torch.rand_like(t).cpu(), torch.randint_like(t, 100).cpu()])
    for lz, cpu in zip(res[1], res[0]):
        assert lz.stride() == cpu.stride()
        assert torch.equal(lz, cpu)


def test_expanded_raises_as_eager():
    with pytest.raises(RuntimeError, match="more than one element") as cpu_err:
        torch.zeros(1, 5).expand(4, 5).uniform_()
    with pytest.raises(RuntimeError, match="more than one element") as lz_err:
        torch.zeros(1, 5, device=DEV).expand(4, 5).uniform_()
        torch.lazyjit.synchronize() if hasattr(torch, "lazyjit") else None
    assert str(cpu_err.value).splitlines()[0] in str(lz_err.value)


def test_captured_redraw_keeps_the_order():
    """Under torch.compile the graph's draws are drawn again on each call, in
    the CPU's order as the first call's."""
    def f(x):
        y = torch.empty(7, 5, device=x.device).t()
        y.normal_()
        z = x[:, ::2]
        z.uniform_()
        return y + 1, x * 2

    torch.manual_seed(3)
    want = [f(torch.zeros(4, 10)) for _ in range(3)]
    compiled = torch.compile(f, backend="lazyjit")
    torch.manual_seed(3)
    got = [compiled(torch.zeros(4, 10, device=DEV)) for _ in range(3)]
    for (gy, gx), (wy, wx) in zip(got, want):
        assert torch.equal(gy.cpu(), wy)
        assert torch.equal(gx.cpu(), wx)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_dropout_draws_its_mask_in_the_inputs_layout(layout):
    """F.dropout on the CPU draws its mask as empty_like(input).bernoulli_(1 - p):
    in the input's layout when dense (a transpose fills in memory order),
    contiguous otherwise. On lazyjit (PrivateUse1 goes to native_dropout) the mask
    was drawn contiguous: a transposed input got another mask."""
    shape, fmt, view = LAYOUTS[layout]

    def run(device):
        torch.manual_seed(1)
        x = _base(shape, fmt, device) + 1
        y = torch.nn.functional.dropout(view(x), 0.5)
        return y.cpu()

    torch.testing.assert_close(run(DEV), run("cpu"), rtol=0, atol=0)
