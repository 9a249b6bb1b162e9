"""Trainer workload benchmark (issue 10, workload A): a flow_grpo-style SD3 loop vs this project's pieces.

One process, one device, the same random SD3 pipeline folder for both implementations:

* workload `a`: a random SD3 transformer of 12 layers, 24 heads x 64 (d = 1536), joint attention dim 4096
  (about 1.0 B parameters), 512x512, 10 steps, SDE noise level 0.7 at every step, CFG 4.5 in rollout and in
  training, LoRA r32 / alpha 64 on the 8 attention projections of flow_grpo's SD3 recipe, every step but the last
  trained, KL beta 0.04 against the adapter-disabled model, bf16, 16 images per step (2 prompts x 8),
  jpeg-compressibility reward, AdamW lr 3e-4, clip ratio 1e-4. Text encoders and VAE are small random ones
  (their cost is under-weighted against a real SD3: the transformer dominates both implementations alike).
* `baseline`: written here in the style of flow_grpo's `train_sd3.py` (not its code): the stock diffusers
  `StableDiffusion3Pipeline` (bf16) with a peft `get_peft_model` LoRA, a Python sampling loop that calls an SDE
  step with log-prob after each CFG forward, rollout log-probs reused as the old ones, and a plain bf16-autocast
  training loop over the trained steps with the reference forward (`disable_adapter()`) interleaved, one
  optimizer step per batch; no FSDP.
* `project`: `DiffusersRolloutEngine.generate` (trajectory with log-probs), jpeg reward and group advantages,
  `DiffusersFSDPEngine.compute_log_prob` (old log-probs) / `compute_ref_log_prob` (KL reference) /
  `update_policy`, then LoRA export (`export_weights`) into the rollout engine (`update_weights`). Variants:
  `recompute` (old log-probs recomputed, the trainer default), `reuse` (the rollout's bf16 log-probs stand in
  for the old ones), `fused` (the update takes the old log-probs from its own first forward, exact when the
  update is on-policy: one mini-batch, one epoch), and `+compile` (each transformer block compiled).

Reported: images/s end to end per implementation and variant and their ratio to the baseline, time per stage,
sampling time against the stock diffusers pipeline (`pipe(...)`), step-1 `pg_clipfrac` and the
|old - rollout| log-prob gap, peak memory. JSON and a bar chart PNG go to `--out`.

    python benchmarks/bench_trainer_workload.py --device cuda --out "$OUT"        # H200, workload a
    python benchmarks/bench_trainer_workload.py --preset tiny --device cpu        # quick functional check
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import pathlib
import platform
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch

FLOW_GRPO_LORA_TARGETS = [
    "attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out",
    "attn.to_k", "attn.to_out.0", "attn.to_q", "attn.to_v",
]  # fmt: skip
# variant suffixes: engine options
EXTRAS = {
    "compile": "torch.compile each transformer block (compile_blocks=True)",
    "cudnn": "diffusers attention backend _native_cudnn (model.attn_backend)",
    "keep": "fsdp_config.reshard_after_forward=false (no re-gather in backward; one device)",
}
PROMPTS = ["a photo of a cat sitting on a red chair", "a watercolor painting of a mountain lake at sunrise"]


@dataclasses.dataclass(frozen=True)
class Workload:
    """Model size and RL step shape of one benchmark preset."""

    layers: int
    heads: int
    head_dim: int
    joint_dim: int  # T5 width = the transformer's joint attention dim
    clip_dims: tuple[int, int]  # the two CLIP text encoders' widths (pooled projection = their sum)
    height: int
    width: int
    steps: int
    n: int  # images per prompt
    text_len: int  # T5 tokens (max_sequence_length); SD3 adds 77 CLIP tokens
    guidance: float = 4.5
    noise_level: float = 0.7
    lora_rank: int = 32
    lora_alpha: int = 64
    kl_beta: float = 0.04
    clip_ratio: float = 1e-4
    lr: float = 3e-4
    model: str = "sd3"  # or "qwen_image" (project only: the flow_grpo-style baseline is SD3's loop)
    window: int = 0  # trained SDE steps; 0 = every step but the last


PRESETS = {
    "a": Workload(12, 24, 64, 4096, (768, 1280), 512, 512, 10, 8, 128),
    # workload B: the Qwen-Image-width transformer of bench_fsdp_engine.py (8 layers, 24 x 128), 32 images per
    # step (2 prompts x 16), SDE window 2, noise 1.2, no CFG, LoRA r64 on the recipe's 12 targets, KL
    "b": Workload(
        8,
        24,
        128,
        64,
        (0, 0),
        512,
        512,
        10,
        16,
        64,
        guidance=1.0,
        noise_level=1.2,
        lora_rank=64,
        lora_alpha=128,
        model="qwen_image",
        window=2,
    ),
    "tiny": Workload(2, 2, 32, 64, (32, 64), 64, 64, 3, 2, 16),
    "tiny-qwen": Workload(2, 2, 32, 64, (0, 0), 64, 64, 3, 2, 16, guidance=1.0, model="qwen_image", window=2),
}
# the 12 LoRA targets of the verl-omni Qwen-Image recipe (as bench_fsdp_engine.py)
QWEN_LORA_TARGETS = [
    "to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
    "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2",
]  # fmt: skip


def lora_targets(w: Workload) -> list[str]:
    return FLOW_GRPO_LORA_TARGETS if w.model == "sd3" else QWEN_LORA_TARGETS


# ---- the random pipeline folder ----------------------------------------------------------------------------


def build_pipeline_folder(w: Workload, out: pathlib.Path, dtype: torch.dtype) -> pathlib.Path:
    """Write a random-weight pipeline folder of workload `w` (seeded) and return its path."""
    if w.model == "qwen_image":  # the test builder's Qwen-Image (text width 64) with this transformer size
        from verl_omni.testing.tiny import TinyPreset, _build_qwen_image

        rope = (16, 56, 56) if w.head_dim == 128 else (8, 12, 12)
        pipe = _build_qwen_image(TinyPreset(w.layers, w.heads, w.head_dim, rope), seed=0)
        pipe.to(dtype=dtype)
        pipe.save_pretrained(out, safe_serialization=True)
        return out
    return _build_sd3_folder(w, out, dtype)


def _build_sd3_folder(w: Workload, out: pathlib.Path, dtype: torch.dtype) -> pathlib.Path:
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from verl_omni.testing.tiny import _clip_tokenizer, _t5_tokenizer

    tok, tok2, tok3 = _clip_tokenizer(), _clip_tokenizer(), _t5_tokenizer()
    encoders = []
    for k, hidden in enumerate(w.clip_dims):
        torch.manual_seed(10 + k)
        cfg = CLIPTextConfig(
            vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=77, projection_dim=hidden,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        )  # fmt: skip
        encoders.append(CLIPTextModelWithProjection(cfg).eval())
    torch.manual_seed(12)
    t5 = T5EncoderModel(
        T5Config(
            vocab_size=len(tok3), d_model=w.joint_dim, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
            feed_forward_proj="gated-gelu", pad_token_id=tok3.pad_token_id, eos_token_id=tok3.eos_token_id,
        )
    ).eval()  # fmt: skip
    torch.manual_seed(1)
    inner = w.heads * w.head_dim
    transformer = SD3Transformer2DModel(
        sample_size=w.height // 8, patch_size=2, in_channels=16, out_channels=16, num_layers=w.layers,
        attention_head_dim=w.head_dim, num_attention_heads=w.heads, joint_attention_dim=w.joint_dim,
        caption_projection_dim=inner, pooled_projection_dim=sum(w.clip_dims), pos_embed_max_size=96,
    )  # fmt: skip
    torch.manual_seed(2)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[16, 16, 32, 32], layers_per_block=1,
        latent_channels=16, norm_num_groups=8, scaling_factor=1.5305, shift_factor=0.0609,
        use_quant_conv=False, use_post_quant_conv=False,
    )  # fmt: skip
    pipe = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=encoders[0], tokenizer=tok, text_encoder_2=encoders[1], tokenizer_2=tok2,
        text_encoder_3=t5, tokenizer_3=tok3,
    )  # fmt: skip
    pipe.to(dtype=dtype)
    pipe.save_pretrained(out, safe_serialization=True)
    return out


# ---- helpers ----------------------------------------------------------------------------------------------


class Clock:
    """Wall time of named stages; synchronises the device at each boundary."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.times: dict[str, float] = {}
        self.peaks: dict[str, float] = {}  # GiB allocated at most during each stage (CUDA only), max over steps
        self._t = 0.0

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def start(self) -> None:
        self.sync()
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) / 2**30
            self.peaks[name] = round(max(self.peaks.get(name, 0.0), peak), 2)
        self.sync()
        now = time.perf_counter()
        self.times[name] = self.times.get(name, 0.0) + now - self._t
        self._t = now


