"""The CUDA kernel emitter's edge cases, run by cuda-sim against CPU eager:
element kernels' tails (vector chunks of 4 float32 or 8 half, the scalar loop
after them), inputs at storage offset 1 (misaligned: the scalar path) and
transposed, row kernels (softmax, layer_norm, sum, amax) over rows of 1, 1000
and 5000 columns (warp rows up to 1024 columns: butterfly shuffles; block rows
past that: shuffles, shared memory and barriers), empty rows, NaN and -inf;
float32, bfloat16 and float16. Each test also checks that the simulated GPU
ran kernels (a plain CPU run would pass the comparison too)."""
import time

import pytest
import torch
import torch.nn.functional as F

import lazyjit
from conftest import DEV, launches

TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
       torch.float16: dict(rtol=1e-3, atol=1e-3)}
# Reductions: the GPU sums float32 in float32 (another order than ATen's).
RTOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=2e-2),
        torch.float16: dict(rtol=2e-3, atol=2e-3)}


def close(got, want, tol):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)


def on_gpu(fn, *inputs, shapes="exact"):
    """fn on the inputs moved to lazyjit, synced; and the kernels that launched.
    shapes: "exact" (kernels for these sizes: i32 indices, the vector chunks'
    count known), "generic" (sizes read at run time) or None (lazyjit's choice:
    exact, then generic or bound to new sizes when a second size comes)."""
    before = launches()
    lazy = [x.to(DEV) for x in inputs]
    for t in lazy:
        if t.dim() and shapes is not None:
            (lazyjit.mark_static if shapes == "exact" else lazyjit.mark_dynamic)(t, list(range(t.dim())))
    out = fn(*lazy).cpu()
    return out, launches() - before


def chain(x, y):
    return (torch.relu(x * y + x) - 0.5 * y).sigmoid() * x


