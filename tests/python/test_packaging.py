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
