"""The cache directory cannot be swapped under a process (issue 48, items 1 and
10): the store works through directory descriptors opened once, so a cache
directory renamed away and replaced under a running process is never read; a
directory whose parent others can write (without the sticky bit) is refused at
open; and lock files do not outlive their holders.

The attack: another user renames the victim's cache away and puts in its place
a cache holding, under the key of the victim's next `sin` graph, the entry of a
`cos` program with the key in its manifest rewritten and the checksum
recomputed (no secret is set, so nothing else binds the entry). Every process
checks its values against eager PyTorch."""
import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT
from test_cache_binding import xxh64

# argv[1]: "sin" or "cos"; argv[2]: the size of the graph run after stdin's
# first line (none with "-"); argv[3] (optional): a size run first, to open the
# store and write an entry before the wait. The last line: values and counters.
PROGRAM = r"""
import json, sys, torch, lazyjit
fn = getattr(torch, sys.argv[1])
if len(sys.argv) > 3:
    x = torch.arange(float(sys.argv[3])) / 3
    torch.testing.assert_close(fn(x.to("lazyjit")).cpu(), fn(x))
    print("ready", flush=True)
    sys.stdin.readline()
x = torch.arange(float(sys.argv[2])) / 3
got = fn(x.to("lazyjit")).cpu()
mt = lazyjit.metrics()
print(json.dumps({"got": got.tolist(), "want": fn(x).tolist(), "disk_hits": mt["disk_hits"],
                  "disk_writes": mt["disk_writes"], "errors": mt["disk_errors_by_kind"]}))
"""


