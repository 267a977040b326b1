"""torch.compile(backend="lazyjit") on CUDA tensors: captured once, then run as
lazyjit programs whose kernels are LLVM-NVPTX code and whose library steps are
ATen's CUDA kernels. CUDA eager is the oracle."""
import torch

from gpu_shared import assert_close, kernels_only

DEV = "cuda"


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="lazyjit")


def test_target_is_cuda(lazyjit):
    assert lazyjit.target() == "cuda"


@kernels_only
def test_elementwise_chain_is_one_kernel(lazyjit):
    def chain(y):
        for _ in range(10):
            y = (y * 1.01 + 0.1).clamp_min(-1)
        return y

    x = torch.randn(1 << 20, device=DEV)
    before = lazyjit.metrics()
    out = _compile(chain)(x)
    after = lazyjit.metrics()
    assert_close(out, chain(x))
    assert after["llvm_compiles"] - before["llvm_compiles"] == 1
    assert lazyjit.dynamo.stats()["eager_graphs"] == 0


@kernels_only
def test_transcendentals_match_cuda_eager(lazyjit):
    def f(x):
        return torch.tanh(x).exp() + torch.log1p(x.abs()) * torch.erf(x) - torch.sigmoid(x) ** 2.5

    x = torch.randn(4097, 33, device=DEV)
    assert_close(_compile(f)(x), f(x), rtol=2e-5, atol=2e-5)


@kernels_only
def test_rows_softmax_layer_norm_and_sums(lazyjit):
    def f(x, w, b):
        return (torch.softmax(x, -1), torch.nn.functional.layer_norm(x, x.shape[-1:], w, b),
                x.sum(-1), x.amax(-1), x.double().sum(-1))

    for cols in (7, 768, 5000):
        x = torch.randn(33, cols, device=DEV)
        w, b = torch.randn(cols, device=DEV), torch.randn(cols, device=DEV)
        for got, want in zip(_compile(f)(x, w, b), f(x, w, b)):
            assert_close(got, want, rtol=1e-5, atol=1e-4)


@kernels_only
def test_half_and_bfloat16_store_and_compute_in_float32(lazyjit):
    def f(x):
        return (x * 3 + 1).relu().to(torch.float32).softmax(-1)

    for dt in (torch.float16, torch.bfloat16):
        x = torch.randn(64, 300, device=DEV, dtype=dt)
        assert_close(_compile(f)(x), f(x), rtol=1e-3, atol=1e-3)


@kernels_only
def test_mlp_training_step_matches_cuda_eager(lazyjit):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 10)).to(DEV)
    ref = __import__("copy").deepcopy(model)
    x, y = torch.randn(32, 64, device=DEV), torch.randint(0, 10, (32,), device=DEV)

    def step(m, x, y):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        return loss

    torch._dynamo.reset()
    got = torch.compile(step, backend="lazyjit")(model, x, y)
    want = step(ref, x, y)
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_the_capturing_call_draws_what_cuda_eager_draws(lazyjit):
    # The capture draws from the CUDA generator while it records and puts that
    # generator back (not the CPU's): every call, the first included, draws
    # what eager does after the same seed.
    def f(x):
        return x + torch.rand_like(x)

    c = _compile(f)
    eager_before = lazyjit.dynamo.stats()["eager_graphs"]
    for _ in range(3):  # the first call captures; the others run the program
        x = torch.zeros(1000, device=DEV)
        torch.manual_seed(1)
        want = f(x)
        torch.manual_seed(1)
        assert torch.equal(c(x), want)
    assert lazyjit.dynamo.stats()["eager_graphs"] == eager_before


def test_outputs_stay_on_the_gpu_and_inputs_are_not_copied(lazyjit):
    x = torch.randn(1000, device=DEV)
    out = _compile(lambda t: t * 2 + 1)(x)
    assert out.device.type == "cuda"
    assert lazyjit.metrics().get("argument_copies", 0) == 0


_SECOND_PROCESS = r"""
import torch, lazyjit

def f(x, w):
    return torch.softmax(x @ w, -1) * torch.tanh(x).sum(-1, keepdim=True)

x, w = torch.randn(64, 128, device="cuda"), torch.randn(128, 128, device="cuda")
out = torch.compile(f, backend="lazyjit")(x, w)
torch.testing.assert_close(out, f(x, w), rtol=1e-4, atol=1e-4)
m = lazyjit.metrics()
print(m["llvm_compiles"], m["disk_hits"])
"""


def test_a_second_process_compiles_nothing(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=str(tmp_path), LAZYJIT_TARGET="cuda")
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "python")
    runs = [subprocess.run([sys.executable, "-c", _SECOND_PROCESS], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first = [int(v) for v in runs[0].stdout.split()]
    second = [int(v) for v in runs[1].stdout.split()]
    assert first[0] >= 1
    assert second == [0, second[1]] and second[1] >= 1, (first, second)
