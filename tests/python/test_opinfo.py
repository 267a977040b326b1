"""OpInfo conformance (issue 3, item 9).

The full pass lives in tools/opinfo_conformance.py (see docs/conformance/README.md),
which writes the committed report docs/conformance/opinfo_float32.{md,json}. Here
the harness runs, now, on a fixed subset of common ops and on a sample of the whole
op_db (every SAMPLED_STRIDE-th op, a few samples each): issue 16's float32 target
(>= 99% of samples pass, none crashes) is asserted on that run. The committed report
is checked for being the tool's output of a full pass, consistent with itself.
"""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "tools", "opinfo_conformance.py")
REPORT_MD = os.path.join(REPO, "docs", "conformance", "opinfo_float32.md")
REPORT_JSON = os.path.join(REPO, "docs", "conformance", "opinfo_float32.json")
STATUSES = ("pass", "fail", "skip", "crash", "timeout")

# Common ops (op_db names, "name.variant" where the op has variants).
COMMON_OPS = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "abs", "exp", "log", "sin", "cos",
    "tanh", "sigmoid", "sqrt", "rsqrt", "pow", "maximum", "where", "clamp", "sum", "mean",
    "amax", "argmax", "softmax", "log_softmax", "matmul", "mm", "bmm", "addmm",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.embedding", "nn.functional.cross_entropy", "cat",
    "stack", "transpose", "permute", "reshape", "expand", "index_select", "gather",
    "masked_fill", "cumsum", "sort", "topk",
]
SAMPLES_PER_OP = 3
# Measured with this subset (3 samples per op): 100% of samples that ran (skips
# excluded) pass. The margin absorbs small regressions' noise, not whole ops:
# one op failing all its samples (~2%) stays above it, two do not.
MIN_PASS_RATE_OF_RUN = 0.97

# The sampled run: every SAMPLED_STRIDE-th op of op_db (index = offset mod stride),
# at most SAMPLED_SAMPLES samples each: ~170 ops, ~1,000 samples, ~40 s on 2 cores.
# LAZYJIT_OPINFO_OFFSET picks another quarter of op_db (0..3).
SAMPLED_STRIDE = 4
SAMPLED_OFFSET = int(os.environ.get("LAZYJIT_OPINFO_OFFSET", "1"))
SAMPLED_SAMPLES = 6
TARGET_PASS_RATE = 0.99  # issue 16's float32 target, over all samples (skips count against it)


def _run(args, env_extra=None, timeout=240):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, HARNESS] + args, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _load(md_path):
    with open(os.path.splitext(md_path)[0] + ".json") as f:
        return json.load(f)


def test_common_ops_subset(tmp_path):
    out = str(tmp_path / "subset.md")
    r = _run(["--exact-ops", ",".join(COMMON_OPS), "--max-samples-per-op", str(SAMPLES_PER_OP),
              "--out", out, "--quiet"])
    assert r.returncode == 0, r.stdout + r.stderr
    doc = _load(out)
    names = {o["op"] for o in doc["ops"]}
    missing = [n for n in COMMON_OPS if n not in names]
    assert not missing, f"not in op_db: {missing}"
    s = doc["summary"]["float32"]
    assert s["total"] >= len(COMMON_OPS) * 2, s
    bad = [(o["op"], x["index"], x["status"], x["reason"]) for o in doc["ops"] for x in o["samples"]
           if x["status"] in ("crash", "timeout")]
    assert not bad, bad
    ran = s["total"] - s["skip"]
    assert ran > 0
    rate = s["pass"] / ran
    fails = [(o["op"], x["index"], x["reason"]) for o in doc["ops"] for x in o["samples"]
             if x["status"] == "fail"]
    assert rate >= MIN_PASS_RATE_OF_RUN, (rate, fails)


def test_harness_survives_crash_and_timeout(tmp_path):
    """A sample that aborts its worker is recorded as "crash" (confirmed in a
    fresh worker) and one that hangs as "timeout"; the other samples of the op
    still run."""
    out = str(tmp_path / "fault.md")
    r = _run(["--exact-ops", "mul", "--max-samples-per-op", "4", "--out", out, "--quiet",
              "--jobs", "1"], env_extra={"OPINFO_HARNESS_FAULT": "abort=mul:1"})
    assert r.returncode == 0, r.stdout + r.stderr
    samples = _load(out)["ops"][0]["samples"]
    assert [x["index"] for x in samples] == [0, 1, 2, 3]
    assert samples[1]["status"] == "crash" and "SIGABRT" in samples[1]["reason"], samples[1]
    assert all(samples[i]["status"] == "pass" for i in (0, 2, 3)), samples

    r = _run(["--exact-ops", "mul", "--max-samples-per-op", "3", "--out", out, "--quiet",
              "--jobs", "1", "--timeout", "3"], env_extra={"OPINFO_HARNESS_FAULT": "hang=mul:0"})
    assert r.returncode == 0, r.stdout + r.stderr
    samples = _load(out)["ops"][0]["samples"]
    assert samples[0]["status"] == "timeout", samples[0]
    assert [x["status"] for x in samples[1:]] == ["pass", "pass"], samples


