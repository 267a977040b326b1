"""ATen steps whose meta kernel gives another result dtype than the CPU kernel
that runs. native_group_norm on a bfloat16 input with a float32 weight (a
norm layer kept in float32 under diffusers' layerwise casting) returns float32
mean and rstd on the CPU, bfloat16 on meta; its backward returns a bfloat16 dX
on the CPU, float32 on meta. The graph used to carry meta's dtypes, so the
kernel after the backward read the bfloat16 dX as float32: twice its bytes,
past the end of its buffer (garbage, or a segfault when the buffer ended a
mapping). The oracle is eager PyTorch on the CPU: the same dtypes, the same
values.
"""
import torch

import lazyjit  # noqa: F401
from conftest import DEV

N, C, H, W, G = 2, 8, 4, 4, 4


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, dtype=torch.bfloat16)
    w, b = torch.randn(C), torch.randn(C)
    g = torch.randn(N, C, H, W, dtype=torch.bfloat16)
    return x, w, b, g


def test_group_norm_mixed_dtypes_equal_eager():
    x, w, b, g = _inputs()
    y, m, r = torch.ops.aten.native_group_norm(x, w, b, N, C, H * W, G, 1e-5)
    ref = torch.ops.aten.native_group_norm_backward(g, x, m, r, w, N, C, H * W, G, [True, True, True])

    L = lambda t: t.to(DEV)
    yl, ml, rl = torch.ops.aten.native_group_norm(L(x), L(w), L(b), N, C, H * W, G, 1e-5)
    assert [t.dtype for t in (yl, ml, rl)] == [t.dtype for t in (y, m, r)]
    out = torch.ops.aten.native_group_norm_backward(L(g), L(x), ml, rl, L(w), N, C, H * W, G, [True, True, True])
    assert [t.dtype for t in out] == [t.dtype for t in ref]
    # Elementwise ops after the steps, in the same graph: they read the
    # steps' results as the graph types them.
    got = [(t * 2).cpu() for t in (yl, ml, rl, *out)]
    want = [t * 2 for t in (y, m, r, *ref)]
    for a, e in zip(got, want):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_group_norm_float32_weight_bfloat16_input_grads_equal_eager():
    x, _, _, g = _inputs()
    torch.manual_seed(1)
    gn = torch.nn.GroupNorm(G, C)
    torch.nn.init.normal_(gn.weight)
    torch.nn.init.normal_(gn.bias)

    def run(dev):
        m = torch.nn.GroupNorm(G, C)
        m.load_state_dict(gn.state_dict())
        m.to(dev)
        xd = x.to(dev).requires_grad_()
        y = m(xd)
        (y.float() * g.to(dev).float()).sum().backward()
        # The gradient read by an elementwise op in the graph that computes it.
        return (y * 1).cpu(), (xd.grad * 3).cpu(), m.weight.grad.cpu(), m.bias.grad.cpu()

    for a, e in zip(run(DEV), run("cpu")):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


# An op whose meta kernel disagrees with its CPU kernel, for whatever op the
# tracer knows no rule for: the kernels after its step read its result
# converted to the dtype the graph gave it, not its bytes as that dtype.
_lib = torch.library.Library("lazyjit_test_dtypes", "DEF")
_lib.define("to_bf16_times2(Tensor x) -> Tensor")
_lib.impl("to_bf16_times2", lambda x: (x * 2).to(torch.bfloat16), "CPU")
_lib.impl("to_bf16_times2", lambda x: torch.empty_like(x), "Meta")  # says float32


def test_step_result_of_another_dtype_is_read_converted():
    torch.manual_seed(0)
    x = torch.randn(4096)  # 8 KB of bfloat16 that a float32 read would take as 16 KB
    want = torch.ops.lazyjit_test_dtypes.to_bf16_times2(x).float() + 1
    got = (torch.ops.lazyjit_test_dtypes.to_bf16_times2(x.to(DEV)) + 1).cpu()
    torch.testing.assert_close(got.float(), want, rtol=0, atol=0)