def peak_gib(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def machine_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or 'cpu'} ({os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads)"


def median_times(steps: list[dict[str, float]]) -> dict[str, float]:
    """Per-stage median over the measured steps (seconds)."""
    keys = steps[0].keys()
    return {k: float(torch.tensor([s[k] for s in steps]).median()) for k in keys}


def advantages_of(rewards: torch.Tensor, n: int) -> torch.Tensor:
    """flow_grpo's per-prompt statistics: (r - mean_group) / (std_group + 1e-4), rows prompt-major."""
    r = rewards.double().view(-1, n)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-4)).flatten().float()


# ---- (a) the flow_grpo-style baseline ----------------------------------------------------------------------


def sde_step_with_logprob(scheduler, model_output, timestep, sample, noise_level, prev_sample=None, generator=None):
    """flow_grpo's SDE step (its formula, this code): next sample, mean-reduced log-prob, mean, std_dev_t.

    The step index of each row is looked up from its timestep (`index_for_timestep`, one lookup per row).
    """
    from diffusers.utils.torch_utils import randn_tensor

    idx = [scheduler.index_for_timestep(t) for t in timestep]
    sigmas = scheduler.sigmas.to(sample.device)
    sigma = sigmas[idx].view(-1, *([1] * (sample.ndim - 1)))
    sigma_prev = sigmas[[i + 1 for i in idx]].view_as(sigma)
    sigma_max = sigmas[1].item()
    dt = sigma_prev - sigma
    std_dev_t = torch.sqrt(sigma / (1 - torch.where(sigma == 1, sigma_max, sigma))) * noise_level
    mean = (
        sample * (1 + std_dev_t**2 / (2 * sigma) * dt)
        + model_output * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
    )
    std = std_dev_t * torch.sqrt(-dt)
    if prev_sample is None:
        noise = randn_tensor(
            model_output.shape, generator=generator, device=model_output.device, dtype=model_output.dtype
        )
        prev_sample = mean + std * noise
    log_prob = -((prev_sample.detach() - mean) ** 2) / (2 * std**2) - torch.log(std) - math.log(math.sqrt(2 * math.pi))
    return prev_sample, log_prob.mean(dim=tuple(range(1, log_prob.ndim))), mean, std_dev_t