def test_random_ops_match_the_cpu_generator(tmp_path):
    # lazyjit draws random numbers from the CPU generator at trace time, so a
    # random op seeded like the eager run gives the eager run's numbers.
    out = str(tmp_path / "rand.md")
    r = _run(["--exact-ops", "rand_like,randn_like,nn.functional.dropout,bernoulli,normal",
              "--max-samples-per-op", "3", "--out", out, "--quiet", "--jobs", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    passed = 0
    for o in _load(out)["ops"]:
        assert o["samples"], o
        for x in o["samples"]:
            # (Some random OpInfos carry PyTorch's own "non-deterministic" skip.)
            assert x["status"] == "pass" or x["reason"].startswith("opinfo:"), (o["op"], x)
            passed += x["status"] == "pass"
    assert passed >= 3, passed


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("opinfo") / "sampled.md")
    r = _run(["--op-stride", str(SAMPLED_STRIDE), "--op-offset", str(SAMPLED_OFFSET),
              "--max-samples-per-op", str(SAMPLED_SAMPLES), "--out", out, "--quiet"], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return _load(out)


def test_sampled_op_db_meets_the_float32_target(sampled_run):
    doc = sampled_run
    s = doc["summary"]["float32"]
    ops = [o for o in doc["ops"] if o["dtype"] == "float32"]
    # A quarter of op_db (~700 OpInfos in torch 2.13), not a handful.
    assert len(ops) > 150 and s["total"] > 600, (len(ops), s["total"])
    assert not doc["meta"]["harness_errors"], doc["meta"]
    broken = [(o["op"], x["index"], x["status"], x.get("reason")) for o in ops for x in o["samples"]
              if x["status"] in ("crash", "timeout")]
    assert not broken, broken
    not_passed = [(o["op"], x["index"], x["status"], x.get("reason")) for o in ops for x in o["samples"]
                  if x["status"] != "pass"]
    rate = s["pass"] / s["total"]
    assert rate >= TARGET_PASS_RATE, (rate, not_passed[:40])


def test_committed_report_is_the_tools_full_pass(sampled_run):
    """The committed report has the shape the tool writes now (the sampled run's) and
    comes from a full pass (no subset options), written to the tool's default path."""
    with open(REPORT_JSON) as f:
        doc = json.load(f)
    assert set(doc) == set(sampled_run), (set(doc), set(sampled_run))
    assert set(doc["meta"]) == set(sampled_run["meta"]), (set(doc["meta"]), set(sampled_run["meta"]))
    s, ref = doc["summary"]["float32"], sampled_run["summary"]["float32"]
    assert set(s) == set(ref), (set(s), set(ref))
    op_keys = {"op", "op_index", "dtype", "samples", "secs", "unsupported", "gen_error"}
    assert all(set(o) <= op_keys for o in doc["ops"]), [set(o) - op_keys for o in doc["ops"] if set(o) - op_keys]
    args = doc["meta"]["args"].split()
    subset = {"--ops", "--exact-ops", "--max-samples-per-op", "--only-sample", "--op-stride", "--dtypes",
              "--sample-other-dtypes", "--out"}
    assert not subset & set(a.split("=")[0] for a in args), doc["meta"]["args"]
    h = _harness()
    assert h.STATUSES == STATUSES


def test_committed_report_exists_and_parses():
    assert os.path.exists(REPORT_MD), REPORT_MD
    with open(REPORT_MD) as f:
        md = f.read()
    assert "## Summary" in md and "| float32 |" in md
    with open(REPORT_JSON) as f:
        doc = json.load(f)
    s = doc["summary"]["float32"]
    assert s["total"] == sum(s[k] for k in STATUSES)
    counts = {k: 0 for k in STATUSES}
    nops = 0
    for o in doc["ops"]:
        if o["dtype"] != "float32":
            continue
        nops += 1
        for x in o["samples"]:
            assert x["status"] in STATUSES, x
            if x["status"] != "pass":
                assert x.get("reason"), x
            counts[x["status"]] += 1
    assert counts == {k: s[k] for k in STATUSES}
    # A full pass, not a subset: op_db in torch 2.13 has ~700 OpInfos and
    # ~17,000 float32 samples.
    assert nops > 600 and s["total"] > 15000, (nops, s["total"])
    assert s["pass_rate_all"] == pytest.approx(s["pass"] / s["total"], abs=1e-4)
    # (Issue 16's target, >= 99%, rests on the run above: test_sampled_op_db_meets_the_float32_target.)
    # The same run under the old rules, for comparability: every sample compared
    # by a rule counts as a skip there.
    ruled = sum(sum(v.values()) for v in s["rules"].values())
    assert s["old_rules"]["skip"] == s["skip"] + ruled, s


def test_common_ops_subset_under_the_compiled_vs_eager_check(tmp_path):
    """LAZYJIT_CHECK=1 compares every value generated code computes with eager's
    kernel on the same operands: on correct code it must never raise."""
    out = str(tmp_path / "checked.md")
    r = _run(["--exact-ops", ",".join(COMMON_OPS), "--max-samples-per-op", str(SAMPLES_PER_OP),
              "--out", out, "--quiet"], env_extra={"LAZYJIT_CHECK": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = _load(out)
    alarms = [(o["op"], x["index"], x.get("reason", "")) for o in doc["ops"] for x in o["samples"]
              if "lazyjit.check" in x.get("reason", "")]
    assert not alarms, alarms
    assert doc["summary"]["float32"]["pass"] >= len(COMMON_OPS) * 2


# ---- the harness's rules for outputs that cannot be compared value for value ----------

def _harness():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    try:
        import opinfo_conformance
    finally:
        sys.path.pop(0)
    return opinfo_conformance


def test_rule_order_undefined_canonicalises_unique():
    import torch
    from torch.testing._internal.opinfo.core import SampleInput
    h = _harness()
    op = type("Op", (), {"name": "unique"})()
    x = torch.tensor([[3.0, 1.0], [3.0, 1.0], [2.0, 5.0]])
    for kw in (dict(sorted=False, return_inverse=True, return_counts=True, dim=None),
               dict(sorted=False, return_inverse=True, return_counts=True, dim=0)):
        s = SampleInput(x, **kw)
        v, inv, cnt = torch.unique(x, **{**kw, "sorted": True})
        # The same result in another order: values permuted, inverse and counts with them.
        perm = torch.arange(v.shape[0] - 1, -1, -1)
        invp = torch.empty_like(perm)
        invp[perm] = torch.arange(len(perm))
        other = (v.index_select(0, perm), invp[inv], cnt[perm])
        assert h._compare_order_undefined(op, s, (v, inv, cnt), (v, inv, cnt), torch) == "exact"
        assert h._compare_order_undefined(op, s, other, (v, inv, cnt), torch) == "canonical"
        # Wrong inverse indices, wrong counts, a missing value: fails.
        for bad in ((other[0], torch.zeros_like(other[1]), other[2]), (other[0], other[1], other[2] + 1),
                    (other[0][1:], other[1], other[2][1:])):
            with pytest.raises(h._Mismatch):
                h._compare_order_undefined(op, s, bad, (v, inv, cnt), torch)


def test_rules_chosen_per_op():
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    h = _harness()
    rules = {}
    for op in op_db:
        skip, rule = h._op_rule(op, torch.float32)
        rules[op.name] = (skip, rule)
    assert rules["unique"] == (None, "order_undefined")
    assert rules["empty_like"] == (None, "uninitialized")
    assert rules["new_empty_strided"] == (None, "uninitialized")
    assert rules["byte"] == (None, "overflow_cast")
    assert rules["add"] == (None, None)


def test_rule_overflow_cast_names_out_of_range_elements():
    import torch
    from torch.testing._internal.opinfo.core import SampleInput
    h = _harness()
    x = torch.tensor([1.5, -3.0, 300.0, 7.0])
    want = x.byte()
    got = want.clone()
    got[2] = 0  # differs only where 300 is out of uint8's range
    reason = h._overflow_cast_reason(got, want, SampleInput(x), torch)
    assert "only on out-of-range elements" in reason and "1/4" in reason, reason
    got[3] = 0  # and now on an in-range element too
    assert "in-range" in h._overflow_cast_reason(got, want, SampleInput(x), torch)


def test_rules_on_real_samples(tmp_path):
    """empty* compared by metadata, unique by contract, eager-raising samples
    by the exception type: a few samples each, run through the harness."""
    out = str(tmp_path / "rules.md")
    r = _run(["--exact-ops", "empty_like,new_empty_strided,unique,jiterator_unary,as_strided",
              "--max-samples-per-op", "8", "--out", out, "--quiet"])
    assert r.returncode == 0, r.stdout + r.stderr
    doc = _load(out)
    by_rule = {}
    for o in doc["ops"]:
        for x in o["samples"]:
            assert x["status"] != "skip", (o["op"], x)
            if x.get("rule"):
                by_rule.setdefault(x["rule"], []).append((o["op"], x["status"], x.get("reason")))
    assert {"uninitialized", "order_undefined", "eager_raises"} <= set(by_rule), by_rule
    for rule, xs in by_rule.items():
        assert all(st == "pass" for _, st, _ in xs), (rule, xs)
    s = doc["summary"]["float32"]
    assert s["old_rules"]["skip"] == s["skip"] + sum(len(v) for v in by_rule.values())
