"""`SD3Adapter`: Stable Diffusion 3 / 3.5 prompt encoding, latents, plain CFG, decode."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from verl_omni.models.base import DiffusionModelBase, calculate_shift, register, to_uint8

__all__ = ["SD3Adapter"]


@register("sd3")
class SD3Adapter(DiffusionModelBase):
    """Adapter for `StableDiffusion3Pipeline`.

    Latents are `(16, H/8, W/8)`. The transformer sees the timestep in [0, 1000]. Guidance is plain CFG
    `v = v_u + w (v_c − v_u)` when `w > 1`, computed in one batched forward on `cat([negative, positive])`
    (as the stock pipeline); gradients flow through both branches.
    """

    pipeline_class_names = ("StableDiffusion3Pipeline", "StableDiffusion3PipelineWithLogProb")
    cond_keys = ("prompt_embeds", "pooled_prompt_embeds")
    negative_cond_keys = ("negative_prompt_embeds", "negative_pooled_prompt_embeds")

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent cell."""
        return 2 ** (len(self.vae_config.get("block_out_channels", [0, 0, 0, 0])) - 1)

    def latent_shape(self, height: int, width: int) -> tuple[int, ...]:
        """Per-sample latent shape for a `height` x `width` image."""
        f = self.vae_scale_factor * int(self.transformer_config.get("patch_size", 2))
        if height % f or width % f:
            raise ValueError(f"height/width: must be multiples of {f} for SD3, got {height}x{width}")
        c = int(self.transformer_config["in_channels"])
        return (c, height // self.vae_scale_factor, width // self.vae_scale_factor)

    def set_timesteps(
        self, scheduler: Any, num_inference_steps: int, height: int, width: int, device: Any = None
    ) -> None:
        """`set_timesteps(N)` (static shift), or with `mu` when the scheduler uses dynamic shifting."""
        cfg = scheduler.config
        if cfg.get("use_dynamic_shifting", False):
            patch = int(self.transformer_config.get("patch_size", 2))
            _, h, w = self.latent_shape(height, width)
            mu = calculate_shift(
                (h // patch) * (w // patch),
                cfg.get("base_image_seq_len", 256),
                cfg.get("max_image_seq_len", 4096),
                cfg.get("base_shift", 0.5),
                cfg.get("max_shift", 1.16),
            )
            scheduler.set_timesteps(num_inference_steps, device=device, mu=mu)
        else:
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
        """`prompt_embeds` `(B, 77 + S, D)`, `pooled_prompt_embeds` `(B, P)` (+ negatives when `do_cfg`)."""
        pe, npe, pooled, npooled = pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=device,
            num_images_per_prompt=1,
            do_classifier_free_guidance=do_cfg,
            negative_prompt=negative_prompt if negative_prompt is not None else "",
            max_sequence_length=max_sequence_length,
        )
        negative = {"prompt_embeds": npe, "pooled_prompt_embeds": npooled} if do_cfg else None
        return self.prompt_batch({"prompt_embeds": pe, "pooled_prompt_embeds": pooled}, negative, len(prompts), device)

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
        """Guided velocity, float32 `(B, 16, H/8, W/8)`; see the class docstring for the guidance rule."""
        self.check_latents(latents, height, width)
        dtype = dtype or self.module_dtype(transformer)
        b = latents.shape[0]
        t = timesteps.to(device=latents.device, dtype=torch.float32).expand(b)
        embeds, pooled = cond["prompt_embeds"], cond["pooled_prompt_embeds"]
        do_cfg = guidance_scale > 1
        hidden = latents.to(dtype)
        if do_cfg:
            if "negative_prompt_embeds" not in set(cond.keys()):
                raise ValueError(
                    "cond: guidance_scale > 1 needs negative_prompt_embeds / negative_pooled_prompt_embeds"
                )
            hidden = torch.cat([hidden, hidden])
            t = torch.cat([t, t])
            embeds = torch.cat([cond["negative_prompt_embeds"], embeds])
            pooled = torch.cat([cond["negative_pooled_prompt_embeds"], pooled])
        out = transformer(
            hidden_states=hidden,
            timestep=t,
            encoder_hidden_states=embeds.to(dtype),
            pooled_projections=pooled.to(dtype),
            return_dict=False,
        )[0].float()
        if not do_cfg:
            return out
        v_uncond, v_cond = out.chunk(2)
        return v_uncond + guidance_scale * (v_cond - v_uncond)

    def decode(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Undo the VAE scaling/shift, decode, return uint8 `(B, 3, H, W)`."""
        self.check_latents(latents, height, width)
        vae = pipe.vae
        x = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        image = vae.decode(x, return_dict=False)[0]
        return to_uint8(pipe.image_processor.postprocess(image, output_type="pt"))
