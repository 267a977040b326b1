"""The GPU bench's report: ratios and bandwidth per workload (``summarize``), the
issue's done-when checked against them, and the markdown (``render_markdown``):
a table per workload, every system a row, a mismatch or error in its row and
again, in full, at the end. bench/gpu_bench.py writes it to bench/results/gpu.md.
"""
from __future__ import annotations

from gpu_workloads import (DONE_WHEN, GPU_WORKLOADS, MEASURE_SYSTEM, SYSTEM_TITLES, SYSTEMS,
                           TOLERANCE)
from report import errors_section
from workloads import TRAIN_STATE_TOL


def step_ms(sr: dict, basis: str):
    """A system's median time per call on the workload's ratio basis, None if it did not run."""
    if not sr or sr.get("error") or sr.get("skipped"):
        return None
    return sr.get("median_gpu_ms") if basis == "gpu" else sr.get("median_wall_ms")


def summarize(results: dict) -> None:
    """Adds, per workload and system, the speedups over eager and the two Inductors
    (their time over this one's: > 1 = faster) and the fraction of the copy's
    bandwidth; then results["done_when"], the issue's targets checked."""
    for key, r in results["workloads"].items():
        wl = GPU_WORKLOADS[key]
        gpu = results["timer"] == "cuda_events" and not wl.launch_bound
        r["ratio_basis"] = "gpu" if gpu else "wall"
        s = r["systems"]
        copy = (s.get("eager") or {}).get("copy")
        r["copy"] = copy
        for name, sr in s.items():
            t = step_ms(sr, r["ratio_basis"])
            for measure, other in MEASURE_SYSTEM.items():
                o = step_ms(s.get(other), r["ratio_basis"])
                sr[measure] = o / t if t and o else None
            sr["copy_fraction"] = (sr["gbps"] / copy["gbps"]
                                   if copy and sr.get("gbps") and not sr.get("error") else None)
    checks = []
    for key, system, measure, need in DONE_WHEN:
        r = results["workloads"].get(key)
        if r is None:
            continue
        sr = r["systems"].get(system) or {}
        value = sr.get(measure)
        why = None
        if value is None:
            other = MEASURE_SYSTEM.get(measure)
            missing = [x for x in (system, other) if x and not step_ms(r["systems"].get(x), r["ratio_basis"])]
            why = "; ".join(f"{x}: {_status(r['systems'].get(x))}" for x in missing) or "no copy measured"
        elif sr.get("match") is False or sr.get("failed"):
            why = "wrong result" if sr.get("match") is False else "failed: " + sr["failed"][:80]
        checks.append({"workload": key, "system": system, "measure": measure, "at_least": need,
                       "value": value, "basis": r["ratio_basis"],
                       "met": None if value is None else (value >= need and why is None),
                       "note": why})
    results["done_when"] = checks


def _status(sr) -> str:
    if not sr:
        return "not run"
    if sr.get("skipped"):
        return "skipped: " + sr["skipped"]
    if sr.get("error"):
        return "error"
    return "ran"


def _ms(x):
    if x is None:
        return "–"
    return f"{x:.4g}"


def _x(x):
    return "–" if x is None else f"{x:.2f}×"


def _match(system: str, sr: dict) -> str:
    if sr.get("skipped"):
        return "skipped: " + sr["skipped"]
    if sr.get("error"):
        return "**error**"
    if sr.get("failed"):
        return "**failed** (" + sr["failed"][:60] + ")"
    if system == "eager":
        return "reference"
    m = sr.get("match")
    if m is None:
        return "no reference (eager did not run)"
    d = sr.get("max_abs_diff")
    return ("yes" if m else "**NO**") + ("" if d is None else f" (max abs diff {d:.2g})")


def _describe_measure(c: dict) -> str:
    m = c["measure"]
    if m == "copy_fraction":
        return f"≥ {100 * c['at_least']:.0f}% of copy bandwidth"
    other = {"vs_eager": "eager", "vs_inductor": "Inductor", "vs_inductor_ro": "Inductor reduce-overhead"}[m]
    return f"≥ {c['at_least']:g}× {other} ({c['basis']} time)"


def render_done_when(results: dict) -> str:
    """The issue's done-when, checked: a row per target and system, then the match count."""
    L = ["## Done when (issue 43)", ""]
    L.append("| workload | system | target | value | met |")
    L.append("|---|---|---|---:|---|")
    for c in results.get("done_when", []):
        v = c["value"]
        val = ("–" if v is None else f"{100 * v:.0f}%" if c["measure"] == "copy_fraction"
               else f"{v:.2f}×")
        met = {True: "yes", False: "**no**", None: "not measured"}[c["met"]]
        L.append(f"| {c['workload']} | {c['system']} | {_describe_measure(c)} | {val} | "
                 f"{met}{' (' + c['note'] + ')' if c['note'] else ''} |")
    ok = [sr.get("match") for r in results["workloads"].values() for s, sr in r["systems"].items()
          if s != "eager"]
    L.append("")
    L.append(f"Every workload matches CUDA eager: {ok.count(True)} system rows match, "
             f"{ok.count(False)} do not, {len(ok) - ok.count(True) - ok.count(False)} "
             "not compared (error, skipped or no reference).")
    L.append("")
    return "\n".join(L)


