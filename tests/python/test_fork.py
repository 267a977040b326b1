"""A process forked after lazyjit ran (os.fork, multiprocessing's "fork"
start method) never hangs: the child inherits no compile worker, and lazyjit
starts a new one there when the child first compiles in the background, as
PyTorch re-creates its own thread pools after a fork. A fork waits for the
compile the worker is running (the worker then holds no lock the child could
need); the jobs still queued are the parent's alone.

A child that computes runs on one thread (torch.set_num_threads(1), as
PyTorch's DataLoader workers do): GNU OpenMP, ATen's pool, is not fork-safe,
and an eager matmul hangs in such a child too.

Each test runs its own interpreter with the worker on (LAZYJIT_BACKGROUND_COMPILE=on).
Inside it the parent forks, the child reports on stdout and leaves through
sys.exit (atexit handlers and all, where the hang was), and the parent waits
for it with a deadline: a child that hangs is killed and reported, not waited
for. Eager PyTorch is the oracle for every value, in both processes.
"""
import json
import subprocess

import pytest
from conftest import run_python

ON = {"LAZYJIT_BACKGROUND_COMPILE": "on"}
CHILD_DEADLINE_S = 10  # eager's child exits in ~0.5 s

PRELUDE = r"""
import json, os, signal, sys, time, torch, lazyjit
torch.manual_seed(0)
L = lambda t: t.to("lazyjit")
def counters():
    m = lazyjit.metrics()
    return {k: m[k] for k in ("compiles", "background_syncs", "op_by_op_syncs", "cache_hits", "shape_binds")}
def mlp(x, w1, w2):
    return torch.nn.functional.layer_norm(torch.nn.functional.gelu(x @ w1) @ w2 + x, (x.shape[-1],))
w1, w2 = torch.randn(16, 32) / 4, torch.randn(32, 16) / 6
def check_mlp(n):
    x = torch.randn(n, 16)
    torch.testing.assert_close(mlp(L(x), L(w1), L(w2)).cpu(), mlp(x, w1, w2), rtol=1e-4, atol=1e-5)
def big(x):
    # A graph whose compile takes a while: still running when the process forks.
    ys = []
    for i in range(8):
        y = x
        for j in range(30):
            # Contractive (a derivative under 1): rounding is not amplified 240 times.
            y = torch.sin(y) * (0.6 + 0.001 * (i + j)) + 0.3 * torch.tanh(y).mean(-1, keepdim=True) + 0.01 * j
        ys.append(y)
    return sum(ys)
def check_big():
    x = torch.randn(32, 32)
    torch.testing.assert_close(big(L(x)).cpu(), big(x), rtol=1e-4, atol=1e-4)
def other(x):
    return (x.softmax(-1) * 3 - x.exp().sqrt()).sum(0)
def check_other(n):
    x = torch.randn(n, 24)
    torch.testing.assert_close(other(L(x)).cpu(), other(x), rtol=1e-4, atol=1e-5)
def fork(child):
    # Runs child() in a forked child that leaves through sys.exit; returns how
    # the child ended: {"rc": exit code or None if it hung, "s": seconds}.
    sys.stdout.flush()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            out = child()
            print("CHILD " + json.dumps(out), flush=True)
        except BaseException as e:
            print("CHILD " + json.dumps({"error": repr(e)}), flush=True)
            sys.stdout.flush()
            sys.exit(3)
        sys.exit(0)  # atexit handlers run: lazyjit's stops the compile worker
    while time.monotonic() - t0 < DEADLINE:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"rc": os.waitstatus_to_exitcode(status), "s": time.monotonic() - t0}
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return {"rc": None, "s": time.monotonic() - t0}
def report(**kw):
    print("PARENT " + json.dumps(kw), flush=True)
"""


def run(body, **env):
    code = PRELUDE.replace("DEADLINE", str(CHILD_DEADLINE_S)) + body
    try:
        proc = run_python(code, env_extra={**ON, **env}, timeout=120)
    except subprocess.TimeoutExpired as e:  # the parent itself hung
        pytest.fail(f"the parent hung:\nstdout:\n{e.stdout}\nstderr:\n{e.stderr}")
    lines = proc.stdout.splitlines()
    child = [json.loads(l[6:]) for l in lines if l.startswith("CHILD ")]
    parent = [json.loads(l[7:]) for l in lines if l.startswith("PARENT ")]
    assert parent, proc.stdout + proc.stderr
    return parent[-1], child, proc


