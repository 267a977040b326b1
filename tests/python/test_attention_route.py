"""scaled_dot_product_attention's route under the CUDA target, traced on the CPU
(tracer/attention_choice.cpp). Under LAZYJIT_TARGET=cuda the tracer answers ATen's
backend choice from CUDA's own choice, mapped to the memory-efficient kernel (or math):
the composite then records _scaled_dot_product_efficient_attention (and autograd its
backward) as library steps, never the CPU-only _scaled_dot_product_flash_attention_for_cpu.

Without a GPU, the test hook LAZYJIT_TEST_SDP_CHOICE stands in for CUDA's answer, and
CPU kernels of the two efficient ops, registered here with torch.library for the
module's tests only, compute them with the math formula (logsumexp padded as CUDA's
kernel and the meta kernel lay it out: [B, H, ceil(L / 32) * 32]; the philox seed and
offset are 0-d CPU int64 tensors, as CUDA's kernel returns them without dropout). The
oracle is eager F.scaled_dot_product_attention on the CPU. tests/gpu/test_attention_cuda.py
runs the same route on a GPU against CUDA eager.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from conftest import DEV, lazyjit

EFFICIENT = "aten::_scaled_dot_product_efficient_attention"
EFFICIENT_BWD = "aten::_scaled_dot_product_efficient_attention_backward"
FLASH_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"


def _scores(q, k, bias, is_causal, scale):
    s = scale if scale is not None else 1 / math.sqrt(q.size(-1))
    attn = (q.float() @ k.float().transpose(-2, -1)) * s
    if bias is not None:
        attn = attn + bias.float()
    if is_causal:  # top left, as the memory-efficient kernel's causal mask
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        attn = attn.masked_fill(~keep, float("-inf"))
    return attn, s


def efficient_cpu(q, k, v, bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, scale=None):
    assert dropout_p == 0.0
    attn, _ = _scores(q, k, bias, is_causal, scale)
    out = (torch.softmax(attn, -1) @ v.float()).to(q.dtype)
    b, h, n, e = out.shape
    res = torch.empty(b, n, h, e, dtype=q.dtype).transpose(1, 2)  # CUDA's layout: [B, L, H, E] transposed
    res.copy_(out)
    lse = torch.full((b, h, (n + 31) // 32 * 32 if compute_log_sumexp else 0), float("inf"))
    if compute_log_sumexp:
        lse[..., :n] = attn.logsumexp(-1)
    return res, lse, torch.empty((), dtype=torch.long), torch.empty((), dtype=torch.long)


def efficient_backward_cpu(grad, q, k, v, bias, out, lse, seed, offset, dropout_p, grad_input_mask,
                           is_causal=False, scale=None):
    assert seed.dtype == offset.dtype == torch.long and seed.dim() == offset.dim() == 0
    attn, s = _scores(q, k, bias, is_causal, scale)
    p = torch.exp(attn - lse[..., :q.size(-2), None])  # the forward's logsumexp, as CUDA's kernel reads it
    g = grad.float()
    dp = g @ v.float().transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = (ds @ k.float()) * s
    dk = (ds.transpose(-2, -1) @ q.float()) * s
    dv = p.transpose(-2, -1) @ g
    db = ds.to(bias.dtype) if bias is not None and grad_input_mask[3] else None
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), db


@pytest.fixture(scope="module", autouse=True)
def efficient_kernels_on_cpu():
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_dot_product_efficient_attention", efficient_cpu, "CPU")
    lib.impl("_scaled_dot_product_efficient_attention_backward", efficient_backward_cpu, "CPU")
    yield
    lib._destroy()


@pytest.fixture
def cuda_says(monkeypatch):
    """cuda_says("flash"): CUDA's choice, as the tracer sees it, is flash (test hook)."""
    def say(backend):
        monkeypatch.setenv("LAZYJIT_TEST_SDP_CHOICE", backend)
    say("efficient")
    return say


@pytest.fixture
def recorded():
    """The names of the ops of every compiled graph, in recording order."""
    seen = []
    h = lazyjit.add_op_hook(lambda op, ins, outs: seen.append(op), lazy=True)
    yield seen
    h.remove()


