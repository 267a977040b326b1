"""LAZYJIT_TRACE=<file.json> and lazyjit.trace(): Chrome trace-event JSON that
Perfetto and chrome://tracing open, with what each thread did: record (per
op), the cache key, the lookup (hit, or miss and why), compile (per program and
per kernel), execute (per step), each sync with its reason and call site."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import DEV, PYTHON_DIR, ROOT, lazyjit

MODEL = '''\
import torch, lazyjit
torch.manual_seed(0)
w1 = torch.randn(16, 32).to("lazyjit")
w2 = torch.randn(32, 8).to("lazyjit")

def step(x):
    h = (x @ w1).relu() * 2 + 1
    return (torch.tanh(h @ w2) + h.sum()).sum()

for i in range(3):
    x = torch.randn(4, 16).to("lazyjit")
    print(float(step(x).cpu()))  # the sync
'''


def run_model(tmp_path, _timeout=180, **env_extra):
    script = tmp_path / "model.py"
    script.write_text(MODEL)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off",
           "LAZYJIT_NUM_THREADS": "2", **env_extra}
    # A timeout: a hang (a trace or dump path that blocks) fails the test.
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=_timeout)
    line = MODEL.splitlines().index('    print(float(step(x).cpu()))  # the sync') + 1
    return p, f"{script}:{line}"


def spans(events, cat=None):
    return [e for e in events if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def instants(events, name):
    return [e for e in events if e["ph"] == "i" and e["name"] == name]


def check_nesting(events):
    """Spans on one thread nest: each lies within its parent, or after it."""
    by_tid = {}
    for e in spans(events):
        start = round(e["ts"] * 1000)  # ns: ts and dur are written with 3 decimals
        by_tid.setdefault(e["tid"], []).append((start, -round(e["dur"] * 1000), e["name"]))
    for tid, ss in by_tid.items():
        stack = []  # (name, end) of the spans open at `start`
        for start, neg_dur, name in sorted(ss):
            end = start - neg_dur
            while stack and start >= stack[-1][1]:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], f"{name} [{start}, {end}] overlaps {stack[-1]} on thread {tid}"
            stack.append((name, end))


def check_file(path):
    with open(path) as f:
        trace = json.load(f)
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    for e in spans(events):
        assert e["dur"] >= 0 and e["ts"] >= 0, e
    check_nesting(events)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in events:
        if e["ph"] in "Xi":
            assert e["tid"] in names, e  # every thread that did something is named
    assert "main" in names.values()
    return events, names


def test_env_trace_of_a_model(tmp_path):
    out = tmp_path / "t.json"
    p, site = run_model(tmp_path, LAZYJIT_TRACE=str(out))
    assert p.returncode == 0, p.stderr
    assert "lazyjit: " not in p.stderr, p.stderr
    events, names = check_file(out)

    # record: one span per recorded op, named by its ATen op.
    recorded = {e["name"] for e in spans(events, "record")}
    assert {"aten::copy_", "aten::mm", "aten::relu", "aten::tanh"} <= recorded, recorded
    # From the first op on (the runtime, and the trace, start with it).
    assert [e["name"] for e in spans(events, "record")].count("aten::mm") == 6

    # sync: reason, the script's own line, the graph's size.
    syncs = spans(events, "sync")
    assert len(syncs) == 3, syncs
    for s in syncs:
        assert s["args"]["site"] == site, s
        assert s["args"]["reason"] and s["name"] == "sync " + s["args"]["reason"]
        assert s["args"]["nodes"] > 5

    # hash: the cache key, inside each sync.
    assert len(spans(events, "hash")) == 3

    # cache: a miss with the explanation at the first sync, hits after.
    misses, hits = instants(events, "cache miss"), instants(events, "cache hit")
    assert len(misses) == 1 and len(hits) == 2, (misses, hits)
    assert misses[0]["args"]["kind"] == "first at this site" and misses[0]["args"]["site"] == site
    assert misses[0]["ts"] < hits[0]["ts"]
    assert all(h["args"]["site"] == site and h["args"]["key"] for h in hits)

    # compile: one program, its phases, and one span per kernel LLVM compiled.
    compile_spans = spans(events, "compile")
    programs = [e for e in compile_spans if e["name"] == "program"]
    assert len(programs) == 1 and programs[0]["args"]["kernels"] >= 1
    assert {"graph passes", "plan", "codegen"} <= {e["name"] for e in compile_spans}
    kernels = [e for e in compile_spans if e["name"].startswith("kernel ")]
    assert kernels and all(e["args"]["kernel"].startswith("fused_") and e["args"]["kernel_cache_hit"] is False
                           for e in kernels)
    for k in kernels:  # on the thread that compiled it: the caller, or a TBB worker
        assert names[k["tid"]] == "main" or names[k["tid"]].startswith("tbb worker"), names[k["tid"]]

    # execute: three runs of the program, each with its fused kernels and library steps.
    runs = [e for e in spans(events, "execute") if e["name"] == "program"]
    assert len(runs) == 3
    steps = [e for e in spans(events, "execute") if e["name"] != "program"]
    kinds = {e["args"]["kind"] for e in steps}
    assert {"kernel", "library"} <= kinds, kinds
    assert any(e["name"] == "aten::mm" and e["args"]["kind"] == "library" for e in steps), steps
    assert {e["name"] for e in steps if e["args"]["kind"] == "kernel"} <= {k["args"]["kernel"] for k in kernels}


def test_disk_tier_hit_and_miss_are_traced(tmp_path):
    cache = tmp_path / "cache"
    env = {"LAZYJIT_CACHE": "on", "LAZYJIT_CACHE_DIR": str(cache)}
    p, _ = run_model(tmp_path, LAZYJIT_TRACE=str(tmp_path / "cold.json"), **env)
    assert p.returncode == 0, p.stderr
    p, site = run_model(tmp_path, LAZYJIT_TRACE=str(tmp_path / "warm.json"), **env)
    assert p.returncode == 0, p.stderr
    cold, _ = check_file(tmp_path / "cold.json")
    warm, _ = check_file(tmp_path / "warm.json")
    assert {e["args"]["result"] for e in spans(cold, "cache") if e["name"] == "disk load"} == {"miss"}
    assert [e["name"] for e in spans(cold, "cache")].count("disk store") == 1
    assert [e["args"]["result"] for e in spans(warm, "cache") if e["name"] == "disk load"] == ["hit"]
    miss = instants(warm, "cache miss")
    assert len(miss) == 1 and miss[0]["args"]["kind"] == "loaded from the on-disk cache", miss
    assert not [e for e in spans(warm, "compile") if e["name"].startswith("kernel ")]


def test_unwritable_trace_path_warns_once(tmp_path):
    p, _ = run_model(tmp_path, LAZYJIT_TRACE="/nonexistent-dir/sub/t.json")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.split()) == 3
    said = [l for l in p.stderr.splitlines() if "trace" in l]
    assert said == ["lazyjit: warning: LAZYJIT_TRACE: cannot write the trace to /nonexistent-dir/sub/t.json: "
                    "No such file or directory; tracing is off"], p.stderr


def _trace_target(tmp_path, kind):
    """A LAZYJIT_TRACE that is not a regular file, and what the warning says of it."""
    if kind in ("fifo", "symlink to a fifo"):
        fifo = tmp_path / "t.fifo"
        os.mkfifo(fifo)  # nothing ever reads it: opening it to write would wait forever
        if kind == "fifo":
            return str(fifo), "it is a FIFO, not a regular file"
        link = tmp_path / "link.json"
        link.symlink_to(fifo)
        return str(link), "it is a FIFO, not a regular file"
    if kind == "directory":
        return str(tmp_path), "it is a directory, not a regular file"
    if kind in ("/dev/full", "/dev/null"):
        return kind, "it is a device, not a regular file"
    assert kind == "missing dir"
    return str(tmp_path / "no" / "t.json"), "No such file or directory"


TARGETS = ["fifo", "symlink to a fifo", "directory", "/dev/full", "/dev/null", "missing dir"]


@pytest.mark.parametrize("kind", TARGETS)
def test_trace_target_not_a_regular_file_is_refused(tmp_path, kind):
    """A FIFO without a reader blocked the process at its first op; a target
    that is not a regular file is one warning naming the switch and the path,
    and the program runs on untraced. The timeout turns a hang into a failure."""
    path, why = _trace_target(tmp_path, kind)
    p, _ = run_model(tmp_path, LAZYJIT_TRACE=path, _timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.split()) == 3
    said = [l for l in p.stderr.splitlines() if "trace" in l]
    assert said == [f"lazyjit: warning: LAZYJIT_TRACE: cannot write the trace to {path}: {why}; "
                    "tracing is off"], p.stderr


@pytest.mark.parametrize("kind", ["fifo", "symlink to a fifo"])
def test_import_torch_with_a_fifo_trace_exits(tmp_path, kind):
    """`import torch` alone loads lazyjit (autoload), whose exit handler used to
    start the runtime, and so the trace: the process hung at exit on the FIFO.
    A runtime never started is not started at exit."""
    path, _ = _trace_target(tmp_path, kind)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    p = subprocess.run([sys.executable, "-c", "import torch, sys; print('lazyjit' in sys.modules)"],
                       env={**env, "LAZYJIT_TRACE": path, "LAZYJIT_CACHE": "off"}, cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True"]
    assert "trace" not in p.stderr, p.stderr


def test_start_trace_refuses_a_fifo(tmp_path):
    """lazyjit.start_trace / lazyjit.trace raise at once on a FIFO, as on any
    target that is not a regular file, and the program goes on."""
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    code = f"""
import torch, lazyjit
x = torch.ones(3).to("lazyjit")
for start in (lambda: lazyjit.start_trace({str(fifo)!r}), lambda: lazyjit.trace({str(fifo)!r}).__enter__()):
    try:
        start()
    except RuntimeError as e:
        print(str(e))
