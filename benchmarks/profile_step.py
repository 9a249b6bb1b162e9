"""Where a FlowGRPO step's device time goes: a `torch.profiler` trace of each stage, summarised by kernel class.

One step of the project's pieces in this process (`bench_trainer_workload.ProjectLoop`: the rollout engine's
`generate`, the FSDP2 engine's reference pass and on-policy update with the fused old log-probs, the LoRA export
into the rollout), with the trainer's CUDA defaults (compiled actor and rollout blocks, params kept gathered; eager
on the CPU), after `--warmup` unprofiled steps (they pay the compile). Each stage runs under its own profiler; its
kernels are put in classes by name:

    GEMM         cuBLAS / CUTLASS / nvjet kernels, `aten::mm|addmm|bmm|linear|convolution` on the CPU
    attention    flash / memory-efficient / cuDNN attention kernels, `aten::_scaled_dot_product_*`
    norm         layer / RMS norm kernels (inductor's fused `..._native_layer_norm`, `..._rsqrt`...)
    elementwise  pointwise and reduction kernels (`elementwise`, `vectorized`, inductor's `triton_poi|red|per`)
    comm         NCCL / gloo collectives
    other        memcpy / memset and the rest

and the table gives each class's share of the stage's device time (CUDA kernel time; on the CPU the self time of
the `aten::` ops), the stage's wall seconds and its MFU (`verl_omni.trainer.flops`, against `--peak-tflops`).

    python benchmarks/profile_step.py --device cuda --preset b --out "$OUT"      # H200, workload B (~3 min)
    python benchmarks/profile_step.py --device cpu --preset tiny                 # CPU check, ~1 min

The JSON (`profile_step_<device>_<preset>.json`) holds the table and each stage's 15 costliest kernels; `--trace`
also writes each stage's Chrome trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # sibling modules, when run as a script
import torch
from trainer_workload_parts import PRESETS, PROMPTS, Clock, build_pipeline_folder, machine_name

CLASSES = ("GEMM", "attention", "norm", "elementwise", "comm", "other")
_RULES: list[tuple[str, tuple[str, ...]]] = [  # first match wins: norm before elementwise (fused norm kernels)
    ("comm", ("nccl", "c10d", "gloo", "allgather", "all_gather", "reduce_scatter", "allreduce", "all_reduce")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "attn", "softmax")),
    ("GEMM", ("gemm", "cutlass", "nvjet", "cublas", "xmma", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear",
              "aten::matmul", "convolution", "conv2d", "aten::_convolution", "mkldnn")),
    ("norm", ("norm", "rsqrt")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "triton_", "reduce", "aten::")),
]  # fmt: skip


def kernel_class(name: str) -> str:
    """The class (`CLASSES`) of a CUDA kernel or `aten::` op name."""
    low = name.lower()
    for cls, keys in _RULES:
        if any(k in low for k in keys):
            return cls
    return "other"


def summarise(prof: Any, device: str) -> dict[str, Any]:
    """Device time per class (µs and share) and the costliest kernels of one profiled stage."""
    per_class = dict.fromkeys(CLASSES, 0.0)
    kernels: dict[str, float] = {}
    for e in prof.key_averages():
        if device == "cuda":
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = float(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0))
        else:
            if not e.key.startswith("aten::"):
                continue
            us = float(e.self_cpu_time_total)
        if us <= 0:
            continue
        per_class[kernel_class(e.key)] += us
        kernels[e.key] = kernels.get(e.key, 0.0) + us
    total = sum(per_class.values())
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:15]
    return {
        "device_us": round(total, 1),
        "share": {k: round(v / total, 4) if total else 0.0 for k, v in per_class.items()},
        "top_kernels": [{"name": k[:160], "us": round(v, 1), "class": kernel_class(k)} for k, v in top],
    }


def profile_stage(name: str, fn: Any, device: torch.device, trace_dir: pathlib.Path | None) -> tuple[Any, dict]:
    """Run `fn()` under the profiler; return its result and the stage's summary (wall seconds included)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - t0
    summary = summarise(prof, device.type)
    summary["wall_s"] = round(wall, 4)
    if trace_dir is not None:
        prof.export_chrome_trace(str(trace_dir / f"trace_{name}.json"))
    return out, summary


