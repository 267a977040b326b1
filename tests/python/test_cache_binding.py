"""Signed means bound (issue 40, items 1, 5, 6): an entry is valid only under the
key it was stored for, in every tier and in the tool's import and pull; what is
not a regular file is refused without blocking; import is all or nothing.

Two graphs of the same signature (a float32 [64, 32] in, one out) make swapped
entries dangerous: each would run, silently giving the other's values. Every
process checks its values against eager PyTorch."""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT
from test_remote_cache import PREFIX, SECRET, RedisServer, tool


# Two programs with one signature, each its own sync; the last line: counters.
PROGRAM = r"""
import json, torch, lazyjit
torch.manual_seed(0)
x = torch.randn(64, 32)
fns = [lambda t: (t * 2 + 1).relu(), lambda t: t.sin() * 3 - 1]
sums = []
for fn in fns:
    got = fn(x.to("lazyjit")).cpu()
    torch.testing.assert_close(got, fn(x))
    sums.append(float(got.double().sum()))
mt = lazyjit.metrics()
print(json.dumps({k: mt[k] for k in ("compiles", "disk_hits", "disk_writes", "remote_hits", "remote_refused",
                                     "remote_writes")}
                 | {"disk": mt["disk_errors_by_kind"], "remote": mt["remote_errors_by_kind"], "sums": sums}))
"""


def env_for(cache_dir, remote=None, secret=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env.update(PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=str(cache_dir),
               LAZYJIT_BACKGROUND_COMPILE="off", LAZYJIT_DYNAMIC="off", LAZYJIT_REMOTE_TIMEOUT_MS="2000")
    if secret:
        env["LAZYJIT_CACHE_SECRET"] = secret
    if remote:
        env["LAZYJIT_REMOTE_CACHE"] = remote
    return env


def run(cache_dir, remote=None, secret=None, timeout=240):
    p = subprocess.run([sys.executable, "-c", PROGRAM], env=env_for(cache_dir, remote, secret), cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"process failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def entries(cache_dir):
    return sorted(glob.glob(os.path.join(str(cache_dir), "v1", "entries", "*.ljc")))


def swap(a, b):
    da, db = open(a, "rb").read(), open(b, "rb").read()
    open(a, "wb").write(db)
    open(b, "wb").write(da)


@pytest.mark.parametrize("secret", [None, SECRET])
def test_swapped_disk_entries_are_refused_and_counted(tmp_path, secret):
    first, _ = run(tmp_path, secret=secret)
    files = entries(tmp_path)
    assert len(files) == 2 == first["disk_writes"], files
    swap(*files)  # needs no secret: the files stay signed, each under the other's name
    again, err = run(tmp_path, secret=secret)
    assert again["disk_hits"] == 0 and again["disk"].get("wrong_key", 0) == 2, (again, err)
    assert again["compiles"] == 2 and again["sums"] == first["sums"]
    assert "wrong_key" in err and "not loaded; compiling instead" in err, err
    assert len(glob.glob(os.path.join(str(tmp_path), "v1", "quarantine", "*.wrong_key.*"))) == 2
    third, _ = run(tmp_path, secret=secret)  # the recompiled entries replaced them
    assert third["disk_hits"] == 2 and third["compiles"] == 0 and third["disk"] == {}, third


def test_swapped_redis_values_are_refused_and_counted(tmp_path):
    server = RedisServer(tmp_path)  # fails, saying to run scripts/setup.sh, when redis-server is missing
    try:
        first, _ = run(tmp_path / "a", server.url, SECRET)
        assert first["remote_writes"] == 2, first
        keys = server.client("KEYS", PREFIX + b"*")
        assert len(keys) == 2
        va, vb = (server.client("GET", k) for k in keys)
        server.client("SET", keys[0], vb)  # renaming values needs no secret
        server.client("SET", keys[1], va)
        second, err = run(tmp_path / "b", server.url, SECRET)
        assert second["remote_hits"] == 0 and second["remote_refused"] == 2, (second, err)
        assert second["remote"].get("wrong_key", 0) == 2, second
        assert second["compiles"] == 2 and second["sums"] == first["sums"]

        # The tool's pull refuses them too, and writes nothing.
        env = {"LAZYJIT_REMOTE_CACHE": server.url, "LAZYJIT_CACHE_SECRET": SECRET}
        server.client("SET", keys[0], vb)
        server.client("SET", keys[1], va)
        p = tool("remote", "pull", "--dir", tmp_path / "c", "--json", env_extra=env, check=False)
        out = json.loads(p.stdout)
        assert p.returncode == 1 and out["pulled"] == [] and len(out["refused"]) == 2, p.stdout
        assert all(r["reason"].startswith("wrong_key") for r in out["refused"]), out
        assert entries(tmp_path / "c") == []

        # Push refuses local files that lie under another entry's name.
        files = entries(tmp_path / "a")
        swap(*files)
        server.client("FLUSHALL")
        p = tool("remote", "push", "--dir", tmp_path / "a", "--json", env_extra=env, check=False)
        out = json.loads(p.stdout)
        assert p.returncode == 1 and out["pushed"] == [] and len(out["refused"]) == 2, p.stdout
        assert server.client("KEYS", PREFIX + b"*") == []
    finally:
        server.stop()


# XXH64 (seed 0), for crafting archives as an attacker would.
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                           0x27D4EB2F165667C5)
_M = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data):
    n, i = len(data), 0
    if n >= 32:
        v = [(_P1 + _P2) & _M, _P2, 0, (-_P1) & _M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], struct.unpack_from("<Q", data, i + 8 * j)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for x in v:
            h = ((h ^ _round(0, x)) * _P1 + _P4) & _M
    else:
        h = _P5
    h = (h + n) & _M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * _P1) & _M, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def read_archive(path):
    data = open(path, "rb").read()
    assert data[:8] == b"LJCARCH1" and struct.unpack("<Q", data[-8:])[0] == xxh64(data[:-8])  # the test's xxh64 agrees
    (n,), at, records = struct.unpack_from("<I", data, 8), 12, []
    for _ in range(n):
        (kl,) = struct.unpack_from("<I", data, at)
        key = data[at + 4:at + 4 + kl]
        (fl,) = struct.unpack_from("<Q", data, at + 4 + kl)
        records.append((key, data[at + 12 + kl:at + 12 + kl + fl]))
        at += 12 + kl + fl
    return records


