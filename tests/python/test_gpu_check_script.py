"""scripts/gpu_check.sh, checked without a GPU through its dry run: the phases
that need a GPU are skipped with their caps, the others run, and the summary
table comes last. A pytest phase cut short by its cap (SIGINT) still leaves
pytest's summary and a JUnit report naming the tests that ran. The build-error
rule that turns CUDA graphs off matches a compiler error in
executor/cuda/cuda_graph.cpp, not ninja's progress line for it."""
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"

SLOW_TESTS = """
import time
def test_fast():
    assert 1 + 1 == 2
def test_slow():
    time.sleep(300)
"""


def _run(*args, env=None, timeout=120):
    return subprocess.run(["bash", str(SCRIPT), *args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _table(out: str) -> dict:
    """The summary table's rows: phase -> (status, secs, cap, note)."""
    lines = out.split("\nphase ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = {}
    for l in lines:
        name, status, rest = l[:20].strip(), l[21:29].strip(), l[29:].split(None, 2)
        rows[name] = (status, int(rest[0]), int(rest[1]), rest[2] if len(rest) > 2 else "")
    return rows


def test_dry_run_with_a_tiny_pytest_budget_leaves_junit_and_summary(tmp_path):
    tests = tmp_path / "test_slow_gpu.py"
    tests.write_text(SLOW_TESTS)
    out = tmp_path / "out"
    p = _run("--dry-run", "--no-build", "--pytest-budget", "4", "--out", str(out),
             env={"LAZYJIT_GPU_CHECK_PYTEST_TARGET": str(tests), "LAZYJIT_GPU_CHECK_GRACE_S": "20"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert summary in p.stdout  # printed last too
    rows = _table(summary)
    assert list(rows) == ["env", "unpack", "configure", "build", "cpp_tests", "cpu_smoke",
                          "gpu_smoke", "gpu_tests", "bench"], rows
    for name in ("cpp_tests", "gpu_smoke", "bench"):
        status, secs, cap, note = rows[name]
        assert status == "skipped" and note == "dry run: needs a GPU" and cap > 0, rows[name]
    assert rows["env"][0] == "ok" and rows["cpu_smoke"][0] == "ok", rows
    status, secs, cap, note = rows["gpu_tests"]
    assert status == "cut" and cap == 4, rows["gpu_tests"]
    assert secs < cap + 20, rows["gpu_tests"]  # SIGINT ended it, not the SIGTERM after the grace
    # pytest's own summary, and the JUnit report with the test that finished
    assert "1 passed" in summary and "interrupted at the time cap" in summary, summary
    assert "PASSED" in (out / "gpu_tests.log").read_text()  # -rA
    suite = ET.parse(out / "gpu_tests.xml").getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert "test_fast" in cases and cases["test_fast"].find("failure") is None, ET.tostring(suite)


def test_bad_budget_is_refused_with_its_name():
    p = _run("--dry-run", "--pytest-budget", "soon")
    assert p.returncode == 2 and "--pytest-budget wants whole seconds, got 'soon'" in p.stderr, p.stderr


def _graph_error(tmp_path, log: str) -> bool:
    f = tmp_path / "build.log"
    f.write_text(log)
    r = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; cuda_graph_build_error "{f}"'],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


def test_graphs_off_only_for_a_compiler_error_in_cuda_graph_cpp(tmp_path):
    progress = ("[41/97] Building CXX object CMakeFiles/lazyjit.dir/executor/cuda/cuda_graph.cpp.o\n"
                "FAILED: tests/CMakeFiles/executor_tests.dir/executor/graph_replay_test.cpp.o\n"
                "/src/tests/executor/graph_replay_test.cpp:12:3: error: 'x' was not declared\n")
    assert not _graph_error(tmp_path, progress)
    assert _graph_error(tmp_path, progress + "/src/executor/cuda/cuda_graph.cpp:40:10: fatal error: "
                        "ATen/cuda/CUDAGraph.h: No such file or directory\n")
    assert _graph_error(tmp_path, "FAILED: CMakeFiles/lazyjit.dir/executor/cuda/cuda_graph.cpp.o\n")


def test_device_run_script_is_the_gpu_check():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "device" / "run.sh"), "--help"],
                       capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert p.returncode == 0 and "bash scripts/gpu_check.sh --dry-run" in p.stdout, p.stdout + p.stderr
