"""Norms and convolutions on channels-last, permuted and expanded inputs made in
the graph: the ATen steps they become (native_group_norm and its backward,
native_layer_norm, native_batch_norm, convolution) get their inputs in the
layout the op saw when it was traced, not whatever layout a view left behind.

The oracle is eager PyTorch on the CPU in float64 (and the same float32 code in
eager, for the tighter check): forward values and the gradients of the input,
the weight and the bias, on both routes, the device (`.to("lazyjit")`, the
compiled program: the suite compiles in the foreground, and the second call
runs the cached program) and `torch.compile(backend="lazyjit")`; and once on
the op-by-op run a graph gets while its program compiles in the background.
"""
import json

import pytest
import torch
import torch.nn.functional as F

import lazyjit
from conftest import DEV, run_python

B, C, H, W = 2, 8, 5, 3


def channels_last(x):
    return x.contiguous(memory_format=torch.channels_last) * 1.0


def permuted(x):
    # The attention block's way back to an image: (b, hw, c) -> (b, c, h, w),
    # a channels-last view of a value computed in the graph.
    t = x.reshape(x.shape[0], x.shape[1], -1).transpose(-1, -2) * 1.0
    return t.transpose(-1, -2).reshape(x.shape)


def expanded(x):
    # A stride-0 view of a computed value, which group_norm's contiguous() copies.
    return (x * 1.0)[:, :, :1, :].expand(x.shape)


LAYOUTS = {"channels_last": channels_last, "permuted": permuted, "expanded": expanded}


def grads(fn, dev, dtype, x0, params):
    """fn's output and the gradients of x and of each parameter, as float64 CPU tensors."""
    # Copies: leaves of their own, never the caller's tensors.
    x = x0.to(dev, dtype, copy=True).requires_grad_()
    ps = [p.to(dev, dtype, copy=True).requires_grad_() for p in params]
    y = fn(x, *ps)
    # A weighting that tells every element apart (a plain sum would hide a
    # permuted gradient), made on the device as user code would.
    g = (torch.arange(y.numel(), dtype=dtype).reshape(y.shape) / y.numel()).to(dev)
    (y * g).sum().backward()
    return [t.detach().cpu().double() for t in (y, x.grad, *[p.grad for p in ps])]


def assert_close(got, want, rtol, atol, what):
    names = ["forward", "grad x"] + [f"grad param {i}" for i in range(len(got) - 2)]
    for name, g, w in zip(names, got, want):
        err = (g - w).abs().max().item()
        assert torch.allclose(g, w, rtol=rtol, atol=atol), f"{what}: {name} differs from eager by {err:.3g}"


def check_device(fn, x0, params, calls=2):
    want64 = grads(fn, "cpu", torch.float64, x0, params)
    want32 = grads(fn, "cpu", torch.float32, x0, params)
    for call in range(calls):  # the first call compiles, the second runs the cached program
        got = grads(fn, DEV, torch.float32, x0, params)
        assert_close(got, want64, 1e-4, 1e-4, f"call {call} vs float64")
        assert_close(got, want32, 1e-5, 1e-5, f"call {call} vs float32 eager")


def check_compiled(fn, x0, params):
    torch._dynamo.reset()
    want64 = grads(fn, "cpu", torch.float64, x0, params)
    cfn = torch.compile(fn, backend="lazyjit")
    for call in range(2):
        got = grads(cfn, "cpu", torch.float32, x0, params)
        assert_close(got, want64, 1e-4, 1e-4, f"torch.compile call {call} vs float64")
    torch._dynamo.reset()


def group_norm_of(layout):
    return lambda x, w, b: F.group_norm(LAYOUTS[layout](x), 4, w, b)


def gn_inputs():
    torch.manual_seed(0)
    return torch.randn(B, C, H, W) * 2 + 0.5, [torch.randn(C), torch.randn(C)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_group_norm_device_route(layout):
    x0, params = gn_inputs()
    check_device(group_norm_of(layout), x0, params)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_group_norm_torch_compile(layout):
    x0, params = gn_inputs()
    check_compiled(group_norm_of(layout), x0, params)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_group_norm_of_a_plain_sum_backward(layout):
    # sum().backward() hands group_norm's backward an expanded gradient, which
    # its contiguous() copies in the graph.
    x0, (w0, b0) = gn_inputs()
    make = channels_last if layout == "channels_last" else (lambda x: x * 1.0)

    def run(dev, dtype):
        x = x0.to(dev, dtype, copy=True).requires_grad_()
        w = w0.to(dev, dtype, copy=True).requires_grad_()
        y = F.group_norm(make(x), 4, w)
        y.sum().backward()
        return [t.detach().cpu().double() for t in (y, x.grad, w.grad)]

    want = run("cpu", torch.float64)
    for call in range(2):
        assert_close(run(DEV, torch.float32), want, 1e-4, 1e-4, f"call {call}")


class AttentionBlock(torch.nn.Module):
    """diffusers' AttnBlock in small: GroupNorm, attention over h*w positions,
    back to (b, c, h, w) through transpose and reshape, residual, GroupNorm."""

    def __init__(self, c=C):
        super().__init__()
        self.norm = torch.nn.GroupNorm(4, c)
        self.q, self.k, self.v, self.out = (torch.nn.Linear(c, c) for _ in range(4))
        self.norm2 = torch.nn.GroupNorm(2, c)

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)
        q, k, v = self.q(t), self.k(t), self.v(t)
        a = torch.softmax(q @ k.transpose(-1, -2) / c ** 0.5, dim=-1) @ v
        t = self.out(a).transpose(-1, -2).reshape(b, c, h, w)
        return self.norm2(t + x)


