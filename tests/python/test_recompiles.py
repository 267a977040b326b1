"""Every compile is explained in the user's terms: what differs from the nearest
program compiled before at the same sync call site (issue 9, item 4).

New sizes of a compiled graph bind to its program without a compile
(runtime/shape_binder.h), so the tests that explain size changes mark the dim
static (lazyjit.mark_static) or run with LAZYJIT_DYNAMIC=off: exact code, a
compile per size."""
import os

import torch

from conftest import run_python


def test_new_batch_size_names_the_dim_and_the_sizes_seen(fresh):
    lazyjit = fresh
    ref = torch.nn.Linear(16, 8)
    lin = torch.nn.Linear(16, 8)
    lin.load_state_dict(ref.state_dict())
    lin = lin.to("lazyjit")
    for batch in (7, 8, 1, 8):
        x = torch.randn(batch, 16)
        xl = x.to("lazyjit")
        lazyjit.mark_static(xl, 0)
        got = torch.nn.functional.gelu(lin(xl)).cpu()
        with torch.no_grad():
            torch.testing.assert_close(got, torch.nn.functional.gelu(ref(x)))
    rs = lazyjit.explain_recompiles()
    assert [r["kind"] for r in rs] == ["first at this site", "new shapes", "new shapes"], rs
    assert len({r["site"] for r in rs}) == 1 and "test_recompiles.py" in rs[0]["site"], rs
    assert "xl (input 1) dim 0: 7 → 8 (sizes seen: 7, 8)" in rs[1]["detail"], rs[1]
    assert "dim 0: 8 → 1 (sizes seen: 1, 7, 8)" in rs[2]["detail"], rs[2]
    report = lazyjit.metrics_report()
    assert "recompiles by call site" in report and "3 compiles" in report, report


def test_a_long_sweep_keeps_each_explanation_short(fresh):
    # The sizes seen are summarized past six: a sweep over thousands of sizes
    # must not make every explanation (kept in the metrics) longer than the last.
    lazyjit = fresh
    for n in range(1, 21):
        x = torch.randn(n, 4)
        xl = x.to("lazyjit")
        lazyjit.mark_static(xl, 0)
        torch.testing.assert_close((xl * 2).cpu(), x * 2)
    last = lazyjit.explain_recompiles()[-1]["detail"]
    assert "19 → 20 (sizes seen: 1, 2, 3, …, 18, 19, 20; 20 sizes)" in last, last


def test_changed_graph_names_the_first_op_that_differs(fresh):
    lazyjit = fresh
    x = torch.randn(4, 8)
    outs = []
    for act in (torch.tanh, torch.sigmoid):
        outs.append((act(x.to("lazyjit")) * 2).cpu())  # one call site, two graphs
    torch.testing.assert_close(outs[1], torch.sigmoid(x) * 2)
    rs = lazyjit.explain_recompiles()
    assert rs[-1]["kind"] == "new graph", rs
    assert "tanh → sigmoid (first op that differs)" in rs[-1]["detail"], rs[-1]


def test_slice_bound_change_is_named(fresh):
    lazyjit = fresh
    x = torch.randn(32, 8)
    for end in (17, 18):
        xl = x.to("lazyjit")
        lazyjit.mark_static(xl, 0)
        got = (xl[:end] * 3).cpu()
        torch.testing.assert_close(got, x[:end] * 3)
    rs = lazyjit.explain_recompiles()
    assert rs[-1]["kind"] == "new shapes", rs
    assert "as_strided (a view): sizes [17, 8] → [18, 8]" in rs[-1]["detail"], rs[-1]


def test_log_recompiles_prints_each_compile():
    code = ("import torch, lazyjit\n"
            "for n in (3, 4):\n"
            "    (torch.ones(n).to('lazyjit') * 2).cpu()\n")
    p = run_python(code, {"LAZYJIT_LOG": "recompiles", "LAZYJIT_DYNAMIC": "off"})
    lines = [l for l in p.stderr.splitlines() if l.startswith("lazyjit: compiling at")]
    assert len(lines) == 2, p.stderr
    assert "first at this site" in lines[0] and "input 0 dim 0: 3 → 4" in lines[1], lines


BUDGET = ("import torch, lazyjit\n"
          "for n in range(1, 7):\n"
          "    out = (torch.ones(n).to('lazyjit') * 2).cpu()\n"
          "    assert out.tolist() == [2.0] * n\n"
          "print('done', len(lazyjit.explain_recompiles()))\n")


