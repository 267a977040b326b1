"""A diffusers pipeline on lazyjit, as the articles' recipe has it: a pipeline
built from configs (a small DiT transformer and VAE, random weights: nothing
downloads), moved with `pipe.to("lazyjit")`, its transformer compiled with
`pipe.transformer.compile(backend="lazyjit", fullgraph=True, dynamic=False)`:
each denoising step is one call of one captured program on the device's tensors
(nothing recorded op by op), the scheduler and the VAE recorded around it.

    python examples/diffusers_pipeline.py            # each system in its own process
    python examples/diffusers_pipeline.py --system lazyjit

Systems: eager (CPU tensors), lazyjit_device (`pipe.to("lazyjit")` alone),
lazyjit (the device plus the compile recipe) and inductor. Each runs the same
seeded pipeline: two warm-up calls, then `lazyjit.wait_for_compiles()` (a new
graph first runs op by op while its program compiles in the background: timing
before it would time that), then timed calls; the table gives denoising steps
per second (the median call's steps over its wall time, VAE decode included),
the median call's CPU time (`time.process_time()`, all the process's threads:
what other work on a busy machine disturbs least),
the images' largest difference from eager's (lazyjit's must stay within float32
rounding, 1e-4) and, for the compile recipe, lazyjit.dynamo.stats()'s captures
and captured-program calls per pipeline call (one per denoising step).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

STEPS = 8  # denoising steps per call


def build_pipeline():
    import diffusers
    import torch

    torch.manual_seed(0)
    transformer = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
        sample_size=8, patch_size=2, num_embeds_ada_norm=1000, norm_num_groups=32)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=32, sample_size=16)
    scheduler = diffusers.DDIMScheduler()
    return diffusers.DiTPipeline(transformer=transformer, vae=vae, scheduler=scheduler,
                                 id2label={0: "zero", 1: "one"}).to(dtype=torch.float32)


def run_system(system: str, calls: int, threads: int = 0) -> dict:
    import torch

    torch.set_num_threads(threads or max(1, os.cpu_count() or 1))
    pipe = build_pipeline()
    if system in ("lazyjit", "lazyjit_device"):
        pipe.to("lazyjit")
    if system == "lazyjit":
        pipe.transformer.compile(backend="lazyjit", fullgraph=True, dynamic=False)
    elif system == "inductor":
        pipe.transformer.compile(backend="inductor", fullgraph=True, dynamic=False)
    elif system not in ("eager", "lazyjit_device"):
        raise SystemExit(f"unknown system {system!r}")

    def settle():
        if system.startswith("lazyjit"):
            import lazyjit
            lazyjit.wait_for_compiles()

    def call():
        g = torch.Generator(device="cpu").manual_seed(0)
        return pipe(class_labels=[1], num_inference_steps=STEPS, generator=g, output_type="np").images

    images = call()  # warm-up: compiles (lazyjit: programs compile in the background meanwhile)
    settle()
    images = call()
    settle()
    stats = None
    if system == "lazyjit":
        import lazyjit.dynamo
        lazyjit.dynamo.reset_stats()
    times, cpu = [], []
    for _ in range(calls):
        c0 = time.process_time()
        t0 = time.perf_counter()
        images = call()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if system == "lazyjit":
        s = lazyjit.dynamo.stats()
        stats = {"captures": s["captures"], "calls_per_call": s["device_calls"] / calls,
                 "eager_graphs": s["eager_graphs"]}
    return {"system": system, "steps_per_s": STEPS / statistics.median(times),
            "cpu_s_per_call": statistics.median(cpu), "images": images.tolist(),
            "stats": stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=["eager", "lazyjit_device", "lazyjit", "inductor"])
    ap.add_argument("--calls", type=int, default=3, help="timed calls per system (the median is reported)")
    ap.add_argument("--systems", default="eager,lazyjit_device,lazyjit,inductor")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per system (default: every core); 1 on a machine busy with other "
                         "work, where OpenMP's waiting threads spin against it")
    args = ap.parse_args()
    if args.system:
        print(json.dumps(run_system(args.system, args.calls, args.threads)))
        return
    import numpy as np

    results = {}
    for system in args.systems.split(","):
        p = subprocess.run([sys.executable, __file__, "--system", system, "--calls", str(args.calls),
                            "--threads", str(args.threads)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{system} failed:\n{p.stderr[-3000:]}")
        results[system] = json.loads(p.stdout.strip().splitlines()[-1])
    eager = np.array(results["eager"]["images"])
    print(f"DiT pipeline from configs, {STEPS} denoising steps a call, median of {args.calls} calls, "
          f"each system in its own process, {args.threads or 'all'} threads")
    print(f"{'system':>14} {'steps/s':>8} {'vs eager':>8} {'CPU s/call':>10} {'vs eager':>8} "
          f"{'max |image - eager|':>20}  captured calls per call")
    worst = 0.0
    for system, r in results.items():
        diff = float(np.abs(np.array(r["images"]) - eager).max())
        if system.startswith("lazyjit"):
            worst = max(worst, diff)
        s = r.get("stats")
        counters = (f"{s['calls_per_call']:g} ({s['captures']} captures while timed, {s['eager_graphs']} run by ATen)"
                    if s else "-")
        cpu_ratio = results["eager"]["cpu_s_per_call"] / r["cpu_s_per_call"]
        print(f"{system:>14} {r['steps_per_s']:>8.2f} {r['steps_per_s'] / results['eager']['steps_per_s']:>7.2f}x "
              f"{r['cpu_s_per_call']:>10.3f} {cpu_ratio:>7.2f}x {diff:>20.2e}  {counters}")
    if worst > 1e-4:
        raise SystemExit(f"lazyjit's images differ from eager's by {worst:.2e}")


if __name__ == "__main__":
    main()
