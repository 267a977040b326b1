"""Under torch.use_deterministic_algorithms(True) the same call gives the same
bits every time, the first included (runtime/pipeline.cpp): a new graph waits
for its program instead of running op by op while it compiles in the
background. Without it, the first calls run op by op and may differ from later
ones by the rounding docs/python.md states."""
import os
import subprocess
import sys

SCRIPT = r"""
import sys, torch, lazyjit
torch.use_deterministic_algorithms(sys.argv[1] == "1")
torch.manual_seed(0)
x, w = torch.randn(64, 256), torch.randn(256)
xl, wl = x.to("lazyjit"), w.to("lazyjit")
outs = []
for _ in range(3):
    outs.append((torch.tanh(xl * 0.7).exp() * wl).softmax(-1).log1p().sum(-1).cpu())
    lazyjit.wait_for_compiles()  # the next call finds the program, if one compiled
ref = (torch.tanh(x * 0.7).exp() * w).softmax(-1).log1p().sum(-1)
torch.testing.assert_close(outs[0], ref)
print(" ".join(str(torch.equal(outs[0], o)) for o in outs[1:]))
"""


def _calls(deterministic):
    env = {**os.environ, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "on"}
    r = subprocess.run([sys.executable, "-c", SCRIPT, "1" if deterministic else "0"], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_deterministic_algorithms_give_the_same_bits_from_the_first_call():
    assert _calls(True) == ["True", "True"]

