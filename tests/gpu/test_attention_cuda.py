"""scaled_dot_product_attention under the CUDA target (tracer/attention_choice.cpp): the
tracer answers ATen's backend choice from CUDA's own (flash and cuDNN mapped to the
memory-efficient kernel, or math), so the composite records
_scaled_dot_product_efficient_attention and its backward as library steps that run
ATen's CUDA kernels, with the mask and scale inside the kernel. Before, it recorded the
CPU-only _scaled_dot_product_flash_attention_for_cpu, which cannot run on CUDA tensors.
CUDA eager is the oracle (it may pick flash for bfloat16: the tolerance allows for it).
tests/python/test_attention_route.py checks the same route on the CPU with a test hook."""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close

L = "lazyjit"
EFFICIENT = "aten::_scaled_dot_product_efficient_attention"
EFFICIENT_BWD = "aten::_scaled_dot_product_efficient_attention_backward"
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


@pytest.fixture
def recorded(lazyjit):
    seen = []
    h = lazyjit.add_op_hook(lambda op, ins, outs: seen.append(op), lazy=True)
    yield seen
    h.remove()


def _qkv(dtype, grad=False, b=2, h=4, n=32, s=64, e=64):
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda *shape: torch.randn(*shape, device="cuda", generator=g).to(dtype).requires_grad_(grad)  # noqa: E731
    return mk(b, h, n, e), mk(b, h, s, e), mk(b, h, s, e)


def _lazy(t):
    if not isinstance(t, torch.Tensor):
        return t
    return t.detach().to(L).requires_grad_(t.requires_grad)


def _cases(dtype):
    g = torch.Generator(device="cuda").manual_seed(1)
    keep = torch.rand(32, 64, device="cuda", generator=g) > 0.4
    keep[:, 0] = True
    return {
        "none": {},
        "float_mask": dict(attn_mask=torch.randn(2, 1, 32, 64, device="cuda", generator=g).to(dtype)),
        "bool_mask": dict(attn_mask=keep),
        "causal": dict(is_causal=True),
        "scale": dict(scale=0.05),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", ["none", "float_mask", "bool_mask", "causal", "scale"])
def test_sdpa_forward_and_backward_run_cuda_efficient_attention(lazyjit, recorded, dtype, case):
    kw = _cases(dtype)[case]
    q, k, v = _qkv(dtype, grad=True)
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    dy = torch.randn_like(out)
    want = torch.autograd.grad(out, (q, k, v), dy)
    ql, kl, vl = map(_lazy, (q, k, v))
    lout = F.scaled_dot_product_attention(ql, kl, vl, **{n: _lazy(a) for n, a in kw.items()})
    got = torch.autograd.grad(lout, (ql, kl, vl), _lazy(dy))
    assert_close(lout.to("cuda"), out, **TOL[dtype])
    for gl, w in zip(got, want):
        assert_close(gl.to("cuda"), w, **TOL[dtype])
    assert EFFICIENT in recorded and EFFICIENT_BWD in recorded, recorded
    assert not any("flash_attention_for_cpu" in op for op in recorded), recorded
    assert not any("attention" in op for op in lazyjit.metrics().get("fallbacks", {})), lazyjit.metrics()


def test_gradient_of_a_float_mask(lazyjit, recorded):
    q, k, v = _qkv(torch.float32, grad=True)
    mask = torch.randn(2, 1, 32, 64, device="cuda").requires_grad_()
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).square().sum(),
                               (q, k, v, mask))
    ls = list(map(_lazy, (q, k, v, mask)))
    got = torch.autograd.grad(F.scaled_dot_product_attention(*ls[:3], attn_mask=ls[3]).square().sum(), ls)
    for gl, w in zip(got, want):
        assert_close(gl.to("cuda"), w, rtol=1e-4, atol=1e-4)
    assert EFFICIENT_BWD in recorded, recorded


def test_backward_in_a_later_graph(lazyjit, recorded):
    """The forward syncs alone: logsumexp and the philox seed and offset (which CUDA's
    kernel returns as 0-d CPU tensors) are program outputs the backward's graph reads."""
    q, k, v = _qkv(torch.float32, grad=True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ql, kl, vl = map(_lazy, (q, k, v))
    lout = F.scaled_dot_product_attention(ql, kl, vl, is_causal=True)
    assert_close(lout.to("cuda"), out, rtol=1e-4, atol=1e-4)
    dy = torch.randn_like(out)
    want = torch.autograd.grad(out, (q, k, v), dy)
    got = torch.autograd.grad(lout, (ql, kl, vl), _lazy(dy))
    for gl, w in zip(got, want):
        assert_close(gl.to("cuda"), w, rtol=1e-4, atol=1e-4)
    assert EFFICIENT_BWD in recorded, recorded


def test_unaligned_mask_and_disabled_efficient_backend_take_math(lazyjit, recorded):
    q, k, v = _qkv(torch.float32, s=5)
    mask = torch.randn(32, 5, device="cuda")
    got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v, mask)))
    assert_close(got.to("cuda"), F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=1e-4, atol=1e-4)
    assert not any("attention" in op for op in recorded), recorded
    q, k, v = _qkv(torch.bfloat16)
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled())
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    try:
        recorded.clear()
        got = F.scaled_dot_product_attention(*map(_lazy, (q, k, v)), is_causal=True)
        assert_close(got.to("cuda"), F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=2e-2, atol=2e-2)
    finally:
        torch.backends.cuda.enable_mem_efficient_sdp(True)
    assert not any("attention" in op for op in recorded), recorded
    assert (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()) == flags


def test_gpt2_with_sdpa_trains(lazyjit, recorded):
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0,
                                  eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_implementation="sdpa")
    torch.manual_seed(0)
    eager = transformers.GPT2LMHeadModel(cfg).to("cuda")
    lazy = transformers.GPT2LMHeadModel(cfg)
    lazy.load_state_dict(eager.state_dict())
    lazy.to(L)
    ids = torch.randint(0, 100, (2, 32), device="cuda")
    mask = torch.ones(2, 32, dtype=torch.long, device="cuda")
    mask[1, -4:] = 0
    want = eager(input_ids=ids, attention_mask=mask, labels=ids)
    want.loss.backward()
    got = lazy(input_ids=ids.to(L), attention_mask=mask.to(L), labels=ids.to(L))
    got.loss.backward()
    assert_close(got.loss.to("cuda"), want.loss, rtol=1e-4, atol=1e-4)
    grads = dict(eager.named_parameters())
    for name, p in lazy.named_parameters():
        torch.testing.assert_close(p.grad.to("cuda"), grads[name].grad, rtol=1e-3, atol=1e-4, msg=name)
    assert recorded.count(EFFICIENT) == 2 and recorded.count(EFFICIENT_BWD) == 2, recorded
