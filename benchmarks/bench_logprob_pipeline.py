"""Log-prob pipeline vs stock diffusers `__call__`: images/s on the same pipeline, batch and steps.

The log-prob pipeline does the same network work as the stock pipeline (same CFG, same steps) plus the
bookkeeping of FlowGRPO: SDE noise in the window, per-step log-probs, stored latents, trajectory TensorDict.
Target: ratio (log-prob images/s / stock images/s) >= 0.9.

CPU (tiny random model):
    python benchmarks/bench_logprob_pipeline.py
GPU (one H200, mid-size random Qwen-Image transformer 16 layers x 12 heads x 128, bf16, 512x512):
    python benchmarks/bench_logprob_pipeline.py --device cuda --preset mid
FLUX.1 / Wan 2.1 (issue 33): a `trainer_workload_parts.PRESETS` workload (model, size, frames, steps, guidance and
text length from it; target >= 0.95):
    python benchmarks/bench_logprob_pipeline.py --device cuda --preset flux        # or wan
    python benchmarks/bench_logprob_pipeline.py --preset tiny-flux --repeats 2     # CPU, or tiny-wan
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import torch
from diffusers import FluxPipeline, QwenImagePipeline, StableDiffusion3Pipeline, WanPipeline

from verl_omni.pipelines import (
    DiffusionSamplingConfig,
    FluxPipelineWithLogProb,
    QwenImagePipelineWithLogProb,
    StableDiffusion3PipelineWithLogProb,
    WanPipelineWithLogProb,
    make_generators,
)
from verl_omni.pipelines.load import load_pipeline
from verl_omni.testing import build_tiny_pipeline

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # sibling modules, when run as a script
from trainer_workload_parts import PRESETS as WORKLOADS
from trainer_workload_parts import build_pipeline_folder

TINY_PRESETS = ["tiny", "small", "mid"]  # `build_tiny_pipeline` sizes of --model
MODEL_PRESETS = sorted(k for k, w in WORKLOADS.items() if w.model in ("flux", "wan"))  # whole workloads (issue 33)
LOGPROB = {"qwen_image": QwenImagePipelineWithLogProb, "sd3": StableDiffusion3PipelineWithLogProb,
           "flux": FluxPipelineWithLogProb, "wan": WanPipelineWithLogProb}  # fmt: skip
STOCK = {"qwen_image": QwenImagePipeline, "sd3": StableDiffusion3Pipeline, "flux": FluxPipeline, "wan": WanPipeline}

PROMPTS = [
    "a photo of a cat sitting on a red chair",
    "a watercolor painting of a mountain lake at sunrise",
    "an astronaut riding a horse on the moon",
    "a bowl of fruit with apples, oranges and bananas",
    "the word HELLO written in neon letters on a brick wall",
    "two dogs playing in the snow, high resolution, detailed",
    "a red sports car parked in front of a glass building",
    "a lighthouse on a cliff during a storm",
]


def machine_name(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {torch.get_num_threads()} threads (torch {torch.__version__})"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--model", default="qwen_image", choices=["qwen_image", "sd3"], help="with a tiny/small/mid --preset"
    )
    ap.add_argument(
        "--preset", default="tiny", choices=TINY_PRESETS + MODEL_PRESETS,
        help=f"{'/'.join(TINY_PRESETS)}: transformer size of --model; {'/'.join(MODEL_PRESETS)}: a whole workload of "
        "trainer_workload_parts.PRESETS (model, size, frames, steps, guidance, text length; flags left unset)",
    )  # fmt: skip
    ap.add_argument("--batch", type=int, default=None, help="images per call (default 4 on cpu, 8 on cuda; wan: 2/4)")
    ap.add_argument("--steps", type=int, default=None, help="default 10 (a workload: its steps)")
    ap.add_argument("--size", type=int, default=None, help="height = width (default 128 on cpu, 512 on cuda)")
    ap.add_argument(
        "--guidance",
        type=float,
        default=None,
        help="true CFG (Qwen) / CFG (SD3, Wan) / distilled guidance (FLUX); default 4 (a workload: its own)",
    )
    ap.add_argument("--max-sequence-length", type=int, default=None, help="default 64 (a workload: its text_len)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chart", default=None, help="PNG path (default: a temp file)")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    w = WORKLOADS[args.preset] if args.preset in MODEL_PRESETS else None
    model = w.model if w else args.model
    batch = args.batch or ((4 if cuda else 2) if model == "wan" else (8 if cuda else 4))
    height, width = (w.height, w.width) if w and not args.size else (args.size or (512 if cuda else 128),) * 2
    frames = w.frames if w else 1
    steps = args.steps or (w.steps if w else 10)
    guidance = args.guidance if args.guidance is not None else (w.guidance if w else 4.0)
    text_len = args.max_sequence_length or (w.text_len if w else 64)

    with tempfile.TemporaryDirectory(prefix=f"bench_{model}_{args.preset}_") as folder:
        if w:
            build_pipeline_folder(w, pathlib.Path(folder), dtype)
        else:
            build_tiny_pipeline(model, folder, preset=args.preset, seed=0, torch_dtype=dtype)
        pipe = load_pipeline(LOGPROB[model], folder, dtype).to(args.device)
    pipe.set_progress_bar_config(disable=True)
    n_params = sum(p.numel() for p in pipe.transformer.parameters())
    prompts = (PROMPTS * ((batch + len(PROMPTS) - 1) // len(PROMPTS)))[:batch]

    negative = "" if model in ("sd3", "wan") else " "
    cfg = DiffusionSamplingConfig(
        n=1, num_inference_steps=steps, height=height, width=width, num_frames=frames, guidance_scale=guidance,
        noise_level=1.2, sde_window_size=2, sde_window_range=[0, min(5, steps - 1)],
        max_sequence_length=text_len, negative_prompt=None if model == "flux" else negative,
    )  # fmt: skip
    stock_kwargs = {"height": height, "width": width, "num_inference_steps": steps, "output_type": "pt",
                    "max_sequence_length": text_len}  # fmt: skip
    if model == "qwen_image":
        stock_kwargs |= {"true_cfg_scale": guidance, "negative_prompt": negative}
    elif model == "flux":  # distilled guidance: one forward per step, no negative prompt (true CFG off)
        stock_kwargs |= {"guidance_scale": guidance}
    else:
        stock_kwargs |= {"guidance_scale": guidance, "negative_prompt": negative}
    if model == "wan":
        stock_kwargs["num_frames"] = frames
    stock_call = STOCK[model].__call__

    def run_stock() -> None:
        stock_call(pipe, prompts, generator=make_generators(0, batch, args.device), **stock_kwargs)

    def run_logprob() -> None:
        pipe.generate_with_logprob(prompts, cfg, make_generators(0, batch, args.device))

    times: dict[str, list[float]] = {"stock __call__": [], "log-prob pipeline": []}
    runners = {"stock __call__": run_stock, "log-prob pipeline": run_logprob}
    for fn in runners.values():  # warm-up
        fn()
    for _ in range(args.repeats):  # interleaved, so drift hits both
        for name, fn in runners.items():
            sync(args.device)
            t0 = time.perf_counter()
            fn()
            sync(args.device)
            times[name].append(time.perf_counter() - t0)

    ips = {name: batch / statistics.median(ts) for name, ts in times.items()}
    best = {name: batch / min(ts) for name, ts in times.items()}
    ratio = ips["log-prob pipeline"] / ips["stock __call__"]
    ratio_best = best["log-prob pipeline"] / best["stock __call__"]
    print(f"machine: {machine_name(args.device)}")
    print(f"model: {model} preset={args.preset} transformer={n_params / 1e6:.2f}M params dtype={dtype}")
    print(f"batch={batch} steps={steps} size={height}x{width} frames={frames} guidance={guidance} "
          f"repeats={args.repeats}")  # fmt: skip
    for name, value in ips.items():
        print(
            f"{name:>18}: {value:8.3f} images/s  (median {statistics.median(times[name]):.4f} s/call, "
            f"best {min(times[name]):.4f} s/call)"
        )
    target = 0.95 if w else 0.9  # issue 33 asks >= 0.95 of the stock pipeline for FLUX and Wan
    print(
        f"ratio log-prob / stock (median): {ratio:.3f}  (target >= {target}: {'PASS' if ratio >= target else 'FAIL'})"
    )
    print(f"ratio log-prob / stock (best of {args.repeats}): {ratio_best:.3f}")

    chart = args.chart or os.path.join(tempfile.gettempdir(), f"bench_logprob_pipeline_{model}_{args.preset}.png")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3))
        ax.bar(list(ips), list(ips.values()), color=["#888888", "#3b7dd8"])
        ax.set_ylabel("images / s")
        ax.set_title(f"{model} {args.preset} on {args.device}: ratio {ratio:.3f}")
        fig.tight_layout()
        fig.savefig(chart)
        print(f"chart: {chart}")
    except ImportError:
        print("chart: matplotlib not installed, skipped")


if __name__ == "__main__":
    main()
