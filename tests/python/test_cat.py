"""torch.cat as a Cat node: joined in a fused kernel, piece by piece along the
cat dim, so rotate_half's cat fuses with the rotary multiply-add around it.

Eager PyTorch on the CPU is the oracle: values, dtype and shape; and no op
falls back to eager (test_ops.check). The plan tests read LAZYJIT_DUMP's plans
in a fresh interpreter."""
import glob

import pytest
import torch

from conftest import DEV
from test_dynamic_shapes import run
from test_ops import View, check, mk
from test_passes import run_dumped


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def test_rotary_embedding_matches_eager():
    q, cos, sin = torch.randn(2, 4, 6, 8), torch.randn(6, 8), torch.randn(6, 8)
    check(rotary, q, cos, sin, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
def test_cat_along_each_dim_with_a_consumer(dim):
    a, b = torch.randn(3, 5, 7), torch.randn(3, 5, 7)
    sizes = [3, 5, 7]
    sizes[dim] = 2
    c = torch.randn(*sizes)
    check(lambda a, b, c: torch.cat((a, c, b), dim=dim).exp() * 2, a, b, c)


def test_pieces_of_one_element_as_a_kv_cache_appends_them():
    past, new = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 1, 4)
    check(lambda p, n: torch.cat((p, n * 3), dim=2), past, new)
    check(lambda p, n: torch.cat((n, p, n), dim=2) + 1, past, new)


def test_views_as_operands():
    base = torch.randn(6, 10)
    check(lambda x: torch.cat((x[:, 2:5], x[:, 7:], x[:, :1]), dim=1) * 2, base)
    check(lambda x: torch.cat((x.t(), x.t()[1:3]), dim=0) - 1, base)
    check(lambda x, y: torch.cat((x, y), dim=1), View(base, lambda t: t.t()), torch.randn(10, 3))
    # A stepped view and an expanded one (stride 0).
    check(lambda x, r: torch.cat((x[:, ::3], r.expand(6, 2), x[::1, 1:2]), dim=1) + 1, base, torch.randn(1, 2))


def test_the_same_operand_twice_and_in_two_cats():
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    check(lambda a: torch.cat((a, a), dim=1), a)
    check(lambda a, b: torch.cat((a, b), dim=1) * torch.cat((b, a), dim=1), a, b)
    # Two cats of one kernel joining along different dims or with other pieces.
    check(lambda a, b: torch.cat((a, b), 0).sum() + torch.cat((a, b), 1).sum(), a, b)
    check(lambda a: torch.cat((a, a[:, :1]), 1) + torch.cat((a[:, :1], a), 1), a)


def test_a_cat_broadcast_into_its_consumer():
    a, b, c = torch.randn(4, 1, 3), torch.randn(4, 1, 5), torch.randn(4, 6, 8)
    check(lambda a, b, c: torch.cat((a, b), -1) * c, a, b, c)


def test_empty_operands_are_skipped_as_in_eager():
    a, b = torch.randn(3, 4), torch.randn(3, 2)
    check(lambda a, b: torch.cat((a, torch.empty(3, 0, device=a.device), b), 1) + 1, a, b)
    check(lambda a, b: torch.cat((torch.tensor([], device=a.device), a, b), 1), a, b)
    check(lambda a, b: torch.cat((a[:0], b[:0]), 1), a, b)  # an empty result


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.uint8, torch.bool])
def test_dtypes(dtype):
    a, b = mk((5, 3), dtype), mk((5, 4), dtype)
    check(lambda a, b: torch.cat((b, a), 1), a, b)


def test_mixed_dtypes_promote_as_in_eager():
    a, b = torch.randn(3, 2), torch.arange(6).reshape(3, 2)
    check(lambda a, b: torch.cat((a, b), 1) * 2, a, b, no_fallback=False)


def test_a_cat_across_threads_shares_of_the_outer_dim():
    # Long enough that the kernel's outermost dim, the cat dim, is split among
    # threads, a share starting or ending inside a piece.
    a, b, c = torch.randn(3001, 64), torch.randn(17, 64), torch.randn(5003, 64)
    check(lambda a, b, c: torch.cat((a, b, c), 0) * 0.5, a, b, c)
    check(lambda a, b, c: torch.cat((a.t(), b.t(), c.t()), 1).t() + 1, a, b, c)


def test_an_argument_error_is_raised_at_the_op_like_eager():
    a, b = torch.randn(3, 4).to(DEV), torch.randn(2, 4).to(DEV)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat((a, b), 1)
    assert torch.equal(torch.cat((a, b), 0).cpu(), torch.cat((a.cpu(), b.cpu()), 0))


