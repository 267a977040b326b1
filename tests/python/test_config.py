"""Every LAZYJIT_* switch is read once and validated: a malformed or unknown
value gets one clear warning naming it and the default it falls back to, the
program still computes eager's results, and no value crashes the process
(LAZYJIT_NUM_THREADS=100000 used to segfault at exit)."""
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT

PROBE = ("import torch, lazyjit; x = torch.randn(300, 500); "
         "torch.testing.assert_close((x.to('lazyjit').tanh() * 2 + 1).cpu(), x.tanh() * 2 + 1); "
         "print('ok', lazyjit.mode())")


def run(**env_extra):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off", "LAZYJIT_BACKGROUND_COMPILE": "off", **env_extra}
    return subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("name,value,says", [
    ("LAZYJIT_MODE", "bogus", "lazy or step"),
    ("LAZYJIT_NUM_THREADS", "abc", "an integer"),
    ("LAZYJIT_NUM_THREADS", "0", "an integer"),
    ("LAZYJIT_NUM_THREADS", "-3", "an integer"),
    ("LAZYJIT_NUM_THREADS", "100000", "an integer"),
    ("LAZYJIT_VECTOR_BITS", "7", "128, 256 or 512"),
    ("LAZYJIT_DISABLE_PASSES", "fold,nosuch", "a pass name"),
    ("LAZYJIT_CACHE", "maybe", "on or off"),
    ("LAZYJIT_SMALL_GEMM", "maybe", "on or off"),
    ("LAZYJIT_CACHE_MAX_BYTES", "lots", "a byte count"),
    ("LAZYJIT_NUM_THREDS", "2", "unknown setting"),
    ("LAZYJIT_REMOTE_CACHE", "http://cache:6379", "a redis://host:port/db URL"),
    ("LAZYJIT_REMOTE_CACHE", "redis://cache:99999/0", "a redis://host:port/db URL"),
    ("LAZYJIT_REMOTE_TIMEOUT_MS", "0", "milliseconds"),
    ("LAZYJIT_REMOTE_TIMEOUT_MS", "soon", "milliseconds"),
    ("LAZYJIT_REMOTE_MAX_ENTRY_BYTES", "huge", "a byte count"),
])
def test_bad_settings_warn_once_and_fall_back(name, value, says):
    p = run(**{name: value})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok lazy", p.stdout
    warnings = [l for l in p.stderr.splitlines() if l.startswith("lazyjit: warning:")]
    assert len(warnings) == 1, p.stderr
    assert name in warnings[0] and says in warnings[0], warnings[0]


def test_a_password_in_a_bad_remote_url_is_not_printed():
    p = run(LAZYJIT_REMOTE_CACHE="rediss://me:hunter2@cache:6379/0")
    assert p.returncode == 0 and "LAZYJIT_REMOTE_CACHE" in p.stderr, p.stderr
    assert "hunter2" not in p.stderr, p.stderr


def test_good_settings_say_nothing():
    p = run(LAZYJIT_MODE="step", LAZYJIT_NUM_THREADS="2", LAZYJIT_VECTOR_BITS="256",
            LAZYJIT_DISABLE_PASSES="fold,cse", LAZYJIT_CACHE_MAX_BYTES="500M", LAZYJIT_REMOTE_TIMEOUT_MS="250",
            LAZYJIT_REMOTE_MAX_ENTRY_BYTES="16M", LAZYJIT_SMALL_GEMM="off")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok step"
    assert "warning" not in p.stderr, p.stderr


@pytest.mark.parametrize("name,value", [
    ("LAZYJIT_CACHE_MAX_BYTES", "17179869184G"),      # 2^64: wrapped to 0
    ("LAZYJIT_CACHE_MAX_BYTES", "17592186044416M"),    # 2^64 too
    ("LAZYJIT_CACHE_MAX_BYTES", "8589934592G"),        # 2^63: no longer fits an int64
    ("LAZYJIT_CACHE_MAX_BYTES", "99999999999999999999"),
    ("LAZYJIT_REMOTE_MAX_ENTRY_BYTES", "17179869185G"),
])
def test_a_byte_count_past_63_bits_is_a_warning_not_a_wrapped_number(name, value):
    p = run(**{name: value})
    assert p.returncode == 0 and p.stdout.strip() == "ok lazy", (p.stdout, p.stderr)
    warnings = [l for l in p.stderr.splitlines() if l.startswith("lazyjit: warning:")]
    assert len(warnings) == 1, p.stderr
    assert f"{name}={value}" in warnings[0] and "2^63" in warnings[0], warnings[0]


def test_the_largest_byte_counts_that_fit_say_nothing():
    p = run(LAZYJIT_CACHE_MAX_BYTES="8589934591G", LAZYJIT_REMOTE_MAX_ENTRY_BYTES="8796093022207M")
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


def test_an_unwritable_dump_directory_is_said_once(tmp_path):
    # A directory under a regular file: no one, root included, can create it.
    (tmp_path / "file").write_text("")
    dump = tmp_path / "file" / "dumps"
    probe = ("import torch, lazyjit\n"
             "for n in (3, 5, 7):\n"
             "    x = torch.randn(n, 8)\n"
             "    torch.testing.assert_close((x.to('lazyjit').exp() * 2).cpu(), x.exp() * 2)\n"
             "print('ok')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_DIR, "LAZYJIT_CACHE": "off",
           "LAZYJIT_BACKGROUND_COMPILE": "off", "LAZYJIT_DYNAMIC": "off", "LAZYJIT_DUMP": str(dump)}
    p = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.stdout, p.stderr)
    said = [l for l in p.stderr.splitlines() if str(dump) in l]
    assert len(said) == 1, p.stderr
    assert "Not a directory" in said[0] and "LAZYJIT_DUMP" in said[0], said[0]
