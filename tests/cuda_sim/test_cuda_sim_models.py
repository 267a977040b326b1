"""GPT-2, Llama and BERT (small configs, random weights, no downloads; as in
tests/python/test_transformers.py) under cuda-sim: a training step
against CPU eager (logits, loss, every parameter's gradient, and the parameters
after an AdamW step), with the CUDA target's kernels doing the elementwise and
row work."""
import pytest
import torch
from torch.testing import assert_close

from conftest import DEV, launches

try:
    import transformers  # noqa: F401
except ImportError:  # scripts/setup.sh installs it: missing is a broken set-up, not a skip
    pytest.fail("transformers is not installed: run scripts/setup.sh", pytrace=False)
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          LlamaConfig, LlamaForCausalLM)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

VOCAB, BATCH, SEQ = 100, 2, 16
# The GPU sums float32 rows in float32, in another order than ATen's CPU kernels.
ATOL = 2e-4

MODELS = {
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64,
                                               bos_token_id=0, eos_token_id=0)),
    "llama": lambda: LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                                  num_key_value_heads=2, num_hidden_layers=2, vocab_size=VOCAB,
                                                  max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
                                                  pad_token_id=0)),
    "bert": lambda: BertForMaskedLM(BertConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                               num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=64,
                                               pad_token_id=0)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_step_matches_cpu_eager(name):
    torch.manual_seed(0)
    eager = MODELS[name]()
    lazy = MODELS[name]()
    lazy.load_state_dict(eager.state_dict())
    lazy.to(DEV)
    eager.eval()
    lazy.eval()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    labels = ids.clone()
    if name == "bert":
        labels[torch.rand(BATCH, SEQ, generator=g) < 0.7] = -100
        labels[:, 0] = ids[:, 0]
    out_e = eager(input_ids=ids, labels=labels)
    out_e.loss.backward()
    before = launches()
    out_l = lazy(input_ids=ids.to(DEV), labels=labels.to(DEV))
    out_l.loss.backward()
    assert_close(out_l.logits.detach().cpu(), out_e.logits.detach(), rtol=0, atol=ATOL)
    assert_close(out_l.loss.detach().cpu(), out_e.loss.detach(), rtol=0, atol=ATOL)
    for (n, p), (_, q) in zip(eager.named_parameters(), lazy.named_parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            assert_close(q.grad.cpu(), p.grad, rtol=0, atol=ATOL, msg=n)
    assert launches() - before >= 10
    # The optimizer step: eager's AdamW on a copy of the eager model given the
    # lazy run's gradients (checked above), against AdamW on the lazy model (its
    # foreach ops as the CUDA target's kernels). Both start from the same
    # parameters and gradients, so they agree to float32 rounding. Eager's own
    # gradients would not do: AdamW's first step is lr * g / (|g| + eps), about
    # lr * sign(g), so a gradient that is rounding noise near 0 may move a
    # parameter by lr one way in one run and the other way in the other.
    ref = MODELS[name]()
    ref.load_state_dict(eager.state_dict())
    for p, q in zip(ref.parameters(), lazy.parameters()):
        p.grad = None if q.grad is None else q.grad.cpu()
    adamw = dict(lr=1e-3, weight_decay=0.1)
    torch.optim.AdamW(ref.parameters(), **adamw).step()
    before = launches()
    torch.optim.AdamW(lazy.parameters(), **adamw).step()
    for (n, p), (_, q) in zip(ref.named_parameters(), lazy.named_parameters()):
        # rtol: float32's; atol far below a step's lr * weight_decay * |p| and lr.
        assert_close(q.detach().cpu(), p.detach(), rtol=1.3e-6, atol=1e-8, msg=n)
    assert launches() - before >= 5
