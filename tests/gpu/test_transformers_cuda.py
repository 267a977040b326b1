"""GPT-2, Llama and BERT from transformers (small configs, random weights)
through torch.compile(backend="lazyjit") on the GPU: logits, loss and
gradients against CUDA eager; ten training steps with one program per step."""
import copy

import pytest
import torch

from gpu_shared import assert_close, kernels_only

transformers = pytest.importorskip("transformers")

DEV = "cuda"


def _gpt2():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg)


def _llama():
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                   max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


def _bert():
    cfg = transformers.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, vocab_size=512, max_position_embeddings=64)
    return transformers.BertForMaskedLM(cfg)


@kernels_only
@pytest.mark.parametrize("make", [_gpt2, _llama, _bert], ids=["gpt2", "llama", "bert"])
def test_logits_loss_and_gradients_match_cuda_eager(lazyjit, make):
    torch.manual_seed(0)
    model = make().to(DEV).eval()  # eval: no dropout draws to compare
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 512, (2, 16), device=DEV)

    def step(m, ids):
        out = m(input_ids=ids, labels=ids)
        out.loss.backward()
        return out.logits, out.loss

    torch._dynamo.reset()
    logits, loss = torch.compile(step, backend="lazyjit")(model, ids)
    ref_logits, ref_loss = step(ref, ids)
    assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert_close(loss, ref_loss, rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is not None:
            assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)


@kernels_only
def test_ten_training_steps_one_program_each(lazyjit):
    torch.manual_seed(0)
    model = _gpt2().to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 512, (2, 16), device=DEV)

    @torch.compile(backend="lazyjit")
    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    torch._dynamo.reset()
    losses = []
    for i in range(10):
        opt.zero_grad()
        losses.append(step(ids).item())
        opt.step()
        if i == 1:
            compiles = lazyjit.metrics()["compiles"]
    assert lazyjit.metrics()["compiles"] == compiles, "steps 3-10 compiled again"
    assert losses[-1] < losses[0]
