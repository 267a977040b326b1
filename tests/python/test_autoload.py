"""`import torch` loads lazyjit through the `torch.backends` entry point
(pyproject.toml, python/lazyjit_autoload.py): programs that never import
lazyjit use the device by name, as transformers' device_map and diffusers'
DIFFUSERS_TEST_DEVICE do. Each test runs a fresh process that never imports
lazyjit itself; eager on the CPU is the oracle."""
import os
import subprocess
import sys

import pytest



def _run(code, **env):
    r = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=600,
                       env={**os.environ, "LAZYJIT_CACHE": "off", **env})
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_the_device_works_without_importing_lazyjit():
    out = _run("import sys, torch\n"
               "x = torch.arange(6.).to('lazyjit')\n"
               "print(torch.equal(((x * 2).sin()).cpu(), (torch.arange(6.) * 2).sin()), 'lazyjit' in sys.modules)\n")
    assert out.split() == ["True", "True"]


def test_autoload_can_be_turned_off():
    out = _run("import sys, torch\nprint('lazyjit' in sys.modules)\n", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.split() == ["False"]


@pytest.mark.parametrize("device_map", ["lazyjit", "auto"])
def test_device_map_lazyjit_and_generate_give_the_cpus_tokens(tmp_path, device_map):
    # "auto": accelerate places the model on the process's accelerator, lazyjit.
    code = f"""
import sys, torch, transformers
cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
torch.manual_seed(0)
transformers.LlamaForCausalLM(cfg).save_pretrained({str(tmp_path)!r})
ids = torch.tensor([[1, 5, 9, 3]])
ref = transformers.AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}).generate(
    ids, max_new_tokens=6, do_sample=False)
lm = transformers.AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, device_map={device_map!r})
assert next(lm.parameters()).device.type == "lazyjit", next(lm.parameters()).device
out = lm.generate(ids.to("lazyjit"), max_new_tokens=6, do_sample=False)
print(out.cpu().tolist() == ref.tolist(), ref.shape[1])
"""
    assert _run(code, HF_HUB_OFFLINE="1").split() == ["True", "10"]


def test_a_generator_on_the_device_draws_reproducibly():
    # A generator of where lazyjit keeps its data: seeded, it draws what a
    # seeded CPU generator draws, into lazyjit tensors.
    code = """
import torch
g = torch.Generator(device="lazyjit")
g.manual_seed(7)
a = torch.randn(5, generator=g, device="lazyjit").cpu()
g.manual_seed(7)
b = torch.randn(5, generator=g, device="lazyjit").cpu()
c = torch.randn(5, generator=torch.Generator().manual_seed(7))
d = torch.rand(3, 4, generator=g.manual_seed(3), device="lazyjit").cpu()
e = torch.rand(3, 4, generator=torch.Generator().manual_seed(3))
print(torch.equal(a, b), torch.equal(a, c), torch.equal(d, e))
"""
    assert _run(code).split() == ["True", "True", "True"]
