"""diffusers' own tests on lazyjit (issue 49, item 5).

Five of diffusers' test files, pinned in tests/third_party/diffusers (its
README names the commit), run twice in fresh processes: on the CPU
(DIFFUSERS_TEST_DEVICE=cpu, lazyjit not loaded), then on lazyjit
(DIFFUSERS_TEST_DEVICE=lazyjit) for exactly the tests that passed on the CPU.
At least 99% of those must pass on lazyjit. Tests that download from the Hub
are deselected: nothing downloads (HF_HUB_OFFLINE=1), and they fail on the
CPU too.

LAZYJIT_DIFFUSERS_EVERY=N runs every Nth test of the CPU run's collection
(sorted by test id) instead of all of them.
"""
import os
import pathlib
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

TREE = pathlib.Path(__file__).resolve().parents[1] / "third_party" / "diffusers"
FILES = [
    "tests/models/unets/test_models_unet_2d.py",
    "tests/models/unets/test_models_unet_2d_condition.py",
    "tests/models/autoencoders/test_models_autoencoder_kl.py",
    "tests/pipelines/ddim/test_ddim.py",
    "tests/pipelines/dit/test_dit.py",
]
# They load checkpoints from the Hub.
HUB = [
    "tests/models/unets/test_models_unet_2d.py::TestUNetLDMModel::test_from_pretrained_hub",
    "tests/models/unets/test_models_unet_2d.py::TestUNetLDMModel::test_output_pretrained",
    "tests/models/unets/test_models_unet_2d.py::TestNCSNppModel::test_output_pretrained_ve_large",
    "tests/models/unets/test_models_unet_2d_condition.py::TestUNet2DConditionHubLoading",
    "tests/models/autoencoders/test_models_autoencoder_kl.py::TestAutoencoderKL::test_from_pretrained_hub",
    "tests/models/autoencoders/test_models_autoencoder_kl.py::TestAutoencoderKL::test_output_pretrained",
]
# What the pinned files give on the CPU with diffusers 0.42.1 and torch 2.13.0
# (171 of 426 collected pass; the rest need an accelerator or the Hub). Fewer
# means the set-up is broken, and the 99% below would say little.
CPU_PASSING_AT_LEAST = 165


def _pytest(args, device, xml, tmp_path, timeout):
    env = {**os.environ, "DIFFUSERS_TEST_DEVICE": device, "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf"), "LAZYJIT_CACHE": "off", "PYTHONDONTWRITEBYTECODE": "1"}
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # eager alone, lazyjit not loaded
    else:
        env["DIFFUSERS_TEST_BACKEND"] = "lazyjit"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--rootdir={TREE}", f"--junitxml={xml}", f"--basetemp={tmp_path / ('bt-' + device)}", *args]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=TREE, env=env, capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def _outcomes(xml, run):
    """Test id -> 'passed' | 'failed' | 'skipped'. Without a JUnit report (the
    process died), the -rA lines it printed; a test missing there did not pass."""
    out = {}
    if xml.exists():
        for tc in ET.parse(xml).getroot().iter("testcase"):
            mod, _, cls = tc.get("classname").rpartition(".")
            tid = f"{mod.replace('.', '/')}.py::{cls}::{tc.get('name')}"
            tags = {c.tag for c in tc}
            out[tid] = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        return out
    for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+::\S+)", run.stdout, re.M):
        out[m.group(2)] = "passed" if m.group(1) == "PASSED" else "failed"
    return out


def _collect(tmp_path):
    env = {**os.environ, "DIFFUSERS_TEST_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                        "-o", "addopts=", f"--rootdir={TREE}", *FILES, *[f"--deselect={h}" for h in HUB]],
                       cwd=TREE, env=env, capture_output=True, text=True, timeout=600)
    ids = sorted(line for line in r.stdout.splitlines() if "::" in line)
    assert ids, r.stdout[-3000:] + r.stderr[-3000:]
    return ids


def test_diffusers_tests_pass_on_lazyjit(tmp_path):
    every = int(os.environ.get("LAZYJIT_DIFFUSERS_EVERY", "1"))
    if every > 1:
        args = _collect(tmp_path)[::every]
    else:
        args = [*FILES, *[f"--deselect={h}" for h in HUB]]
    cpu_run, cpu_s = _pytest(args, "cpu", tmp_path / "cpu.xml", tmp_path, 1500)
    cpu = _outcomes(tmp_path / "cpu.xml", cpu_run)
    passing = sorted(t for t, o in cpu.items() if o == "passed")
    # A sample of every Nth test holds about 1/N of them, not exactly.
    assert len(passing) >= (CPU_PASSING_AT_LEAST if every == 1 else CPU_PASSING_AT_LEAST // (2 * every)), (
        f"only {len(passing)} tests pass on the CPU:\n{cpu_run.stdout[-4000:]}\n{cpu_run.stderr[-2000:]}")

    lj_run, lj_s = _pytest(passing, "lazyjit", tmp_path / "lazyjit.xml", tmp_path, 1500)
    lj = _outcomes(tmp_path / "lazyjit.xml", lj_run)
    failing = [t for t in passing if lj.get(t) != "passed"]
    by_file = {f: (sum(t.startswith(f) for t in passing), sum(t.startswith(f) and t not in failing for t in passing))
               for f in FILES}
    report = (f"CPU {cpu_s:.0f} s, lazyjit {lj_s:.0f} s; per file (CPU-passing, lazyjit-passing): {by_file}")
    print(report)
    assert len(failing) <= len(passing) // 100, (
        f"{len(failing)} of the {len(passing)} tests that pass on the CPU fail on lazyjit "
        f"(rc {lj_run.returncode}{'' if (tmp_path / 'lazyjit.xml').exists() else ', no report: the process died'}; "
        f"{report}):\n" + "\n".join(failing)
        + f"\n--- output tail ---\n{lj_run.stdout[-6000:]}\n{lj_run.stderr[-3000:]}")
