"""The report: the machine's description (``machine_info``), speedups and target
checks (``summarize``) and the markdown tables (``render_markdown``) of a results
JSON. bench/run.py is the command line (``--render`` re-renders a JSON).
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path

import torch

from workloads import DEVICE_COMPILE_TARGETS, REPO, SMALL_OPS_40_COUNT, SMALL_OPS_COUNT, SYSTEMS, TARGETS


def machine_info() -> dict:
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ""
    try:
        flags = next(l for l in Path("/proc/cpuinfo").read_text().splitlines()
                     if l.startswith("flags"))
    except (OSError, StopIteration):
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f" {f}" in flags]
    mem_gib = None
    try:
        mem_gib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
                      .group(1)) / 1024 / 1024
    except (OSError, AttributeError):
        pass

    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:
            return ""

    try:
        import transformers
        tf_version = transformers.__version__
    except Exception:
        tf_version = None
    return {
        "cpu_model": model,
        "cpu_isa": isa,
        "logical_cpus": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": mem_gib,
        "torch": torch.__version__,
        "transformers": tf_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "lazyjit_num_threads_env": os.environ.get("LAZYJIT_NUM_THREADS"),
        "loadavg_start": os.getloadavg(),
    }


def system_failed(sr: dict) -> bool:
    """The system raised, gave a wrong result, or (lazyjit_compile) ran graphs through
    ATen instead of lazyjit."""
    return bool(sr.get("error") or sr.get("correct") is False or sr.get("failed"))


def summarize(results: dict) -> None:
    """Speedups, bandwidth fractions, target checks (in place)."""
    triad = results["triad"]["gbps_best"] if results.get("triad") else None
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        lz = s.get("lazyjit", {}).get("median_ms")
        eg = s.get("eager", {}).get("median_ms")
        ind = s.get("inductor", {}).get("median_ms")
        lcs = s.get("lazyjit_compile", {})
        lc = lcs.get("median_ms") if not system_failed(lcs) else None
        sm = {}
        sm["speedup_vs_eager"] = eg / lz if (eg and lz) else None
        sm["speedup_vs_inductor"] = ind / lz if (ind and lz) else None
        sm["inductor_vs_eager"] = eg / ind if (eg and ind) else None
        # torch.compile(backend="lazyjit"): None when it failed (error, mismatch, or
        # graphs run through ATen), its time is still in systems.lazyjit_compile
        sm["compile_speedup_vs_eager"] = eg / lc if (eg and lc) else None
        sm["compile_speedup_vs_inductor"] = ind / lc if (ind and lc) else None
        sm["lazyjit_compile_failed"] = system_failed(lcs) if lcs else None
        if triad:
            for name, sr in s.items():
                if sr.get("gbps"):
                    sr["fraction_of_triad"] = sr["gbps"] / triad
        tg = TARGETS.get(key, {})
        tsys = tg.get("systems", {})
        speedups = {"lazyjit": (sm["speedup_vs_eager"], sm["speedup_vs_inductor"]),
                    "lazyjit_compile": (sm["compile_speedup_vs_eager"],
                                        sm["compile_speedup_vs_inductor"])}
        checks = {}
        if "vs_eager" in tg:
            x = speedups[tsys.get("vs_eager", "lazyjit")][0]
            checks["vs_eager"] = x is not None and x >= tg["vs_eager"]
        if "vs_inductor" in tg:
            x = speedups[tsys.get("vs_inductor", "lazyjit")][1]
            checks["vs_inductor"] = x is not None and x >= tg["vs_inductor"]
        if "bandwidth" in tg:
            f = s.get(tsys.get("bandwidth", "lazyjit"), {}).get("fraction_of_triad")
            checks["bandwidth"] = f is not None and f >= tg["bandwidth"]
        checks["correct"] = s.get("lazyjit", {}).get("correct") is True
        for x in sorted(set(tsys.values()) - {"lazyjit"}):
            checks[f"correct_{x}"] = (s.get(x, {}).get("correct") is True
                                      and not system_failed(s.get(x, {})))
        # The same speedup targets met by each lazyjit system (the device and
        # torch.compile(backend="lazyjit")), shown beside the check itself.
        by_system = {}
        for name, (ve, vi) in speedups.items():
            by_system[name] = {c: x is not None and x >= tg[c]
                               for c, x in (("vs_eager", ve), ("vs_inductor", vi)) if c in tg}
        sm["targets"] = tg
        sm["target_checks"] = checks
        # torch.compile(backend="lazyjit") on the device (issue 57), its own checks
        # (DEVICE_COMPILE_TARGETS), not part of targets_met
        dcs = s.get("lazyjit_device_compile", {})
        if dcs:
            dc = dcs.get("median_ms") if not system_failed(dcs) else None
            lcm = lcs.get("median_ms") if (lcs and not system_failed(lcs)) else None
            sm["device_compile_failed"] = system_failed(dcs)
            sm["device_compile_speedup_vs_eager"] = eg / dc if (eg and dc) else None
            sm["device_compile_speedup_vs_lazyjit"] = lz / dc if (lz and dc) else None
            sm["device_compile_speedup_vs_lazyjit_compile"] = lcm / dc if (lcm and dc) else None
            dtg = DEVICE_COMPILE_TARGETS.get(key, {})
            dx = {"vs_eager": sm["device_compile_speedup_vs_eager"],
                  "vs_lazyjit_compile": sm["device_compile_speedup_vs_lazyjit_compile"]}
            sm["device_compile_targets"] = dtg
            sm["device_compile_target_checks"] = {c: dx[c] is not None and dx[c] >= t
                                                  for c, t in dtg.items()}
        sm["target_checks_by_system"] = by_system
        sm["targets_met"] = all(checks.values()) if checks else None
        r["summary"] = sm


def _threads(config, machine) -> str:
    """The workers' torch threads: --threads when given (set after machine_info read
    torch's default), else torch's default."""
    t = config.get("threads")
    return f"{t} (--threads {t})" if t else f"{machine['torch_threads']}"


def _f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def _ms(x):
    if x is None:
        return "–"
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def _corr(sr):
    if not sr:
        return "–"
    if sr.get("error"):
        return "ERROR"
    if sr.get("failed"):
        return "FAIL (fallback)"
    c = sr.get("correct")
    if c is None:
        return "–"
    return "pass" if c else "FAIL"


def render_markdown(results: dict) -> str:
    m = results["machine"]
    tr = results.get("triad")
    tc = results.get("tracing")
    L = []
    L.append("# lazyjit benchmark results")
    L.append("")
    L.append(f"- Date: {m['date']}; commit `{m['git_commit']}`"
             f"{' (dirty tree)' if m['git_dirty'] else ''}; scale `{results['config']['scale']}`"
             f", {results['config']['warmup']} warm-up + {results['config']['runs']} timed runs"
             " per system")
    L.append(f"- CPU: {m['cpu_model']} ({m['cpus_available']} CPUs available, ISA "
             f"{', '.join(m['cpu_isa'])}); torch threads "
             f"{_threads(results['config'], m)}; "
             f"memory {_f(m['memory_gib'], '{:.0f}')} GiB")
    L.append(f"- torch {m['torch']}, transformers {m['transformers']}, Python {m['python']}")
    la0, la1 = m.get("loadavg_start"), m.get("loadavg_end")
    if la0:
        busy = max(la0[0], (la1 or la0)[0]) > 0.5 * m["cpus_available"]
        L.append(f"- Load average (1 min) at start {la0[0]:.2f}, at end "
                 f"{_f(la1[0] if la1 else None)}"
                 + (" — **the machine was shared with other work during the run: "
                    "expect noise, and OpenMP-threaded code (eager, Inductor, ATen calls) "
                    "suffers most from oversubscription**" if busy else ""))
    if results["config"].get("competing_load"):
        L.append(f"- **Competing load during the workloads: {results['config']['competing_load']}** "
                 "(started by `--load`; the triad and tracing figures are taken before it starts)")
    if tr:
        L.append(f"- Measured bandwidth (triad a = b + s·c, {tr['array_mib']:.0f} MiB arrays, "
                 f"best of {tr['reps']}): **{tr['gbps_best']:.1f} GB/s** "
                 f"(1 thread {tr['gbps_1_thread']:.1f}, {tr['threads_all_threads']} threads "
                 f"{tr['gbps_all_threads']:.1f})")
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("Times are medians of the timed runs (ms per step; `f_small_ops`: per call, "
             "each timed sample loops many calls). lazyjit = the lazyjit device "
             "(`.to(\"lazyjit\")`, call + `lazyjit.sync()`); lazyjit_compile = "
             "`torch.compile(fn, backend=\"lazyjit\")` on CPU tensors. Speedups are ratios "
             "of medians: `eager/X` and `inductor/X` (> 1 means X is faster). 1st call = "
             "first step including compilation (Inductor, lazyjit_compile); lazyjit 1st step "
             "(bg compile) = the device route's first step as a user sees it by default: run "
             "op by op while its programs compile in the background, compile not included. "
             "min = fastest timed step (eager / lazyjit / "
             "inductor / lazyjit_compile), less sensitive to a busy machine. A failed "
             "lazyjit_compile (error, wrong result, or graphs run through ATen: "
             "`lazyjit.dynamo.stats()[\"eager_reasons\"]`) shows `failed` and no ratios. "
             "lazyjit_device_compile (`torch.compile(fn, backend=\"lazyjit\")` on the "
             "device), when it ran, has tables of its own below.")
    L.append("")
    L.append("| workload | eager ms | lazyjit ms | inductor ms | lazyjit_compile ms | "
             "eager/lazyjit | inductor/lazyjit | eager/lazyjit_compile | "
             "inductor/lazyjit_compile | lazyjit 1st step ms (bg compile) | inductor 1st call ms | "
             "lazyjit_compile 1st call ms | lazyjit correct | inductor correct | "
             "lazyjit_compile correct | min ms e / l / i / lc | targets |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|:-:|:-:|---:|---|")
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        e, l, i = s.get("eager", {}), s.get("lazyjit", {}), s.get("inductor", {})
        lc = s.get("lazyjit_compile", {})
        sm = r.get("summary", {})
        chk = sm.get("target_checks", {})
        tg = sm.get("targets", {})
        tsys = tg.get("systems", {})
        who = lambda c: "" if tsys.get(c, "lazyjit") == "lazyjit" else f" ({tsys[c]})"  # noqa: E731
        by_sys = sm.get("target_checks_by_system", {})

        def other(c):  # the other lazyjit system's result on the same target, if it ran
            o = "lazyjit_compile" if tsys.get(c, "lazyjit") == "lazyjit" else "lazyjit"
            if o not in s or system_failed(s[o]) or c not in by_sys.get(o, {}):
                return ""
            return f" [{'compile' if o == 'lazyjit_compile' else 'device'} {'✓' if by_sys[o][c] else '✗'}]"
        parts = []
        if "vs_eager" in tg:
            parts.append(f"≥{tg['vs_eager']:g}× eager{who('vs_eager')} "
                         f"{'✓' if chk.get('vs_eager') else '✗'}{other('vs_eager')}")
        if "vs_inductor" in tg:
            parts.append(f"≥{tg['vs_inductor']:g}× ind.{who('vs_inductor')} "
                         f"{'✓' if chk.get('vs_inductor') else '✗'}{other('vs_inductor')}")
        if "bandwidth" in tg:
            parts.append(f"≥{100 * tg['bandwidth']:.0f}% BW{who('bandwidth')} "
                         f"{'✓' if chk.get('bandwidth') else '✗'}")
        if lc.get("error"):
            lc_ms = "**error**"
        elif lc and system_failed(lc):
            lc_ms = f"**failed** ({_ms(lc.get('median_ms'))})"
        else:
            lc_ms = _ms(lc.get("median_ms"))
        L.append(
            f"| {key} | {_ms(e.get('median_ms'))} | "
            f"{'**error**' if l.get('error') else _ms(l.get('median_ms'))} | "
            f"{'**error**' if i.get('error') else _ms(i.get('median_ms'))} | {lc_ms} | "
            f"{_f(sm.get('speedup_vs_eager'), '{:.2f}×')} | "
            f"{_f(sm.get('speedup_vs_inductor'), '{:.2f}×')} | "
            f"{_f(sm.get('compile_speedup_vs_eager'), '{:.2f}×')} | "
            f"{_f(sm.get('compile_speedup_vs_inductor'), '{:.2f}×')} | "
            f"{_ms(l.get('first_call_ms'))} | {_ms(i.get('first_call_ms'))} | "
            f"{_ms(lc.get('first_call_ms'))} | "
            f"{_corr(l)} | {_corr(i)} | {_corr(lc)} | "
            f"{' / '.join(_ms(x.get('min_ms')) for x in (e, l, i, lc))} | {'; '.join(parts)} |")
    L.append("")
    L.append("Workloads:")
    for key, r in results["workloads"].items():
        L.append(f"- `{key}`: {r.get('description', '')}")
    L.append("")

    if any("lazyjit_compile" in r.get("systems", {}) for r in results["workloads"].values()):
        L.append('## torch.compile(backend="lazyjit") counters')
        L.append("")
        L.append("From `lazyjit.dynamo.stats()` and `lazyjit.metrics()`, over the whole phase "
                 "(build, first call, warm-up, timed): graphs = graphs handed to lazyjit "
                 "(Dynamo's, or AOTAutograd's forward/backward), captures = graph captures (steady = during the timed steps, "
                 "should be 0), calls/call = captured-program runs per workload call in the "
                 "timed steps, eager graphs = graphs run through ATen (a failure), "
                 "compiles / llvm compiles / disk hits = `lazyjit.metrics()`'s counters "
                 "(disk hits 0: the first call was a cold compile); graph breaks = "
                 "Dynamo's, for Inductor and lazyjit_compile.")
        L.append("")
        L.append("| workload | graphs | captures (steady) | calls/call | eager graphs | "
                 "compiles | llvm compiles | disk hits | compile ms | graph breaks ind. / lc |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key, r in results["workloads"].items():
            s = r.get("systems", {})
            st = s.get("lazyjit_compile", {}).get("lazyjit_compile")
            if not st:
                L.append(f"| {key} | " + " | ".join(["–"] * 9) + " |")
                continue
            tot, sd = st["total"], st["steady"]
            gb = " / ".join(str(s.get(x, {}).get("dynamo", {}).get("graph_breaks", "–"))
                            for x in ("inductor", "lazyjit_compile"))
            L.append(f"| {key} | {tot['graphs']} | {tot['captures']} ({sd['captures']}) | "
                     f"{st['steady_calls_per_call']:.3g} | {tot['eager_graphs']} | "
                     f"{tot.get('compiles', '–')} | {tot.get('llvm_compiles', '–')} | "
                     f"{tot.get('disk_hits', '–')} | "
                     f"{_ms(tot.get('compile_ms'))} | {gb} |")
        L.append("")

    L.extend(device_compile_section(results))

    L.append("## Bandwidth (memory-bound workloads)")
    L.append("")
    L.append("GB/s = compulsory bytes (inputs read once + output written once) / median time; "
             "% = of the measured triad bandwidth (DRAM: its arrays exceed the L3). A working "
             "set that fits in the last-level cache can exceed 100%.")
    L.append("")
    L.append("| workload | MB moved | " + " | ".join(f"{x} GB/s" for x in SYSTEMS) + " | "
             + " | ".join(f"{x} %" for x in SYSTEMS) + " |")
    L.append("|---|---:|" + "---:|" * (2 * len(SYSTEMS)))
    for key, r in results["workloads"].items():
        if not r.get("bytes_moved"):
            continue
        s = r.get("systems", {})
        row = [key, f"{r['bytes_moved'] / 1e6:.1f}"]
        row += [_f(s.get(x, {}).get("gbps"), "{:.1f}") for x in SYSTEMS]
        row += [_f(s.get(x, {}).get("fraction_of_triad"), "{:.0%}") for x in SYSTEMS]
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    L.append("## Peak resident memory (MiB)")
    L.append("")
    L.append("Each workload runs in its own process; the peak-RSS counter is reset before "
             "each system, so the numbers are per system: peak RSS during that system's "
             "phase (growth over the RSS at the start of the phase in parentheses). The "
             "process also holds eager's reference outputs during the later phases.")
    L.append("")
    L.append("| workload | " + " | ".join(SYSTEMS) + " |")
    L.append("|---|" + "---:|" * len(SYSTEMS))
    for key, r in results["workloads"].items():
        s = r.get("systems", {})
        cells = []
        for x in SYSTEMS:
            sr = s.get(x, {})
            cells.append("–" if sr.get("peak_rss_mib") is None else
                         f"{sr['peak_rss_mib']:.0f} ({round(sr['peak_rss_delta_mib']):+d})")
        L.append(f"| {key} | " + " | ".join(cells) + " |")
    L.append("")

    L.append("## Where lazyjit's time goes (per steady-state step)")
    L.append("")
    L.append("trace = Python call of the workload (recording ops, no execution); "
             "sync = `lazyjit.sync()` (cache lookup + run); execute = the executor's own "
             "timer from `lazyjit.metrics()`; sync overhead = sync − execute. "
             "ops/step = `ops_traced` per step. compile ms / 50 ops = the first call's compile "
             "time per 50 ops traced (a graph of fewer ops counts as 50: the issue's bound is "
             "100 ms per 50 ops).")
    L.append("")
    L.append("| workload | step ms | trace ms | sync ms | execute ms | sync overhead ms | "
             "ops/step | trace µs/op | graphs/step | compiles (steady) | compile ms done at 1st step | "
             "compile ms / 50 ops |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, r in results["workloads"].items():
        l = r.get("systems", {}).get("lazyjit", {})
        ps = l.get("lazyjit_per_step")
        if not ps:
            L.append(f"| {key} | " + " | ".join(["–"] * 11) + " |")
            continue
        fc = l.get("lazyjit_first", {})
        L.append(f"| {key} | {_ms(l['median_ms'])} | {_ms(ps['trace_ms'])} | "
                 f"{_ms(ps['sync_ms'])} | {_ms(ps['execute_ms'])} | "
                 f"{_ms(ps['sync_overhead_ms'])} | {ps['ops_traced']:.0f} | "
                 f"{_f(ps['trace_us_per_op'], '{:.1f}')} | {ps['graphs_executed']:.2g} | "
                 f"{l['lazyjit_steady']['compiles']} | {_ms(fc.get('compile_ms'))} | "
                 f"{_ms(fc['compile_ms'] * 50 / max(ps['ops_traced'], 50) if fc.get('compile_ms') else None)} |")
    L.append("")
    if tc:
        L.append("## Tracing cost per op")
        L.append("")
        if tc.get("error"):
            L.append(f"lazyjit tracing benchmark failed: `{tc['error']}`")
        else:
            L.append(f"A chain of {tc['ops_per_rep']} small elementwise ops (16 elements, "
                     "mul/add/tanh/sub) recorded without syncing, median of "
                     f"{tc['reps']} repetitions:")
            L.append("")
            L.append("| device | µs/op |")
            L.append("|---|---:|")
            L.append(f"| lazyjit (record only) | {tc['lazyjit_us_per_op']:.2f} |")
            L.append(f"| eager CPU (Python + dispatcher + runs a 16-element kernel) | "
                     f"{tc['cpu_us_per_op']:.2f} |")
            L.append(f"| lazyjit − eager (≈ recording cost beyond PyTorch's per-op overhead) | "
                     f"{tc['lazyjit_minus_eager_us_per_op']:.2f} |")
            L.append("")
            L.append(f"Sync of the recorded chain: first (compile) "
                     f"{tc['lazyjit_first_sync_ms']:.1f} ms, cached {tc['lazyjit_sync_ms']:.2f} ms.")
        L.append("")

    L.extend(errors_section(results))
    return "\n".join(L)


def device_compile_section(results) -> list:
    """The lazyjit_device_compile tables (none when that system did not run): times
    against eager, the device and torch.compile(backend="lazyjit") on CPU tensors,
    issue 57's targets, and the counters."""
    rows = [(k, r) for k, r in results["workloads"].items()
            if "lazyjit_device_compile" in r.get("systems", {})]
    if not rows:
        return []
    L = ['## torch.compile(backend="lazyjit") on the lazyjit device (lazyjit_device_compile)', ""]
    L.append("lazyjit_device_compile = the workload built for the lazyjit device as the lazyjit "
             "system's (`.to(\"lazyjit\")`), then `torch.compile(fn, backend=\"lazyjit\")` "
             "(g_decode: `model.forward` compiled, `generate` called on device ids); each call "
             "followed by `lazyjit.sync()`, timed after `lazyjit.wait_for_compiles()` following "
             "the warm-up. ms = medians per call, as above (g_decode: per `generate` call); "
             "`X/ldc` = X's median over lazyjit_device_compile's (> 1: the device compile is "
             "faster). Issue 57's targets: g_decode at least as fast as lazyjit_compile "
             "(the backend on CPU tensors); \"40 small ops\" at least 5× eager, checked on "
             f"f40_small_ops ({SMALL_OPS_40_COUNT} ops) and on f_small_ops ({SMALL_OPS_COUNT} "
             "ops: the same chain less its last 10, so its per-call overhead weighs more).")
    L.append("")
    L.append("| workload | eager ms | lazyjit ms | lazyjit_compile ms | lazyjit_device_compile ms | "
             "eager/ldc | lazyjit/ldc | lazyjit_compile/ldc | ldc 1st call ms | ldc correct | "
             "min ms e / l / lc / ldc | issue 57 target |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---|")
    names = {"vs_eager": "eager", "vs_lazyjit_compile": "lazyjit_compile"}
    for key, r in rows:
        s = r["systems"]
        e, l, lc, d = (s.get(x, {}) for x in ("eager", "lazyjit", "lazyjit_compile",
                                              "lazyjit_device_compile"))
        sm = r.get("summary", {})
        if d.get("error"):
            d_ms = "**error**"
        elif system_failed(d):
            d_ms = f"**failed** ({_ms(d.get('median_ms'))})"
        else:
            d_ms = _ms(d.get("median_ms"))
        chk = sm.get("device_compile_target_checks", {})
        tg = sm.get("device_compile_targets", {})
        target = "; ".join(f"≥{t:g}× {names[c]} {'✓' if chk.get(c) else '✗'}" for c, t in tg.items())
        L.append(f"| {key} | {_ms(e.get('median_ms'))} | {_ms(l.get('median_ms'))} | "
                 f"{_ms(lc.get('median_ms'))} | {d_ms} | "
                 f"{_f(sm.get('device_compile_speedup_vs_eager'), '{:.2f}×')} | "
                 f"{_f(sm.get('device_compile_speedup_vs_lazyjit'), '{:.2f}×')} | "
                 f"{_f(sm.get('device_compile_speedup_vs_lazyjit_compile'), '{:.2f}×')} | "
                 f"{_ms(d.get('first_call_ms'))} | {_corr(d)} | "
                 f"{' / '.join(_ms(x.get('min_ms')) for x in (e, l, lc, d))} | {target or '–'} |")
    L.append("")
    L.append("The same calls in CPU time (`time.process_time()` per call, all of the process's "
             "threads, medians): what other work on a shared machine disturbs least (a "
             "process waiting for a core is not charged), beside the wall-clock medians above. "
             "`X/ldc` as above.")
    L.append("")
    L.append("| workload | eager CPU ms | lazyjit_compile CPU ms | lazyjit_device_compile CPU ms | "
             "eager/ldc (CPU) | lazyjit_compile/ldc (CPU) |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for key, r in rows:
        s = r["systems"]
        e, lc, d = (s.get(x, {}).get("cpu_median_ms") for x in ("eager", "lazyjit_compile",
                                                                  "lazyjit_device_compile"))
        ratio = lambda a, b: _f(a / b if a and b else None, "{:.2f}×")  # noqa: E731
        L.append(f"| {key} | {_ms(e)} | {_ms(lc)} | {_ms(d)} | {ratio(e, d)} | {ratio(lc, d)} |")
    L.append("")
    L.append("Counters of lazyjit_device_compile, from `lazyjit.dynamo.stats()` and "
             "`lazyjit.metrics()`: graphs, captures (steady = during the timed steps, should "
             "be 0), eager graphs (graphs that could not be captured and ran recorded op by "
             "op: a failure), compiles and compile ms over the whole phase; per call in the "
             "timed steps: device calls (captured programs run on lazyjit tensors' data), "
             "ops traced (ops recorded op by op: what the workload does outside the compiled "
             "graphs, e.g. generate's own loop), syncs and programs executed "
             "(`graphs_executed`, device calls included); graph breaks = Dynamo's.")
    L.append("")
    L.append("| workload | graphs | captures (steady) | eager graphs | device calls/call | "
             "ops traced/call | syncs/call | programs/call | compiles | llvm compiles | "
             "compile ms | graph breaks |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, r in rows:
        d = r["systems"]["lazyjit_device_compile"]
        st, ps = d.get("lazyjit_compile"), d.get("lazyjit_per_step")
        if not st or not ps:
            L.append(f"| {key} | " + " | ".join(["–"] * 11) + " |")
            continue
        tot, sd = st["total"], st["steady"]
        L.append(f"| {key} | {tot['graphs']} | {tot['captures']} ({sd['captures']}) | "
                 f"{tot['eager_graphs']} | {st['steady_device_calls_per_call']:.3g} | "
                 f"{ps['ops_traced']:.4g} | {ps['syncs']:.3g} | {ps['graphs_executed']:.3g} | "
                 f"{tot.get('compiles', '–')} | {tot.get('llvm_compiles', '–')} | "
                 f"{_ms(tot.get('compile_ms'))} | "
                 f"{d.get('dynamo', {}).get('graph_breaks', '–')} |")
    L.append("")
    return L


def errors_section(results, ok="correct", why="correct_error", mismatch="output mismatch"):
    """The "Errors and mismatches" lines of a report (none when there are none):
    per workload and system, an error, a result that did not match (`ok` False,
    `why` saying how) or a failure. The GPU bench calls it with its own keys."""
    errs = []
    for key, r in results["workloads"].items():
        for x, sr in r.get("systems", {}).items():
            if sr.get("error"):
                errs.append(f"- `{key}` / {x}: `{sr['error'][:600]}`"
                            + (f" (at {sr['error_where']})" if sr.get("error_where") else ""))
            elif sr.get(ok) is False:
                errs.append(f"- `{key}` / {x}: {mismatch}: `{(sr.get(why) or '')[:600]}`")
            if sr.get("failed"):
                errs.append(f"- `{key}` / {x}: failed: `{sr['failed'][:600]}`")
    if not errs:
        return []
    return ["## Errors and mismatches", ""] + [e.replace("\n", " ") for e in errs] + [""]
