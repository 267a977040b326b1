"""examples/demo.py, as `bash scripts/demo.sh` runs it from a fresh clone (an
empty cache directory): its table shows a compile, steps run by the compiled
program and cache hits, and a second run loads the program from disk."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _demo(cache_dir):
    env = {**os.environ, "LAZYJIT_CACHE": "on", "LAZYJIT_CACHE_DIR": str(cache_dir),
           "LAZYJIT_BACKGROUND_COMPILE": "on"}
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "demo.py")], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def _column(out, name):
    rows = [line for line in out.splitlines() if line[:4].strip().isdigit()]
    return [row for row in rows if name in row]


def test_the_demo_shows_a_compile_then_the_program_from_the_cache(tmp_path):
    first = _demo(tmp_path / "cache")
    assert "op by op (compiling)" in first.splitlines()[2], first
    assert len(_column(first, "program (just compiled)")) == 1, first
    assert len(_column(first, "program (cache hit)")) == 6, first
    assert "1 compiles" in first and "6 cache hits" in first and "results match eager" in first, first
    second = _demo(tmp_path / "cache")
    assert "program (disk load)" in second.splitlines()[2], second
    assert "0 compiles" in second and "1 disk loads" in second, second
