"""lazyjit-cache's command line (issue 41): the options every command takes
(--dir, --json) go before the command or after it with the same result; an
option in the wrong place says where it goes; every JSON document of a command
that reads a cache directory names it in "dir".

The cache is two small programs written by one real run; the tool is
<repo>/build/lazyjit-cache (LAZYJIT_CACHE_TOOL overrides it).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT

from test_cache_tool import TOOL, _tool_is_built  # noqa: F401 (a missing tool fails every test here)
from test_remote_cache import RedisServer

PROGRAM = r"""
import torch, lazyjit
print((torch.ones(4).to("lazyjit") * 2).cpu())
print((torch.ones(3, 5).to("lazyjit") + 1).sum().cpu())
"""

SECRET = "issue-41-secret"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env.update(extra)
    return env


def tool(*args, rc=0):
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, env=clean_env(), timeout=120)
    if rc is not None:
        assert p.returncode == rc, f"{args}: rc {p.returncode}, wanted {rc}\n{p.stdout}\n{p.stderr}"
    return p


def doc(*args, rc=0):
    return json.loads(tool(*args, rc=rc).stdout)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-cache")
    env = clean_env(PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=str(d),
                    LAZYJIT_BACKGROUND_COMPILE="off", LAZYJIT_DYNAMIC="off", LAZYJIT_CACHE_SECRET=SECRET)
    p = subprocess.run([sys.executable, "-c", PROGRAM], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    keys = sorted(f[:-4] for f in os.listdir(d / "v1" / "entries") if f.endswith(".ljc"))
    assert len(keys) == 2, keys
    return {"dir": str(d), "keys": keys}


def test_dir_before_the_command_is_the_same_as_after_it(cache):
    d = cache["dir"]
    after = tool("ls", "--dir", d, "--json").stdout
    before = tool("--dir", d, "ls", "--json").stdout
    assert json.loads(before)["dir"] == d
    assert before == after


@pytest.mark.parametrize("args", [["ls"], ["stats"], ["verify"], ["show", "K0"], ["explain", "K0", "K1"],
                                  ["prune", "--max-size", "1G", "--dry-run"], ["ls", "--sort", "size", "--limit", "1"]])
def test_global_options_in_every_position_give_identical_output(cache, args):
    d = cache["dir"]
    args = [cache["keys"][int(a[1])] if a in ("K0", "K1") else a for a in args]
    cmd, rest = args[0], args[1:]
    outputs = {
        "after": tool(cmd, *rest, "--dir", d, "--json").stdout,
        "before": tool("--dir", d, "--json", cmd, *rest).stdout,
        "json first": tool("--json", "--dir", d, cmd, *rest).stdout,
        "split": tool("--json", cmd, *rest, "--dir", d).stdout,
        "split other way": tool("--dir", d, cmd, *rest, "--json").stdout,
        "--dir=D": tool(f"--dir={d}", cmd, "--json", *rest).stdout,
        "both, same": tool("--dir", d, "--json", cmd, *rest, "--dir", d, "--json").stdout,
    }
    assert json.loads(outputs["after"])["dir"] == d
    for name, out in outputs.items():
        assert out == outputs["after"], name
    # The human-readable form too.
    assert tool("--dir", d, cmd, *rest).stdout == tool(cmd, *rest, "--dir", d).stdout


def test_different_dirs_before_and_after_are_an_error(cache, tmp_path):
    p = tool("--dir", cache["dir"], "ls", "--dir", str(tmp_path), rc=2)
    assert "--dir" in p.stderr and cache["dir"] in p.stderr and str(tmp_path) in p.stderr, p.stderr
    assert p.stdout == ""
    # Twice in the same place is CLI11's error, also a usage error.
    tool("--dir", cache["dir"], "--dir", str(tmp_path), "ls", rc=2)
    tool("ls", "--dir", cache["dir"], "--dir", str(tmp_path), rc=2)


def test_dir_before_remote_subcommands(cache):
    # No remote to reach: the usage is accepted and the command itself says so.
    p = tool("--dir", cache["dir"], "remote", "push", "--secret", "s", rc=2)
    assert "no remote" in p.stderr, p.stderr
    assert "not expected" not in p.stderr


@pytest.mark.parametrize("args, says", [
    (["--timeout-ms", "5", "remote", "push"],
     ["--timeout-ms belongs to 'remote ls|push|pull'", "lazyjit-cache remote push --timeout-ms"]),
    (["--timeout-ms", "5", "remote", "ls"], ["lazyjit-cache remote ls --timeout-ms"]),
    (["--key", "x", "ls"], ["unknown option --key", "--dir", "--json"]),
    (["--secret", "s", "verify"], ["--secret belongs to 'verify', 'import', 'remote push|pull'",
                                   "lazyjit-cache verify --secret"]),
    (["--sort", "size", "ls"], ["--sort belongs to 'ls'", "lazyjit-cache ls --sort"]),
    (["--llvm", "show", "abc"], ["--llvm belongs to 'show'", "lazyjit-cache show KEY --llvm"]),
    (["ls", "--secret", "s"], ["--secret is not an option of 'ls'", "belongs to 'verify'"]),
    (["ls", "--bogus"], ["unknown option --bogus for 'ls'", "lazyjit-cache ls --help"]),
    (["remote", "--remote", "redis://x", "ls"], ["--remote is not an option of 'remote'",
                                                  "lazyjit-cache remote ls --remote"]),
    (["remote", "--json", "ls"], ["--json goes before or after the command, not between 'remote' and its command",
                                  "lazyjit-cache --json remote ls, or lazyjit-cache remote ls --json"]),
    (["remote", "--dir", "D", "push"], ["lazyjit-cache --dir DIR remote push, or lazyjit-cache remote push --dir DIR"]),
])
def test_a_misplaced_option_says_where_it_goes(cache, args, says):
    p = tool(*args, rc=2)
    assert "not expected" not in p.stderr, p.stderr
    for s in says:
        assert s in p.stderr, (s, p.stderr)


def test_json_with_a_command_that_has_no_json_output_is_an_error(cache):
    for args in (["--json", "rm", cache["keys"][0]], ["--json", "clear"], ["--json", "export", "/nonexistent/x"]):
        p = tool("--dir", cache["dir"], *args, rc=2)
        assert "no JSON output" in p.stderr, p.stderr
    assert len(os.listdir(os.path.join(cache["dir"], "v1", "entries"))) >= 2  # nothing removed


def test_help_names_the_global_options():
    out = tool("--help").stdout
    assert "--dir" in out and "--json" in out
    assert "before or after the command" in out


@pytest.fixture
def redis_url(tmp_path):
    server = RedisServer(tmp_path)  # fails, saying to run scripts/setup.sh, when redis-server is missing
    yield server.url
    server.stop()


def test_every_json_document_of_a_cache_command_has_dir(cache, tmp_path, redis_url):
    d = cache["dir"]
    k0, k1 = cache["keys"]
    archive = tmp_path / "a.ljca"
    tool("--dir", d, "export", archive)
    log = tmp_path / "recompiles.log"
    log.write_text("lazyjit: compiling at t.py:1: first at this site\n")
    fresh = tmp_path / "fresh"
    pulled = tmp_path / "pulled"
    docs = {
        "ls": doc("--json", "--dir", d, "ls"),
        "show": doc("--json", "--dir", d, "show", k0),
        "stats": doc("--json", "--dir", d, "stats"),
        "explain": doc("--json", "--dir", d, "explain", k0, k1),
        "verify": doc("--json", "--dir", d, "verify", "--secret", SECRET),
        "prune": doc("--json", "--dir", d, "prune", "--older-than", "1000d", "--dry-run"),
        "import": doc("--json", "--dir", fresh, "import", archive),
        "remote-push": doc("--json", "--dir", d, "remote", "push", "--remote", redis_url, "--secret", SECRET),
        "remote-pull": doc("--json", "--dir", pulled, "remote", "pull", "--remote", redis_url, "--secret", SECRET),
    }
    want = {"import": str(fresh), "remote-pull": str(pulled)}
    for name, j in docs.items():
        assert j["schema"] == f"lazyjit-cache/{name}/1", j
        assert j.get("dir") == want.get(name, d), (name, j)
    assert sorted(docs["import"]["imported"]) == cache["keys"] and docs["import"]["complete"] is True
    assert sorted(docs["remote-push"]["pushed"]) == cache["keys"]
    assert sorted(docs["remote-pull"]["pulled"]) == cache["keys"]
    # The two that read no cache directory name what they read instead (docs/lazyjit-cache.md).
    remote_ls = doc("--json", "--dir", d, "remote", "ls", "--remote", redis_url)
    assert remote_ls["schema"] == "lazyjit-cache/remote-ls/1" and remote_ls["remote"] == redis_url
    assert sorted(e["key"] for e in remote_ls["entries"]) == cache["keys"]
    why = doc("--json", "why-miss", log)
    assert why["schema"] == "lazyjit-cache/why-miss/1" and why["log"] == str(log) and why["compiles"] == 1


# --- lazyjit-cache on a terminal (issue 59, point 5) ---------------------------------------------------------------
# An entry as a Hugging Face model writes one: its site deep in site-packages and
# forty inputs (a layer's weights), whose SHAPES alone would run to hundreds of columns.
WIDE_PROGRAM = r"""
import torch, lazyjit
ts = [torch.ones(i + 1, 3).to("lazyjit") for i in range(40)]
total = ts[0].sum()
for t in ts[1:]:
    total = total + t.sum()
