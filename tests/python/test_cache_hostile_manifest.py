"""Checksummed entries whose manifests are hostile (issue 48, defects 5 and 8),
as a real run wrote them and then rewritten: one field of the wrong JSON type,
or a field nested 100,000 deep, the checksum recomputed (XXH64, checked
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

from test_cache_binding import xxh64
from test_remote_cache import TOOL, disk_entries, run, tool


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
