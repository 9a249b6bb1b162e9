"""`QwenImageAdapter`: Qwen-Image prompt encoding, packed latents, norm-rescaled true CFG, decode."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl_omni.models.base import DiffusionModelBase, calculate_shift, register, to_uint8

__all__ = ["QwenImageAdapter"]


@register("qwen_image")
class QwenImageAdapter(DiffusionModelBase):
    """Adapter for `QwenImagePipeline`.

    Latents are 2x2-packed tokens `(H/16 · W/16, 4 · z_dim)`. The transformer sees `timestep / 1000` (= σ).
    Guidance is "true CFG" with norm rescaling per token: `c = v_n + w (v_c − v_n)`, `v = c · ‖v_c‖ / ‖c‖`,
    used when `w > 1` and negative embeddings are present (two forward passes, as the stock pipeline).
    """

    pipeline_class_names = ("QwenImagePipeline", "QwenImagePipelineWithLogProb")
    cond_keys = ("prompt_embeds", "prompt_embeds_mask")
    negative_cond_keys = ("negative_prompt_embeds", "negative_prompt_embeds_mask")

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent cell."""
        return 2 ** len(self.vae_config.get("temperal_downsample", [False, True, True]))

    @property
    def latent_channels(self) -> int:
        """VAE latent channels (before 2x2 packing)."""
        return int(self.transformer_config["in_channels"]) // 4

    def _grid(self, height: int, width: int) -> tuple[int, int]:
        f = self.vae_scale_factor * 2
        if height % f or width % f:
            raise ValueError(f"height/width: must be multiples of {f} for Qwen-Image, got {height}x{width}")
        return height // f, width // f

    def latent_shape(self, height: int, width: int) -> tuple[int, ...]:
        """Per-sample latent shape for a `height` x `width` image."""
        gh, gw = self._grid(height, width)
        return (gh * gw, self.latent_channels * 4)

    def _noise_shape(self, batch_size: int, height: int, width: int) -> tuple[int, ...]:
        gh, gw = self._grid(height, width)
        return (batch_size, 1, self.latent_channels, 2 * gh, 2 * gw)

    def _noise_to_latents(self, noise: torch.Tensor, height: int, width: int) -> torch.Tensor:
        b, _, c, h, w = noise.shape
        x = noise.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // 2) * (w // 2), c * 4)

    def set_timesteps(
        self, scheduler: Any, num_inference_steps: int, height: int, width: int, device: Any = None
    ) -> None:
        """Sigmas `linspace(1, 1/N, N)` with the dynamic shift of the stock `QwenImagePipeline`."""
        gh, gw = self._grid(height, width)
        cfg = scheduler.config
        mu = calculate_shift(
            gh * gw,
            cfg.get("base_image_seq_len", 256),
            cfg.get("max_image_seq_len", 4096),
            cfg.get("base_shift", 0.5),
            cfg.get("max_shift", 1.15),
        )
        sigmas = np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)

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
        """`prompt_embeds` `(B, S, D)` and `prompt_embeds_mask` `(B, S)` int64, padded to S = max_sequence_length."""
        embeds, mask = self._encode(pipe, prompts, max_sequence_length, device)
        negative = None
        if do_cfg:
            negative_prompt = " " if negative_prompt is None else negative_prompt
            neg, neg_mask = self._encode(pipe, [negative_prompt] * len(prompts), max_sequence_length, device)
            negative = {"prompt_embeds": neg, "prompt_embeds_mask": neg_mask}
        return self.prompt_batch({"prompt_embeds": embeds, "prompt_embeds_mask": mask}, negative, len(prompts), device)

    @staticmethod
    def _encode(pipe: Any, prompts: list[str], length: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        embeds, mask = pipe.encode_prompt(prompt=prompts, device=device, max_sequence_length=length)
        b, s, d = embeds.shape
        if mask is None:
            mask = torch.ones(b, s, dtype=torch.long, device=embeds.device)
        padded = embeds.new_zeros(b, length, d)
        padded[:, :s] = embeds
        padded_mask = torch.zeros(b, length, dtype=torch.long, device=embeds.device)
        padded_mask[:, :s] = mask.long()
        return padded, padded_mask

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
        """Guided velocity, float32 `(B, L, C)`; see the class docstring for the guidance rule."""
        self.check_latents(latents, height, width)
        dtype = dtype or self.module_dtype(transformer)
        gh, gw = self._grid(height, width)
        b = latents.shape[0]
        hidden = latents.to(dtype)
        t = timesteps.to(device=latents.device, dtype=dtype).expand(b) / 1000
        img_shapes = [[(1, gh, gw)]] * b
        guidance = None
        if self.transformer_config.get("guidance_embeds", False):
            guidance = torch.full((b,), float(guidance_scale), device=latents.device, dtype=torch.float32)

        def run(embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            embeds, mask = _trim_padding(embeds, mask)
            out = transformer(
                hidden_states=hidden,
                timestep=t,
                guidance=guidance,
                encoder_hidden_states_mask=mask,
                encoder_hidden_states=embeds.to(dtype),
                img_shapes=img_shapes,
                return_dict=False,
            )[0]
            return out.float()

        v_cond = run(cond["prompt_embeds"], cond["prompt_embeds_mask"])
        if guidance is not None or guidance_scale <= 1 or "negative_prompt_embeds" not in set(cond.keys()):
            return v_cond
        v_neg = run(cond["negative_prompt_embeds"], cond["negative_prompt_embeds_mask"])
        comb = v_neg + guidance_scale * (v_cond - v_neg)
        return comb * (torch.norm(v_cond, dim=-1, keepdim=True) / torch.norm(comb, dim=-1, keepdim=True))

    def decode(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Unpack, un-normalise with the VAE's latents mean/std, decode, return uint8 `(B, 3, H, W)`."""
        self.check_latents(latents, height, width)
        gh, gw = self._grid(height, width)
        b, _, ch = latents.shape
        x = latents.view(b, gh, gw, ch // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, ch // 4, 1, 2 * gh, 2 * gw)
        vae = pipe.vae
        x = x.to(vae.dtype)
        z = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(x.device, x.dtype)
        x = x / inv_std + mean
        image = vae.decode(x, return_dict=False)[0][:, :, 0]
        return to_uint8(pipe.image_processor.postprocess(image, output_type="pt"))


def _trim_padding(embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Drop trailing all-padding text columns; mask `None` when every remaining token is valid (as stock).

    Padding tokens are masked out of attention and text RoPE positions do not depend on the padded length, so
    this changes no result beyond float rounding; it only saves the work on padding tokens.
    """
    valid = mask.bool()
    used = valid.any(dim=0).nonzero()
    length = int(used.max()) + 1 if used.numel() else 1
    embeds, valid = embeds[:, :length], valid[:, :length]
    return embeds, (None if bool(valid.all()) else mask[:, :length])