@pytest.mark.parametrize("cache", ["off", "on"])
@pytest.mark.parametrize("when", ["compiling", "compiled"])
def test_a_child_that_only_exits_exits_at_once(when, cache, tmp_path):
    # "compiling": forked right after the sync that queued the compile (with the
    # disk cache on, the parent's exit finishes queued compiles: the child must
    # not wait for those). "compiled": the worker is idle but alive.
    out, _, proc = run(rf"""
check_big()
check_mlp(8)
if "{when}" == "compiled":
    lazyjit.wait_for_compiles()
ended = fork(lambda: {{"pid": os.getpid()}})
report(ended=ended)
""", LAZYJIT_CACHE=cache, LAZYJIT_CACHE_DIR=str(tmp_path / "cache"))
    assert out["ended"]["rc"] == 0, (out, proc.stderr)
    assert out["ended"]["s"] < CHILD_DEADLINE_S, out


@pytest.mark.parametrize("when", ["compiling", "compiled"])
def test_a_child_that_uses_lazyjit_gets_eagers_values_and_exits(when):
    # In the child: a graph the parent compiled (a cache hit); the graph whose
    # compile was queued or running at the fork (a running one finished before
    # the fork: the child takes its program, even past the overdue limit; a
    # queued one is the parent's: the child queues it again); and a new graph,
    # compiled on a worker the child starts itself. Each checked against eager.
    out, child, proc = run(rf"""
check_mlp(8)
lazyjit.wait_for_compiles()
check_mlp(8)                    # now the program: cached in the parent
check_big()                     # its compile is queued or runs now
if "{when}" == "compiled":
    lazyjit.wait_for_compiles()
def child():
    # As in a DataLoader worker: GNU OpenMP's threads are not in a child (ATen's
    # matmul hangs there, eager or not, unless it runs on one thread).
    torch.set_num_threads(1)
    before = counters()
    check_mlp(8)                # the parent's program
    time.sleep(1.2)             # past BackgroundCompiles::kOverdue
    check_big()
    check_big()
    mid = counters()
    check_other(5)              # new: runs op by op, compiles in the background
    waited = lazyjit.wait_for_compiles()
    after = counters()
    check_other(5)              # the program compiled in the child
    check_big()
    check_mlp(8)
    return {{"before": before, "mid": mid, "waited": waited, "after": after, "end": counters()}}
ended = fork(child)
check_other(5)                  # the parent goes on
report(ended=ended)
""")
    assert out["ended"]["rc"] == 0, (out, child, proc.stderr)
    assert len(child) == 1 and "error" not in child[0], (child, proc.stderr)
    c = child[0]
    assert c["waited"] >= 1 and c["after"]["compiles"] > c["mid"]["compiles"], c  # other, in the child
    assert c["end"]["background_syncs"] > c["before"]["background_syncs"], c
    # After the wait every graph ran a program: none op by op, none compiled again.
    assert c["end"]["background_syncs"] == c["after"]["background_syncs"], c
    assert c["end"]["compiles"] == c["after"]["compiles"], c
    assert c["end"]["op_by_op_syncs"] == c["before"]["op_by_op_syncs"], c


@pytest.mark.parametrize("cache", ["off", "on"])
def test_the_parent_goes_on_after_the_fork(cache, tmp_path):
    # The parent forks while a compile runs and again when idle, then goes on:
    # the same graphs, new graphs compiled on its worker, eager's values, and a
    # clean exit (its own atexit stops its worker, finishing what it queued
    # with the disk cache on).
    out, child, proc = run(r"""
check_mlp(8)
ended = [fork(lambda: {"pid": os.getpid()})]
check_mlp(8)
lazyjit.wait_for_compiles()
ended.append(fork(lambda: {"pid": os.getpid()}))
before = counters()
for step in range(3):
    check_mlp(8)
    check_other(6)
    check_big()
waited = lazyjit.wait_for_compiles()
for step in range(3):
    check_mlp(8)
    check_other(6)
    check_big()
report(ended=ended, before=before, waited=waited, end=counters())
""", LAZYJIT_CACHE=cache, LAZYJIT_CACHE_DIR=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert [e["rc"] for e in out["ended"]] == [0, 0], out
    before, end = out["before"], out["end"]
    # other and big compiled after the forks, in the background, on the parent's worker.
    assert end["compiles"] - before["compiles"] == 2, out
    assert end["background_syncs"] - before["background_syncs"] >= 2, out
    assert end["op_by_op_syncs"] == before["op_by_op_syncs"], out
    assert "terminate" not in proc.stderr and "Segmentation" not in proc.stderr, proc.stderr
