"""Pieces of `bench_trainer_workload.py`: workload presets, the random pipeline folders, timing helpers, and the
flow_grpo-style SD3 baseline (its structure, written here; not flow_grpo's code)."""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any

import bench_fsdp_engine as engine_bench  # shared memory / machine helpers (same folder)
import torch

FLOW_GRPO_LORA_TARGETS = [
    "attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out",
    "attn.to_k", "attn.to_out.0", "attn.to_q", "attn.to_v",
]  # fmt: skip
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
    model: str = "sd3"  # or "qwen_image", "flux", "wan" (project only: the flow_grpo-style baseline is SD3's loop)
    window: int = 0  # trained SDE steps; 0 = every step but the last
    single_layers: int = 0  # FLUX: single-stream blocks (`layers` = double-stream blocks)
    frames: int = 1  # Wan: frames per video (4k + 1)
    ffn_dim: int = 0  # Wan: feed-forward width (0 = 2 x heads x head_dim)
    micro_batch: int = 16  # samples per forward in the update (`actor.ppo_micro_batch_size_per_gpu`, at most)


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
    # issue 33, random weights at a realistic width (text encoders and VAEs stay tiny, as in every preset):
    # FLUX.1-dev's block shapes (24 heads x 128 = 3072, MLP 4x, guidance-distilled, one forward per step) with 4 of
    # its 19 double-stream and 8 of its 38 single-stream blocks (2.5 B parameters), 512², 16 images per step
    "flux": Workload(4, 24, 128, 64, (0, 0), 512, 512, 10, 8, 128, guidance=3.5, model="flux", single_layers=8),
    # Wan 2.1 1.3B's transformer whole (30 blocks, 12 heads x 128 = 1536, FFN 8960), 33-frame 480x832 videos
    # (9 latent frames, 14 040 tokens), CFG 5 (two forwards), 8 videos per step, SDE window 2, one video per forward
    "wan": Workload(
        30,
        12,
        128,
        32,
        (0, 0),
        480,
        832,
        10,
        4,
        128,
        guidance=5.0,
        model="wan",
        window=2,
        frames=33,
        ffn_dim=8960,
        micro_batch=1,
    ),
    "tiny-flux": Workload(2, 2, 32, 64, (0, 0), 64, 64, 3, 2, 16, guidance=3.5, model="flux", single_layers=2),
    "tiny-wan": Workload(2, 2, 32, 32, (0, 0), 64, 64, 3, 2, 16, guidance=5.0, model="wan", window=2, frames=5),
}
# the 12 LoRA targets of the verl-omni Qwen-Image recipe (as bench_fsdp_engine.py)
QWEN_LORA_TARGETS = [
    "to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
    "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2",
]  # fmt: skip


# FLUX: the attention projections of both block kinds (single-stream blocks have no `to_out` / `add_*`); Wan: self-
# and cross-attention projections and the FFN
FLUX_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]
WAN_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]


def lora_targets(w: Workload) -> list[str]:
    targets = {"sd3": FLOW_GRPO_LORA_TARGETS, "qwen_image": QWEN_LORA_TARGETS, "flux": FLUX_LORA_TARGETS,
               "wan": WAN_LORA_TARGETS}  # fmt: skip
    return targets[w.model]


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
    if w.model in ("flux", "wan"):
        pipe = _build_flux(w) if w.model == "flux" else _build_wan(w)
        pipe.to(dtype=dtype)
        pipe.save_pretrained(out, safe_serialization=True)
        return out
    return _build_sd3_folder(w, out, dtype)


def _build_flux(w: Workload) -> Any:
    """The test builder's FLUX.1 (tiny CLIP / T5 / VAE) with a transformer of `w`'s blocks at its head shape."""
    from diffusers import FluxTransformer2DModel

    from verl_omni.testing.tiny import TinyPreset, _build_flux

    pipe = _build_flux(TinyPreset(1, 1, 32, (8, 12, 12)), seed=0)
    c = pipe.transformer.config
    third = 2 * (w.head_dim // 6)  # FLUX.1: (16, 56, 56) for head_dim 128
    torch.manual_seed(1)
    pipe.transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=w.layers, num_single_layers=w.single_layers,
        attention_head_dim=w.head_dim, num_attention_heads=w.heads, joint_attention_dim=c.joint_attention_dim,
        pooled_projection_dim=c.pooled_projection_dim, guidance_embeds=True,
        axes_dims_rope=(w.head_dim - 2 * third, third, third),
    )  # fmt: skip
    return pipe


def _build_wan(w: Workload) -> Any:
    """The test builder's Wan 2.1 (tiny UMT5 / video VAE) with a transformer of `w`'s size (Wan 2.1's layout)."""
    from diffusers import WanTransformer3DModel

    from verl_omni.testing.tiny import TinyPreset
    from verl_omni.testing.tiny_wan import build_tiny_wan

    pipe = build_tiny_wan(TinyPreset(1, 1, 32, (8, 12, 12)), seed=0)
    torch.manual_seed(1)
    pipe.transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=w.heads, attention_head_dim=w.head_dim, in_channels=16,
        out_channels=16, text_dim=pipe.transformer.config.text_dim, freq_dim=256 if w.head_dim >= 128 else 32,
        ffn_dim=w.ffn_dim or 2 * w.heads * w.head_dim, num_layers=w.layers, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=1024,
    )  # fmt: skip
    return pipe


def _build_sd3_folder(w: Workload, out: pathlib.Path, dtype: torch.dtype) -> pathlib.Path:
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from verl_omni.testing.tiny_tokenizers import clip_tokenizer, t5_tokenizer

    tok, tok2, tok3 = clip_tokenizer(), clip_tokenizer(), t5_tokenizer()
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
    peak = engine_bench.peak_gib(device)
    return None if peak is None else round(peak, 2)


free_memory = engine_bench.reset_peak  # gc, empty the CUDA cache, reset the peak counter
machine_name = engine_bench.machine_name


def median_times(steps: list[dict[str, float]]) -> dict[str, float]:
    """Per-stage median over the measured steps (seconds)."""
    keys = steps[0].keys()
    return {k: float(torch.tensor([s[k] for s in steps]).median()) for k in keys}


def generate_s(rollout: Any, sampling: Any, clock: Clock, warmup: int, iters: int) -> float:
    """Median seconds of `rollout.generate(PROMPTS)` alone over `iters` calls after `warmup` (as the stock call)."""
    times = []
    for i in range(warmup + iters):
        clock.start()
        rollout.generate(PROMPTS, dataclasses.replace(sampling, seed=300 + i))
        clock.lap("gen")
        times.append(clock.times.pop("gen"))
    return float(torch.tensor(times[warmup:]).median())


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

        from verl_omni.pipelines.load import load_pipeline

        self.w, self.device, self.dtype = w, device, dtype
        # VAE in the compute dtype too: the stock pipeline feeds it latents of that dtype (flow_grpo keeps an fp32
        # VAE and casts; with this small random VAE the difference is not measurable)
        self.pipe = load_pipeline(StableDiffusion3Pipeline, folder, dtype).to(device)
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
