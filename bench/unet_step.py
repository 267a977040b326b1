"""A denoising step of an SD-class UNet with cross-attention (issue 58, items 4
and 6): time, peak memory and the fraction of the GEMM floor reached.

Systems, each in a process of its own, the order alternating over rounds:
  eager           the UNet on CPU tensors
  device          unet.to("lazyjit"); each step synced (the output's .cpu())
  device_compile  unet.to("lazyjit") then unet.compile(backend="lazyjit",
                  fullgraph=True): the diffusers recipe on the device
  backend         unet.compile(backend="lazyjit", fullgraph=True) on CPU tensors
  inductor        unet.compile(fullgraph=True) (Inductor) on CPU tensors

The model is a diffusers UNet2DConditionModel built in code (random weights,
nothing downloads) with Stable Diffusion's block layout at reduced widths:
three down blocks (two with cross-attention transformers, the last plain),
the mirror up blocks and the cross-attention mid block, --channels wide at the
top (SD's: 320, 640, 1280, 1280), group norm of 32 groups, 8-wide attention
heads, a --context-dim text context of 77 tokens. One step is what a pipeline
runs per denoising step with classifier-free guidance: the UNet on a batch of 2
latents of --latent x --latent x 4 at one timestep, under torch.no_grad().

Reported per system, medians over rounds of per-process medians: the steady
step, the first (cold: each process has its own empty lazyjit and Inductor
caches) step, peak RSS, and the output's largest difference from
eager's. The row's limit is the step's GEMM floor (bench/gemm_floor.py: its
convolutions and matrix products at the best rate ATen's libraries reach on one
large product at the same thread count), measured in the eager process; **of floor** = floor /
steady step.

    .venv/bin/python bench/unet_step.py                       # 3 rounds, all systems
    .venv/bin/python bench/unet_step.py --systems eager,device_compile --rounds 1
    .venv/bin/python bench/unet_step.py --out bench/results/unet_step.json
"""
import argparse
import json
import statistics
import sys
import time

from gemm_floor import floor_line
from rounds import add_common_args, report, run_rounds, summarize

SYSTEMS = ("eager", "device", "device_compile", "backend", "inductor")


def vm_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def build(args, system):
    import torch
    from diffusers import UNet2DConditionModel

    c = args.channels
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=args.latent, in_channels=4, out_channels=4, layers_per_block=args.layers_per_block,
        block_out_channels=(c, 2 * c, 4 * c),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=args.context_dim, attention_head_dim=8, norm_num_groups=32).eval()
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(2, 4, args.latent, args.latent, generator=g)
    context = torch.randn(2, 77, args.context_dim, generator=g)
    t = torch.tensor([500, 500])
    if system in ("device", "device_compile"):
        import lazyjit  # noqa: F401
        unet = unet.to("lazyjit")
        latents, context, t = latents.to("lazyjit"), context.to("lazyjit"), t.to("lazyjit")
    if system in ("device_compile", "backend"):
        import lazyjit  # noqa: F401
        unet.compile(backend="lazyjit", fullgraph=True)
    if system == "inductor":
        unet.compile(fullgraph=True)

    def step():
        with torch.no_grad():
            return unet(latents, t, encoder_hidden_states=context).sample.cpu()

    return unet, step


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    _, step = build(args, args.worker)
    t0 = time.perf_counter()
    out = step()
    first_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(args.steps - 1):
        t0 = time.perf_counter()
        out = step()
        times.append((time.perf_counter() - t0) * 1e3)
    res = {"system": args.worker, "first_ms": first_ms, "step_ms": times, "peak_rss_mib": vm_mib("VmHWM"),
           "out_head": out.flatten()[:4096].tolist()}
    if args.worker == "eager":
        from gemm_floor import measure
        res.update(measure(step))
    if args.worker not in ("eager", "inductor"):
        import lazyjit
        m = lazyjit.metrics()
        res["counters"] = {k: v for k, v in m.items() if isinstance(v, (int, float))}
        if args.worker in ("device_compile", "backend"):
            res["dynamo"] = {k: v for k, v in lazyjit.dynamo.stats().items() if k != "eager_reasons"}
    print("RESULT " + json.dumps(res))


def table(a, loads, rows):
    """The results as markdown lines: a heading line, the floor, the table
    (also what bench/real_size.py puts in results/real_size.md)."""
    base = next((r for r in rows if r["system"] == "eager" and not r.get("failed")), None)
    c = a["channels"]
    out = [f"SD-class UNet denoising step: UNet2DConditionModel, channels {c}/{2 * c}/{4 * c}, "
           f"{a['layers_per_block']} layers a block, context 77 x {a['context_dim']}, batch 2 x 4 x {a['latent']} x "
           f"{a['latent']}, f32, no_grad, {a['steps']} steps a process, {a['threads']} threads, {a['rounds']} rounds; "
           f"load (1 min) {' '.join(f'{x:.2f}' for x in loads)}", ""]
    floor = base and base.get("floor_ms")
    if floor:
        out += [floor_line(base, "convolutions and products"), ""]
    out += ["| system | steady step ms | eager / system | of floor | ATen GEMMs alone / step | first step ms "
            "| peak RSS MiB | peak / eager | output max abs diff vs eager |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("failed"):
            out.append(f"| {r['system']} | failed | | | | | | | |")
            continue
        speed = f"{base['step_ms'] / r['step_ms']:.2f}x" if base else ""
        of = f"{floor / r['step_ms']:.0%}" if floor else ""
        alone = f"{base['aten_gemm_ms'] / r['step_ms']:.0%}" if floor else ""
        mem = f"{r['peak_rss_mib'] / base['peak_rss_mib']:.2f}x" if base else ""
        diff = "" if r["out_diff"] is None else f"{r['out_diff']:.1e}"
        out.append(f"| {r['system']} | {r['step_ms']:.1f} | {speed} | {of} | {alone} | {r['first_ms']:.0f} "
                   f"| {r['peak_rss_mib']:.0f} | {mem} | {diff} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, SYSTEMS, steps=6)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--layers-per-block", type=int, default=2)
    ap.add_argument("--context-dim", type=int, default=384)
    ap.add_argument("--latent", type=int, default=32)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    systems = args.systems.split(",")

    def progress(r, s, res):
        print(f"round {r} {s:15s} first {res['first_ms']:8.0f} ms  steady {statistics.median(res['step_ms']):7.1f} ms"
              f"  peak {res['peak_rss_mib']:6.0f} MiB  load {res['load']:.2f}", file=sys.stderr, flush=True)

    flags = [f"--{k.replace('_', '-')}={getattr(args, k)}"
             for k in ("channels", "layers_per_block", "context_dim", "latent", "steps", "threads")]
    runs, loads = run_rounds(__file__, systems, args.rounds, flags, progress=progress)

    rows = summarize(systems, runs, ("first_ms", "peak_rss_mib"), ("out_diff", "out_head"),
                     extra=lambda s, rs: {"dynamo": rs[-1].get("dynamo")})
    report(args, loads, rows, runs, table, drop=("out_head",))  # 4,096 outputs a run


if __name__ == "__main__":
    main()