@pytest.mark.parametrize("n", [1, 3, 4, 5, 31, 33, 1000, 1003, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shapes", ["exact", "generic"])
def test_elementwise_tails(shapes, n, dtype):
    x, y = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    got, ran = on_gpu(chain, x, y, shapes=shapes)
    assert ran >= 1
    close(got, chain(x, y), TOL[dtype])


def at_offset_one(base, rows, cols):
    return base[1:].view(rows, cols)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_inputs_at_storage_offset_one_and_transposed(dtype):
    """Views taken on lazyjit: the kernel reads its input at offset 1 (not 16-byte
    aligned: the scalar loop) and transposed (strided)."""
    base, yt = torch.randn(1 + 37 * 41).to(dtype), torch.randn(41, 37).to(dtype)
    fn = lambda b, y: chain(at_offset_one(b, 37, 41), y.t())  # noqa: E731
    got, ran = on_gpu(fn, base, yt)
    assert ran >= 1
    close(got, fn(base, yt), TOL[dtype])
    fn1 = lambda b: at_offset_one(b, 37, 41) * 2 + 1  # noqa: E731
    got, _ = on_gpu(fn1, base)
    close(got, fn1(base), TOL[dtype])


def test_a_million_element_chain_runs_in_seconds():
    x, y = torch.randn(1 << 20), torch.randn(1 << 20)
    on_gpu(chain, x, y, shapes="generic")  # compiled before the clock starts
    t0 = time.perf_counter()
    got, ran = on_gpu(chain, x, y, shapes="generic")
    seconds = time.perf_counter() - t0
    print(f"cuda-sim: 1M-element chain in {seconds:.3f} s ({ran} launches)")
    assert ran >= 1
    close(got, chain(x, y), TOL[torch.float32])
    assert seconds < 20, seconds


def test_a_program_bound_to_new_sizes_launches_its_kernels():
    """A chain compiled for 1003 elements, then run at 2^20 and 77: the program
    of the second size is the first's bound to it (runtime/shape_binder.h),
    whose kernels are the same simulated ones."""
    for n in (1003, 1 << 20, 77):
        x, y = torch.randn(n), torch.randn(n)
        got, ran = on_gpu(lambda a, b: chain(a, b) + 1, x, y, shapes=None)
        assert ran == 1, n
        close(got, chain(x, y) + 1, TOL[torch.float32])


ROW_SHAPES = [(5, 1), (3, 1000), (2, 5000), (67, 33), (1, 5000)]


def layer_norm(x):
    w = torch.linspace(0.5, 1.5, x.shape[-1], dtype=x.dtype)
    return F.layer_norm(x, x.shape[-1:], w.to(x.device), None, 1e-5)


ROW_OPS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": layer_norm,
    "sum": lambda x: x.sum(-1),
    "amax": lambda x: x.amax(-1),
    "max_minus": lambda x: x - x.amax(-1, keepdim=True),
}


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", list(ROW_OPS))
@pytest.mark.parametrize("shapes", ["exact", "generic"])
def test_row_kernels_float32(shapes, op, shape):
    x = torch.randn(shape) * 3
    got, ran = on_gpu(ROW_OPS[op], x, shapes=shapes)
    assert ran >= 1
    close(got, ROW_OPS[op](x), RTOL[torch.float32])


@pytest.mark.parametrize("shape", [(3, 1000), (2, 5000)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", ["softmax", "sum", "amax", "layer_norm"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_row_kernels_half(op, shape, dtype):
    x = torch.randn(shape).to(dtype)
    got, ran = on_gpu(ROW_OPS[op], x)
    assert ran >= 1
    # Eager on the CPU computes half reductions in float32 too.
    close(got, ROW_OPS[op](x), RTOL[dtype])


@pytest.mark.parametrize("cols", [1000, 5000])
def test_rows_of_a_transposed_input_and_at_offset_one(cols):
    base, t = torch.randn(1 + 4 * cols), torch.randn(cols, 4)
    for op in ("softmax", "sum", "layer_norm"):
        f = ROW_OPS[op]
        for fn, inp in ((lambda b: f(at_offset_one(b, 4, cols)), base), (lambda a: f(a.t()), t)):
            got, ran = on_gpu(fn, inp)
            assert ran >= 1
            close(got, fn(inp), RTOL[torch.float32])


@pytest.mark.parametrize("shape", [(4, 0), (0, 16)], ids=lambda s: "x".join(map(str, s)))
def test_empty_rows(shape):
    x = torch.randn(shape)
    for op in ("softmax", "log_softmax", "sum") + (("amax", "max_minus") if shape[-1] else ()):
        got, _ = on_gpu(ROW_OPS[op], x)
        close(got, ROW_OPS[op](x), RTOL[torch.float32])


@pytest.mark.parametrize("cols", [33, 1000, 5000])
def test_nan_and_minus_inf(cols):
    x = torch.randn(6, cols)
    x[0, cols // 2] = float("nan")       # a NaN row: NaN everywhere
    x[1, :] = float("-inf")              # all -inf: softmax NaN, amax -inf
    x[2, 0] = float("-inf")              # one -inf: softmax 0 there
    x[3, cols - 1] = float("inf")
    for op in ("softmax", "log_softmax", "sum", "amax", "max_minus"):
        got, ran = on_gpu(ROW_OPS[op], x)
        assert ran >= 1
        close(got, ROW_OPS[op](x), RTOL[torch.float32])
    got, _ = on_gpu(lambda a: torch.exp(a) * 2, x)
    close(got, torch.exp(x) * 2, TOL[torch.float32])


def test_the_cpu_target_is_not_what_ran():
    """The simulated GPU's launches are counted; the shapes of the CUDA target
    (4 float32 a thread, blocks of whole warps) are what a kernel's results
    depend on here, so a launch count of 0 would mean the CPU's code ran."""
    x = torch.randn(1003)
    before = launches()
    (x.to(DEV) * 3).cpu()
    assert launches() == before + 1