class FlowGRPOBaseline:
    """A flow_grpo-style SD3 LoRA trainer on one device: sample with log-probs, reward, train with KL."""

    def __init__(self, folder: pathlib.Path, w: Workload, device: torch.device, dtype: torch.dtype) -> None:
        from diffusers import StableDiffusion3Pipeline

        self.w, self.device, self.dtype = w, device, dtype
        # VAE in the compute dtype too: the stock pipeline feeds it latents of that dtype (flow_grpo keeps an fp32
        # VAE and casts; with this small random VAE the difference is not measurable)
        self.pipe = StableDiffusion3Pipeline.from_pretrained(folder, dtype=dtype).to(device)
        self.pipe.set_progress_bar_config(disable=True)

    def attach_lora(self) -> None:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=self.w.lora_rank, lora_alpha=self.w.lora_alpha, init_lora_weights="gaussian",
                         target_modules=FLOW_GRPO_LORA_TARGETS)  # fmt: skip
        self.pipe.transformer = get_peft_model(self.pipe.transformer, cfg)
        self.params = [p for p in self.pipe.transformer.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=self.w.lr, betas=(0.9, 0.999), weight_decay=1e-4, eps=1e-8)

    def autocast(self) -> Any:
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32)

    @torch.no_grad()
    def stock_sample(self, seed: int) -> torch.Tensor:
        """The stock diffusers pipeline call (no log-probs): the sampling reference speed."""
        w = self.w
        g = torch.Generator(self.device).manual_seed(seed)
        return self.pipe(
            prompt=PROMPTS, num_images_per_prompt=w.n, num_inference_steps=w.steps, guidance_scale=w.guidance,
            height=w.height, width=w.width, max_sequence_length=w.text_len, output_type="pt", generator=g,
        ).images  # fmt: skip

    @torch.no_grad()
    def sample(self, seed: int) -> dict[str, Any]:
        """flow_grpo's `pipeline_with_logprob` shape: Python loop, CFG batch, SDE step with log-prob each step."""
        pipe, w = self.pipe, self.w
        prompts = [p for p in PROMPTS for _ in range(w.n)]
        with self.autocast():
            pe, npe, pooled, npooled = pipe.encode_prompt(
                prompt=prompts, prompt_2=None, prompt_3=None, device=self.device, num_images_per_prompt=1,
                do_classifier_free_guidance=True, negative_prompt="", max_sequence_length=w.text_len,
            )  # fmt: skip
        embeds, pooled_all = torch.cat([npe, pe]), torch.cat([npooled, pooled])
        g = torch.Generator(self.device).manual_seed(seed)
        latents = pipe.prepare_latents(len(prompts), 16, w.height, w.width, pe.dtype, self.device, g)
        pipe.scheduler.set_timesteps(w.steps, device=self.device)
        timesteps = pipe.scheduler.timesteps
        all_latents, all_log_probs = [latents.float()], []
        for t in timesteps:
            with self.autocast():
                pred = pipe.transformer(
                    hidden_states=torch.cat([latents] * 2), timestep=t.expand(2 * len(prompts)),
                    encoder_hidden_states=embeds, pooled_projections=pooled_all, return_dict=False,
                )[0]  # fmt: skip
            pred = pred.to(pe.dtype)
            uncond, text = pred.chunk(2)
            pred = uncond + w.guidance * (text - uncond)
            dtype = latents.dtype
            latents, log_prob, _, _ = sde_step_with_logprob(
                pipe.scheduler, pred.float(), t.unsqueeze(0), latents.float(), w.noise_level, generator=g
            )
            all_latents.append(latents)
            all_log_probs.append(log_prob)
            latents = latents.to(dtype)
        x = latents.float() / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
        image = pipe.vae.decode(x.to(pipe.vae.dtype), return_dict=False)[0]
        images = pipe.image_processor.postprocess(image, output_type="pt")
        return {
            "images": images, "latents": torch.stack(all_latents, 1), "log_probs": torch.stack(all_log_probs, 1),
            "timesteps": timesteps.repeat(len(prompts), 1), "embeds": embeds, "pooled": pooled_all,
        }  # fmt: skip

    def _log_prob(self, s: dict[str, Any], j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with self.autocast():
            pred = self.pipe.transformer(
                hidden_states=torch.cat([s["latents"][:, j]] * 2), timestep=torch.cat([s["timesteps"][:, j]] * 2),
                encoder_hidden_states=s["embeds"], pooled_projections=s["pooled"], return_dict=False,
            )[0]  # fmt: skip
            uncond, text = pred.chunk(2)
            pred = uncond + self.w.guidance * (text - uncond)
            _, log_prob, mean, std_dev_t = sde_step_with_logprob(
                self.pipe.scheduler, pred.float(), s["timesteps"][:, j], s["latents"][:, j].float(),
                self.w.noise_level, prev_sample=s["latents"][:, j + 1].float(),
            )  # fmt: skip
        return log_prob, mean, std_dev_t

    def train(self, s: dict[str, Any], advantages: torch.Tensor) -> dict[str, float]:
        """One optimizer step over all trained steps (gradients accumulated), KL to the adapter-disabled model."""
        w = self.w
        k = w.steps - 1
        self.pipe.transformer.train()
        clipfrac = []
        adv = advantages.to(self.device).clamp(-5.0, 5.0)
        for j in range(k):
            log_prob, mean, std_dev_t = self._log_prob(s, j)
            with torch.no_grad(), self.pipe.transformer.disable_adapter():
                _, ref_mean, _ = self._log_prob(s, j)
            ratio = torch.exp(log_prob - s["log_probs"][:, j])
            unclipped = -adv * ratio
            clipped = -adv * torch.clamp(ratio, 1.0 - w.clip_ratio, 1.0 + w.clip_ratio)
            policy_loss = torch.mean(torch.maximum(unclipped, clipped))
            kl = (((mean - ref_mean) ** 2).mean(dim=(1, 2, 3), keepdim=True) / (2 * std_dev_t**2)).mean()
            ((policy_loss + w.kl_beta * kl) / k).backward()
            clipfrac.append(((ratio - 1.0).abs() > w.clip_ratio).float().mean().detach())
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"pg_clipfrac": torch.stack(clipfrac).mean().item()}

    def step(self, seed: int, clock: Clock) -> dict[str, float]:
        from verl_omni.reward.jpeg import jpeg_compressibility

        clock.start()
        s = self.sample(seed)
        clock.lap("gen")
        rewards = jpeg_compressibility(s["images"])
        adv = advantages_of(rewards, self.w.n)
        clock.lap("reward")
        metrics = self.train(s, adv)
        clock.lap("update")
        return metrics


