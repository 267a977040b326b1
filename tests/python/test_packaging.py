"""`pip install --no-build-isolation .` builds against the installed torch and
gives an importable package whose device works (issue 3, item 8)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pip_install_builds_an_importable_package(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                    "--target", str(target), ROOT], check=True, cwd=str(tmp_path))
    probe = ("import torch, lazyjit; m = torch.nn.Linear(4, 2).to('lazyjit'); x = torch.randn(3, 4); "
             "m2 = torch.nn.Linear(4, 2); m2.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()}); "
             "torch.testing.assert_close(m(x.to('lazyjit')).cpu(), m2(x)); print(lazyjit.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, "-c", probe], check=True, env=env, cwd=str(tmp_path),
                         capture_output=True, text=True).stdout
    assert out.strip().startswith(str(target)), out
    # The inspection tool comes with the package, as a console script that runs
    # the bundled binary without importing torch.
    tool = target / "bin" / "lazyjit-cache"
    assert tool.exists(), sorted(os.listdir(target / "bin")) if (target / "bin").exists() else "no bin/"
    empty = tmp_path / "empty-cache"
    res = subprocess.run([sys.executable, str(tool), "ls", "--dir", str(empty)], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True)
    assert res.returncode == 2 and str(empty) in res.stderr, (res.returncode, res.stdout, res.stderr)


# A fresh venv gets torch without downloading it: a .pth file naming a folder of
# links to what the venv running the tests has installed (torch 2.13.0 and its
# dependencies, pip, setuptools), lazyjit left out. Nothing is installed in the
# fresh venv itself: lazyjit has to be installed into it to be found there.
def _fresh_venv(tmp_path, name):
    venv = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    import torch
    test_site = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
    view = tmp_path / f"{name}-borrowed"
    view.mkdir()
    for entry in os.listdir(test_site):
        if "lazyjit" not in entry.lower() and not entry.endswith(".pth"):
            os.symlink(os.path.join(test_site, entry), view / entry)
    with open(os.path.join(site, "_borrowed_from_the_test_venv.pth"), "w") as f:
        f.write(str(view) + "\n")
    return venv, py


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra)
    return env


DEVICE_PROBE = ("import torch, lazyjit; m = torch.nn.Linear(4, 2); x = torch.randn(3, 4); want = m(x); "
                "torch.testing.assert_close(m.to('lazyjit')(x.to('lazyjit')).cpu(), want); "
                "assert lazyjit.metrics()['graphs_executed'] >= 1; print(lazyjit.__file__)")


COMPILE_PROBE = ("import sys, torch; f = torch.compile(lambda x: (x * 2).sin(), backend='lazyjit'); "
                 "x = torch.randn(3, 4); torch.testing.assert_close(f(x), (x * 2).sin()); "
                 "import lazyjit.dynamo; assert lazyjit.dynamo.stats()['calls'] == 1; "
                 "print(sys.modules['lazyjit'].__file__)")


def test_wheel_installs_into_a_fresh_venv(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    "-w", str(wheels), ROOT], check=True, cwd=str(tmp_path))
    (wheel,) = os.listdir(wheels)
    # It holds a CPython extension: a platform wheel for this interpreter, not py3-none-any.
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.startswith("lazyjit-0.1.0-") and f"-{tag}-{tag}-linux_x86_64.whl" in wheel, wheel
    venv, py = _fresh_venv(tmp_path, "venv")
    # Its dependency (torch==2.13.0) is checked, not skipped: pip finds it installed.
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(wheels / wheel)], check=True,
                   cwd=str(tmp_path), env=_clean_env())
    out = subprocess.run([str(py), "-c", DEVICE_PROBE], check=True, cwd=str(tmp_path), env=_clean_env(),
                         capture_output=True, text=True).stdout
    assert out.strip().startswith(str(venv)), out
    # The wheel's entry point makes torch.compile find the backend without `import lazyjit`.
    out = subprocess.run([str(py), "-c", COMPILE_PROBE], check=True, cwd=str(tmp_path), env=_clean_env(),
                         capture_output=True, text=True).stdout
    assert out.strip().startswith(str(venv)), out
    empty = tmp_path / "empty-cache"
    res = subprocess.run([str(venv / "bin" / "lazyjit-cache"), "ls", "--dir", str(empty)], cwd=str(tmp_path),
                         env=_clean_env(), capture_output=True, text=True)
    assert res.returncode == 2 and str(empty) in res.stderr, (res.returncode, res.stdout, res.stderr)


def test_build_script_installs_the_checkout_into_a_venv(tmp_path):
    """What scripts/build.sh does for .venv (scripts/venv_install.sh), on a scratch
    venv: afterwards `import lazyjit` works from any directory, from this checkout's
    python/, and PYTHONPATH still wins over it."""
    venv, py = _fresh_venv(tmp_path, "venv")
    log = tmp_path / "setup.log"
    install = ["bash", os.path.join(ROOT, "scripts", "venv_install.sh"), str(venv)]
    res = subprocess.run(install, cwd=str(tmp_path), env=_clean_env(LAZYJIT_SETUP_LOG=str(log)),
                         capture_output=True, text=True)
    assert res.returncode == 0, (res.stdout, res.stderr, log.read_text() if log.exists() else "")
    assert res.stdout.count("\n") == 1 and "editable" in res.stdout, res.stdout  # one line; pip's output in the log
    out = subprocess.run([str(py), "-c", DEVICE_PROBE], check=True, cwd=str(tmp_path), env=_clean_env(),
                         capture_output=True, text=True).stdout
    assert out.strip() == os.path.join(ROOT, "python", "lazyjit", "__init__.py"), out
    # PYTHONPATH comes first: a checkout named there is the one imported.
    other = tmp_path / "other" / "lazyjit"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    out = subprocess.run([str(py), "-c", "import lazyjit; print(lazyjit.__file__)"], check=True, cwd=str(tmp_path),
                         env=_clean_env(PYTHONPATH=str(other.parent)), capture_output=True, text=True).stdout
    assert out.strip() == str(other / "__init__.py"), out
    res = subprocess.run([str(venv / "bin" / "lazyjit-cache"), "--help"], cwd=str(tmp_path), env=_clean_env(),
                         capture_output=True, text=True)
    assert res.returncode == 0 and "ls" in res.stdout, (res.returncode, res.stdout, res.stderr)
    # Installed once: the next build finds it and says nothing.
    res = subprocess.run(install, cwd=str(tmp_path), env=_clean_env(LAZYJIT_SETUP_LOG=str(log)),
                         capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout == "", (res.stdout, res.stderr)
