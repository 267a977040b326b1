"""The repro runners (`python -m lazyjit.repro DIR`, `build/lazyjit-repro DIR`)
read a repro directory as data, never as instructions (issue 40).

env.txt may set only the lazyjit switches a repro carries (the ones that change
generated code, and LAZYJIT_CACHE), each validated as the config would; any
other name (PYTHONPATH, LD_PRELOAD, LC_CTYPE, ...) is never applied: a one-line
warning names the file and line and the runner goes on without it. A runner
re-executes itself at most once. A malformed line (no '=', a LAZYJIT_ name that
is not a repro switch, a value the config rejects, a scalars.txt line that is
not an integer) exits 3 with a message naming the file and line, never a
traceback, and never 1, which means "reproduced"."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT
from test_check_graphs import run_script

REPRO_TOOL = os.path.join(ROOT, "build", "lazyjit-repro")
RUNNERS = ["python", "cpp"]
MALFORMED = 3


@pytest.fixture(scope="module")
def made_repro(tmp_path_factory):
    """One real repro (a planted fault in mul's generated code), written once."""
    tmp = tmp_path_factory.mktemp("made")
    p, _ = run_script("mul", tmp)
    assert p.returncode == 3, (p.stdout, p.stderr)
    (d,) = list((tmp / "lazyjit_repro").iterdir())
    return d


@pytest.fixture
def repro(made_repro, tmp_path):
    """A copy of the repro this test may change."""
    d = tmp_path / "repro"
    shutil.copytree(made_repro, d)
    return d


def run_runner(runner, d, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_") and k != "LD_PRELOAD"}
    env["PYTHONPATH"] = PYTHON_DIR
    if runner == "python":
        cmd = [sys.executable, "-m", "lazyjit.repro", str(d)]
    else:
        assert os.path.exists(REPRO_TOOL), f"{REPRO_TOOL} is not built (ninja -C build lazyjit-repro)"
        cmd = [REPRO_TOOL, str(d)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def add_env_line(d, line):
    """Appends `line` to env.txt; returns its 1-based line number."""
    lines = (d / "env.txt").read_text().splitlines()
    lines.append(line)
    (d / "env.txt").write_text("\n".join(lines) + "\n")
    return len(lines)


def assert_ignored_with_a_warning(r, d, n, name):
    assert r.returncode == 1 and "reproduced" in r.stdout, (r.returncode, r.stdout, r.stderr)
    warnings = [l for l in r.stderr.splitlines() if f"env.txt:{n}:" in l]
    assert len(warnings) == 1, r.stderr
    assert name in warnings[0] and "ignored" in warnings[0] and "warning" in warnings[0], warnings[0]


def test_the_runners_reproduce_an_untouched_repro(repro):
    for runner in RUNNERS:
        r = run_runner(runner, repro)
        assert r.returncode == 1 and "reproduced" in r.stdout and "mul (op #" in r.stdout, (runner, r.stdout, r.stderr)
        assert "warning" not in r.stderr, (runner, r.stderr)


@pytest.mark.parametrize("runner", RUNNERS)
def test_pythonpath_in_env_txt_never_runs_code(runner, repro, tmp_path):
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "pwned_pythonpath"
    (evil / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    n = add_env_line(repro, f"PYTHONPATH={evil}")
    r = run_runner(runner, repro)
    assert not marker.exists(), "env.txt's PYTHONPATH ran sitecustomize.py"
    assert_ignored_with_a_warning(r, repro, n, "PYTHONPATH")


def build_preload(tmp_path, marker):
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "gcc is needed to build the LD_PRELOAD probe"
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n'
                   '__attribute__((constructor)) static void pwn(void) {\n'
                   f'  FILE* f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n'
                   '}\n')
    so = tmp_path / "evil.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True, timeout=120)
    return so


@pytest.mark.parametrize("runner", RUNNERS)
def test_ld_preload_in_env_txt_never_runs_code(runner, repro, tmp_path):
    marker = tmp_path / "pwned_preload"
    so = build_preload(tmp_path, marker)
    # The probe works: preloaded, its constructor runs.
    subprocess.run(["true"], env=dict(os.environ, LD_PRELOAD=str(so)), check=True, timeout=60)
    assert marker.exists()
    marker.unlink()
    n = add_env_line(repro, f"LD_PRELOAD={so}")
    r = run_runner(runner, repro)
    assert not marker.exists(), "env.txt's LD_PRELOAD ran a constructor"
    assert_ignored_with_a_warning(r, repro, n, "LD_PRELOAD")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_locale_line_neither_applies_nor_loops(runner, repro):
    # The interpreter coerces LC_CTYPE=C to C.UTF-8: applied, the old runner saw
    # it differ after each re-exec and re-executed forever.
    n = add_env_line(repro, "LC_CTYPE=C")
    try:
        r = run_runner(runner, repro, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the runner did not finish in 60 s (re-executing itself in a loop?)")
    assert_ignored_with_a_warning(r, repro, n, "LC_CTYPE")


def assert_malformed(r, file, line=None, says=""):
    where = f"{file}:{line}:" if line is not None else file
    assert r.returncode == MALFORMED, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "reproduced" not in r.stdout, r.stderr
    msg = [l for l in r.stderr.splitlines() if where in l]
    assert msg and says in msg[0], (where, says, r.stderr)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("line,says", [
    ("no equals sign here", "NAME=VALUE"),
    ("LAZYJIT_NO_SUCH_SWITCH=1", "not a switch a repro carries"),
    ("LAZYJIT_DUMP=/tmp/somewhere", "not a switch a repro carries"),
    ("LAZYJIT_REMOTE_CACHE=redis://evil:6379/0", "not a switch a repro carries"),
    ("LAZYJIT_VECTOR_BITS=7", "128, 256 or 512"),
    ("LAZYJIT_OPT_LEVEL=9", "0, 1, 2 or 3"),
    ("LAZYJIT_FAULT=exp", "set twice"),  # env.txt has LAZYJIT_FAULT=mul
    ("LAZYJIT_DYNAMIC=sometimes", "auto, off or all"),
])
def test_a_malformed_env_txt_line_is_a_clear_error(runner, line, says, repro):
    n = add_env_line(repro, line)
    r = run_runner(runner, repro)
    assert_malformed(r, "env.txt", n, says)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("old,new,says", [
    ("LAZYJIT_FAULT=mul", "LAZYJIT_FAULT=nosuchop", "the name of an IR op"),
    ("LAZYJIT_CACHE=off", "LAZYJIT_CACHE=maybe", "on or off"),
])
def test_a_bad_value_of_a_repro_switch_is_a_clear_error(runner, old, new, says, repro):
    lines = (repro / "env.txt").read_text().splitlines()
    n = lines.index(old) + 1
    lines[n - 1] = new
    (repro / "env.txt").write_text("\n".join(lines) + "\n")
    r = run_runner(runner, repro)
    assert_malformed(r, "env.txt", n, says)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("content,line,says", [
    ("abc\n", 1, "not an integer"),
    ("12abc\n", 1, "not an integer"),
    ("99999999999999999999\n", 1, "not an integer"),
    ("1\n2\n3\n", None, "the graph takes"),
])
def test_a_malformed_scalars_txt_is_a_clear_error(runner, content, line, says, repro):
    (repro / "scalars.txt").write_text(content)
    r = run_runner(runner, repro)
    assert_malformed(r, "scalars.txt", line, says)


def test_both_runners_document_the_same_exit_statuses():
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    py = subprocess.run([sys.executable, "-m", "lazyjit.repro", "--help"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert os.path.exists(REPRO_TOOL), REPRO_TOOL
    cpp = subprocess.run([REPRO_TOOL, "--help"], env=env, capture_output=True, text=True, timeout=60)
    def statuses(text):
        text = " ".join(text.split())
        start = text.index("Exit status:")
        end = text.index("the file and line", start)
        return text[start:end]
    assert statuses(py.stderr) == statuses(cpp.stderr), (py.stderr, cpp.stderr)
    assert "3 a malformed line" in statuses(py.stderr), py.stderr


def test_both_runners_set_the_same_switches():
    # python/lazyjit/repro.py keeps a copy of runtime/debug_runs/repro.cpp's repro_switches().
    from lazyjit import repro as pyrepro
    cpp = subprocess.run([REPRO_TOOL, "--help"], capture_output=True, text=True, timeout=60)
    text = " ".join(cpp.stderr.split())
    start = text.index("carries (") + len("carries (")
    listed = text[start:text.index(")", start)].split(", ")
    assert tuple(listed) == pyrepro._SWITCHES, (listed, pyrepro._SWITCHES)
    assert all(name in pyrepro.__doc__ for name in listed)