def render_markdown(results: dict) -> str:
    m = results["meta"]
    gpu_col = ("GPU ms/call (CUDA events)" if results["timer"] == "cuda_events"
               else "GPU ms/call (no CUDA events: dry run)")
    L = ["# lazyjit GPU bench", ""]
    L.append(f"- {m['date']}; commit `{m.get('git_commit') or '?'}`; {m.get('gpu') or 'no GPU'}"
             f"{' (CUDA ' + m['cuda'] + ')' if m.get('cuda') else ''}; torch {m.get('torch')}, "
             f"transformers {m.get('transformers')}; {m['cpu_model']} ({m['cpus_available']} CPUs)")
    mode = ("**dry run on the CPU** (`--device cpu`): wall timers, no CUDA events, tiny sizes"
            if results["device"] == "cpu" else "CUDA")
    c = results["config"]
    L.append(f"- Mode: {mode}; scale `{results['scale']}`; {c['warmup']} warm-up steps, then "
             f"{c['runs']}–{c['max_runs']} timed samples (at least {c['min_time_s']:g} s of them), "
             "medians")
    for note in results.get("notes", []):
        L.append(f"- {note}")
    L.append(f"- Time budget {results['budget_s']:.0f} s, used {results['total_wall_s']:.0f} s "
             "(worker start-up and every system's cold compile included)")
    L.append("")
    L.append(f"Columns: **{gpu_col}** = CUDA events around a sample of back-to-back calls, per "
             "call; **wall ms/call** = host `perf_counter` around the sample and a "
             "`torch.cuda.synchronize()`, per call; **× eager**, **× Inductor**, **× Inductor RO** = "
             "that system's time over this row's (> 1: this row is faster), on the workload's ratio "
             "basis: GPU time, or wall time where launches dominate (f, g) or no events were taken; "
             "**% of copy** = GB/s (compulsory bytes: inputs read once, outputs written once) over a "
             "device-to-device copy of the same bytes timed in the same run; **1st call s** = the "
             "first call's wall time, its cold compile included (the device route with "
             "`LAZYJIT_BACKGROUND_COMPILE=off`), not in the step times; **match** = outputs "
             "against CUDA eager's (`torch.testing.assert_close`, tolerances per dtype: "
             + ", ".join(f"{str(dt).replace('torch.', '')} rtol {t['rtol']:g} atol {t['atol']:g}"
                         for dt, t in TOLERANCE.items())
             + f", others exact; a training step's loss, and its parameters at rtol = atol = "
             f"{TRAIN_STATE_TOL['atol']:g}, after the first call and the warm-up steps).")
    L.append("")
    L.append("Systems: " + "; ".join(f"`{s}` = {SYSTEM_TITLES[s]}" for s in SYSTEMS) + ".")
    L.append("")

    L.append(render_done_when(results))
    for key, r in results["workloads"].items():
        s = r["systems"]
        bw = bool(r.get("bytes_moved"))
        L.append(f"## {key}")
        L.append("")
        L.append(f"{r['description']}; ratios from {r['ratio_basis']} time"
                 + (f"; {r['bytes_moved'] / 1e6:.3g} MB moved a call; copy "
                    f"{r['copy']['gbps']:.3g} GB/s" if bw and r.get("copy") else "") + ".")
        L.append("")
        if not s:
            L.append("Not run (yet).")
            L.append("")
            continue
        head = ["system", gpu_col, "wall ms/call", "× eager", "× Inductor", "× Inductor RO"]
        if bw:
            head += ["GB/s", "% of copy"]
        head += ["1st call s", "match"]
        L.append("| " + " | ".join(head) + " |")
        L.append("|---|" + "---:|" * (len(head) - 2) + "---|")
        for name in SYSTEMS:
            if name not in s:
                continue
            sr = s[name]
            row = [name, _ms(sr.get("median_gpu_ms")), _ms(sr.get("median_wall_ms")),
                   _x(sr.get("vs_eager")), _x(sr.get("vs_inductor")), _x(sr.get("vs_inductor_ro"))]
            if bw:
                row += ["–" if not sr.get("gbps") else f"{sr['gbps']:.3g}",
                        "–" if sr.get("copy_fraction") is None else f"{100 * sr['copy_fraction']:.0f}%"]
            row += ["–" if sr.get("first_call_ms") is None else f"{sr['first_call_ms'] / 1e3:.2f}",
                    _match(name, sr)]
            L.append("| " + " | ".join(row) + " |")
        L.append("")

    L.extend(errors_section(results, ok="match", why="match_error", mismatch="mismatch"))
    return "\n".join(L)
