"""One debug ladder (issue 12, item 6): LAZYJIT_DEBUG=1 logs every sync and every
recompile; 2 also writes the graph, pass and plan dumps, text and DOT, into
./lazyjit_debug (or LAZYJIT_DUMP); 3 also the LLVM IR and each kernel's assembly.
Switches are read once per process, so every level runs in a fresh interpreter on
a small training-like script, whose results equal eager's at every level."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON_DIR

# A fused chain after a matmul, read back with item() at the same line four
# times: a compile, a cache hit, a new batch size (bound to the first program,
# no compile), then another activation (a new graph: a recompile).
SCRIPT = """\
import torch, lazyjit
torch.manual_seed(0)
w = torch.randn(64, 64)
wl = w.to("lazyjit")
def step(x, w, act):
    return (act(x @ w) * 2 + 1).softmax(-1)
for n, act in ((8, torch.tanh), (8, torch.tanh), (9, torch.tanh), (9, torch.sigmoid)):
    x = torch.randn(n, 64)
    y = step(x.to("lazyjit"), wl, act)
    got = y.sum().item()
    torch.testing.assert_close(y.cpu(), step(x, w, act))
print("ok")
"""
ITEM_LINE = next(i + 1 for i, l in enumerate(SCRIPT.splitlines()) if "got = y.sum().item()" in l)


def run_level(tmp_path, level, **env_extra):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env.update({"PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off"})
    if level is not None:
        env["LAZYJIT_DEBUG"] = str(level)
    env.update(env_extra)
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok", p.stdout  # results equal eager's
    return p


def sync_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("lazyjit: sync at ")]


def test_level0_says_nothing_and_dumps_nothing(tmp_path):
    p = run_level(tmp_path, 0)
    assert "lazyjit:" not in p.stderr, p.stderr
    assert not (tmp_path / "lazyjit_debug").exists()


def test_level1_logs_each_sync_with_the_line_and_each_recompile(tmp_path):
    p = run_level(tmp_path, 1)
    site = f"train.py:{ITEM_LINE}"
    at_item = [l for l in sync_lines(p.stderr) if f"{site} (item())" in l]
    assert len(at_item) == 4, p.stderr
    num = r"\d+(\.\d+)? ms"
    assert re.search(rf"\d+ ops -> compiled \(first at this site\) in {num}, ran in {num}$", at_item[0]), at_item[0]
    assert re.search(rf"\d+ ops -> cache hit, ran in {num}$", at_item[1]), at_item[1]
    assert re.search(rf"\d+ ops -> bound to new sizes in {num}, ran in {num}$", at_item[2]), at_item[2]
    assert re.search(rf"-> compiled \(new graph\) in {num}, ran in {num}$", at_item[3]), at_item[3]
    # The recompile's explanation, before its sync line; the binding has none.
    lines = p.stderr.splitlines()
    whys = [i for i, l in enumerate(lines) if l.startswith("lazyjit: compiling at ") and f"{site}: " in l]
    assert len(whys) == 2 and "first at this site" in lines[whys[0]], lines
    assert "new graph" in lines[whys[1]] and "tanh → sigmoid" in lines[whys[1]], lines[whys[1]]
    assert lines.index(at_item[2]) < whys[1] < lines.index(at_item[3])
    assert not (tmp_path / "lazyjit_debug").exists()  # level 1 writes no files


def test_level1_says_when_a_program_came_from_the_disk_cache(tmp_path):
    cache = str(tmp_path / "cache")
    run_level(tmp_path, 1, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=cache)  # compiles, writes
    p = run_level(tmp_path, 1, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=cache)
    at_item = [l for l in sync_lines(p.stderr) if f"train.py:{ITEM_LINE} (item())" in l]
    assert len(at_item) == 4 and all(" -> loaded from disk in " in at_item[i] for i in (0, 3)), p.stderr
    # The new batch size binds to the program loaded from disk.
    assert "cache hit" in at_item[1] and " -> bound to new sizes in " in at_item[2], p.stderr
    assert "compiling at" not in p.stderr, p.stderr


def _dumps(d: Path):
    return sorted(f.name for f in d.iterdir())


def _dot_accepts(path: Path):
    if shutil.which("dot") is None:
        pytest.fail("graphviz's dot is not installed: run scripts/setup.sh", pytrace=False)
    p = subprocess.run(["dot", "-Tsvg", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"dot rejects {path.name}: {p.stderr}"
    assert "<svg" in p.stdout


def test_level2_dumps_graphs_and_plans_as_text_and_dot_but_no_llvm(tmp_path):
    p = run_level(tmp_path, 2)
    assert len(sync_lines(p.stderr)) >= 3  # level 1's log too
    d = tmp_path / "lazyjit_debug"
    names = _dumps(d)
    keys = sorted({n.split(".")[0] for n in names if n.endswith(".plan.txt")})
    assert len(keys) >= 2, names  # at least the two compiles at the item() line
    for key in keys:
        for suffix in (".graph.txt", ".graph.dot", ".plan.txt", ".plan.dot"):
            assert key + suffix in names, (key, suffix, names)
        assert any(n.startswith(key + ".pass") for n in names), names
    assert not [n for n in names if n.endswith((".ll", ".s"))], names
    plan_dot = next(d / (k + ".plan.dot") for k in keys if "subgraph cluster_" in (d / (k + ".plan.dot")).read_text())
    text = plan_dot.read_text()
    assert re.search(r'label="fused_\d+ \(step \d+\)', text), text
    assert "aten::mm" in text and "shape=invhouse" in text and "shape=house" in text
    _dot_accepts(plan_dot)
    _dot_accepts(plan_dot.with_name(plan_dot.name.replace(".plan.dot", ".graph.dot")))


def test_level2_writes_into_LAZYJIT_DUMP_when_set(tmp_path):
    run_level(tmp_path, 2, LAZYJIT_DUMP=str(tmp_path / "mine"))
    assert not (tmp_path / "lazyjit_debug").exists()
    names = _dumps(tmp_path / "mine")
    assert any(n.endswith(".plan.dot") for n in names) and not any(n.endswith(".ll") for n in names), names


@pytest.mark.parametrize("how", ["level3", "LAZYJIT_DUMP"])
def test_level3_and_plain_dump_add_llvm_ir_and_assembly(tmp_path, how):
    if how == "level3":
        run_level(tmp_path, 3)
        d = tmp_path / "lazyjit_debug"
    else:
        run_level(tmp_path, None, LAZYJIT_DUMP=str(tmp_path / "dump"))
        d = tmp_path / "dump"
    names = _dumps(d)
    asm = [d / n for n in names if n.endswith(".s")]
    assert asm and len(asm) == len([n for n in names if n.endswith(".ll")]), names
    for s in asm:
        text = s.read_text()
        assert re.search(r"^# ==== fused_\d+", text, re.M), text[:500]
        # Real x86 code of a fused kernel, vectorized.
        assert re.search(r"^\s+ret[q]?\s*$", text, re.M), text[:2000]
        assert re.search(r"%[yz]mm\d+", text), text[:2000]
        ll = s.with_suffix(".ll").read_text()
        assert "after optimization" in ll and "define " in ll
    assert any(n.endswith(".plan.dot") for n in names)
