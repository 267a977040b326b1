"""lazyjit-cache (issue 11) on caches built by real runs: an MLP forward at two
batch sizes and a tiny transformers Llama forward, each in its own process with
LAZYJIT_CACHE=on. Destructive tests work on a copy of the shared cache.

Paths: the runs import lazyjit from <repo>/python and the tool is
<repo>/build/lazyjit-cache, where <repo> is the checkout holding this file.
LAZYJIT_CACHE_TOOL overrides the tool; a worktree without a built extension
can symlink the main checkout's python/lazyjit/_C*.so and lib/ into its own.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import PYTHON_DIR, ROOT

TOOL = os.environ.get("LAZYJIT_CACHE_TOOL", os.path.join(ROOT, "build", "lazyjit-cache"))


def require(program):
    """scripts/setup.sh installs every program these tests use: one missing is a
    broken set-up, and fails the test that needs it."""
    path = shutil.which(program) or (program if os.access(program, os.X_OK) else None)
    if path is None:
        pytest.fail(f"{program} is not installed: run scripts/setup.sh", pytrace=False)
    return path


@pytest.fixture(scope="module", autouse=True)
def _tool_is_built():
    if not os.access(TOOL, os.X_OK):
        pytest.fail(f"{TOOL} is not built: run scripts/build.sh (scripts/setup.sh, then ninja -C build)",
                    pytrace=False)


# An MLP forward at batch size argv[1] (default 8), checked against eager; the
# last line is the process's compile counters as JSON.
MLP = r"""
import json, sys, torch, lazyjit
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
x = torch.randn(batch, 16)
with torch.no_grad():
    want = m(x)
    got = m.to("lazyjit")(x.to("lazyjit")).cpu()
torch.testing.assert_close(got, want)
mt = lazyjit.metrics()
print(json.dumps({k: mt[k] for k in ("llvm_compiles", "disk_hits", "disk_writes")}))
"""

LLAMA = r"""
import json, torch, lazyjit
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, vocab_size=128, max_position_embeddings=64, bos_token_id=0,
                  eos_token_id=0, pad_token_id=0)
m = LlamaForCausalLM(cfg).eval()
ids = torch.randint(1, 128, (2, 8))
with torch.no_grad():
    want = m(ids).logits
    got = m.to("lazyjit")(ids.to("lazyjit")).logits.cpu()
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
mt = lazyjit.metrics()
print(json.dumps({k: mt[k] for k in ("llvm_compiles", "disk_hits", "disk_writes")}))
"""

# Many batch sizes in a row: a writer and reader of the cache for a few seconds.
BUSY = r"""
import torch, lazyjit
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
lm = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
lm.load_state_dict(m.state_dict())
lm = lm.to("lazyjit")
with torch.no_grad():
    for rounds in range(2):
        for batch in range(1, 25):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(lm(x.to("lazyjit")).cpu(), m(x))
print("ok")
"""


def env_for(cache_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    # Exact code: each batch size a program and an entry of its own, for the
    # tool to list and compare (by default a new size binds to a stored program).
    env.update(PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=str(cache_dir), LAZYJIT_DYNAMIC="off",
               LAZYJIT_BACKGROUND_COMPILE="off")
    return env


def run_program(cache_dir, program, *args):
    p = subprocess.run([sys.executable, "-c", program, *map(str, args)], env=env_for(cache_dir), cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def tool(*args, check=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, env=env, timeout=120)
    if check:
        assert p.returncode == 0, f"{args}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def tool_json(*args):
    return json.loads(tool(*args, "--json").stdout)


def entry_files(cache_dir):
    d = os.path.join(str(cache_dir), "v1", "entries")
    return sorted(f[:-4] for f in os.listdir(d) if f.endswith(".ljc"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The shared cache and how many entries the runs wrote."""
    d = tmp_path_factory.mktemp("cache")
    writes = 0
    for program, args in ((MLP, (7,)), (MLP, (8,)), (LLAMA, ())):
        writes += run_program(d, program, *args)["disk_writes"]
    second = run_program(d, MLP, 8)  # a hit, for stats
    assert second["llvm_compiles"] == 0 and second["disk_hits"] >= 1
    return {"dir": d, "writes": writes}