def env_for(cache_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYJIT_")}
    env.update(PYTHONPATH=PYTHON_DIR, LAZYJIT_CACHE="on", LAZYJIT_CACHE_DIR=str(cache_dir),
               LAZYJIT_BACKGROUND_COMPILE="off", LAZYJIT_DYNAMIC="off")
    return env


def start(cache_dir, *args):
    return subprocess.Popen([sys.executable, "-c", PROGRAM, *map(str, args)], env=env_for(cache_dir), cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, stdin=None):
    out, err = p.communicate(stdin, timeout=240)
    assert p.returncode == 0, f"process failed ({p.returncode}):\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1]), err


def entries(cache_dir):
    return sorted(glob.glob(os.path.join(str(cache_dir), "v1", "entries", "*.ljc")))


def manifest(file):
    (m,) = struct.unpack_from("<I", file, 12)
    return json.loads(file[24:24 + m])


def entry_of(cache_dir, op):
    """The one entry of a fresh cache that ran `op` at size 5: (key, file bytes)."""
    finish(start(cache_dir, op, 5))
    found = entries(cache_dir)
    assert len(found) == 1, (op, found)
    file = open(found[0], "rb").read()
    assert f"= {op}[" in manifest(file)["ir"], manifest(file)["ir"]
    return os.path.basename(found[0])[:-4], file


def forge(cos_file, key):
    """`cos_file` with its manifest naming `key`, the checksum recomputed."""
    m, p = struct.unpack_from("<IQ", cos_file, 12)
    forged = manifest(cos_file)
    forged["key"] = key
    body_m = json.dumps(forged, separators=(",", ":")).encode()
    payload = cos_file[24 + m:24 + m + p]
    head = cos_file[:12] + struct.pack("<IQ", len(body_m), p)
    return head + body_m + payload + struct.pack("<Q", xxh64(body_m + payload)) + b"\0"


def plant(cache_dir, key, file):
    """A cache directory as its owner's store lays it out, holding `file` under `key`."""
    for sub in ("", "v1", "v1/entries", "v1/locks", "v1/tmp", "v1/quarantine"):
        os.mkdir(os.path.join(cache_dir, sub), 0o700)
    with open(os.path.join(cache_dir, "v1", "entries", key + ".ljc"), "wb") as f:
        f.write(file)


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    """The key of the victim's sin graph at size 5, and a cos entry forged under it."""
    d = tmp_path_factory.mktemp("forge")
    key, _ = entry_of(d / "sin", "sin")
    _, cos_file = entry_of(d / "cos", "cos")
    return key, forge(cos_file, key)


def assert_sin(r):
    got, want = r["got"], r["want"]
    assert len(got) == len(want) and all(abs(a - b) <= 1e-6 for a, b in zip(got, want)), \
        f"sin(x) gave {got}, eager gives {want}"


def test_the_forged_entry_is_what_an_unprotected_store_would_run(tmp_path, forged):
    # The attack's entry checks out: a process started on it (the attacker's own
    # directory, owned by this user here) loads it and gets cos. This is what
    # the tests below keep away from a running process.
    key, file = forged
    plant(tmp_path / "cache", key, file)
    r, _ = finish(start(tmp_path / "cache", "sin", 5))
    assert r["disk_hits"] == 1 and r["got"] != r["want"], r


def swap_under(cache, forged):
    """Starts the victim on `cache`, swaps the directory once it runs, returns its result."""
    key, file = forged
    p = start(cache, "sin", 5, 4)
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    os.rename(cache, str(cache) + ".victim")
    plant(cache, key, file)
    return finish(p, "go\n")


def test_a_directory_swapped_under_a_running_process_is_never_read(tmp_path, forged):
    # A parent only this user can write: the store opens, then the directory is
    # renamed away and replaced (simulated here by this user). The running
    # store keeps working in the directory it opened.
    parent = tmp_path / "own"
    os.mkdir(parent, 0o700)
    r, err = swap_under(parent / "cache", forged)
    assert_sin(r)
    assert r["disk_hits"] == 0 and r["disk_writes"] == 2 and not r["errors"], (r, err)  # sizes 4 and 5
    # Its new entry went to the directory it opened; the planted one is untouched.
    assert len(entries(str(parent / "cache") + ".victim")) == 2
    assert [os.path.basename(f)[:-4] for f in entries(parent / "cache")] == [forged[0]]


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_parent_others_can_write_without_the_sticky_bit_is_refused(tmp_path, forged, mode):
    team = tmp_path / "team"
    os.mkdir(team)
    os.chmod(team, mode)
    r, err = swap_under(team / "cache", forged)
    assert_sin(r)
    assert r["disk_hits"] == 0 and r["disk_writes"] == 0, r
    said = [l for l in err.splitlines() if "compile cache" in l]
    assert len(said) == 1 and str(team) in said[0] and "sticky" in said[0], err


def test_a_sticky_parent_like_tmp_is_accepted(tmp_path):
    shared = tmp_path / "shared"
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    r, err = finish(start(shared / "cache", "sin", 5))
    assert_sin(r)
    assert r["disk_writes"] == 1 and not r["errors"], (r, err)


def test_lock_files_do_not_outlive_their_holders(tmp_path):
    cache = tmp_path / "cache"
    for op, n in (("sin", 5), ("cos", 6), ("exp", 7)):
        r, _ = finish(start(cache, op, n))
        assert r["disk_writes"] == 1
    locks = cache / "v1" / "locks"
    assert os.listdir(locks) == []
    # One left by a holder killed mid-compile (the kernel released its lock)
    # goes when the next process opens the cache.
    open(locks / "killed-holder.lock", "w").close()
    r, _ = finish(start(cache, "sin", 5))
    assert r["disk_hits"] == 1
    assert os.listdir(locks) == []


def test_clear_removes_lock_files_nobody_holds(tmp_path):
    from test_cache_tool import TOOL
    cache = tmp_path / "cache"
    r, _ = finish(start(cache, "sin", 5))
    assert r["disk_writes"] == 1
    locks = cache / "v1" / "locks"
    for name in ("killed-a.lock", "killed-b.lock"):
        open(locks / name, "w").close()
    out = subprocess.run([TOOL, "--dir", str(cache), "clear", "--yes"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "1 entries" in out.stdout and "2 lock files" in out.stdout, out.stdout
    assert os.listdir(locks) == [] and entries(cache) == []