# ---- (b) this project's pieces ----------------------------------------------------------------------------


class ProjectLoop:
    """Rollout engine + FSDP2 engine + LoRA weight sync, driven by hand through one FlowGRPO step."""

    def __init__(self, folder: pathlib.Path, w: Workload, device: torch.device, dtype: torch.dtype) -> None:
        from verl_omni.pipelines import DiffusionSamplingConfig
        from verl_omni.rollout.diffusers_engine import DiffusersRolloutEngine

        self.folder, self.w, self.device, self.dtype = folder, w, device, dtype
        self.sampling = DiffusionSamplingConfig(
            n=w.n, num_inference_steps=w.steps, height=w.height, width=w.width, noise_level=w.noise_level,
            guidance_scale=w.guidance, negative_prompt="" if w.model == "sd3" else None,
            max_sequence_length=w.text_len, sde_window_size=w.window,
        )  # fmt: skip
        self.rollout = DiffusersRolloutEngine(folder, device=device, dtype=dtype, sampling=self.sampling)
        self.lora_config = {"r": w.lora_rank, "lora_alpha": w.lora_alpha, "init_lora_weights": "gaussian",
                            "target_modules": lora_targets(w)}  # fmt: skip
        self.engines: dict[frozenset[str], Any] = {}

    def engine(self, extras: frozenset[str]) -> Any:
        """The FSDP2 engine of a set of `EXTRAS` (built once; its LoRA is synced into the rollout engine)."""
        from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
        from verl_omni.engine import DiffusersFSDPEngine

        if extras not in self.engines:
            w = self.w
            actor = DiffusionActorConfig(
                rollout_n=w.n, ppo_mini_batch_size=len(PROMPTS),
                ppo_micro_batch_size_per_gpu=min(16, len(PROMPTS) * w.n),
                use_kl_loss=True, kl_loss_coef=w.kl_beta, optim={"lr": w.lr, "weight_decay": 1e-4},
                diffusion_loss={"clip_ratio": w.clip_ratio},
                fsdp_config={"dtype": str(self.dtype).removeprefix("torch."),
                             "reshard_after_forward": "keep" not in extras},
            )  # fmt: skip
            model = DiffusionModelConfig(
                path=str(self.folder), lora_rank=w.lora_rank, lora_alpha=w.lora_alpha,
                target_modules=lora_targets(w), enable_gradient_checkpointing=False,
                attn_backend="_native_cudnn" if "cudnn" in extras else None,
            )  # fmt: skip
            self.engines[extras] = DiffusersFSDPEngine.from_pretrained(
                model, actor, device=self.device, compile_blocks="compile" in extras
            )
            self.sync_weights(self.engines[extras])
        return self.engines[extras]

    def sync_weights(self, engine: Any) -> None:
        self.rollout.update_weights(engine.export_weights(dtype=self.dtype), lora_config=self.lora_config)

    def step(self, seed: int, clock: Clock, mode: str, extras: frozenset[str]) -> dict[str, float]:
        """One FlowGRPO step; `mode` is how the old log-probs are obtained (recompute, reuse, fused)."""
        from verl_omni.algos import compute_flow_grpo_advantages
        from verl_omni.reward.jpeg import jpeg_compressibility

        engine = self.engine(extras)
        clock.start()
        traj = self.rollout.generate(PROMPTS, dataclasses.replace(self.sampling, seed=seed))
        clock.lap("gen")
        rewards = jpeg_compressibility(traj["images"])
        adv = compute_flow_grpo_advantages(rewards, traj["prompt_index"].cpu())
        batch = traj.exclude("images")
        batch["advantages"] = adv.to(batch.device)
        clock.lap("reward")
        if mode == "recompute":
            batch["old_log_probs"] = engine.compute_log_prob(batch)["old_log_probs"]
        elif mode == "reuse":
            batch["old_log_probs"] = batch["log_probs"].clone()
        clock.lap("old_log_prob")
        batch.update(engine.compute_ref_log_prob(batch))
        clock.lap("ref")
        metrics = engine.update_policy(batch)
        clock.lap("update")
        self.sync_weights(engine)
        clock.lap("weight_sync")
        return {k.removeprefix("actor/"): float(v) for k, v in metrics.items()}

    def logprob_gap(self, seed: int, extras: frozenset[str]) -> dict[str, float]:
        """|engine recompute - rollout| log-prob gap of one fresh rollout batch (untimed)."""
        engine = self.engine(extras)
        traj = self.rollout.generate(PROMPTS, dataclasses.replace(self.sampling, seed=seed)).exclude("images")
        old = engine.compute_log_prob(traj)["old_log_probs"].float()
        d = (old - traj["log_probs"].float().to(old.device)).abs()
        return {"logprob_gap_mean": d.mean().item(), "logprob_gap_max": d.max().item()}


