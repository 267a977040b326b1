"""The GEMM floor of a step (issue 58, item 6): the limit a training or
diffusion step at real widths is measured against.

`record(fn)` runs `fn` once in eager PyTorch under a dispatch mode and keeps
each matrix product and convolution it ran (forward and backward: mm, addmm,
bmm, baddbmm, convolution, convolution_backward) with its operands' sizes,
strides and dtypes. Two figures come from them:
- `flops(ops)` / the best of `peak_rates()`: the step's multiply-adds at the best rate
  ATen's libraries reach on one large product at the current thread count (the
  better of a 2048^3 torch.mm and a 512-channel 3x3 convolution: on an AMD CPU
  MKL runs its AVX2 code, oneDNN its AVX-512 code, about twice as fast): the
  **floor**, what the step would take if everything but its products and
  convolutions cost nothing and each of them ran at that speed;
- `aten_ms(ops)`: each of them run again alone by ATen, on new random operands
  of the same geometry, the medians summed (what eager's kernels take for them).
Attention kernels (scaled_dot_product_attention) are in neither: they count
with the rest of the step.

    from gemm_floor import measure
    m = measure(step)  # floor_ms, gemm_gflop, peak_rates, peak_gflops, aten_gemm_ms
"""
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

GEMM_OPS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default",
            "aten.convolution.default", "aten.convolution_backward.default"}


class _Spec:
    """A tensor operand's geometry, in place of its values."""
    __slots__ = ("size", "stride", "dtype")

    def __init__(self, t):
        self.size, self.stride, self.dtype = tuple(t.shape), tuple(t.stride()), t.dtype

    def key(self):
        return ("T", self.size, self.stride, str(self.dtype))

    def make(self):
        t = torch.empty_strided(self.size, self.stride, dtype=self.dtype)
        return t.normal_() if t.is_floating_point() else t.zero_()


def _spec(v):
    if isinstance(v, torch.Tensor):
        return _Spec(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_spec(x) for x in v)
    return v


def _key(v):
    if isinstance(v, _Spec):
        return v.key()
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    return repr(v)


def _make(v):
    if isinstance(v, _Spec):
        return v.make()
    if isinstance(v, (list, tuple)):
        return type(v)(_make(x) for x in v)
    return v


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = {}  # key -> [func, args, kwargs, count]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if str(func) in GEMM_OPS:
            a, k = _spec(tuple(args)), {n: _spec(v) for n, v in kwargs.items()}
            key = (str(func), _key(a), _key(tuple(sorted(k.items()))))
            if key in self.ops:
                self.ops[key][3] += 1
            else:
                self.ops[key] = [func, a, k, 1]
        return func(*args, **kwargs)


def record(fn):
    """fn's matrix products and convolutions: a list of (op, args, kwargs,
    times it ran), operands as geometry only."""
    rec = _Recorder()
    with rec:
        fn()
    return list(rec.ops.values())


def _numel(size):
    n = 1
    for d in size:
        n *= d
    return n


def _op_flops(func, a, k):
    """Floating-point operations (2 per multiply-add) of one recorded op."""
    name = str(func)
    if name in ("aten.mm.default", "aten.addmm.default"):
        m1, m2 = (a[0], a[1]) if name == "aten.mm.default" else (a[1], a[2])
        return 2 * m1.size[0] * m1.size[1] * m2.size[1]
    if name in ("aten.bmm.default", "aten.baddbmm.default"):
        b1, b2 = (a[0], a[1]) if name == "aten.bmm.default" else (a[1], a[2])
        return 2 * b1.size[0] * b1.size[1] * b1.size[2] * b2.size[2]
    if name == "aten.convolution.default":
        # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
        # weight [out, in / groups, *kernel] (transposed: [in, out / groups, *kernel])
        x, w, stride, padding, dilation, transposed = a[0], a[1], a[3], a[4], a[5], a[6]
        if transposed:
            return 2 * _numel(x.size) * w.size[1] * _numel(w.size[2:])
        out = [(x.size[2 + i] + 2 * padding[i] - dilation[i] * (w.size[2 + i] - 1) - 1) // stride[i] + 1
               for i in range(len(w.size) - 2)]
        return 2 * x.size[0] * w.size[0] * _numel(out) * w.size[1] * _numel(w.size[2:])
    if name == "aten.convolution_backward.default":
        # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
        #  output_padding, groups, output_mask): the input's and the weight's
        # gradients each cost the forward's products
        grad_out, w, mask = a[0], a[2], a[10]
        per = 2 * _numel(grad_out.size) * w.size[1] * _numel(w.size[2:])
        return per * (int(bool(mask[0])) + int(bool(mask[1])))
    return 0


def flops(ops):
    """The recorded ops' floating-point operations, each counted as often as it ran."""
    return sum(_op_flops(func, a, k) * count for func, a, k, count in ops)


def _best_rate(fn, flop, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flop / best / 1e9


def peak_rates(reps=5):
    """GFLOP/s of one large product at the current thread count, by each of
    the libraries ATen's CPU kernels use: a 2048^3 torch.mm (BLAS) and a 3x3
    convolution of 512 channels over 2 x 32 x 32 (oneDNN)."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    x, w = torch.randn(2, 512, 32, 32), torch.randn(512, 512, 3, 3)
    with torch.no_grad():
        mm = _best_rate(lambda: torch.mm(a, b), 2 * 2048 ** 3, reps)
        conv = _best_rate(lambda: torch.nn.functional.conv2d(x, w, padding=1), 2 * 2 * 512 * 32 * 32 * 512 * 9, reps)
    return {"mm": mm, "conv": conv}


def aten_ms(ops, reps=5):
    """The sum over `ops` of each one's median time alone (times the number of
    times the step ran it), in milliseconds."""
    total = 0.0
    with torch.no_grad():
        for func, a, k, count in ops:
            args, kwargs = _make(a), _make(k)
            func(*args, **kwargs)  # warm: oneDNN primitives, packed weights
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                func(*args, **kwargs)
                ts.append(time.perf_counter() - t0)
            total += statistics.median(ts) * count
    return total * 1e3


def measure(step):
    """The floor of `step` (a function running one step in eager) and what it is
    made of, as the step benches report it: GFLOP of products, the libraries'
    rates, the floor in ms, and ATen's time for the products alone."""
    ops = record(step)
    res = {"gemm_gflop": flops(ops) / 1e9, "peak_rates": peak_rates()}
    res["peak_gflops"] = max(res["peak_rates"].values())
    res["floor_ms"] = res["gemm_gflop"] / res["peak_gflops"] * 1e3
    res["aten_gemm_ms"] = aten_ms(ops)
    return res


FIELDS = ("floor_ms", "gemm_gflop", "peak_gflops", "peak_rates", "aten_gemm_ms")


def floor_line(base, what="products"):
    """The markdown line stating a section's floor, from the eager row's fields."""
    return (f"GEMM floor {base['floor_ms']:.1f} ms: {base['gemm_gflop']:.1f} GFLOP of {what} at "
            f"{base['peak_gflops']:.0f} GFLOP/s (the better of a 2048^3 torch.mm and a 512-channel 3x3 "
            f"convolution); ATen runs them alone in {base['aten_gemm_ms']:.1f} ms")
