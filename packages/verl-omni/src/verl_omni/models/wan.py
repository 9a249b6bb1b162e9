"""`WanAdapter`: Wan 2.1 text-to-video: UMT5 prompts, 5-D video latents, plain CFG, fixed-shift schedule, decode.

Transformer shapes (for a FLOPs formula; `WanTransformer3DModel`): with `inner = num_attention_heads ·
attention_head_dim`, a video of `F` frames at `H x W` pixels has latents `(16, (F - 1) / 4 + 1, H / 8, W / 8)`,
patchified `(1, 2, 2)` into `L = F' · H/16 · W/16` tokens of width `inner`. Each of the `num_layers` blocks
(`transformer.blocks`, class `WanTransformerBlock`) runs: self-attention over the `L` video tokens (q/k/v/o
`inner x inner`, RMS q/k norm, 3-axis RoPE), cross-attention from the `L` tokens to the `S` text tokens (q/o
`inner x inner`; k/v `inner x inner` on the text projected to `inner` once per forward), and a GELU MLP `inner ->
ffn_dim -> inner`. Per block and sample, the matmul FLOPs are `2·L·inner²·4 + 4·L²·inner` (self-attention) +
`2·L·inner²·2 + 2·S·inner²·2 + 4·L·S·inner` (cross-attention) + `4·L·inner·ffn_dim` (MLP). Wan 2.1 T2V-1.3B:
inner 1536 (12 x 128), ffn 8960, 30 layers; T2V-14B: inner 5120 (40 x 128), ffn 13824, 40 layers; 81 frames at
480x832 give `L = 21 · 30 · 52 = 32760`; the text is `S = 512` UMT5 tokens (dim 4096). With CFG the rollout runs
two forwards per step (conditional, then unconditional, as the stock pipeline). `verl_omni.models.flops` counts
these FLOPs (with the text embedder's, the patch embedding's and the output projection's) for MFU.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from verl_omni.models.base import DiffusionModelBase, register, to_uint8
from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler

__all__ = ["WanAdapter"]

#: UMT5 prompts: the stock pipeline's default `max_sequence_length` (Wan's checkpoints were trained with 512).
MAX_SEQUENCE_LENGTH = 512


@register("wan")
class WanAdapter(DiffusionModelBase):
    """Adapter for `WanPipeline` (Wan 2.1 text-to-video, `WanTransformer3DModel` + `AutoencoderKLWan`).

    Latents are 5-D `(B, C, F', H/8, W/8)` with `F' = (num_frames - 1) / 4 + 1` latent frames (the video VAE
    compresses time 4x, keeping the first frame alone); `decode` returns uint8 videos `(B, num_frames, 3, H, W)`.
    Every row is its own video: the transformer attends within a sample and the VAE decodes each row on its own,
    so frames never mix across rows. Conditioning is the UMT5 sequence `prompt_embeds` `(B, S, D)`, zero past each
    prompt's length (as the stock pipeline; no mask reaches the transformer). CFG is Wan's plain CFG, two forwards
    per step: `v = v_uncond + w · (v_cond − v_uncond)` on `negative_prompt_embeds` (the negative prompt defaults to
    `""`, the stock default). The schedule is the flow-match sigma grid with Wan's fixed shift `σ ← sσ / (1 + (s −
    1)σ)` (`shift` of a flow-match scheduler config, or `flow_shift` of the `UniPCMultistepScheduler` the real
    checkpoints ship; 3.0 for 480p, 5.0 for 720p), independent of the resolution. The transformer sees the
    timestep `1000·σ`.

    Not supported (refused by name): Wan 2.2's two-expert pipelines (`transformer_2` / `boundary_ratio`) and its
    per-token timesteps (`expand_timesteps`, TI2V-5B).
    """

    pipeline_class_names = ("WanPipeline", "WanPipelineWithLogProb")
    cond_keys = ("prompt_embeds",)
    negative_cond_keys = ("negative_prompt_embeds",)
    max_prompt_tokens = MAX_SEQUENCE_LENGTH
    prompt_encoder = "Wan's UMT5"
    fsdp_layer_prefixes = ("blocks.",)
    is_video = True

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent cell (spatial)."""
        return int(self.vae_config.get("scale_factor_spatial") or 8)

    @property
    def vae_scale_factor_temporal(self) -> int:
        """Video frames per latent frame (after the first)."""
        return int(self.vae_config.get("scale_factor_temporal") or 4)

    @property
    def shift(self) -> float:
        """Wan's fixed sigma shift `s`, from the scheduler config (`shift`, or UniPC's `flow_shift`)."""
        cfg = self.scheduler_config
        return float(cfg["flow_shift"] if "flow_shift" in cfg and "shift" not in cfg else cfg.get("shift", 1.0))

    def build_scheduler(self) -> FlowMatchSDEDiscreteScheduler:
        """A `FlowMatchSDEDiscreteScheduler` with Wan's fixed shift (a UniPC `flow_shift` becomes `shift`)."""
        return FlowMatchSDEDiscreteScheduler(shift=self.shift, use_dynamic_shifting=False)

    def latent_frames(self, num_frames: int) -> int:
        """Latent frames of a `num_frames` video: `(num_frames - 1) / 4 + 1`.

        Raises:
            ValueError: `num_frames - 1` is not a multiple of the VAE's temporal factor (4).
        """
        t = self.vae_scale_factor_temporal
        if num_frames < 1 or (num_frames - 1) % t:
            raise ValueError(
                f"num_frames: Wan videos have 4k + 1 frames (1, 5, 9, ..., 81), got {num_frames}; set "
                f"rollout.pipeline.num_frames to {max(1, (num_frames - 1) // t * t + 1)}"
            )
        return (num_frames - 1) // t + 1

    def _grid(self, height: int, width: int) -> tuple[int, int]:
        f = self.vae_scale_factor * int(self.transformer_config.get("patch_size", (1, 2, 2))[-1])
        if height % f or width % f:
            raise ValueError(f"height/width: must be multiples of {f} for Wan, got {height}x{width}")
        return height // self.vae_scale_factor, width // self.vae_scale_factor

    def latent_shape(self, height: int, width: int, num_frames: int = 1) -> tuple[int, ...]:
        """Per-sample latent shape `(C, F', H/8, W/8)` of a `num_frames` x `height` x `width` video."""
        h, w = self._grid(height, width)
        return (int(self.transformer_config["in_channels"]), self.latent_frames(num_frames), h, w)

    def prepare_latents(
        self,
        batch_size: int,
        height: int,
        width: int,
        generator: torch.Generator | list[torch.Generator] | None,
        device: Any,
        num_frames: int = 1,
    ) -> torch.Tensor:
        """Initial noise, float32 `(batch_size, C, F', H/8, W/8)`, one generator per row when a list (as stock)."""
        from diffusers.utils.torch_utils import randn_tensor

        if isinstance(generator, list) and len(generator) != batch_size:
            raise ValueError(f"generator: {len(generator)} generators for a batch of {batch_size} rows")
        shape = (batch_size, *self.latent_shape(height, width, num_frames))
        return randn_tensor(shape, generator=generator, device=device, dtype=torch.float32)

    def check_latents(self, latents: torch.Tensor, height: int, width: int, key: str = "latents") -> None:
        """Raise `ValueError` naming `key` unless `latents` is `(B, C, F', H/8, W/8)` (any number of frames)."""
        c, _, h, w = self.latent_shape(height, width)
        if latents.dim() != 5 or latents.shape[1] != c or tuple(latents.shape[3:]) != (h, w):
            raise ValueError(
                f"{key}: expected shape (B, {c}, frames, {h}, {w}) for a {height}x{width} video with wan, got "
                f"{tuple(latents.shape)}"
            )

    def set_timesteps(
        self, scheduler: Any, num_inference_steps: int, height: int, width: int, device: Any = None
    ) -> None:
        """The stock `scheduler.set_timesteps(N)`: the fixed shift over the flow-match grid, at any resolution."""
        scheduler.set_timesteps(num_inference_steps, device=device)

    def encode_prompts(
        self,
        pipe: Any,
        prompts: list[str],
        *,
        negative_prompt: str | None,
        do_cfg: bool,
        max_sequence_length: int,
        device: Any,
    ) -> TensorDict:
        """`prompt_embeds` `(B, max_sequence_length, D)` and, with CFG, `negative_prompt_embeds` likewise (UMT5).

        Raises:
            ValueError: `max_sequence_length` above 512, or a Wan 2.2 pipeline (two experts or per-token timesteps).
        """
        config = getattr(pipe, "config", {})
        if getattr(pipe, "transformer_2", None) is not None or config.get("boundary_ratio") is not None:
            raise ValueError(
                "model: Wan 2.2's two-expert pipelines (transformer_2 / boundary_ratio) are not supported; use a "
                "Wan 2.1 WanPipeline folder"
            )
        if config.get("expand_timesteps"):
            raise ValueError("model: Wan 2.2 TI2V's per-token timesteps (expand_timesteps) are not supported")
        self.check_max_sequence_length(max_sequence_length)
        embeds, negative = pipe.encode_prompt(
            prompt=prompts, negative_prompt=negative_prompt or "", do_classifier_free_guidance=do_cfg,
            num_videos_per_prompt=1, max_sequence_length=max_sequence_length, device=device,
        )  # fmt: skip
        negative_cond = {"prompt_embeds": negative} if do_cfg else None
        return self.prompt_batch({"prompt_embeds": embeds}, negative_cond, len(prompts), device)

    def velocity(
        self,
        transformer: Any,
        latents: torch.Tensor,
        timesteps: torch.Tensor,
        cond: TensorDict,
        *,
        guidance_scale: float,
        height: int,
        width: int,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """Velocity, float32 `(B, C, F', h, w)`; with `guidance_scale > 1` a second, unconditional forward (CFG).

        Raises:
            ValueError: latents of another shape; CFG without `negative_prompt_embeds` in `cond`.
        """
        self.check_latents(latents, height, width)
        dtype = dtype or _input_dtype(transformer)
        b = latents.shape[0]
        x = latents.to(dtype)
        t = timesteps.to(latents.device).expand(b)

        def forward(embeds: torch.Tensor) -> torch.Tensor:
            return transformer(hidden_states=x, timestep=t, encoder_hidden_states=embeds.to(dtype),
                               return_dict=False)[0]  # fmt: skip

        v = forward(cond["prompt_embeds"])
        if guidance_scale > 1:
            if "negative_prompt_embeds" not in cond.keys():  # noqa: SIM118 - some TensorDict versions refuse `in`
                raise ValueError(
                    f"guidance_scale: {guidance_scale} asks for CFG but the conditioning has no negative_prompt_embeds "
                    "(encode the prompts with do_cfg=True)"
                )
            uncond = forward(cond["negative_prompt_embeds"])
            v = uncond + guidance_scale * (v - uncond)
        return v.float()

    def decode(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Undo the per-channel latent normalisation, decode each row, return uint8 videos `(B, F, 3, H, W)`."""
        self.check_latents(latents, height, width)
        vae = pipe.vae
        x = latents.to(vae.dtype)
        z = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        x = x / inv_std + mean
        video = vae.decode(x, return_dict=False)[0]
        return to_uint8(pipe.video_processor.postprocess_video(video, output_type="pt"))


def _input_dtype(transformer: Any) -> torch.dtype:
    """The compute dtype: the patch embedding's.

    Wan keeps its norms and `scale_shift_table` in float32, so the first parameter does not tell it (the stock
    pipeline's `transformer.dtype` skips them too).
    """
    embed = getattr(transformer, "patch_embedding", None)
    weight = getattr(embed, "weight", None)
    return weight.dtype if isinstance(weight, torch.Tensor) else DiffusionModelBase.module_dtype(transformer)
