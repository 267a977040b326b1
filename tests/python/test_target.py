"""LAZYJIT_TARGET: what kernels are compiled for ("cpu", the default, or
"cuda"), read once per process. A value that is neither gets the one warning
every malformed switch gets and the CPU; "cuda" where it cannot work (a
CPU-only PyTorch, no driver, no GPU) is a Python RuntimeError at the first
lazyjit op saying which is missing, and the process exits normally: no
crash, no second report at exit. tests/gpu/ runs the CUDA target itself."""
import signal
import subprocess
import sys

import pytest
import torch

import lazyjit
from conftest import PYTHON_DIR, ROOT

PROBE = ("import torch, lazyjit; print('target', lazyjit.target(), flush=True); "
         "x = torch.randn(300, 500); "
         "torch.testing.assert_close((x.to('lazyjit').tanh() * 2 + 1).cpu(), x.tanh() * 2 + 1); "
         "print('ok', flush=True)")

CUDA_BUILD = torch.backends.cuda.is_built()


def run(code=PROBE, **env_extra):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off", **env_extra}
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_the_default_target_is_the_cpu():
    assert lazyjit.target() == "cpu"
    assert "target" in lazyjit.__all__
    p = run()
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["target", "cpu", "ok"], p.stdout
    assert "warning" not in p.stderr, p.stderr


def test_cpu_named_is_the_default_and_says_nothing():
    p = run(LAZYJIT_TARGET="cpu")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["target", "cpu", "ok"], p.stdout
    assert p.stderr == "", p.stderr


@pytest.mark.parametrize("value", ["bogus", "gpu", "CUDA", "cuda:0"])
def test_an_unknown_target_names_the_variable_and_the_values_and_runs_on_the_cpu(value):
    p = run(LAZYJIT_TARGET=value)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["target", "cpu", "ok"], p.stdout
    warnings = [l for l in p.stderr.splitlines() if l.startswith("lazyjit: warning:")]
    assert warnings == [f"lazyjit: warning: LAZYJIT_TARGET={value} is not cpu, cuda or cuda-sim; using cpu"], p.stderr


# cuda-sim: the CUDA target's kernels on the host (tests/cuda_sim/ runs them
# against eager). Its programs are its own: on one disk cache, neither the CPU's
# nor its own of another kind are served to the other.
SIM_PROBE = ("import torch, lazyjit; x = torch.randn(1000, 300); "
             "torch.testing.assert_close(torch.softmax(x.to('lazyjit') * 2, -1).cpu(), torch.softmax(x * 2, -1)); "
             "m = lazyjit.metrics(); "
             "print(lazyjit.target(), m['device_kernel_launches'], m['disk_hits'], m['compiles'], flush=True)")


@pytest.mark.parametrize("value", ["cuda-sim", "cpu"])
def test_cuda_sim_runs_kernels_on_its_simulated_gpu_and_cpu_launches_none(value):
    p = run(SIM_PROBE, LAZYJIT_TARGET=value)
    assert p.returncode == 0, p.stderr
    target, launches, _, _ = p.stdout.split()
    assert target == value and p.stderr == "", (p.stdout, p.stderr)
    assert (int(launches) > 0) == (value == "cuda-sim"), p.stdout


def test_cuda_sim_and_cpu_programs_do_not_share_keys(tmp_path):
    disk = {"LAZYJIT_CACHE": "on", "LAZYJIT_CACHE_DIR": str(tmp_path)}
    def probe(target):
        p = run(SIM_PROBE, LAZYJIT_TARGET=target, **disk)
        assert p.returncode == 0, p.stderr
        return p.stdout.split()
    assert probe("cpu")[1:] == ["0", "0", "1"]
    # The CPU's program is on disk: cuda-sim compiles its own...
    first = probe("cuda-sim")
    assert first[2:] == ["0", "1"], first
    # ...and loads it (its kernels' host objects) in the next process.
    again = probe("cuda-sim")
    assert again[2:] == ["1", "0"] and int(again[1]) > 0, again
    assert probe("cpu")[1:] == ["0", "1", "0"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a usable GPU here: tests/gpu/ runs the CUDA target")
def test_cuda_without_a_gpu_is_a_clear_python_error_not_a_crash():
    code = ("import torch, lazyjit\n"
            "print('target', lazyjit.target(), flush=True)\n"
            "try:\n"
            "    (torch.ones(3).to('lazyjit') * 2).cpu()\n"
            "except RuntimeError as e:\n"
            "    print('error:', e, flush=True)\n"
            "try:\n"
            "    (torch.ones(3).to('lazyjit') * 2).cpu()\n"  # the same error again, not a half-made runtime
            "except RuntimeError as e:\n"
            "    print('error:', e, flush=True)\n"
            "print('done', flush=True)\n")
    p = run(code, LAZYJIT_TARGET="cuda")
    # Exited by itself: no signal (a negative code), no core dump.
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert p.returncode != -signal.SIGSEGV and p.returncode != -signal.SIGABRT
    lines = p.stdout.splitlines()
    assert lines[0] == "target cuda" and lines[-1] == "done", p.stdout
    errors = [l for l in lines if l.startswith("error:")]
    assert len(errors) == 2 and errors[0] == errors[1], p.stdout
    if CUDA_BUILD:
        # A CUDA PyTorch without a usable GPU: the driver's reason.
        assert "error: LAZYJIT_TARGET=cuda: no CUDA GPU is usable: " in errors[0], errors[0]
    else:
        assert errors[0] == (f"error: LAZYJIT_TARGET=cuda needs a CUDA build of PyTorch; this one "
                             f"({torch.__version__.split('+')[0]}) is CPU-only"), errors[0]
    # Reported where lazyjit was used, not again at exit.
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a usable GPU here: tests/gpu/ runs the CUDA target")
def test_cuda_uncaught_error_exits_with_a_traceback_not_a_signal():
    p = run(LAZYJIT_TARGET="cuda")
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert p.stdout.split() == ["target", "cuda"], p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: LAZYJIT_TARGET=cuda"), p.stderr
    assert p.stderr.count("LAZYJIT_TARGET=cuda") == 1, p.stderr  # once: nothing again at exit