def block_grads(dev, dtype, model0, x0):
    m = AttentionBlock()
    m.load_state_dict(model0.state_dict())
    m = m.to(dtype).to(dev)
    x = x0.to(dev, dtype, copy=True).requires_grad_()
    y = m(x)
    g = (torch.arange(y.numel(), dtype=dtype).reshape(y.shape) / y.numel()).to(dev)
    (y * g).sum().backward()
    return [t.detach().cpu().double() for t in [y, x.grad] + [p.grad for p in m.parameters()]]


def test_attention_block_device_route():
    torch.manual_seed(0)
    model0, x0 = AttentionBlock(), torch.randn(B, C, 4, 4)
    want = block_grads("cpu", torch.float64, model0, x0)
    for call in range(2):
        assert_close(block_grads(DEV, torch.float32, model0, x0), want, 1e-4, 1e-4, f"call {call}")


def test_attention_block_torch_compile():
    torch.manual_seed(0)
    model0, x0 = AttentionBlock(), torch.randn(B, C, 4, 4)
    want = block_grads("cpu", torch.float64, model0, x0)
    torch._dynamo.reset()
    m = AttentionBlock()
    m.load_state_dict(model0.state_dict())
    cm = torch.compile(m, backend="lazyjit")
    for call in range(2):
        x = x0.clone().requires_grad_()
        y = cm(x)
        g = torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape) / y.numel()
        (y * g).sum().backward()
        got = [t.detach().double() for t in [y, x.grad] + [p.grad for p in m.parameters()]]
        m.zero_grad(set_to_none=True)
        assert_close(got, want, 1e-4, 1e-4, f"torch.compile call {call}")
    torch._dynamo.reset()


OTHERS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(channels_last(x).permute(0, 2, 3, 1), (C,), w, b),
                   lambda: [torch.randn(C), torch.randn(C)]),
    "batch_norm": (lambda x, w, b: F.batch_norm(channels_last(x), None, None, w, b, training=True),
                   lambda: [torch.randn(C), torch.randn(C)]),
    "conv2d": (lambda x, w, b: F.conv2d(channels_last(x), w, b, padding=1),
               lambda: [torch.randn(6, C, 3, 3) / 8, torch.randn(6)]),
    "conv2d_permuted": (lambda x, w, b: F.conv2d(permuted(x), w, b, padding=1),
                        lambda: [torch.randn(6, C, 3, 3) / 8, torch.randn(6)]),
    "conv2d_expanded": (lambda x, w, b: F.conv2d(expanded(x), w, b, padding=1),
                        lambda: [torch.randn(6, C, 3, 3) / 8, torch.randn(6)]),
    "batch_norm_expanded": (lambda x, w, b: F.batch_norm(expanded(x), None, None, w, b, training=True),
                            lambda: [torch.randn(C), torch.randn(C)]),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(channels_last(x), w, b, stride=2),
                         lambda: [torch.randn(C, 6, 3, 3) / 8, torch.randn(6)]),
    "upsample_nearest": (lambda x, w, b: F.interpolate(channels_last(x), scale_factor=2) * w[:, None, None]
                         + b[:, None, None], lambda: [torch.randn(C), torch.randn(C)]),
    "upsample_bilinear": (lambda x, w, b: F.interpolate(permuted(x), scale_factor=2, mode="bilinear") * w[:, None, None]
                          + b[:, None, None], lambda: [torch.randn(C), torch.randn(C)]),
    "pixel_shuffle": (lambda x, w, b: F.pixel_shuffle(channels_last(x), 2) * w[0] + b[0],
                      lambda: [torch.randn(C), torch.randn(C)]),
}


@pytest.mark.parametrize("name", list(OTHERS))
def test_other_norms_and_conv_device_route(name):
    fn, params = OTHERS[name]
    torch.manual_seed(1)
    x0 = torch.randn(B, C, H, W)
    check_device(fn, x0, params())


@pytest.mark.parametrize("name", list(OTHERS))
def test_other_norms_and_conv_torch_compile(name):
    fn, params = OTHERS[name]
    torch.manual_seed(1)
    x0 = torch.randn(B, C, H, W)
    check_compiled(fn, x0, params())


OP_BY_OP = r"""
import json, torch, lazyjit
import torch.nn.functional as F
torch.manual_seed(0)
x0, w0, b0 = torch.randn(2, 8, 5, 3), torch.randn(8), torch.randn(8)
def run(dev, dtype):
    x, w, b = (t.to(dev, dtype, copy=True).requires_grad_() for t in (x0, w0, b0))
    xc = x.contiguous(memory_format=torch.channels_last) * 1.0
    e = (x * 1.0)[:, :, :1, :].expand(x.shape)
    y = F.group_norm(xc, 4, w, b) + F.group_norm(e, 4, w, b)
    g = (torch.arange(y.numel(), dtype=dtype).reshape(y.shape) / y.numel()).to(dev)
    (y * g).sum().backward()
    return [t.detach().cpu().double() for t in (y, x.grad, w.grad, b.grad)]
want = run("cpu", torch.float64)
got = run("lazyjit", torch.float32)
m = lazyjit.metrics()
print(json.dumps({"errors": [(a - b).abs().max().item() for a, b in zip(got, want)],
                  "op_by_op_syncs": m["background_syncs"]}))
"""


def test_group_norm_op_by_op_run_while_compiling():
    r = run_python(OP_BY_OP, {"LAZYJIT_BACKGROUND_COMPILE": "on", "LAZYJIT_CACHE": "off"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["op_by_op_syncs"] >= 1, out  # the run checked is the op-by-op one
    assert max(out["errors"]) < 1e-4, out
