"""The on-disk compile cache (issue 10): a second process compiles nothing, many
processes share one directory safely, and a damaged, foreign, unsigned or
wrongly signed entry is never run: it is a miss, counted by kind, set aside and
compiled again. Every process checks its own results against eager."""
import glob
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import time

import pytest

from conftest import PYTHON_DIR, ROOT

# Runs an MLP block forward (kernels and ATen steps) on lazyjit, checks it
# against eager, and prints its metrics as JSON on the last line.
PROGRAM = r"""
import json, sys, torch, lazyjit
width = int(sys.argv[1]) if len(sys.argv) > 1 else 32
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width),
                        torch.nn.LayerNorm(width))
x = torch.randn(batch, width)
with torch.no_grad():
    want = m(x)
    got = m.to("lazyjit")(x.to("lazyjit")).cpu()
torch.testing.assert_close(got, want)
mt = lazyjit.metrics()
print(json.dumps({k: mt[k] for k in ("compiles", "llvm_compiles", "disk_hits", "disk_misses", "disk_writes",
                                     "disk_errors", "shape_binds")} | {"errors": mt["disk_errors_by_kind"],
                                                         "sum": float(got.double().sum())}))
"""


def env_for(cache_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env["PYTHONPATH"] = PYTHON_DIR
    env["LAZYJIT_CACHE"] = "on"
    env["LAZYJIT_CACHE_DIR"] = str(cache_dir)
    env["LAZYJIT_BACKGROUND_COMPILE"] = "off"  # compiles counted at the sync that needs them
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(cache_dir, width=32, batch=8, **extra):
    return subprocess.Popen([sys.executable, "-c", PROGRAM, str(width), str(batch)], env=env_for(cache_dir, **extra),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, timeout=240):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"process failed ({p.returncode}):\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1]), err


def run(cache_dir, width=32, batch=8, **extra):
    return finish(start(cache_dir, width, batch, **extra))


def entries(cache_dir):
    return sorted(glob.glob(os.path.join(str(cache_dir), "v1", "entries", "*.ljc")))


def quarantined(cache_dir):
    return glob.glob(os.path.join(str(cache_dir), "v1", "quarantine", "*"))


def test_second_process_compiles_nothing(tmp_path):
    first, _ = run(tmp_path)
    assert first["llvm_compiles"] >= 1 and first["disk_writes"] == first["compiles"]
    assert first["disk_hits"] == 0
    assert entries(tmp_path)
    mode = stat.S_IMODE(os.stat(tmp_path / "v1").st_mode)
    assert mode & 0o077 == 0, oct(mode)
    second, _ = run(tmp_path)
    assert second["llvm_compiles"] == 0 and second["compiles"] == 0
    assert second["disk_hits"] == first["disk_writes"]
    assert second["sum"] == first["sum"]  # bitwise: same program, same inputs


def test_cache_off_and_moved(tmp_path):
    off, _ = run(tmp_path / "a", LAZYJIT_CACHE="off")
    assert off["disk_writes"] == 0 and not entries(tmp_path / "a")
    moved, _ = run(tmp_path / "b")
    assert moved["disk_writes"] >= 1 and entries(tmp_path / "b")


def test_eight_processes_at_once_compile_each_program_once(tmp_path):
    widths = [32, 32, 32, 32, 48, 48, 64, 64]
    # Exact code: each width its own program (by default a width could bind to
    # another width's program found on disk, depending on who wrote first).
    procs = [start(tmp_path, w, LAZYJIT_DYNAMIC="off") for w in widths]
    results = [finish(p)[0] for p in procs]
    for r in results:
        assert r["disk_errors"] == 0, r
    # Per distinct program, one LLVM compile among all the processes running it.
    for w in set(widths):
        rs = [r for r, ww in zip(results, widths) if ww == w]
        assert sum(r["compiles"] for r in rs) == rs[0]["compiles"] + rs[0]["disk_hits"], rs
        assert len({r["sum"] for r in rs}) == 1
    assert not glob.glob(os.path.join(str(tmp_path), "v1", "tmp", "*"))


def test_a_new_process_binds_a_program_stored_for_another_size(tmp_path):
    first, _ = run(tmp_path, batch=8)
    assert first["compiles"] >= 1 and first["disk_writes"] == first["compiles"], first
    # Another batch size in a new process: no entry under its key, so the
    # program stored for batch 8 is loaded and bound to batch 13.
    second, _ = run(tmp_path, batch=13)
    assert second["compiles"] == 0 and second["llvm_compiles"] == 0, second
    assert second["shape_binds"] >= 1 and second["disk_hits"] >= 1 and second["disk_errors"] == 0, second
    # Exact code never binds: it compiles.
    off, _ = run(tmp_path, batch=21, LAZYJIT_DYNAMIC="off")
    assert off["compiles"] >= 1 and off["shape_binds"] == 0, off


def damage_and_rerun(tmp_path, damage, kind):
    first, _ = run(tmp_path)
    files = entries(tmp_path)
    assert files
    for f in files:
        damage(f)
    again, err = run(tmp_path)
    assert again["disk_hits"] == 0
    assert again["errors"].get(kind, 0) == len(files), (again, err)
    assert again["compiles"] == first["compiles"]
    assert again["sum"] == first["sum"]
    assert len(quarantined(tmp_path)) >= len(files)
    # The recompiled entries replace the bad ones: a third process loads them.
    third, _ = run(tmp_path)
    assert third["llvm_compiles"] == 0 and third["disk_errors"] == 0
    return err


def truncate(f):
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])