# ---- driver -----------------------------------------------------------------------------------------------


def run_steps(fn, clock: Clock, warmup: int, iters: int) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Run `warmup + iters` steps; return the median stage times of the measured ones and every step's metrics."""
    measured, metrics = [], []
    for i in range(warmup + iters):
        clock.times = {}
        metrics.append(fn(i))
        times = dict(clock.times, step=sum(clock.times.values()))
        if i >= warmup:
            measured.append(times)
        else:
            metrics[-1]["warmup_step_s"] = times["step"]
    return median_times(measured), metrics


@contextlib.contextmanager
def phase(name: str, results: dict[str, Any], device: torch.device) -> Iterator[dict[str, Any]]:
    free_memory(device)
    entry: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        yield entry
    except Exception as e:  # keep the other phases' figures; the error is recorded and printed
        entry["error"] = f"{type(e).__name__}: {e}"
        print(f"[{name}] FAILED: {entry['error']}", flush=True)
        if os.environ.get("BENCH_RAISE"):
            raise
    entry["wall_s"] = round(time.perf_counter() - t0, 1)
    entry["peak_gib"] = peak_gib(device)
    results[name] = entry


def chart(results: dict[str, Any], path: pathlib.Path) -> bool:
    """Bar chart: images/s per implementation (left) and stacked stage times per step (right).

    Also redraws a chart from a saved JSON: `chart(json.load(open(path)), png_path)`.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [(k, v) for k, v in results["runs"].items() if "images_per_s" in v]
    if not rows:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [k for k, _ in rows]
    colors = ["grey" if name == "baseline" else "tab:blue" for name in names]
    ax1.bar(names, [v["images_per_s"] for _, v in rows], color=colors)
    if results["preset"] == "a":
        ax1.axhline(4.6, color="tab:red", linestyle="--", linewidth=1, label="target 4.6 images/s")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set_ylabel("images / s (end to end)")
    ax1.set_title(f"workload {results['preset']}, {results['machine']}")
    for i, (_, v) in enumerate(rows):
        ax1.text(i, v["images_per_s"], f"{v['images_per_s']:.2f}", ha="center", va="bottom")
    stages = ["gen", "reward", "old_log_prob", "ref", "update", "weight_sync"]
    bottom = [0.0] * len(rows)
    for st in stages:
        vals = [v["stage_s"].get(st, 0.0) for _, v in rows]
        ax2.bar(names, vals, bottom=bottom, label=st)
        bottom = [b + x for b, x in zip(bottom, vals, strict=True)]
    ax2.set_ylabel("seconds per step (median)")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="a on cuda, tiny on cpu")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured steps per run (2 on cuda, 0 on cpu)")
    parser.add_argument("--iters", type=int, default=None, help="measured steps per run (3 on cuda, 1 on cpu)")
    parser.add_argument(
        "--variants",
        default="recompute,reuse,fused",
        help="recompute, reuse or fused, then optional +compile +cudnn +keep",
    )
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--folder", default=None, help="pipeline folder (built here when absent)")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args(argv)
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)
        torch.backends.cuda.matmul.allow_tf32 = True
    preset = args.preset or ("a" if device.type == "cuda" else "tiny")
    w = PRESETS[preset]
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    warmup = args.warmup if args.warmup is not None else (2 if device.type == "cuda" else 0)
    iters = args.iters if args.iters is not None else (3 if device.type == "cuda" else 1)
    images = len(PROMPTS) * w.n
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "preset": preset, "workload": dataclasses.asdict(w), "machine": machine_name(device),
        "torch": torch.__version__, "dtype": str(dtype), "images_per_step": images, "warmup": warmup,
        "iters": iters, "runs": {},
    }  # fmt: skip
    json_path = out / f"bench_trainer_workload_{device.type}_{preset}.json"

    def save() -> None:
        json_path.write_text(json.dumps(results, indent=1))

    with contextlib.ExitStack() as stack:
        if args.folder and (pathlib.Path(args.folder) / "model_index.json").exists():
            folder = pathlib.Path(args.folder)
        else:
            folder = pathlib.Path(args.folder or stack.enter_context(tempfile.TemporaryDirectory()))
            t0 = time.perf_counter()
            build_pipeline_folder(w, folder, dtype)
            results["build_s"] = round(time.perf_counter() - t0, 1)
        clock = Clock(device)
        n_params = None

        if w.model != "sd3":
            results["baseline_skipped"] = "the flow_grpo-style baseline is an SD3 loop"
        if not args.skip_baseline and w.model == "sd3":
            with phase("baseline", results["runs"], device) as entry:
                base = FlowGRPOBaseline(folder, w, device, dtype)
                n_params = sum(p.numel() for p in base.pipe.transformer.parameters())
                stock = []
                for i in range(warmup + iters):
                    clock.start()
                    base.stock_sample(100 + i)
                    clock.lap("stock")
                    if i >= warmup:
                        stock.append(clock.times.pop("stock"))
                    clock.times = {}
                results["stock_sampling_s"] = float(torch.tensor(stock).median())
                base.attach_lora()  # the same stock call with the LoRA adapter in the forward (as our rollout has)
                stock = []
                for i in range(1 + iters):
                    clock.start()
                    base.stock_sample(200 + i)
                    clock.lap("stock")
                    stock.append(clock.times.pop("stock"))
                results["stock_sampling_lora_s"] = float(torch.tensor(stock[1:]).median())
                stage, metrics = run_steps(lambda i: base.step(i, clock), clock, warmup, iters)
                entry.update(stage_s=stage, images_per_s=images / stage["step"],
                             step1_pg_clipfrac=metrics[0]["pg_clipfrac"], old_log_probs="rollout (reused)")  # fmt: skip
                entry["sampling_vs_stock"] = results["stock_sampling_s"] / stage["gen"]
                entry["sampling_vs_stock_lora"] = results["stock_sampling_lora_s"] / stage["gen"]
                del base
            save()

        loop = None
        for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
            mode, *extra = variant.split("+")
            extras = frozenset(extra)
            if mode not in ("recompute", "reuse", "fused") or not extras <= EXTRAS.keys():
                raise SystemExit(
                    f"--variants: unknown variant {variant!r}: recompute|reuse|fused, then +{'/+'.join(EXTRAS)}"
                )
            with phase(variant, results["runs"], device) as entry:
                clock.peaks = {}
                if loop is None:
                    loop = ProjectLoop(folder, w, device, dtype)
                    n_params = n_params or sum(p.numel() for p in loop.rollout.transformer.parameters())
                t0 = time.perf_counter()
                loop.engine(extras)
                entry["engine_build_s"] = round(time.perf_counter() - t0, 1)
                stage, metrics = run_steps(
                    lambda i, lp=loop, m=mode, x=extras: lp.step(1000 + i, clock, m, x), clock, warmup, iters
                )
                entry.update(stage_s=stage, images_per_s=images / stage["step"])
                entry["stage_share"] = {k: round(v / stage["step"], 4) for k, v in stage.items() if k != "step"}
                if clock.peaks:
                    entry["stage_peak_gib"] = dict(clock.peaks)
                entry["warmup_step_s"] = [round(m["warmup_step_s"], 2) for m in metrics if "warmup_step_s" in m]
                first = metrics[0]
                entry["step1"] = {k: first[k] for k in ("pg_clipfrac", "ratio_mean", "ppo_kl", "kl_loss") if k in first}
                entry["step1"].update(loop.logprob_gap(5000, extras))
                if "stock_sampling_s" in results:
                    entry["sampling_vs_stock"] = results["stock_sampling_s"] / stage["gen"]
                    entry["sampling_vs_stock_lora"] = results["stock_sampling_lora_s"] / stage["gen"]
                if "baseline" in results["runs"] and "images_per_s" in results["runs"]["baseline"]:
                    entry["vs_baseline"] = entry["images_per_s"] / results["runs"]["baseline"]["images_per_s"]
            save()

    results["transformer_params"] = n_params
    results["chart"] = str(out / f"bench_trainer_workload_{device.type}_{preset}.png")
    if not chart(results, pathlib.Path(results["chart"])):
        results["chart"] = None
    save()
    print_table(results)
    print_shares(results)
    print(f"wrote {json_path}" + (f" and {results['chart']}" if results["chart"] else ""))
    return results


def print_shares(results: dict[str, Any]) -> None:
    """Each run's stage shares of the step and, on CUDA, the peak memory of each stage."""
    for name, r in results["runs"].items():
        if "stage_share" in r:
            shares = ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["stage_share"].items())
            print(f"{name}: {shares}")
        if r.get("stage_peak_gib"):
            print(f"{name} peak GiB per stage: {r['stage_peak_gib']}")