print(float((x * 2).sum().cpu()))
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_NUM_THREADS": "2"}
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    want = f"lazyjit.start_trace: cannot write the trace to {fifo}: it is a FIFO, not a regular file"
    assert p.stdout.splitlines() == [want, want, "6.0"], p.stdout


def test_trace_target_made_a_fifo_after_the_start(tmp_path):
    """The trace is written at exit to the path it started with: a FIFO put
    there since is refused then too, instead of waiting at exit for a reader."""
    out = tmp_path / "t.json"
    code = MODEL + f"""
import os
os.remove({str(out)!r})
os.mkfifo({str(out)!r})
"""
    script = tmp_path / "swap.py"
    script.write_text(code)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_NUM_THREADS": "2", "LAZYJIT_TRACE": str(out)}
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    said = [l for l in p.stderr.splitlines() if "trace" in l]
    assert said == [f"lazyjit: cannot write the trace to {out}: it is a FIFO, not a regular file"], p.stderr


def test_dump_file_planted_as_a_fifo(tmp_path):
    """LAZYJIT_DUMP writes files of known names (the program's key): one that
    is a FIFO is one warning, not a wait for a reader."""
    first = tmp_path / "d1"
    p, _ = run_model(tmp_path, LAZYJIT_DUMP=str(first), LAZYJIT_DEBUG="0")
    assert p.returncode == 0, p.stderr
    names = sorted(os.listdir(first))
    assert names
    second = tmp_path / "d2"
    second.mkdir()
    for n in names:
        os.mkfifo(second / n)
    p, _ = run_model(tmp_path, LAZYJIT_DUMP=str(second), _timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.split()) == 3
    said = [l for l in p.stderr.splitlines() if "cannot write dumps" in l]
    assert len(said) == 1 and said[0].startswith("lazyjit: warning: cannot write dumps (LAZYJIT_DUMP"), p.stderr
    assert f"{second}/" in said[0] and "it is a FIFO, not a regular file" in said[0], said


