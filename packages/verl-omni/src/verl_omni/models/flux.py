"""`FluxAdapter`: FLUX.1 (guidance-distilled) T5 + CLIP-pooled prompts, packed latents, position ids, decode."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl_omni.models.base import DiffusionModelBase, calculate_shift, register, to_uint8

__all__ = ["FluxAdapter"]

#: FluxPipeline refuses longer T5 prompts (`check_inputs`).
MAX_SEQUENCE_LENGTH = 512


@register("flux")
class FluxAdapter(DiffusionModelBase):
    """Adapter for `FluxPipeline` (FLUX.1-dev / -schnell, `FluxTransformer2DModel`).

    Latents are 2x2-packed tokens `(H/16 · W/16, 4 · 16)`; the transformer gets 2-D position ids: image tokens
    `(0, row, col)` of the packed grid, text tokens all zero. Conditioning is the T5 sequence `prompt_embeds`
    `(B, S, D)` (padded to `max_sequence_length`, no mask, as the stock pipeline) and the CLIP pooled output
    `pooled_prompt_embeds` `(B, P)`. The transformer sees `timestep / 1000` (= σ).

    Guidance is distilled: a transformer with `guidance_embeds` gets `guidance_scale` through its guidance
    embedding, in one forward per step and with no negative prompt (FLUX.1-dev; the stock default is 3.5). A
    transformer without it (FLUX.1-schnell) ignores `guidance_scale`, as the stock pipeline does. The stock
    pipeline's optional true CFG (`true_cfg_scale` with a negative prompt) is not supported.
    """

    pipeline_class_names = ("FluxPipeline", "FluxPipelineWithLogProb")
    cond_keys = ("prompt_embeds", "pooled_prompt_embeds")
    negative_cond_keys = ()
    max_prompt_tokens = MAX_SEQUENCE_LENGTH
    prompt_encoder = "FLUX's T5"
    fsdp_layer_prefixes = ("transformer_blocks.", "single_transformer_blocks.")
    # cuDNN's fused attention backward failed in FLUX's compiled blocks on an H200 (torch 2.11, bf16, 24 heads x 128,
    # 1152 tokens): `mha_graph.execute(...).is_good()`, the defect of pytorch/pytorch#134001 and #190321
    cudnn_sdpa_in_training = False

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent cell."""
        return 2 ** (len(self.vae_config.get("block_out_channels", [0, 0, 0, 0])) - 1)

    @property
    def guidance_embeds(self) -> bool:
        """Whether the transformer is guidance-distilled (takes `guidance_scale` as an input)."""
        return bool(self.transformer_config.get("guidance_embeds", False))

    def _grid(self, height: int, width: int) -> tuple[int, int]:
        f = self.vae_scale_factor * 2
        if height % f or width % f:
            raise ValueError(f"height/width: must be multiples of {f} for FLUX, got {height}x{width}")
        return height // f, width // f

    def latent_shape(self, height: int, width: int) -> tuple[int, ...]:
        """Per-sample latent shape for a `height` x `width` image: `(H/16 · W/16, in_channels)`."""
        gh, gw = self._grid(height, width)
        return (gh * gw, int(self.transformer_config["in_channels"]))

    def _noise_shape(self, batch_size: int, height: int, width: int) -> tuple[int, ...]:
        gh, gw = self._grid(height, width)
        return (batch_size, int(self.transformer_config["in_channels"]) // 4, 2 * gh, 2 * gw)

    def _noise_to_latents(self, noise: torch.Tensor, height: int, width: int) -> torch.Tensor:
        b, c, h, w = noise.shape
        x = noise.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // 2) * (w // 2), c * 4)

    def set_timesteps(
        self, scheduler: Any, num_inference_steps: int, height: int, width: int, device: Any = None
    ) -> None:
        """Sigmas `linspace(1, 1/N, N)` shifted by `μ`, linear in the number of image tokens (stock `FluxPipeline`)."""
        gh, gw = self._grid(height, width)
        cfg = scheduler.config
        mu = calculate_shift(
            gh * gw,
            cfg.get("base_image_seq_len", 256),
            cfg.get("max_image_seq_len", 4096),
            cfg.get("base_shift", 0.5),
            cfg.get("max_shift", 1.15),
        )
        sigmas = (
            None
            if cfg.get("use_flow_sigmas", False)
            else np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        )
        if sigmas is None:
            scheduler.set_timesteps(num_inference_steps, device=device, mu=mu)
        else:
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
        """`prompt_embeds` `(B, max_sequence_length, D)` (T5) and `pooled_prompt_embeds` `(B, P)` (CLIP).

        `do_cfg` and `negative_prompt` are not used: FLUX's guidance is the distilled guidance embedding.

        Raises:
            ValueError: `max_sequence_length` above 512 (the stock pipeline's limit).
        """
        self.check_max_sequence_length(max_sequence_length)
        embeds, pooled, _ = pipe.encode_prompt(
            prompt=prompts, prompt_2=None, device=device, num_images_per_prompt=1,
            max_sequence_length=max_sequence_length,
        )  # fmt: skip
        return self.prompt_batch({"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}, None, len(prompts), device)

    def position_ids(self, height: int, width: int, text_len: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """`(img_ids (L, 3), txt_ids (S, 3))` float32: image tokens `(0, row, col)`, text tokens zero."""
        gh, gw = self._grid(height, width)
        img = torch.zeros(gh, gw, 3)
        img[..., 1] = torch.arange(gh)[:, None]
        img[..., 2] = torch.arange(gw)[None, :]
        return img.reshape(gh * gw, 3).to(device), torch.zeros(text_len, 3, device=device)

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
        """Velocity, float32 `(B, L, C)`: one forward, `guidance_scale` through the guidance embedding."""
        self.check_latents(latents, height, width)
        dtype = dtype or self.module_dtype(transformer)
        b = latents.shape[0]
        embeds = cond["prompt_embeds"]
        img_ids, txt_ids = self.position_ids(height, width, embeds.shape[1], latents.device)
        guidance = None
        if self.guidance_embeds:
            guidance = torch.full((b,), float(guidance_scale), device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=timesteps.to(device=latents.device, dtype=dtype).expand(b) / 1000,
            guidance=guidance,
            pooled_projections=cond["pooled_prompt_embeds"].to(dtype),
            encoder_hidden_states=embeds.to(dtype),
            txt_ids=txt_ids,
            img_ids=img_ids,
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Unpack, undo the VAE scaling/shift, decode, return uint8 `(B, 3, H, W)`."""
        self.check_latents(latents, height, width)
        gh, gw = self._grid(height, width)
        b, _, ch = latents.shape
        x = latents.view(b, gh, gw, ch // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, ch // 4, 2 * gh, 2 * gw)
        vae = pipe.vae
        x = x.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        image = vae.decode(x, return_dict=False)[0]
        return to_uint8(pipe.image_processor.postprocess(image, output_type="pt"))