def print_table(results: dict[str, Any]) -> None:
    stages = ["gen", "reward", "old_log_prob", "ref", "update", "weight_sync", "step"]
    print(f"\nworkload {results['preset']} on {results['machine']} ({results['dtype']}), "
          f"{results['images_per_step']} images/step; stock sampling {results.get('stock_sampling_s')} s, "
          f"with the LoRA adapter {results.get('stock_sampling_lora_s')} s")  # fmt: skip
    head = f"{'run':<20}{'img/s':>7}{'x base':>8}{'samp/stock':>11}{'/stock+lora':>12}"
    print(head + "".join(f"{s:>13}" for s in stages)
          + f"{'clipfrac1':>10}{'gap mean':>10}{'peak GiB':>9}")  # fmt: skip
    for name, r in results["runs"].items():
        if "error" in r:
            print(f"{name:<20} ERROR {r['error'][:200]}")
            continue
        st = r["stage_s"]
        s1 = r.get("step1", {"pg_clipfrac": r.get("step1_pg_clipfrac")})
        print(f"{name:<20}{r['images_per_s']:>7.2f}{r.get('vs_baseline', 1.0):>8.2f}"
              f"{r.get('sampling_vs_stock', float('nan')):>11.2f}{r.get('sampling_vs_stock_lora', float('nan')):>12.2f}"
              + "".join(f"{st.get(s, 0.0):>13.3f}" for s in stages)
              + f"{s1.get('pg_clipfrac') or 0:>10.3f}{s1.get('logprob_gap_mean', float('nan')):>10.2e}"
              f"{r.get('peak_gib') or 0:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
