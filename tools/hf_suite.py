#!/usr/bin/env python3
"""Runs transformers' own model test files on the CPU and on lazyjit and compares them.

    .venv/bin/python tools/hf_suite.py                       # gpt2, llama, bert; both devices
    .venv/bin/python tools/hf_suite.py --models gpt2         # one model
    .venv/bin/python tools/hf_suite.py --models gpt2 --reuse-cpu   # keep an earlier CPU result
    .venv/bin/python tools/hf_suite.py --report-only         # rebuild the table from saved results

The test files (transformers' tests/models/<model>/test_modeling_<model>.py with the shared
mixins) live in ../shared/hf_tests (see its README.md); they are copied into a scratch folder
(--work, default /tmp/lazyjit_hf_suite) with src/transformers linked to the installed package.
Each model file runs under pytest with one xdist worker (a test that kills its process is a
failure, and the run goes on) and pytest-timeout's per-test limit (--timeout), once on the CPU and
once with TRANSFORMERS_TEST_BACKEND=lazyjit TRANSFORMERS_TEST_DEVICE=lazyjit (python/ on
PYTHONPATH). Results per device are saved as JSON in <work>/results/ (the junit XML and the log
beside them); the table goes to --out (markdown) and stdout.

The share is (tests passing on both) / (tests passing on the CPU), leaving out the float16
`test_eager_matches_sdpa_inference_*` cases: transformers compares those with a 1e-7/1e-4
tolerance on any device it does not know (5e-3 on the CPU), which the float16 numbers of both
devices miss alike. They are counted in a column of their own.

Needs pytest-xdist, pytest-timeout, parameterized and httpx (installed by
`LAZYJIT_HF_SUITE=1 bash scripts/setup.sh`).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = ["gpt2", "llama", "bert"]
DEPS = {"xdist": "pytest-xdist", "pytest_timeout": "pytest-timeout", "parameterized": "parameterized",
        "httpx": "httpx"}
# transformers' float16 eager-vs-sdpa cases: tolerance for unknown devices (see module doc).
FP16_SDPA = re.compile(r"test_eager_matches_sdpa_inference_\d+_fp16")


def check_deps(python):
    code = "import importlib.util, sys; sys.exit(','.join(m for m in %r if importlib.util.find_spec(m) is None))"
    r = subprocess.run([python, "-c", code % list(DEPS)], capture_output=True, text=True)
    missing = [m for m in r.stderr.strip().split(",") if m]
    if missing:
        pkgs = " ".join(DEPS[m] for m in missing)
        sys.exit(f"hf_suite: missing test dependencies ({pkgs}); install them with "
                 f"`LAZYJIT_HF_SUITE=1 bash scripts/setup.sh` (or `{python} -m pip install {pkgs}`)")


def prepare(src, work, python):
    suite = work / "suite"
    if suite.exists():
        shutil.rmtree(suite)
    shutil.copytree(src, suite, symlinks=True)
    r = subprocess.run([python, "-c", "import transformers, os; print(os.path.dirname(transformers.__file__))"],
                       capture_output=True, text=True, check=True)
    (suite / "src").mkdir(exist_ok=True)
    link = suite / "src" / "transformers"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(r.stdout.strip())
    return suite


def group_key(error):
    """An error line with its measured numbers (1.524e-04, 0.0035) blanked, for grouping."""
    return re.sub(r"\d+\.\d+(e[-+]?\d+)?", "#", error)


def first_line(text):
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line[:200]
    return "(no message)"


def parse_junit(path):
    """test id -> {"outcome": pass|fail|skip, "error": first line}"""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, error = "pass", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "fail"
                error = first_line(child.get("message") or child.text)
                break
            if child.tag == "skipped":
                outcome = "skip"
                error = first_line(child.get("message"))
        # A test can appear twice (a failing teardown); a failure wins.
        if name not in out or outcome == "fail":
            out[name] = {"outcome": outcome, "error": error}
    return out


def run_model(suite, results, model, device, python, timeout, extra, pythonpath):
    test_file = f"tests/models/{model}/test_modeling_{model}.py"
    stem = results / f"{model}_{device}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [pythonpath, env.get("PYTHONPATH", "")] if p)
    env.pop("TRANSFORMERS_TEST_BACKEND", None)
    env.pop("TRANSFORMERS_TEST_DEVICE", None)
    if device == "lazyjit":
        env["TRANSFORMERS_TEST_BACKEND"] = "lazyjit"
        env["TRANSFORMERS_TEST_DEVICE"] = "lazyjit"
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", f"--timeout={timeout}",
           f"--junitxml={stem}.xml", "-o", "junit_family=xunit1", test_file] + extra
    print(f"[hf_suite] {model} on {device}: {' '.join(cmd[3:])}", flush=True)
    t0 = time.time()
    with open(f"{stem}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=suite, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    secs = time.time() - t0
    if not Path(f"{stem}.xml").exists():
        sys.exit(f"hf_suite: pytest wrote no results for {model} on {device} (exit {rc}); see {stem}.log")
    tests = parse_junit(f"{stem}.xml")
    data = {"model": model, "device": device, "seconds": round(secs, 1), "exit": rc, "tests": tests}
    Path(f"{stem}.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    counts = Counter(t["outcome"] for t in tests.values())
    print(f"[hf_suite] {model} on {device}: {counts['pass']} pass, {counts['fail']} fail, "
          f"{counts['skip']} skip in {secs:.0f} s", flush=True)
    return data


def load(results, model, device):
    p = results / f"{model}_{device}.json"
    return json.loads(p.read_text()) if p.exists() else None


def summarize(per_model):
    """Rows of the table and the grouped regressions."""
    rows, groups, both_fail, others = [], defaultdict(list), Counter(), defaultdict(list)
    tot = Counter()
    for model, (cpu, lj) in per_model.items():
        c, l = cpu["tests"], lj["tests"]
        cc = Counter(t["outcome"] for t in c.values())
        lc = Counter(t["outcome"] for t in l.values())
        counted = [n for n, t in c.items() if t["outcome"] == "pass" and not FP16_SDPA.search(n)]
        fp16 = [n for n, t in c.items() if FP16_SDPA.search(n)]
        ok = [n for n in counted if l.get(n, {}).get("outcome") == "pass"]
        fp16_cpu = sum(c[n]["outcome"] == "pass" for n in fp16)
        fp16_lj = sum(l.get(n, {}).get("outcome") == "pass" for n in fp16)
        for n in counted:
            t = l.get(n)
            if t is None:
                groups["(not run on lazyjit)"].append((model, n))
            elif t["outcome"] != "pass":
                key = group_key(t["error"]) if t["outcome"] == "fail" else "skipped on lazyjit: " + t["error"]
                groups[key].append((model, n))
        for n, t in c.items():
            if t["outcome"] == "fail" and l.get(n, {}).get("outcome") == "fail":
                both_fail[model] += 1
        for n, t in l.items():
            if t["outcome"] == "fail" and (c.get(n, {}).get("outcome") != "pass" or FP16_SDPA.search(n)):
                others[group_key(t["error"])].append((model, n))
        rows.append((model, cc, lc, len(counted), len(ok), len(fp16), fp16_cpu, fp16_lj))
        tot.update({"counted": len(counted), "ok": len(ok)})
    return rows, groups, both_fail, tot, others


def pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "-"


def report(per_model, out):
    rows, groups, both_fail, tot, others = summarize(per_model)
    lines = ["| model | CPU pass / fail / skip | lazyjit pass / fail / skip | CPU-passing tests that pass on lazyjit "
             "| fp16 eager-vs-sdpa cases (pass CPU / lazyjit, of) |",
             "|---|---|---|---|---|"]
    for model, cc, lc, counted, ok, nfp16, fp16_cpu, fp16_lj in rows:
        lines.append(f"| {model} | {cc['pass']} / {cc['fail']} / {cc['skip']} | {lc['pass']} / {lc['fail']} / "
                     f"{lc['skip']} | **{pct(ok, counted)}** ({ok} of {counted}) | {fp16_cpu} / {fp16_lj} of {nfp16} |")
    if len(rows) > 1:
        lines.append(f"| all | | | **{pct(tot['ok'], tot['counted'])}** ({tot['ok']} of {tot['counted']}) | |")
    lines.append("")
    if both_fail:
        lines.append("Failing on both devices (not counted): " +
                     ", ".join(f"{m} {n}" for m, n in sorted(both_fail.items())) + ".")
        lines.append("")
    lines.append(f"CPU-passing tests that do not pass on lazyjit, grouped by first error line "
                 f"({sum(len(v) for v in groups.values())}):")
    lines.append("")
    for key, tests in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = key.replace("`", "'")
        lines.append(f"- **{len(tests)}**: `{shown}`")
        for model, n in sorted(tests)[:12]:
            lines.append(f"  - {model}: {n.split('::')[-1]}")
        if len(tests) > 12:
            lines.append(f"  - ... and {len(tests) - 12} more")
    lines.append("")
    lines.append(f"Other lazyjit failures, not in the share (the float16 eager-vs-sdpa cases, tests the CPU "
                 f"skips or fails), grouped by first error line ({sum(len(v) for v in others.values())}):")
    lines.append("")
    for key, tests in sorted(others.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = key.replace("`", "'")
        names = sorted({n.split("::")[-1] for _, n in tests})
        models = ", ".join(sorted({m for m, _ in tests}))
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        lines.append(f"- **{len(tests)}** ({models}): `{shown}` — {', '.join(names[:6])}{more}")
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
        print(f"[hf_suite] wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="all", help="comma-separated of %s, or all" % ",".join(MODELS))
    ap.add_argument("--tests", default=str(REPO.parent / "shared" / "hf_tests"),
                    help="the hf_tests folder (default ../shared/hf_tests)")
    ap.add_argument("--work", default="/tmp/lazyjit_hf_suite", help="scratch folder (copy of the tests, results)")
    ap.add_argument("--devices", default="cpu,lazyjit")
    ap.add_argument("--reuse-cpu", action="store_true", help="use <work>/results/<model>_cpu.json when present")
    ap.add_argument("--report-only", action="store_true", help="only rebuild the table from saved results")
    ap.add_argument("--timeout", type=int, default=600, help="per-test limit in seconds (pytest-timeout)")
    ap.add_argument("--out", default=None, help="write the table (markdown) here too")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default=str(REPO / "python"),
                    help="where the lazyjit package is (default: this checkout's python/)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --  (e.g. -- -k deepcopy)")
    args = ap.parse_args()

    models = MODELS if args.models == "all" else args.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"hf_suite: unknown model {m!r}; known: {', '.join(MODELS)}")
    work = Path(args.work)
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    devices = args.devices.split(",")

    if not args.report_only:
        check_deps(args.python)
        if not Path(args.tests, "tests", "models").is_dir():
            sys.exit(f"hf_suite: no transformers tests in {args.tests} (--tests)")
        suite = prepare(Path(args.tests), work, args.python)
        for m in models:
            for d in devices:
                if d == "cpu" and args.reuse_cpu and load(results, m, "cpu"):
                    print(f"[hf_suite] {m} on cpu: reusing {results / (m + '_cpu.json')}")
                    continue
                run_model(suite, results, m, d, args.python, args.timeout, args.pytest_args, args.pythonpath)

    per_model = {}
    for m in models:
        cpu, lj = load(results, m, "cpu"), load(results, m, "lazyjit")
        if cpu and lj:
            per_model[m] = (cpu, lj)
        else:
            print(f"[hf_suite] {m}: no {'CPU' if not cpu else 'lazyjit'} results in {results}; left out of the table")
    if per_model:
        report(per_model, args.out)


if __name__ == "__main__":
    main()