@pytest.fixture
def copy(cache, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(cache["dir"], dst, symlinks=True)
    return dst


def mlp_entries(listing, width=16):
    """The MLP's programs by batch size: the entries with a [batch, 16] f32 input of 5 inputs."""
    out = {}
    for e in listing["entries"]:
        sizes = [t["sizes"] for t in e["inputs"]]
        if len(sizes) == 5 and sizes[1][1:] == [width] and sizes[2] == [width, 64]:
            out[sizes[1][0]] = e
    return out


def test_ls_json_lists_exactly_the_entries_the_runs_created(cache):
    listing = tool_json("ls", "--dir", cache["dir"])
    assert listing["schema"] == "lazyjit-cache/ls/1"
    keys = [e["key"] for e in listing["entries"]]
    assert sorted(keys) == entry_files(cache["dir"])
    assert len(keys) == cache["writes"]
    assert set(mlp_entries(listing)) == {7, 8}
    for e in listing["entries"]:
        assert e["kind"] == "program" and e["problem"] is None and e["compile_ms"] > 0 and e["ops"] > 0
        assert e["site"], e
    assert sum(e["hits"] for e in listing["entries"]) >= 1
    text = tool("ls", "--dir", cache["dir"], "--sort", "hits", "--limit", "1").stdout.splitlines()
    assert text[0].split()[:2] == ["KEY", "KIND"] and len(text) == 2
    filtered = tool_json("ls", "--dir", cache["dir"], "--filter", keys[0][:40])
    assert [e["key"] for e in filtered["entries"]] == [keys[0]]


def test_explain_names_the_dim_that_differs(cache):
    mlp = mlp_entries(tool_json("ls", "--dir", cache["dir"]))
    a, b = mlp[7]["key"], mlp[8]["key"]
    out = tool_json("explain", a, b, "--dir", cache["dir"])
    assert out["key_parts"] == ["shape"]
    assert [d["text"] for d in out["inputs"]] == ["input 1 dim 0: 7 → 8"]
    assert out["first_ir_difference"]["op_a"] == "input"
    assert out["first_op_difference"]["op_a"] == "aten[aten::addmm]"  # the first Linear, on 7 vs 8 rows
    assert "[7,64]" in out["first_op_difference"]["a"] and "[8,64]" in out["first_op_difference"]["b"]
    text = tool("explain", mlp[7]["short_key"], mlp[8]["short_key"], "--dir", cache["dir"]).stdout
    assert "key parts that differ: shape" in text and "input 1 dim 0: 7 → 8" in text


def test_show_prints_manifest_ir_plan_and_assembly(cache):
    key = mlp_entries(tool_json("ls", "--dir", cache["dir"]))[8]["key"]
    text = tool("show", key[:40], "--dir", cache["dir"], "--asm").stdout
    assert key in text and "== IR" in text and "gelu" in text and "== plan" in text and "fused_0" in text
    require("llvm-objdump-19")  # --asm disassembles with it
    assert "<fused_0>:" in text
    shown = tool_json("show", key, "--dir", cache["dir"], "--llvm")
    assert shown["manifest"]["key"] == key and shown["llvm"] is None and shown["notes"]


def test_stats_counts_hits_and_time_saved(cache):
    s = tool_json("stats", "--dir", cache["dir"])
    assert s["entries"] == cache["writes"] and s["hits"] >= 1
    assert s["hit_ratio"] == pytest.approx(s["hits"] / (s["hits"] + s["entries"]))
    assert s["saved_ms"] > 0 and len(s["never_hit"]) < s["entries"]
    assert s["top_sites"] and all(r["site"] for r in s["top_sites"])


def test_errors_are_clear(cache, tmp_path):
    p = tool("ls", "--dir", tmp_path / "missing", check=False)
    assert p.returncode == 2 and "no cache directory" in p.stderr
    p = tool("ls", "--dir", tmp_path, check=False)
    assert p.returncode == 2 and "not a lazyjit cache" in p.stderr
    key = entry_files(cache["dir"])[0]
    typo = ("0" if key[0] != "0" else "1") + key[1:20]
    p = tool("show", typo, "--dir", cache["dir"], check=False)
    assert p.returncode == 2 and f"did you mean {key}" in p.stderr


def test_verify_finds_a_flipped_byte(copy):
    assert tool("verify", "--dir", copy).returncode == 0
    key = entry_files(copy)[0]
    path = copy / "v1" / "entries" / f"{key}.ljc"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    p = tool("verify", "--dir", copy, "--json", check=False)
    assert p.returncode == 1
    assert [b["key"] for b in json.loads(p.stdout)["bad"]] == [key]
    p = tool("verify", "--dir", copy, "--quarantine", check=False)
    assert p.returncode == 1 and "quarantined" in p.stdout
    assert key not in entry_files(copy) and os.listdir(copy / "v1" / "quarantine")
    assert tool("verify", "--dir", copy).returncode == 0


def test_prune_while_a_process_uses_the_cache_leaves_it_valid(copy):
    busy = subprocess.Popen([sys.executable, "-c", BUSY], env=env_for(copy), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pruned = 0
    while busy.poll() is None:
        out = tool_json("prune", "--dir", copy, "--max-size", "12K")
        pruned += len(out["removed"])
        assert out["kept_bytes"] <= 12 * 1024
        time.sleep(0.05)
    out, err = busy.communicate()
    assert busy.returncode == 0 and out.strip() == "ok", err
    assert pruned > 0
    assert tool("verify", "--dir", copy).returncode == 0
    assert tool_json("prune", "--dir", copy, "--older-than", "0s", "--dry-run")["removed"]
    tool("prune", "--dir", copy, "--older-than", "0s")
    assert entry_files(copy) == []


def test_rm_and_clear(copy):
    keys = entry_files(copy)
    assert "removed" in tool("rm", keys[0][:45], "--dir", copy).stdout
    assert entry_files(copy) == keys[1:]
    assert "would remove" in tool("clear", "--dir", copy).stdout and entry_files(copy) == keys[1:]
    tool("clear", "--dir", copy, "--yes")
    assert entry_files(copy) == [] and tool("verify", "--dir", copy).returncode == 0


def test_export_then_import_makes_a_new_process_compile_nothing(cache, tmp_path):
    archive = tmp_path / "warm.ljca"
    assert "exported" in tool("export", archive, "--dir", cache["dir"]).stdout
    fresh = tmp_path / "fresh"
    out = tool_json("import", archive, "--dir", fresh)
    assert len(out["imported"]) == cache["writes"] and out["refused"] == []
    assert entry_files(fresh) == entry_files(cache["dir"])
    for program, args in ((MLP, (7,)), (MLP, (8,)), (LLAMA, ())):
        m = run_program(fresh, program, *args)
        assert m["llvm_compiles"] == 0 and m["disk_hits"] >= 1, m


def test_import_refuses_foreign_and_damaged_archives(cache, tmp_path):
    archive = tmp_path / "warm.ljca"
    tool("export", archive, "--dir", cache["dir"])
    p = tool("import", archive, "--dir", tmp_path / "a", "--expect-fingerprint", "llvm 0;cpu other", "--json", check=False)
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["imported"] == [] and len(out["refused"]) == cache["writes"]
    assert all(r["reason"].startswith("foreign") for r in out["refused"])
    assert tool("import", archive, "--dir", tmp_path / "b", "--expect-fingerprint", "x", "--allow-foreign").returncode == 0
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 1
    archive.write_bytes(bytes(data))
    p = tool("import", archive, "--dir", tmp_path / "c", check=False)
    assert p.returncode == 1 and "damaged" in p.stderr


def png_distinct_bytes(path):
    """How many distinct byte values the decompressed pixel rows hold: 1-2 for a blank page."""
    import struct
    import zlib
    data, pos, idat = open(path, "rb").read(), 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


CHROMIUM = "/usr/bin/chromium"


def test_report_html_loads_in_headless_chromium_and_shows_every_entry(cache, tmp_path):
    require(CHROMIUM)
    page = tmp_path / "report.html"
    assert "wrote" in tool("report", "--html", page, "--dir", cache["dir"]).stdout
    html = page.read_text()
    assert "<script src" not in html and "<link" not in html  # self-contained
    require("dot")  # the report draws each entry's graph with it
    assert html.count("<svg") >= 2 + 1  # two charts and at least one graph
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr", "--v=0", "--window-size=1200,900"]
    shot = tmp_path / "report.png"
    p = subprocess.run(base + [f"--screenshot={shot}", f"file://{page}"], capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 5000, p.stderr
    assert png_distinct_bytes(shot) > 20
    assert "Uncaught" not in p.stderr and "ERROR:CONSOLE" not in p.stderr, p.stderr
    dom = subprocess.run(base + ["--dump-dom", f"file://{page}"], capture_output=True, text=True, timeout=120)
    assert "Uncaught" not in dom.stderr and "ERROR:CONSOLE" not in dom.stderr, dom.stderr
    for key in entry_files(cache["dir"]):
        assert key in dom.stdout


def test_why_miss_summarizes_a_recompile_log(tmp_path):
    code = ("import torch, lazyjit\n"
            "for n in (3, 4, 5, 4):\n"
            "    out = (torch.ones(n, 8).to('lazyjit') * 2).cpu()\n"
            "    assert out.eq(2).all()\n"
            "x = torch.randn(4, 8)\n"
            "for f in (torch.tanh, torch.sigmoid):\n"
            "    (f(x.to('lazyjit')) + 1).cpu()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    # Exact code: each new size compiles (by default it binds, and is not in the log).
    env.update(PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="off", LAZYJIT_LOG="recompiles", LAZYJIT_DYNAMIC="off",
               LAZYJIT_BACKGROUND_COMPILE="off")
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    log = tmp_path / "recompiles.log"
    log.write_text(p.stderr)
    out = tool_json("why-miss", str(log))
    assert out["schema"] == "lazyjit-cache/why-miss/1" and out["compiles"] == 5, out
    sites = {s["site"]: s for s in out["sites"]}
    assert sites["<string>:3"]["varying_dims"] == {"input 0 dim 0": [3, 4, 5]}, sites
    assert sites["<string>:7"]["op_changes"] == ["op #1: tanh → sigmoid (first op that differs)"], sites
    text = tool("why-miss", str(log)).stdout
    assert "input 0 dim 0 took 3 sizes: 3, 4, 5" in text, text


def test_explain_names_the_switch_behind_a_target_difference(tmp_path):
    # The same graph compiled with debug_nans off, then on: two entries whose
    # fingerprints print the same. Before the fix explain printed only "key parts
    # that differ: target", with no target field named (d659f04).
    code = ("import json, sys, torch, lazyjit\n"
            "lazyjit.debug_nans(sys.argv[1] == 'on')\n"
            "(torch.ones(4, 4).to('lazyjit').tanh() * 3).cpu()\n"
            "print(json.dumps({}))\n")
    for switch in ("off", "on"):
        run_program(tmp_path, code, switch)
    entries = tool_json("ls", "--dir", tmp_path)["entries"]
    assert len(entries) == 2, entries
    a, b = sorted(entries, key=lambda e: e["created"])
    out = tool_json("explain", a["key"], b["key"], "--dir", tmp_path)
    assert out["key_parts"] == ["target"], out
    assert [(t["field"], t["a"], t["b"]) for t in out["target"]] == [("debug_nans", "off", "on")], out["target"]
    text = tool("explain", a["key"], b["key"], "--dir", tmp_path).stdout
    assert "key parts that differ: target (debug_nans)" in text and "target debug_nans: off → on" in text, text
