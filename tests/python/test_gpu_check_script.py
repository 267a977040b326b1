"""scripts/gpu_check.sh, checked without a GPU through its dry run: the phases
that need a GPU are skipped with their caps, the others run, and the summary
table comes last. A pytest phase cut short by its cap (SIGINT) still leaves
pytest's summary and a JUnit report naming the tests that ran, also when its
files run in several pytest processes. The budget printed first comes from
the measured build time, and leaves tests/gpu at least 5 minutes of a cold
10-minute call. --no-build builds nothing. The build-error rule that turns
CUDA graphs off matches a compiler error in targets/cuda/cuda_graph.cpp, not
ninja's progress line for it."""
import math
import os
import re
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
    # tests/gpu first, then the C++ tests, the smoke steps and the bench.
    assert list(rows) == ["env", "unpack", "configure", "build", "gpu_tests", "build_cpp_tests", "cpp_tests",
                          "cpu_smoke", "gpu_smoke", "bench"], rows
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
    progress = ("[41/97] Building CXX object CMakeFiles/lazyjit.dir/targets/cuda/cuda_graph.cpp.o\n"
                "FAILED: tests/CMakeFiles/executor_tests.dir/executor/graph_replay_test.cpp.o\n"
                "/src/tests/executor/graph_replay_test.cpp:12:3: error: 'x' was not declared\n")
    assert not _graph_error(tmp_path, progress)
    assert _graph_error(tmp_path, progress + "/src/targets/cuda/cuda_graph.cpp:40:10: fatal error: "
                        "ATen/cuda/CUDAGraph.h: No such file or directory\n")
    assert _graph_error(tmp_path, "FAILED: CMakeFiles/lazyjit.dir/targets/cuda/cuda_graph.cpp.o\n")


def test_device_run_script_is_the_gpu_check():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "device" / "run.sh"), "--help"],
                       capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert p.returncode == 0 and "bash scripts/gpu_check.sh --dry-run" in p.stdout, p.stdout + p.stderr


def _measured():
    """The script's MEASURED_* figures."""
    text = SCRIPT.read_text()
    return {k: (v if k == "ON" else int(v)) for k, v in
            re.findall(r'^MEASURED_([A-Z_]+)="?([^"\s]+)"?', text, re.M)}


def test_the_budget_from_the_measured_build_leaves_tests_gpu_five_minutes():
    p = _run("--dry-run", "--budget")
    assert p.returncode == 0, p.stdout + p.stderr
    m = _measured()
    rows = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 3 and f[1].isdigit() and f[2].isdigit():
            rows[f[0]] = (int(f[1]), int(f[2]), line)
    assert list(rows) == ["env", "unpack", "configure", "build", "gpu_tests", "build_cpp_tests"], p.stdout
    # A 16-core machine: the measured CPU seconds over 16 cores, plus what no core count shortens.
    build = math.ceil(m["BUILD_CPU_S"] / 16) + m["BUILD_SERIAL_S"]
    assert rows["build"][1] == build and f"{m['BUILD_CPU_S']} CPU-s / 16 cores" in rows["build"][2], p.stdout
    assert rows["unpack"][1] == m["UNPACK_S"] and rows["configure"][1] >= m["CONFIGURE_S"], p.stdout
    # Each phase starts where the one before it ends; tests/gpu right after the build.
    names = list(rows)
    for a, b in zip(names, names[1:]):
        assert rows[b][0] == rows[a][0] + rows[a][1], p.stdout
    start, secs = rows["gpu_tests"][:2]
    assert secs >= 300 and start + secs + 20 <= 540, p.stdout
    assert f"budget: tests/gpu gets {secs} s of a cold call of 600 s" in p.stdout, p.stdout
    # The measurement is the one docs/gpu.md records.
    doc = (ROOT / "docs" / "gpu.md").read_text()
    for k in ("BUILD_CPU_S", "BUILD_SERIAL_S", "TESTS_CPU_S", "UNPACK_S"):
        assert f"{m[k]} " in doc, k
    assert m["ON"] in doc


def test_a_budget_that_leaves_tests_gpu_too_little_fails():
    # A build that ends at 300 s of the 540: tests/gpu would get 220 s.
    p = _run("--dry-run", "--budget", env={"LAZYJIT_GPU_CHECK_PLAN_CORES": "1"})
    assert p.returncode == 1, p.stdout
    assert re.search(r"budget: tests/gpu gets \d+ s", p.stdout), p.stdout


def test_no_build_builds_nothing_and_uses_the_folder_given(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text("# not a real build: nothing may run ninja here\n")
    tests = tmp_path / "test_one.py"
    tests.write_text("def test_one():\n    pass\n")
    out = tmp_path / "out"
    p = _run("--dry-run", "--no-build", "--out", str(out),
             env={"LAZYJIT_GPU_CHECK_BUILD": str(build), "LAZYJIT_GPU_CHECK_PYTEST_TARGET": str(tests)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = _table((out / "summary.txt").read_text())
    for name in ("unpack", "configure", "build", "build_cpp_tests"):
        assert rows[name][0] == "skipped" and rows[name][3] == f"--no-build (uses {build})", rows[name]
    assert (out / "build.log").read_text() == "", (out / "build.log").read_text()
    assert "budget of a call with --no-build" in p.stdout, p.stdout
    assert rows["gpu_tests"][0] == "ok", rows


PARALLEL_TEST = """
import os, time
def _record(name):
    t0 = time.time()
    time.sleep(5)
    with open(os.path.join(os.environ["RECORD_DIR"], name), "w") as f:
        f.write(f"{os.getpid()} {t0} {time.time()}")
"""


def test_gpu_tests_files_run_in_parallel_processes_and_report_as_one(tmp_path):
    d = tmp_path / "gpu"
    d.mkdir()
    rec = tmp_path / "rec"
    rec.mkdir()
    (d / "test_a.py").write_text(PARALLEL_TEST + "def test_a():\n    _record('a')\n")
    (d / "test_b.py").write_text(PARALLEL_TEST + "def test_b():\n    _record('b')\n    assert False, 'b fails'\n")
    (d / "test_c.py").write_text(PARALLEL_TEST + "def test_c():\n    _record('c')\n"
                                 "def test_c_slow():\n    time.sleep(300)\n")
    out = tmp_path / "out"
    p = _run("--dry-run", "--no-build", "--pytest-budget", "20", "--out", str(out),
             env={"LAZYJIT_GPU_CHECK_PYTEST_TARGET": str(d), "LAZYJIT_GPU_CHECK_PYTEST_PROCS": "3",
                  "LAZYJIT_GPU_CHECK_GRACE_S": "20", "RECORD_DIR": str(rec)}, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    status, secs, cap, note = _table(summary)["gpu_tests"]
    assert status == "cut" and cap == 20 and secs < cap + 20, (status, secs, cap, note)
    # Three processes at once, one a file.
    runs = {n: (rec / n).read_text().split() for n in "abc"}
    assert len({r[0] for r in runs.values()}) == 3, runs
    assert max(float(r[1]) for r in runs.values()) < min(float(r[2]) for r in runs.values()), runs
    # One summary over the three, one JUnit report with what finished.
    assert "1 failed, 2 passed" in summary and "interrupted at the time cap" in summary, summary
    assert "FAILED " in summary and "test_b" in summary, summary
    cases = {c.get("name"): c for c in ET.parse(out / "gpu_tests.xml").getroot().iter("testcase")}
    assert {"test_a", "test_b", "test_c"} <= set(cases), list(cases)
    assert cases["test_b"].find("failure") is not None and cases["test_a"].find("failure") is None