def _qkv(b=2, h=3, n=5, s=16, e=8, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, n, e, generator=g).to(dtype)
    k = torch.randn(b, h, s, e, generator=g).to(dtype)
    v = torch.randn(b, h, s, e, generator=g).to(dtype)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def _lazy(t):
    if not isinstance(t, torch.Tensor):
        return t
    return t.detach().to(DEV).requires_grad_(t.requires_grad)


def _masks():
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(5, 16, generator=g) > 0.4
    keep[:, 0] = True  # every row attends somewhere
    return {
        "none": {},
        "float_mask": dict(attn_mask=torch.randn(2, 1, 5, 16, generator=g)),
        "bool_mask": dict(attn_mask=keep),
        "causal": dict(is_causal=True),
        "scale": dict(scale=0.3),
        "mask_and_scale": dict(attn_mask=torch.randn(5, 16, generator=g), scale=-0.2),
    }


MASKS = _masks()


@pytest.mark.parametrize("case", list(MASKS))
def test_forward_records_the_efficient_kernel_and_matches_eager(case, cuda_says, recorded):
    kw = MASKS[case]
    q, k, v = _qkv()
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v)), **{n: _lazy(a) for n, a in kw.items()})
    assert_close(got.cpu(), want)
    assert EFFICIENT in recorded, recorded
    assert FLASH_CPU not in recorded, recorded
    assert not any("attention" in op for op in lazyjit.metrics().get("fallbacks", {})), lazyjit.metrics()


@pytest.mark.parametrize("case", list(MASKS))
def test_gradients_of_q_k_v_match_eager(case, cuda_says, recorded):
    kw = MASKS[case]
    q, k, v = _qkv(grad=True)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, **kw).square().sum(), (q, k, v))
    ql, kl, vl = map(_lazy, (q, k, v))
    out = F.scaled_dot_product_attention(ql, kl, vl, **{n: _lazy(a) for n, a in kw.items()})
    got = torch.autograd.grad(out.square().sum(), (ql, kl, vl))
    for g, w in zip(got, want):
        assert_close(g.cpu(), w)
    assert EFFICIENT in recorded and EFFICIENT_BWD in recorded, recorded
    assert FLASH_CPU not in recorded and FLASH_CPU + "_backward" not in recorded, recorded


def test_gradient_of_a_float_mask_matches_eager(cuda_says, recorded):
    q, k, v = _qkv(grad=True)
    mask = torch.randn(2, 1, 5, 16).requires_grad_()  # broadcast over heads: its gradient sums them
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).square().sum(),
                               (q, k, v, mask))
    ql, kl, vl, ml = map(_lazy, (q, k, v, mask))
    got = torch.autograd.grad(F.scaled_dot_product_attention(ql, kl, vl, attn_mask=ml).square().sum(),
                              (ql, kl, vl, ml))
    for g, w in zip(got, want):
        assert_close(g.cpu(), w)
    assert EFFICIENT_BWD in recorded, recorded


def test_backward_in_a_later_graph_reads_the_saved_logsumexp_and_seed(cuda_says, recorded):
    """The forward syncs first: its logsumexp, philox seed and offset (0-d int64)
    are program outputs, read back as inputs by the backward's graph."""
    q, k, v = _qkv(grad=True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ql, kl, vl = map(_lazy, (q, k, v))
    lout = F.scaled_dot_product_attention(ql, kl, vl, is_causal=True)
    assert_close(lout.cpu(), out)  # sync: the forward ran as a program of its own
    assert EFFICIENT in recorded and EFFICIENT_BWD not in recorded, recorded
    dy = torch.randn_like(out)
    want = torch.autograd.grad(out, (q, k, v), dy)
    got = torch.autograd.grad(lout, (ql, kl, vl), _lazy(dy))
    for g, w in zip(got, want):
        assert_close(g.cpu(), w)
    assert EFFICIENT_BWD in recorded, recorded


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_matches_eager(dtype, cuda_says, recorded):
    q, k, v = _qkv(dtype=dtype)
    mask = torch.randn(5, 16).to(dtype)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v, mask)))
    assert_close(got.cpu(), want, rtol=2e-2, atol=2e-2)
    assert EFFICIENT in recorded, recorded


