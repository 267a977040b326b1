"""Checksummed entries whose manifests are hostile (issue 48, defects 5 and 8),
as a real run wrote them and then rewritten: one field of the wrong JSON type,
or a field nested 100,000 deep, the checksum recomputed (XXH64, below, checked
against the entries as written). No secret is set, so a good checksum is all
an entry needs. `lazyjit-cache ls --json` lists that entry as damaged, naming
the field, and the others as usual (before, "ops": "three" made it exit 2 for
the whole cache); `verify` calls it bad. A field the runtime does not read
leaves the entry usable: the next process loads it and computes what eager
does; one it checks (kind, format) makes the entry a miss, compiled again.
"""
import json
import os
import struct

import pytest

from test_remote_cache import TOOL, disk_entries, run, tool

P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579,
                      2870177450012600261)
M = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M, 31) * P1) & M


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while i + 32 <= n:
            v = [_round(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0]) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M
        for x in v:
            h = ((h ^ _round(0, x)) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((struct.unpack_from("<I", data, i)[0] * P1) & M), 23) * P2 + P3) & M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & M), 11) * P1) & M
        i += 1
    h = ((h ^ (h >> 33)) * P2) & M
    h = ((h ^ (h >> 29)) * P3) & M
    return h ^ (h >> 32)


def split(data):
    """(manifest bytes, payload bytes) of an entry file, its checksum checked."""
    m, p = struct.unpack_from("<IQ", data, 12)
    manifest, payload = data[24:24 + m], data[24 + m:24 + m + p]
    assert struct.unpack_from("<Q", data, 24 + m + p)[0] == xxh64(manifest + payload), "xxh64 here is not the cache's"
    return manifest, payload


def entry(manifest, payload):
    """An unsigned entry file, checksum and all."""
    return (b"LAZYJITC" + struct.pack("<IIQ", 1, len(manifest), len(payload)) + manifest + payload +
            struct.pack("<Q", xxh64(manifest + payload)) + b"\x00")


def wrong_kind(m):
    m["kind"] = 1
    return json.dumps(m).encode()


def wrong_format(m):
    m["format"] = "1"
    return json.dumps(m).encode()


def wrong_ops(m):
    m["ops"] = "three"
    return json.dumps(m).encode()


def nested_deep(m):
    text = json.dumps(m).encode()
    return text[:-1] + b', "deep": ' + b"[" * 100000 + b"]" * 100000 + b"}"


NO_SECRET = {"LAZYJIT_CACHE_SECRET": "<unset>"}


@pytest.mark.parametrize("rewrite,damaged", [(wrong_kind, "manifest field 'kind' is an integer, expected a string"),
                                             (wrong_format, "manifest field 'format' is a string, expected an integer"),
                                             (wrong_ops, "manifest field 'ops' is a string"),
                                             (nested_deep, "manifest nests deeper than 64 levels")],
                         ids=["kind", "format", "ops", "nested_deep"])
def test_hostile_manifests_are_damage_not_failures(tmp_path, rewrite, damaged):
    first, _ = run(tmp_path, widths=(16, 24), **NO_SECRET)  # checks its results against eager
    entries = disk_entries(tmp_path)
    assert len(entries) == first["disk_writes"] >= 2
    bad_key = sorted(entries)[0]
    manifest, payload = split(entries[bad_key])
    path = os.path.join(str(tmp_path), "v1", "entries", bad_key + ".ljc")
    with open(path, "wb") as f:
        f.write(entry(rewrite(json.loads(manifest)), payload))

    # The tool: that entry damaged, named with its reason; the others as usual.
    if not os.access(TOOL, os.X_OK):
        pytest.fail(f"{TOOL} is not built", pytrace=False)
    listing = json.loads(tool("ls", "--json", "--dir", str(tmp_path)).stdout)["entries"]
    problems = {row["key"]: row["problem"] for row in listing}
    assert damaged in (problems[bad_key] or ""), problems
    assert all(problems[k] is None for k in problems if k != bad_key), problems
    verify = tool("verify", "--dir", str(tmp_path), check=False)
    assert verify.returncode == 1 and f"BAD  {bad_key}  corrupt: {damaged}" in verify.stdout, verify.stdout

    if rewrite in (wrong_ops, nested_deep):
        # Fields the runtime does not read: it loads the entry, and computes what eager does.
        again, err = run(tmp_path, widths=(16, 24), **NO_SECRET)
        assert again["sums"] == first["sums"], (again, err)
        assert again["disk_hits"] == 2 and again["compiles"] == 0, again
    else:
        # Fields the runtime checks: of the wrong type, the entry is a miss
        # (set aside, compiled again), never an exception at the sync.
        again, err = run(tmp_path, widths=(16, 24), **NO_SECRET)
        assert again["sums"] == first["sums"], (again, err)
        assert again["disk_hits"] == 1 and again["compiles"] == 1, again