def test_cat_with_out_and_in_place_consumers():
    a, b = torch.randn(3, 4), torch.randn(3, 4)

    def f(a, b):
        out = torch.empty(3, 8, device=a.device)
        torch.cat((a, b), 1, out=out)
        out.mul_(2)
        r = torch.cat((a, b), 0)
        r.add_(1)
        return out, r

    check(f, a, b, no_fallback=False)


ROTARY = r"""
import sys, torch, lazyjit
torch.manual_seed(0)
def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)
def f(q, k, cos, sin):  # Llama's apply_rotary_pos_emb
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
q, k = torch.randn(1, 4, 16, 64), torch.randn(1, 2, 16, 64)
cos, sin = torch.randn(1, 1, 16, 64), torch.randn(1, 1, 16, 64)
got = [t.cpu() for t in f(*(t.to("lazyjit") for t in (q, k, cos, sin)))]
torch.save([got, list(f(q, k, cos, sin))], sys.argv[1])
"""


def test_rotate_half_fuses_with_the_rotary_multiply_add(tmp_path):
    d, got, want = run_dumped(tmp_path, ROTARY)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    (plan,) = [open(p).read() for p in glob.glob(str(d / "*.plan.txt"))]
    assert "aten::cat" not in plan, plan
    cats = [line for line in plan.splitlines() if " cat_dim=" in line]
    # One kernel per rotary embedding holds its cat (and its multiply-adds);
    # it stores only the embedding.
    assert len(cats) == 2, plan
    for line in cats:
        assert "cat_ends=[32,64]" in line and len(line.split("stores=")[1].split()) == 1, plan


DECODE = r"""
import json, torch, lazyjit
torch.manual_seed(0)
def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)
k = torch.randn(1, 2, 3, 8)
lk = k.to("lazyjit")
cos, sin = torch.randn(8), torch.randn(8)
bad = []
for step in range(12):
    # A decode step's new key: [1, 1, 2, 8] transposed to [1, 2, 1, 8], rotated
    # (its q * cos reads back through strides that differ at size-1 dims only).
    new = torch.randn(1, 1, 2, 8)
    want = new.transpose(1, 2)
    want = want * cos + rotate_half(want) * sin
    ln = new.to("lazyjit").transpose(1, 2)
    ln = ln * cos.to("lazyjit") + rotate_half(ln) * sin.to("lazyjit")
    k = torch.cat((k, want * 2), dim=2)
    lk = torch.cat((lk, ln * 2), dim=2)
    got = (lk + 1).cpu()
    if not torch.allclose(got, k + 1, rtol=1e-6, atol=1e-6):
        bad.append(step)
    if step == 1:
        after_two = dict(lazyjit.metrics())
m = lazyjit.metrics()
print(json.dumps({"bad": bad, "two": after_two["llvm_compiles"], "all": m["llvm_compiles"],
                  "compiles": m["compiles"], "binds": m["shape_binds"]}))
"""


def test_a_growing_cache_binds_to_one_program_without_compiling_again():
    # The pieces' ends are read at run time, so a cat one longer per step runs
    # the shape-generic code compiled for the first.
    out, _ = run(DECODE)
    assert out["bad"] == [], out
    assert out["two"] > 0 and out["all"] == out["two"], out
    assert out["binds"] >= 10, out


STACKS = r"""
import sys, torch, lazyjit
xs = [torch.randn(4, 8) for _ in range(9)]
ls = [x.to("lazyjit") for x in xs]
got = [torch.stack(ls[:8]).mul(2).cpu(), torch.stack(ls).mul(2).cpu()]
torch.save([got, [torch.stack(xs[:8]) * 2, torch.stack(xs) * 2]], sys.argv[1])
"""


def test_stacks_of_many_tensors_stay_one_library_step(tmp_path):
    # Past 8 pieces a cat stays an ATen step: one loop body per piece would make
    # LLVM's compile time grow with the count (torch.stack of 512: 16 s).
    d, got, want = run_dumped(tmp_path, STACKS)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    plans = sorted(open(p).read() for p in glob.glob(str(d / "*.plan.txt")))
    assert len(plans) == 2, plans
    assert sum("cat_ends=[4,8,12,16,20,24,28,32]" in p and "aten::cat" not in p for p in plans) == 1, plans
    assert sum("aten::cat" in p and "cat_dim" not in p for p in plans) == 1, plans