def test_trace_context_manager(tmp_path):
    out = tmp_path / "region.json"
    a = torch.randn(8, 8)
    x = a.to(DEV)
    with lazyjit.trace(out):
        y = (x * 3).relu() @ x  # no sync inside: leaving the region runs it
    torch.testing.assert_close(y.cpu(), (a * 3).relu() @ a)
    events, names = check_file(out)
    assert {"aten::mul.Tensor", "aten::relu", "aten::mm"} <= {e["name"] for e in spans(events, "record")}
    (sync,) = spans(events, "sync")
    assert sync["args"]["reason"] == "lazyjit.sync()"
    assert sync["args"]["site"].startswith(__file__ + ":"), sync  # the with statement's line
    assert spans(events, "execute")
    # Stopped: what runs afterwards is not added.
    size = os.path.getsize(out)
    (x + 1).cpu()
    assert os.path.getsize(out) == size


def test_start_trace_to_an_unwritable_path_raises(tmp_path):
    with pytest.raises(RuntimeError, match="lazyjit.start_trace: cannot write the trace to /nonexistent-dir/t.json"):
        lazyjit.start_trace("/nonexistent-dir/t.json")
    lazyjit.stop_trace()  # nothing running: nothing happens
    out = tmp_path / "api.json"
    lazyjit.start_trace(str(out))
    (torch.randn(4).to(DEV) + 1).cpu()
    lazyjit.stop_trace()
    events, _ = check_file(out)
    assert spans(events, "sync") and spans(events, "execute")
