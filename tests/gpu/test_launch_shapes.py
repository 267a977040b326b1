"""Launch shapes chosen per kernel (lowering/launch_shape.h) on a GPU: row
kernels of every length around the warp/block boundary (one warp a row up to
1024 cols, one block a row past it; few long rows a block each) and
vectorized element chains of odd lengths (the scalar tail after the last full
vector), each against CUDA eager. Sizes change between calls without a reset
too, so code planned for one row length (a hint) runs at others."""
import pytest
import torch

from gpu_shared import assert_close, kernels_only

DEV = "cuda"
COLS = (1, 31, 32, 33, 1000, 1024, 1025, 5000)
ROWS = (1, 3, 257)


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="lazyjit")


def rows_fn(x, w, b):
    return (torch.softmax(x, -1), torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps=1e-5),
            x.sum(-1), x.amax(-1))


@kernels_only
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
def test_rows_of_every_length_match_cuda_eager(lazyjit, rows, cols):
    torch.manual_seed(rows * 10007 + cols)
    x = torch.randn(rows, cols, device=DEV)
    w, b = torch.randn(cols, device=DEV), torch.randn(cols, device=DEV)
    for got, want in zip(_compile(rows_fn)(x, w, b), rows_fn(x, w, b)):
        assert_close(got, want, rtol=1e-5, atol=1e-4)


@kernels_only
def test_one_capture_runs_every_row_length(lazyjit):
    # No reset between sizes: a plan (and its launch shape) made for short rows
    # may be bound to long ones, and the other way round.
    f = _compile(rows_fn)
    for cols in COLS + tuple(reversed(COLS)):
        x = torch.randn(65, cols, device=DEV)
        w, b = torch.randn(cols, device=DEV), torch.randn(cols, device=DEV)
        for got, want in zip(f(x, w, b), rows_fn(x, w, b)):
            assert_close(got, want, rtol=1e-5, atol=1e-4)


@kernels_only
def test_bfloat16_rows_compute_in_float32(lazyjit):
    for cols in COLS:
        x = torch.randn(33, cols, device=DEV, dtype=torch.bfloat16)
        got = _compile(lambda t: torch.softmax(t.float(), -1).to(torch.bfloat16))(x)
        assert_close(got, torch.softmax(x.float(), -1).to(torch.bfloat16), rtol=1.6e-2, atol=1e-2)


def chain(y):
    for _ in range(6):
        y = (y * 1.01 + 0.1).clamp_min(-1)
    return y * torch.sigmoid(y)


@kernels_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 3, 7, 1001, 4099, (1 << 20) + 3])
def test_element_chains_of_odd_lengths_match_cuda_eager(lazyjit, dtype, n):
    x = torch.randn(n, device=DEV, dtype=dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
    assert_close(_compile(chain)(x), chain(x), **tol)
    # A view one element in: the vector accesses' alignment check takes the scalar path.
    y = torch.randn(n + 1, device=DEV, dtype=dtype)[1:]
    assert_close(_compile(chain)(y), chain(y), **tol)


@kernels_only
def test_device_route_rows_and_chains(lazyjit):
    # The device route (lazyjit storages in GPU memory) over the same kernels.
    for cols in (33, 1000, 1025):
        x = torch.randn(9, cols, device=DEV)
        got = torch.softmax(x.to("lazyjit"), -1).to(DEV)
        assert_close(got, torch.softmax(x, -1), rtol=1e-5, atol=1e-5)
    x = torch.randn(4099, device=DEV, dtype=torch.bfloat16)
    assert_close(chain(x.to("lazyjit")).to(DEV), chain(x), rtol=1.6e-2, atol=1e-2)