print(total.cpu())
"""


@pytest.fixture(scope="module")
def wide_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("wide")
    src = root / "venv" / "lib" / "python3.11" / "site-packages" / "transformers" / "models" / "llama"
    src.mkdir(parents=True)
    (src / "modeling_llama.py").write_text(WIDE_PROGRAM)
    d = root / "cache"
    env = clean_env(PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=str(d),
                    LAZYJIT_BACKGROUND_COMPILE="off", LAZYJIT_DYNAMIC="off", LAZYJIT_CACHE_SECRET=SECRET)
    p = subprocess.run([sys.executable, str(src / "modeling_llama.py")], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return str(d)


def tool_env(*args, **env):
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, env=clean_env(**env), timeout=120)
    assert p.returncode == 0, f"{args}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_ls_fits_the_terminal_width_and_keeps_the_tail_of_long_sites(wide_cache, columns):
    # Before the fix (81458a9^) this printed: "assert 158 <= 80" (the header row
    # alone) and, at 160 columns, "assert 542 <= 160" for the entry's row.
    text = tool_env("ls", "--dir", wide_cache, COLUMNS=str(columns))
    lines = text.splitlines()
    assert lines[0].split()[0] == "KEY" and "SITE" in lines[0] and "SHAPES" in lines[0], text
    for line in lines:
        assert len(line) <= columns, (columns, len(line), line)
    row = lines[1]
    # Cut from the left: the file and line survive, the venv's prefix does not.
    assert "modeling_llama.py:" in row and "…" in row and "site-packages/t…" not in row, row
    # Forty shapes summarised: the first few, then how many more.
    assert "f32[1,3]" in row and "more" in row and "f32[40,3]" not in row, row


def test_ls_without_a_terminal_uses_a_default_width(wide_cache):
    # Before the fix: "assert (542 <= 160)", SITE cut on the right as
    # ".../wide0/venv/lib/py…" and all forty shapes spelled out.
    env = clean_env()
    env.pop("COLUMNS", None)
    p = subprocess.run([TOOL, "ls", "--dir", wide_cache], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(line) for line in lines) <= 160 and lines[0].split()[:2] == ["KEY", "KIND"], p.stdout
    # --json keeps every field whole.
    entry = json.loads(tool_env("ls", "--json", "--dir", wide_cache))["entries"][0]
    assert len(entry["inputs"]) == 40 and "python3.11/site-packages/transformers" in entry["site"], entry


def test_stats_shows_the_limit_what_prune_reclaims_and_the_hit_rate(cache):
    # Before the fix: "assert ('limit' in 'cache ... entries 2 ... hit ratio 0.0% ...')":
    # no limit, nothing reclaimable, no hits served in the process.
    text = tool_env("stats", "--dir", cache["dir"], LAZYJIT_CACHE_MAX_BYTES="1M")
    assert "limit" in text and "1.0 MiB" in text, text
    assert "reclaimable" in text, text
    assert "hits served" in text and "hit rate" in text, text
    s = json.loads(tool_env("stats", "--json", "--dir", cache["dir"], LAZYJIT_CACHE_MAX_BYTES="1M"))
    assert s["max_bytes"] == 1 << 20 and s["reclaimable_bytes"] == 0, s
    # A limit below what is cached: prune would take the least recently used entries.
    s = json.loads(tool_env("stats", "--json", "--dir", cache["dir"], LAZYJIT_CACHE_MAX_BYTES="1"))
    assert s["max_bytes"] == 1 and s["reclaimable_bytes"] == s["bytes"] and s["reclaimable_entries"] == 2, s
    text = tool_env("stats", "--dir", cache["dir"], LAZYJIT_CACHE_MAX_BYTES="1")
    assert "prune --max-size" in text, text


def test_import_of_entries_already_present_says_so(cache, tmp_path):
    # Before the fix: "assert ('imported 2 new' in 'imported 2 entries into .../fresh, refused 0')",
    # (81458a9: a repeated import of the same archive said "imported 2 entries").
    archive = tmp_path / "a.ljca"
    tool("--dir", cache["dir"], "export", archive)
    fresh = tmp_path / "fresh"
    first = tool("--dir", fresh, "import", archive).stdout
    assert "imported 2 new" in first and "0 already present" in first, first
    again = tool("--dir", fresh, "import", archive).stdout
    assert "imported 0 new, 2 already present" in again, again
    out = doc("--json", "--dir", fresh, "import", archive)
    assert out["imported"] == [] and sorted(out["already_present"]) == cache["keys"], out