def flip_bit(f):
    data = bytearray(open(f, "rb").read())
    data[len(data) * 2 // 3] ^= 0x04  # inside the payload (the object code)
    open(f, "wb").write(bytes(data))


def zero_bytes(f):
    open(f, "wb").close()


def foreign_version(f):
    data = bytearray(open(f, "rb").read())
    data[8] ^= 0x7F  # the u32 format version after the 8-byte magic
    open(f, "wb").write(bytes(data))


@pytest.mark.parametrize("damage,kind", [(truncate, "corrupt"), (flip_bit, "corrupt"), (zero_bytes, "corrupt"),
                                         (foreign_version, "foreign")])
def test_damaged_entries_are_misses_never_run(tmp_path, damage, kind):
    err = damage_and_rerun(tmp_path, damage, kind)
    assert "on-disk compile cache" in err


def relabel(entry, key, secret=None):
    """An entry file with `entry`'s manifest and payload, its manifest's key set
    to `key`: unsigned, or signed with `secret`."""
    import hashlib
    import hmac
    from test_cache_binding import xxh64
    m_len, p_len = struct.unpack_from("<IQ", entry, 12)
    manifest = json.loads(entry[24:24 + m_len])
    payload = entry[24 + m_len:24 + m_len + p_len]
    manifest["key"] = key
    m = json.dumps(manifest).encode()
    body = b"LAZYJITC" + struct.pack("<IIQ", 1, len(m), len(payload)) + m + payload
    checksum = struct.pack("<Q", xxh64(m + payload))
    if secret is None:
        return body + checksum + b"\0"
    return body + checksum + b"\1" + hmac.new(secret.encode(), body, hashlib.sha256).digest()


def test_foreign_target_entry_is_refused(tmp_path):
    # Entries compiled for 256-bit vectors, under the names this process looks up.
    run(tmp_path / "theirs", LAZYJIT_VECTOR_BITS=256)
    run(tmp_path / "ours")
    theirs, ours = entries(tmp_path / "theirs"), entries(tmp_path / "ours")
    assert len(theirs) == len(ours) and {os.path.basename(f) for f in theirs} != {os.path.basename(f) for f in ours}
    shared = tmp_path / "shared"
    os.makedirs(shared / "v1" / "entries", mode=0o700)
    os.chmod(shared, 0o700)
    os.chmod(shared / "v1", 0o700)
    # The same programs, pairwise by structure (file names sort the same way up to the target part).
    by_prefix = {os.path.basename(f).rsplit("-", 1)[0]: f for f in theirs}
    for f in ours:
        name = os.path.basename(f)
        src = by_prefix[name.rsplit("-", 1)[0]]
        with open(src, "rb") as a, open(shared / "v1" / "entries" / name, "wb") as b:
            b.write(a.read())
    # Copied under our names, each entry still names the key it was stored for.
    r, _ = run(shared)
    assert r["disk_hits"] == 0 and r["errors"].get("wrong_key", 0) == len(ours), r
    # Relabelled with our keys (as a build whose keys left the target out would
    # have stored them), their manifests' target is what refuses them.
    for f in ours:
        name = os.path.basename(f)
        data = open(by_prefix[name.rsplit("-", 1)[0]], "rb").read()
        open(shared / "v1" / "entries" / name, "wb").write(relabel(data, name[:-4]))
    r, _ = run(shared)
    assert r["disk_hits"] == 0 and r["errors"].get("foreign", 0) == len(ours), r


def test_signed_entries(tmp_path):
    signed, _ = run(tmp_path, LAZYJIT_CACHE_SECRET="right")
    assert signed["disk_writes"] >= 1
    ok, _ = run(tmp_path, LAZYJIT_CACHE_SECRET="right")
    assert ok["llvm_compiles"] == 0 and ok["disk_errors"] == 0
    wrong, _ = run(tmp_path, LAZYJIT_CACHE_SECRET="wrong")
    assert wrong["disk_hits"] == 0 and wrong["errors"].get("bad_signature", 0) >= 1, wrong
    assert wrong["sum"] == signed["sum"]
    # Unsigned entries are never loaded by a process that has a secret.
    run(tmp_path / "plain")
    unsigned, _ = run(tmp_path / "plain", LAZYJIT_CACHE_SECRET="right")
    assert unsigned["disk_hits"] == 0 and unsigned["errors"].get("unsigned", 0) >= 1, unsigned


def test_directory_writable_by_others_is_refused(tmp_path):
    d = tmp_path / "loose"
    run(d)
    os.chmod(d, 0o777)
    r, err = run(d)
    assert r["disk_hits"] == 0 and r["disk_writes"] == 0 and r["llvm_compiles"] >= 1
    assert "writable" in err and str(d) in err, err


def test_full_disk_still_runs(tmp_path):
    r, err = run(tmp_path, LAZYJIT_TEST_DISK_FULL=1)
    assert r["disk_writes"] == 0 and r["errors"].get("full", 0) >= 1, r
    said = [l for l in err.splitlines() if l.startswith("lazyjit: on-disk compile cache: full")]
    assert len(said) == 1, err  # reported once, counted every time
    assert "not saved" in said[0], said
    assert not entries(tmp_path)


def test_killed_writer_leaves_nothing_half_written(tmp_path):
    p = start(tmp_path, LAZYJIT_TEST_PAUSE_IN_WRITE="*")
    deadline = time.time() + 120
    tmp_files = []
    while time.time() < deadline and not tmp_files:
        tmp_files = glob.glob(os.path.join(str(tmp_path), "v1", "tmp", "*"))
        time.sleep(0.2)
    assert tmp_files, "the writer never started writing"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not entries(tmp_path)
    r, _ = run(tmp_path)  # not blocked by the dead writer's lock
    assert r["disk_errors"] == 0 and r["llvm_compiles"] >= 1
    assert not glob.glob(os.path.join(str(tmp_path), "v1", "tmp", "*")), "leftover not cleaned"
    again, _ = run(tmp_path)
    assert again["llvm_compiles"] == 0


def test_eviction_bounds_the_directory_while_others_read(tmp_path):
    limit = 200_000
    procs = [start(tmp_path, w, LAZYJIT_CACHE_MAX_BYTES=limit, LAZYJIT_DYNAMIC="off")  # a program per width
             for w in (32, 48, 64, 80, 32, 48, 64, 80)]
    for p in procs:
        finish(p)
    total = sum(os.path.getsize(f) for f in entries(tmp_path))
    assert total <= limit, total


# Every bench workload (tiny sizes), the demo's MLP block and a transformers
# Llama training step, in one process; outputs saved for comparison.
EVERYTHING = r"""
import importlib.util, json, sys, torch, lazyjit
spec = importlib.util.spec_from_file_location("bench_run", "bench/run.py")
bench = importlib.util.module_from_spec(spec); sys.modules["bench_run"] = bench; spec.loader.exec_module(bench)
outs = {}
for key in bench.WORKLOADS:
    wl = bench.make_workload(key, "tiny")
    fn, args = wl.build("lazyjit")
    for step in range(2):
        with (torch.no_grad() if wl.no_grad else torch.enable_grad()):
            out = fn(*args)
        lazyjit.sync()
        outs[f"{key}/{step}"] = bench.to_cpu(out)
sys.path.insert(0, "examples")
from demo import MLPBlock
torch.manual_seed(0)
with torch.no_grad():
    outs["demo"] = MLPBlock(64).to("lazyjit")(torch.randn(16, 64).to("lazyjit")).cpu()
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=4, vocab_size=128)).to("lazyjit")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 128, (2, 16)).to("lazyjit")
for step in range(2):
    opt.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    outs[f"llama/{step}"] = loss.detach().cpu()
outs["llama/weights"] = {k: v.cpu() for k, v in model.state_dict().items()}
torch.save(outs, sys.argv[1])
m = lazyjit.metrics()
print(json.dumps({k: m[k] for k in ("compiles", "llvm_compiles", "disk_hits", "disk_writes", "disk_errors")}))
"""


def test_bench_workloads_demo_and_transformers_warm_start(tmp_path):
    import torch
    runs = []
    for i in range(2):
        p = subprocess.run([sys.executable, "-c", EVERYTHING, str(tmp_path / f"out{i}.pt")],
                           env=env_for(tmp_path / "cache"), cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["compiles"] >= 5 and cold["disk_errors"] == 0, cold
    assert warm["llvm_compiles"] == 0 and warm["disk_hits"] >= cold["compiles"], warm
    a, b = torch.load(tmp_path / "out0.pt"), torch.load(tmp_path / "out1.pt")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=lambda m: f"{k}: {m}")