def profiled_step(loop: Any, extras: frozenset[str], seed: int, trace_dir: pathlib.Path | None) -> dict[str, Any]:
    """One fused on-policy FlowGRPO step, each stage under its own profiler (as `ProjectLoop.step`)."""
    from verl_omni.algos import compute_flow_grpo_advantages
    from verl_omni.reward.jpeg import jpeg_compressibility

    engine, dev = loop.engine(extras), loop.device
    stages: dict[str, Any] = {}
    sampling = dataclasses.replace(loop.sampling, seed=seed)
    traj, stages["gen"] = profile_stage("gen", lambda: loop.rollout.generate(PROMPTS, sampling), dev, trace_dir)
    rewards = jpeg_compressibility(traj["images"])
    batch = traj.exclude("images")
    batch["advantages"] = compute_flow_grpo_advantages(rewards, traj["prompt_index"].cpu()).to(batch.device)
    ref, stages["ref"] = profile_stage("ref", lambda: engine.compute_ref_log_prob(batch), dev, trace_dir)
    batch.update(ref)
    _, stages["update_actor"] = profile_stage("update_actor", lambda: engine.update_policy(batch), dev, trace_dir)
    _, stages["update_weights"] = profile_stage("update_weights", lambda: loop.sync_weights(engine), dev, trace_dir)
    return {"stages": stages, "batch": batch}


def add_mfu(result: dict[str, Any], folder: pathlib.Path, batch: Any, peak_tflops: float | None) -> None:
    """Each stage's model FLOPs and MFU (`verl_omni.trainer.flops.StageFlops`, LoRA, one device)."""
    from verl_omni.trainer.flops import StageFlops

    counter = StageFlops.for_folder(folder, lora=True, peak_tflops=peak_tflops)
    if counter is None:
        return
    timing = {k: v["wall_s"] for k, v in result["stages"].items()}
    timing["step"] = sum(timing.values())
    metrics = counter.metrics(batch, timing)
    for stage, entry in result["stages"].items():
        if f"perf/flops/{stage}" in metrics:
            entry["tflop"] = round(metrics[f"perf/flops/{stage}"] / 1e12, 4)
        if f"perf/mfu/{stage}" in metrics:
            entry["mfu"] = round(metrics[f"perf/mfu/{stage}"], 4)
    if "perf/mfu/step" in metrics:
        result["step_mfu"] = round(metrics["perf/mfu/step"], 4)


def print_table(result: dict[str, Any]) -> None:
    mode = "compiled" if result["compiled"] else "eager"
    print(f"\n{result['machine']}, workload {result['preset']}, {result['images_per_step']} images/step, {mode}; "
          "share of each stage's device time per kernel class")  # fmt: skip
    print(f"{'stage':<15}{'wall s':>8}{'device s':>10}{'MFU':>7}  " + "".join(f"{c:>12}" for c in CLASSES))
    for stage, s in result["stages"].items():
        mfu = f"{100 * s['mfu']:.1f}%" if "mfu" in s else "—"
        shares = "".join(f"{100 * s['share'][c]:>11.1f}%" for c in CLASSES)
        print(f"{stage:<15}{s['wall_s']:>8.3f}{s['device_us'] / 1e6:>10.3f}{mfu:>7}  {shares}")
    if "step_mfu" in result:
        print(f"step MFU {100 * result['step_mfu']:.1f}% (peak {result['peak_tflops']} TFLOP/s)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="b on cuda, tiny on cpu")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--warmup", type=int, default=None, help="unprofiled steps first (2 on cuda, 1 on cpu)")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="one device's dense bf16 peak (CUDA only)")
    parser.add_argument("--eager", action="store_true", help="no compiled blocks on CUDA (the pre-#29 defaults)")
    parser.add_argument("--trace", action="store_true", help="also write each stage's Chrome trace")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        device = torch.device("cuda", 0)
    preset = args.preset or ("b" if device.type == "cuda" else "tiny")
    w = PRESETS[preset]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    compiled = device.type == "cuda" and not args.eager
    extras = frozenset({"compile", "keep"}) if compiled else frozenset()
    warmup = args.warmup if args.warmup is not None else (2 if device.type == "cuda" else 1)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_dir = out / f"profile_step_{device.type}_{preset}_traces" if args.trace else None
    if trace_dir is not None:
        trace_dir.mkdir(exist_ok=True)

    from bench_trainer_workload import ProjectLoop

    with tempfile.TemporaryDirectory(prefix="profile_step_") as tmp:
        folder = pathlib.Path(tmp) / "pipeline"
        build_pipeline_folder(w, folder, dtype)
        loop = ProjectLoop(folder, w, device, dtype, compile_rollout=compiled)
        clock = Clock(device)
        for i in range(warmup):  # the compile and the allocator's first growth happen here, unprofiled
            loop.step(i, clock, "fused", extras)
        step = profiled_step(loop, extras, seed=warmup, trace_dir=trace_dir)
        result: dict[str, Any] = {
            "preset": preset, "workload": w.__dict__, "device": device.type, "machine": machine_name(device),
            "images_per_step": len(PROMPTS) * w.n, "compiled": compiled, "warmup": warmup, "classes": list(CLASSES),
            "peak_tflops": args.peak_tflops if device.type == "cuda" else None, "stages": step["stages"],
        }  # fmt: skip
        add_mfu(result, folder, step["batch"], result["peak_tflops"])
    path = out / f"profile_step_{device.type}_{preset}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