def write_archive(path, records, count=None):
    out = b"LJCARCH1" + struct.pack("<I", len(records) if count is None else count)
    for key, file in records:
        out += struct.pack("<I", len(key)) + key + struct.pack("<Q", len(file)) + file
    open(path, "wb").write(out + struct.pack("<Q", xxh64(out)))


@pytest.fixture
def archive(tmp_path):
    first, _ = run(tmp_path / "src", secret=SECRET)
    path = tmp_path / "all.ljca"
    p = tool("export", path, "--dir", tmp_path / "src")
    assert p.returncode == 0, p.stderr
    records = read_archive(path)
    assert len(records) == 2
    return path, records, first


def test_import_refuses_an_archive_whose_entries_lie_under_other_keys(tmp_path, archive):
    _, records, first = archive
    (ka, fa), (kb, fb) = records
    crafted = tmp_path / "crafted.ljca"
    write_archive(crafted, [(ka, fb), (kb, fa)])
    p = tool("import", crafted, "--dir", tmp_path / "dst", "--secret", SECRET, "--json",
             env_extra={"LAZYJIT_CACHE_SECRET": SECRET}, check=False)
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["imported"] == [], p.stdout
    assert all(r["reason"].startswith("wrong_key") for r in out["refused"]), out
    assert entries(tmp_path / "dst") == []
    # The run that follows compiles, with eager's values: nothing was planted.
    after, _ = run(tmp_path / "dst", secret=SECRET)
    assert after["compiles"] == 2 and after["sums"] == first["sums"]


@pytest.mark.parametrize("damage", ["count", "one_bad_entry"])
def test_import_is_all_or_nothing(tmp_path, archive, damage):
    _, records, _ = archive
    crafted = tmp_path / "damaged.ljca"
    if damage == "count":
        write_archive(crafted, records, count=0xFFFFFFFF)
    else:  # the second entry's payload damaged: the first, good one must not be written either
        (ka, fa), (kb, fb) = records
        fb = bytearray(fb)
        fb[len(fb) * 2 // 3] ^= 4
        write_archive(crafted, [(ka, fa), (kb, bytes(fb))])
    p = tool("import", crafted, "--dir", tmp_path / "dst", "--secret", SECRET, check=False)
    assert p.returncode != 0, p.stdout
    assert "nothing imported" in p.stdout + p.stderr, (p.stdout, p.stderr)
    assert entries(tmp_path / "dst") == []


def test_a_fifo_at_an_entry_path_is_refused_without_blocking(tmp_path):
    first, _ = run(tmp_path)
    files = entries(tmp_path)
    os.unlink(files[0])
    os.mkfifo(files[0], 0o600)
    again, err = run(tmp_path, timeout=120)  # blocked forever before
    assert again["disk"].get("not_a_file", 0) >= 1 and again["sums"] == first["sums"], (again, err)
    assert "not a regular file" in err, err
    # The run replaced it with a good entry; plant it again for the tool.
    os.unlink(files[0])
    os.mkfifo(files[0], 0o600)
    for args in (("ls", "--dir", tmp_path), ("verify", "--dir", tmp_path), ("stats", "--dir", tmp_path)):
        p = tool(*args, check=False)
        assert p.returncode in (0, 1), (args, p.returncode, p.stderr)
    p = tool("verify", "--dir", tmp_path, check=False)
    assert "not a regular file" in p.stdout + p.stderr, p.stdout
    # A FIFO given as an archive to import is refused at once, too.
    fifo = tmp_path / "archive.fifo"
    os.mkfifo(fifo, 0o600)
    p = tool("import", fifo, "--dir", tmp_path / "dst", check=False)
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr


def test_an_unreadable_symlinked_entry_says_it_was_not_loaded(tmp_path):
    first, _ = run(tmp_path)
    files = entries(tmp_path)
    target = tmp_path / "elsewhere.ljc"
    shutil.move(files[0], target)
    os.symlink(target, files[0])
    again, err = run(tmp_path)
    assert again["sums"] == first["sums"]
    said = [l for l in err.splitlines() if "on-disk compile cache" in l and os.path.basename(files[0]) in l]
    assert said and all("not loaded; compiling instead" in l and "not saved" not in l for l in said), err