def test_recompile_limit_warns_once_per_site():
    p = run_python(BUDGET, {"LAZYJIT_RECOMPILE_LIMIT": "3", "LAZYJIT_DYNAMIC": "off"})
    warnings = [l for l in p.stderr.splitlines() if "recompile" in l or "compiles at" in l]
    assert len(warnings) == 1 and "4 compiles at <string>:3" in warnings[0], p.stderr
    assert "input 0 dim 0: 3 → 4" in warnings[0], warnings
    assert p.stdout.strip() == "done 6"


def test_recompile_limit_error_raises_with_the_explanation():
    import subprocess, sys
    from conftest import PYTHON_DIR, ROOT
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off",
           "LAZYJIT_RECOMPILE_LIMIT": "3", "LAZYJIT_ON_RECOMPILE_LIMIT": "error",
           "LAZYJIT_DYNAMIC": "off"}
    p = subprocess.run([sys.executable, "-c", BUDGET], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "recompile limit reached: 4 compiles at <string>:3" in p.stderr and "3 → 4" in p.stderr, p.stderr


def test_new_sizes_bind_without_a_compile_to_explain(fresh):
    lazyjit = fresh
    for n in (3, 4, 9, 1):
        x = torch.randn(n, 4)
        torch.testing.assert_close((x.to("lazyjit").tanh() * 2).cpu(), x.tanh() * 2)
    rs = lazyjit.explain_recompiles()
    assert [r["kind"] for r in rs] == ["first at this site"], rs
    assert lazyjit.metrics()["shape_binds"] == 3, lazyjit.metrics()


# --- by name, and by what changed (issue 59, point 3) -----------------------------------------------------------


def test_a_dtype_change_is_named_as_such_with_the_inputs_name(fresh):
    # The model moves to float64 between steps: its old float32 parameters are
    # read by the graph that casts them, which reorders the inputs. Matched by
    # position, x's dtype change read as "input 2 dim 0: 16 → 8 — now dynamic".
    # Before the fix this printed: "input 2 dim 0: 16 → 8 (sizes seen: 8, 16) —
    # now dynamic; input 2 dim 1: 8 → 16 ..." and dynamic_dims was 2 (d659f04).
    lazyjit = fresh
    model = torch.nn.Linear(16, 8).to("lazyjit")
    for dt in (torch.float32, torch.float64):
        model = model.to(dt)
        x = torch.randn(8, 16, dtype=dt).to("lazyjit")
        torch.nn.functional.gelu(model(x)).cpu()
    rs = lazyjit.explain_recompiles()
    assert len(rs) == 2, rs
    detail = rs[-1]["detail"]
    assert "now dynamic" not in detail and "→ 8" not in detail and "rank" not in detail, detail
    assert "x (input " in detail and "dtype float32 → float64" in detail, detail
    assert lazyjit.metrics()["dynamic_dims"] == 0, lazyjit.metrics()


def test_size_and_layout_changes_name_the_argument_path(fresh):
    lazyjit = fresh
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).to("lazyjit")
    batch = {"tokens": None}
    for n, transpose in ((6, False), (7, False), (7, True)):
        src = torch.randn(4, n).t() if transpose else torch.randn(n, 4)
        batch["tokens"] = src.to("lazyjit")
        lazyjit.mark_static(batch["tokens"], 0)
        (model(batch["tokens"]) * 2).cpu()
    rs = lazyjit.explain_recompiles()
    assert "batch['tokens'] (input " in rs[1]["detail"] and "dim 0: 6 → 7" in rs[1]["detail"], rs
    assert "batch['tokens'] (input " in rs[2]["detail"] and "layout" in rs[2]["detail"], rs
    assert "contiguous" in rs[2]["detail"], rs


def test_why_miss_advice_follows_the_change(tmp_path):
    # Four compiles at one site, each a new dtype: casting is the advice, not
    # padding (no dim took a second size).
    import subprocess, sys
    from conftest import PYTHON_DIR, ROOT
    code = ("import torch, lazyjit\n"
            "for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):\n"
            "    x = torch.ones(8, 4, dtype=dt).to('lazyjit')\n"
            "    (x * 2).cpu()\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_LOG": "recompiles"}
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    log = tmp_path / "recompiles.log"
    log.write_text(p.stderr)
    tool = os.environ.get("LAZYJIT_CACHE_TOOL", os.path.join(ROOT, "build", "lazyjit-cache"))
    out = subprocess.run([tool, "why-miss", str(log)], capture_output=True, text=True, timeout=60).stdout
    assert "pad or bucket" not in out, out
    assert "dtype" in out and "x" in out, out