@pytest.mark.parametrize("cuda_choice", ["flash", "cudnn"])
def test_flash_or_cudnn_become_efficient_when_cuda_also_allows_it(cuda_choice, cuda_says, recorded):
    cuda_says(cuda_choice)
    flash, cudnn = torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()
    q, k, v = _qkv()
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v)), is_causal=True)
    assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert EFFICIENT in recorded, recorded
    # The tracer turned flash and cuDNN off to ask again, and back on.
    assert (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()) == (flash, cudnn)


@pytest.mark.parametrize("cuda_choice", ["flash", "math"])
def test_math_when_cuda_would_not_take_efficient(cuda_choice, cuda_says, recorded):
    """With the memory-efficient backend turned off (torch.backends.cuda), flash maps to
    math: attention is then recorded as ordinary ops, and no fused attention step."""
    cuda_says(cuda_choice)
    q, k, v = _qkv(grad=True)
    was = torch.backends.cuda.mem_efficient_sdp_enabled()
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    try:
        want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(), (q, k, v))
        ql, kl, vl = map(_lazy, (q, k, v))
        got = torch.autograd.grad(F.scaled_dot_product_attention(ql, kl, vl, is_causal=True).sum(), (ql, kl, vl))
        for g, w in zip(got, want):
            assert_close(g.cpu(), w)
    finally:
        torch.backends.cuda.enable_mem_efficient_sdp(was)
    assert recorded and not any("attention" in op for op in recorded), recorded


def test_a_mask_whose_rows_the_graph_cannot_align_takes_math(cuda_says, recorded):
    """The memory-efficient kernel needs the mask's row stride aligned; the graph holds
    ATen's padded mask densely, so 5 keys (not a multiple of 16) take math."""
    q, k, v = _qkv(s=5)
    mask = torch.randn(5, 5)
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v, mask)))
    assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert recorded and not any("attention" in op for op in recorded), recorded
    # Without a mask, any key length is the efficient kernel's.
    recorded.clear()
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v)))
    assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v))
    assert EFFICIENT in recorded, recorded


def test_a_bad_hook_value_is_named(monkeypatch):
    monkeypatch.setenv("LAZYJIT_TEST_SDP_CHOICE", "fast")
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match="LAZYJIT_TEST_SDP_CHOICE=fast is not an attention backend"):
        F.scaled_dot_product_attention(*map(_lazy, (q, k, v))).cpu()


def test_the_cpu_target_without_the_hook_keeps_the_cpu_flash_kernel(monkeypatch, recorded):
    monkeypatch.delenv("LAZYJIT_TEST_SDP_CHOICE", raising=False)
    q, k, v = _qkv()
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v)), is_causal=True)
    assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert FLASH_CPU in recorded and EFFICIENT not in recorded, recorded


@pytest.mark.parametrize("padded", [False, True])
def test_gpt2_with_sdpa_trains_through_the_efficient_kernel(padded, cuda_says, recorded):
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()

    def make():
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64,
                                      bos_token_id=0, eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_implementation="sdpa")
        model = transformers.GPT2LMHeadModel(cfg)
        assert model.config._attn_implementation == "sdpa"
        return model

    torch.manual_seed(0)
    eager = make()
    lazy = make()
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEV)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 16, dtype=torch.long)
    if padded:
        mask[1, -4:] = 0  # padding on the second row: a 4-D mask reaches the kernel
    kw = dict(attention_mask=mask) if padded else {}
    want = eager(input_ids=ids, labels=ids, **kw)
    want.loss.backward()
    got = lazy(input_ids=ids.to(DEV), labels=ids.to(DEV), **{n: t.to(DEV) for n, t in kw.items()})
    got.loss.backward()
    assert_close(got.logits.cpu(), want.logits, rtol=1e-4, atol=1e-4)
    assert_close(got.loss.cpu(), want.loss, rtol=1e-4, atol=1e-4)
    grads = dict(eager.named_parameters())
    for name, p in lazy.named_parameters():
        assert_close(p.grad.cpu(), grads[name].grad, rtol=1e-4, atol=1e-4, msg=name)
    assert recorded.count(EFFICIENT) == 2 and recorded.count(EFFICIENT_BWD) == 2, recorded
    assert FLASH_CPU not in recorded, recorded
