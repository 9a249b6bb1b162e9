"""Benchmark `DiffusersFSDPEngine`: training MFU, log-prob recompute throughput, peak memory, LoRA export time.

Workload (issue 5): a random Qwen-Image transformer of the real layer width (24 heads x 128 = 3072, joint
attention dim 3584) with fewer layers, bf16 compute / fp32 master weights, 512x512 images (1024 image tokens),
64 text tokens, an SDE window of 2 steps, micro-batch 16, no CFG, full fine-tuning, gradient checkpointing off.

Model FLOPs (matmuls of the transformer forward, per image and denoising step; d = heads x head_dim,
N_img = (H/16)(W/16), N_txt = text tokens, N = N_img + N_txt, L = layers, p = 2 the patch size):

    per block:  24·d²·N          QKV (3), attention output (1) and MLP (4d, 2 matmuls = 8) projections, with
                                 separate image and text weights (double stream): 2·(3+1+8)·d² per token
              + 4·N²·d           QKᵀ and AV of the joint attention (2·N²·d each)
              + 24·d²            img/txt modulation Linear(d, 6d) on the time embedding
    embeddings: 2·N_img·C_in·d (img_in) + 2·N_txt·D_txt·d (txt_in) + 2·N_img·d·(p²·C_out) (proj_out)
              + 2·(256·d + d²) (time embedding MLP) + 2·d·2d (norm_out modulation)
    train = 3 x forward (backward = 2 x forward: activation and weight gradients)

MFU = model FLOPs of the update / wall time / 989e12 (H200 dense bf16 peak). The baseline measured in the same
process is a plain bf16-autocast forward/backward of the same (unwrapped) transformer on the same inputs, without
FSDP, adapter, scheduler or optimizer; the engine/baseline time ratio is its overhead.

    python benchmarks/bench_fsdp_engine.py --device cuda                       # H200: preset qwen-width
    python benchmarks/bench_fsdp_engine.py --device cpu --preset tiny          # quick functional check here
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import os
import platform
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
from verl_omni.engine import DiffusersFSDPEngine
from verl_omni.models.qwen_image import QwenImageAdapter
from verl_omni.schedulers import setting_code

H200_PEAK_BF16 = 989e12
QWEN_SCHEDULER = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 8192,
    "max_shift": 0.9,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.02,
    "time_shift_type": "exponential",
    "use_dynamic_shifting": True,
}
# the 12 LoRA targets of the verl-omni Qwen-Image recipe
RECIPE_LORA_TARGETS = [
    "to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
    "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2",
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Preset:
    layers: int
    heads: int
    head_dim: int
    joint_dim: int
    rope: tuple[int, int, int]
    height: int
    width: int
    text_len: int
    micro_batch: int
    micro_batches: int  # per optimizer step


PRESETS = {
    "tiny": Preset(2, 2, 32, 64, (8, 12, 12), 64, 64, 16, 4, 2),
    "qwen-width": Preset(8, 24, 128, 3584, (16, 56, 56), 512, 512, 64, 16, 2),
}


def forward_flops_per_image_step(p: Preset, in_channels: int = 64, out_channels: int = 16) -> float:
    """Matmul FLOPs of one transformer forward for one image at one denoising step (formula in the docstring)."""
    d = p.heads * p.head_dim
    n_img = (p.height // 16) * (p.width // 16)
    n_txt = p.text_len
    n = n_img + n_txt
    block = 24 * d * d * n + 4 * n * n * d + 24 * d * d
    embed = 2 * n_img * in_channels * d + 2 * n_txt * p.joint_dim * d + 2 * n_img * d * (4 * out_channels)
    embed += 2 * (256 * d + d * d) + 2 * d * 2 * d
    return float(p.layers * block + embed)


def build_model(p: Preset, device: torch.device) -> tuple[torch.nn.Module, QwenImageAdapter]:
    from diffusers import QwenImageTransformer2DModel

    config = {
        "patch_size": 2,
        "in_channels": 64,
        "out_channels": 16,
        "num_layers": p.layers,
        "attention_head_dim": p.head_dim,
        "num_attention_heads": p.heads,
        "joint_attention_dim": p.joint_dim,
        "axes_dims_rope": p.rope,
        "guidance_embeds": False,
    }
    torch.manual_seed(0)
    with torch.device(device):
        transformer = QwenImageTransformer2DModel(**config)
    adapter = QwenImageAdapter(dict(transformer.config), {"temperal_downsample": [False, True, True]}, QWEN_SCHEDULER)
    return transformer, adapter


def build_batch(p: Preset, adapter: QwenImageAdapter, batch: int, window: int, steps: int) -> TensorDict:
    """A trajectory batch with the layout of the log-prob pipelines (random latents and text embeddings)."""
    scheduler = adapter.build_scheduler()
    adapter.set_timesteps(scheduler, steps, p.height, p.width)
    g = torch.Generator().manual_seed(0)
    idx = torch.arange(1, 1 + window).expand(batch, window)
    latent = adapter.latent_shape(p.height, p.width)
    return TensorDict(
        {
            "latents": torch.randn(batch, window + 1, *latent, generator=g),
            "log_probs": torch.zeros(batch, window),
            "step_indices": idx.clone(),
            "timesteps": scheduler.timesteps[idx].float(),
            "sigmas": scheduler.sigmas[idx].float(),
            "sigmas_next": scheduler.sigmas[idx + 1].float(),
            "noise_level": torch.full((batch,), 1.2),
            "guidance_scale": torch.ones(batch),
            "sde_type": torch.full((batch,), setting_code("sde_type", "sde")),
            "cps_logprob": torch.full((batch,), setting_code("cps_logprob", "exact")),
            "num_inference_steps": torch.full((batch,), steps),
            "height": torch.full((batch,), p.height),
            "width": torch.full((batch,), p.width),
            "prompt_index": torch.arange(batch),
            "prompt_embeds": torch.randn(batch, p.text_len, p.joint_dim, generator=g).to(torch.bfloat16),
            "prompt_embeds_mask": torch.ones(batch, p.text_len, dtype=torch.long),
            "advantages": torch.randn(batch, generator=g),
        },
        batch_size=[batch],
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, iters: int, warmup: int) -> float:
    """Mean seconds per call after `warmup` calls; synchronises only around the timed region."""
    for _ in range(warmup):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - start) / iters


def baseline_step_time(transformer, batch, p, device, dtype, iters, warmup) -> float:
    """Seconds per image-step of a plain autocast forward/backward of the unwrapped transformer (micro-batch)."""
    micro = batch[: p.micro_batch].to(device)
    x = micro["latents"][:, 0]
    t = micro["timesteps"][:, 0] / 1000
    gh, gw = p.height // 16, p.width // 16
    kwargs = {
        "hidden_states": x,
        "timestep": t,
        "encoder_hidden_states": micro["prompt_embeds"].float(),
        "encoder_hidden_states_mask": micro["prompt_embeds_mask"],
        "img_shapes": [[(1, gh, gw)]] * p.micro_batch,
        "return_dict": False,
    }

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            out = transformer(**kwargs)[0]
        out.float().square().mean().backward()

    per_micro = timed(step, device, iters, warmup)
    transformer.zero_grad(set_to_none=True)
    return per_micro / p.micro_batch


def make_engine(transformer, adapter, p, args, *, lora_rank=0, offload=False, forward_only=False):
    actor = DiffusionActorConfig(
        rollout_n=1,
        ppo_mini_batch_size=p.micro_batch * p.micro_batches,
        ppo_micro_batch_size_per_gpu=p.micro_batch,
        optim={"lr": 1e-5, "weight_decay": 1e-4},
        fsdp_config={
            "dtype": args.dtype,
            "param_offload": offload,
            "optimizer_offload": offload,
            "forward_only": forward_only,
        },
    )
    model = DiffusionModelConfig(
        path="<random>",
        enable_gradient_checkpointing=args.grad_ckpt,
        lora_rank=lora_rank,
        lora_alpha=2 * max(lora_rank, 1),
        target_modules=RECIPE_LORA_TARGETS if lora_rank else "all-linear",
        attn_backend=args.attn_backend,
    )
    return DiffusersFSDPEngine(
        transformer,
        adapter=adapter,
        scheduler=adapter.build_scheduler(),
        actor_config=actor,
        model_config=model,
        device=args.device,
        compile_blocks=args.compile,
    )


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def machine_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} ({os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None)
    parser.add_argument("--layers", type=int, default=None, help="override the preset's layer count")
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="num_inference_steps of the schedule")
    parser.add_argument("--dtype", default=None, help="compute dtype (bfloat16 on cuda, float32 on cpu)")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing (off for the MFU figure)")
    parser.add_argument("--compile", action="store_true", help="torch.compile each transformer block")
    parser.add_argument("--attn-backend", default=None, help="diffusers attention backend (default: SDPA)")
    parser.add_argument("--lora-rank", type=int, default=64, help="rank of the LoRA export timing (0 skips)")
    parser.add_argument("--skip-offload", action="store_true", help="skip the CPU-offload memory run")
    parser.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"), help="JSON and PNG go here")
    args = parser.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    args.device = str(device)
    preset = PRESETS[args.preset or ("qwen-width" if device.type == "cuda" else "tiny")]
    if args.layers:
        preset = dataclasses.replace(preset, layers=args.layers)
    if args.micro_batch:
        preset = dataclasses.replace(preset, micro_batch=args.micro_batch)
    args.dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, args.dtype)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    batch_size = preset.micro_batch * preset.micro_batches
    fwd = forward_flops_per_image_step(preset)
    results: dict[str, object] = {
        "machine": machine_name(device),
        "torch": torch.__version__,
        "preset": dataclasses.asdict(preset),
        "window": args.window,
        "batch": batch_size,
        "compute_dtype": args.dtype,
        "grad_ckpt": args.grad_ckpt,
        "compile": args.compile,
        "fwd_tflop_per_image_step": fwd / 1e12,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{device.type}_{args.preset or ('qwen-width' if device.type == 'cuda' else 'tiny')}"
    json_path = out / f"bench_fsdp_engine_{tag}.json"

    def save() -> None:  # after every phase, so a later failure (OOM) keeps the figures so far
        json_path.write_text(json.dumps(results, indent=1))

    print(f"machine: {results['machine']}  torch {torch.__version__}")
    print(f"preset {preset}, window {args.window}, batch {batch_size}, dtype {args.dtype}")

    # 1. model, trajectory batch, plain baseline
    transformer, adapter = build_model(preset, device)
    n_params = sum(p.numel() for p in transformer.parameters())
    results["params_b"] = n_params / 1e9
    batch = build_batch(preset, adapter, batch_size, args.window, args.steps)
    reset_peak(device)
    base_t = baseline_step_time(transformer, batch, preset, device, dtype, args.iters, args.warmup)
    results["baseline_s_per_image_step"] = base_t
    results["baseline_mfu"] = 3 * fwd / base_t / H200_PEAK_BF16
    print(f"params {n_params / 1e9:.3f} B; forward {fwd / 1e12:.3f} TFLOP per image-step")
    print(f"baseline plain fwd+bwd: {base_t * 1e3:.1f} ms per image-step, {3 * fwd / base_t / 1e12:.3f} TFLOP/s, "
          f"MFU {results['baseline_mfu']:.1%}")  # fmt: skip

    # 2. full fine-tuning engine: log-prob recompute, policy update, peak memory
    reset_peak(device)
    engine = make_engine(transformer, adapter, preset, args)
    recompute_t = timed(functools.partial(engine.compute_log_prob, batch), device, args.iters, args.warmup)
    batch["old_log_probs"] = engine.compute_log_prob(batch)["old_log_probs"].cpu()
    reset_peak(device)
    update_t = timed(functools.partial(engine.update_policy, batch), device, args.iters, args.warmup)
    train_flops = 3 * fwd * batch_size * args.window
    results.update(
        recompute_images_per_s=batch_size / recompute_t,
        recompute_mfu=fwd * batch_size * args.window / recompute_t / H200_PEAK_BF16,
        update_s=update_t,
        train_mfu=train_flops / update_t / H200_PEAK_BF16,
        train_images_per_s=batch_size / update_t,
        engine_over_baseline=update_t / (base_t * batch_size * args.window),
        peak_gib_no_offload=peak_gib(device),
    )
    print(f"log-prob recompute: {results['recompute_images_per_s']:.2f} images/s (window {args.window}), "
          f"MFU {results['recompute_mfu']:.1%}")  # fmt: skip
    print(f"update: {update_t:.3f} s per optimizer step of {batch_size} images x {args.window} steps; "
          f"{train_flops / update_t / 1e12:.3f} TFLOP/s, train MFU {results['train_mfu']:.1%} (target >= 35 %); "
          f"engine/baseline time {results['engine_over_baseline']:.2f}x")  # fmt: skip
    peak = results["peak_gib_no_offload"]
    print(f"peak memory, no offload: {'n/a (cpu)' if peak is None else f'{peak:.1f} GiB'}")
    save()
    del engine, transformer
    reset_peak(device)

    # 3. CPU offload (params + grads + optimizer step on the host): peak accelerator memory
    if device.type == "cuda" and not args.skip_offload:
        _guarded("offload", results, save, lambda: _offload_phase(preset, args, batch, device, results))
    else:
        print("offload run skipped (needs CUDA)" if device.type != "cuda" else "offload run skipped")

    # 4. LoRA: export of the adapter tensors for weight sync
    if args.lora_rank:
        _guarded("lora", results, save, lambda: _lora_phase(preset, args, batch, device, results, train_flops))

    save()
    print(f"results: {json_path}")
    _chart(results, out / f"bench_fsdp_engine_{tag}.png")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _guarded(name, results, save, phase) -> None:
    """Run a phase; an accelerator OOM is recorded in the results instead of losing the earlier figures."""
    try:
        phase()
    except torch.cuda.OutOfMemoryError as e:
        results[f"{name}_error"] = f"OutOfMemoryError: {str(e).splitlines()[0]}"
        print(f"{name} phase: {results[f'{name}_error']}")
    save()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _offload_phase(preset, args, batch, device, results) -> None:
    transformer, adapter = build_model(preset, device)
    engine = make_engine(transformer, adapter, preset, args, offload=True)
    del transformer
    reset_peak(device)  # the model was built on the GPU; measure the update with the params on the host
    offload_t = timed(lambda: engine.update_policy(batch), device, 1, 1)
    results.update(peak_gib_offload=peak_gib(device), update_s_offload=offload_t)
    print(f"peak memory, param+optimizer offload: {results['peak_gib_offload']:.1f} GiB (update {offload_t:.2f} s)")


def _lora_phase(preset, args, batch, device, results, train_flops) -> None:
    transformer, adapter = build_model(preset, device)
    engine = make_engine(transformer, adapter, preset, args, lora_rank=args.lora_rank)
    del transformer
    export_t = timed(lambda: engine.export_weights(dtype=torch.bfloat16), device, args.iters, 1)
    exported = engine.export_weights(dtype=torch.bfloat16)
    n_lora = sum(t.numel() for t in exported.values())
    export_bytes = sum(t.numel() * t.element_size() for t in exported.values())
    del exported  # the engine reuses its export buffer only once the earlier result is dropped
    reset_peak(device)
    lora_update_t = timed(lambda: engine.update_policy(batch), device, args.iters, args.warmup)
    results.update(
        lora_rank=args.lora_rank,
        lora_modules=engine.num_lora_modules,
        lora_params_m=n_lora / 1e6,
        lora_export_s=export_t,
        lora_export_bytes=export_bytes,
        lora_update_s=lora_update_t,
        lora_train_mfu_x3=train_flops / lora_update_t / H200_PEAK_BF16,
        peak_gib_lora=peak_gib(device),
    )
    print(f"LoRA r{args.lora_rank}: {engine.num_lora_modules} modules, {n_lora / 1e6:.1f} M params, "
          f"export (bf16, {export_bytes / 1e6:.1f} MB, to CPU) {export_t * 1e3:.1f} ms; update {lora_update_t:.3f} s "
          f"(MFU counted x3 = {results['lora_train_mfu_x3']:.1%}; no base grads: high)")  # fmt: skip


def _chart(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = ["baseline_mfu", "train_mfu", "recompute_mfu"]
    labels = ["plain fwd+bwd", "engine update", "engine recompute"]
    values = [100 * float(results[n]) for n in names]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(labels, values, color=["grey", "tab:blue", "tab:green"])
    ax.axhline(35, color="red", linestyle="--", linewidth=1, label="target 35 %")
    ax.set_ylabel("MFU vs 989 TFLOP/s (%)")
    ax.set_title(results["machine"][:48], fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart: {path}")


if __name__ == "__main__":
    main()
