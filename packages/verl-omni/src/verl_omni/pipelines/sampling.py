"""The one sampling loop of the log-prob pipelines: images plus the trajectory as a `TensorDict`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from diffusers.utils import BaseOutput
from tensordict import TensorDict

from verl_omni.models.base import DiffusionModelBase
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler, draw_sde_window

__all__ = ["LogProbPipelineOutput", "make_generators", "sample_with_logprob"]


@dataclass
class LogProbPipelineOutput(BaseOutput):
    """Output of the log-prob pipelines.

    Args:
        images (`torch.Tensor` of shape `(B, 3, H, W)`, uint8): the decoded images, `B = len(prompts) * n`.
        trajectory (`TensorDict` of batch `[B]`): the layout documented in docs/omni/sampling.md.
    """

    images: torch.Tensor
    trajectory: TensorDict


def make_generators(seed: int, count: int, device: Any = "cpu") -> list[torch.Generator]:
    """One generator per row: row `r` is seeded with `seed + r`."""
    return [torch.Generator(device=device).manual_seed(seed + r) for r in range(count)]


def sample_with_logprob(
    pipe: Any,
    adapter: DiffusionModelBase,
    scheduler: FlowMatchSDEDiscreteScheduler,
    prompts: list[str],
    config: DiffusionSamplingConfig,
    generator: torch.Generator | list[torch.Generator] | None = None,
    *,
    decode: bool = True,
) -> LogProbPipelineOutput:
    """Generate `config.n` images per prompt and record the SDE-window trajectory.

    Steps inside the window `[start, start + K)` use `config.noise_level`; the others are exact Euler (ODE)
    steps. The window is drawn once per call from the first row's generator.

    Args:
        pipe: a loaded `QwenImagePipeline` / `StableDiffusion3Pipeline` (or subclass).
        adapter (`DiffusionModelBase`): the model adapter (velocity, latents, decode).
        scheduler (`FlowMatchSDEDiscreteScheduler`): the SDE scheduler (its schedule is set here).
        prompts (`list[str]`): the prompts; rows are prompt-major (`prompt_index = row // n`).
        config (`DiffusionSamplingConfig`): sampling parameters.
        generator (`torch.Generator` or list of `B`, *optional*): noise source; `config.seed` builds one
            generator per row when this is None.
        decode (`bool`, defaults to `True`): decode images (else `images` is an empty uint8 tensor).

    Returns:
        [`LogProbPipelineOutput`].

    Raises:
        ValueError: empty or non-string prompts, a generator list of the wrong length.
    """
    # 1. Check inputs
    if isinstance(prompts, str) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"prompts: expected a non-empty list of str, got {prompts!r}")
    n, steps, height, width = config.n, config.num_inference_steps, config.height, config.width
    batch = len(prompts) * n
    device = pipe._execution_device
    if generator is None and config.seed is not None:
        generator = make_generators(config.seed, batch, device)
    if isinstance(generator, list) and len(generator) != batch:
        raise ValueError(f"generator: {len(generator)} generators for {len(prompts)} prompts x n={n} = {batch} rows")
    transformer = pipe.transformer

    # 2. Encode prompts once per prompt, then repeat for the n samples of each prompt
    cond = adapter.encode_prompts(
        pipe,
        list(prompts),
        negative_prompt=config.negative_prompt,
        do_cfg=config.do_cfg,
        max_sequence_length=config.max_sequence_length,
        device=device,
    )
    if n > 1:
        cond = cond.repeat_interleave(n, dim=0)

    # 3. Prepare latents (float32) and the schedule
    latents = adapter.prepare_latents(batch, height, width, generator, device)
    adapter.set_timesteps(scheduler, steps, height, width, device=device)
    timesteps = scheduler.timesteps
    sigmas = scheduler.sigmas

    # 4. Draw the SDE window
    window_gen = generator[0] if isinstance(generator, list) else generator
    start, end = draw_sde_window(steps, config.sde_window_size, config.sde_window_range, window_gen)

    # 5. Denoising loop
    stored, log_probs = [], []
    for i in range(steps):
        stochastic = start <= i < end and config.noise_level > 0
        if i == start:
            stored.append(latents)
        t = timesteps[i]
        v = adapter.velocity(
            transformer, latents, t.expand(batch), cond, guidance_scale=config.guidance_scale, height=height,
            width=width,
        )  # fmt: skip
        out = scheduler.step(
            v,
            t,
            latents,
            generator=generator,
            noise_level=config.noise_level if stochastic else 0.0,
            sde_type=config.sde_type,
            cps_logprob=config.cps_logprob,
            step_index=i,
            return_logprobs=stochastic,
        )
        latents = out.prev_sample
        if start <= i < end:
            stored.append(latents)
            log_probs.append(out.log_prob if stochastic else torch.zeros(batch, device=latents.device))

    # 6. Decode
    images = adapter.decode(pipe, latents, height, width) if decode else torch.empty(0, dtype=torch.uint8)
    pipe.maybe_free_model_hooks()

    # 7. Trajectory
    k = end - start
    idx = torch.arange(start, end, device=latents.device)
    rows = torch.arange(batch, device=latents.device)
    traj = {
        "latents": torch.stack(stored, dim=1) if stored else latents.new_zeros(batch, 0, *latents.shape[1:]),
        "log_probs": torch.stack(log_probs, dim=1) if log_probs else latents.new_zeros(batch, 0),
        "timesteps": timesteps[start:end].float().to(latents.device).expand(batch, k).clone(),
        "step_indices": idx.expand(batch, k).clone(),
        "sigmas": sigmas[start:end].float().to(latents.device).expand(batch, k).clone(),
        "sigmas_next": sigmas[start + 1 : end + 1].float().to(latents.device).expand(batch, k).clone(),
        "noise_level": torch.full((batch,), float(config.noise_level), device=latents.device),
        "guidance_scale": torch.full((batch,), float(config.guidance_scale), device=latents.device),
        "num_inference_steps": torch.full((batch,), steps, dtype=torch.long, device=latents.device),
        "height": torch.full((batch,), height, dtype=torch.long, device=latents.device),
        "width": torch.full((batch,), width, dtype=torch.long, device=latents.device),
        "prompt_index": rows // n,
    }
    if decode:
        traj["images"] = images
    trajectory = TensorDict(traj, batch_size=[batch], device=latents.device)
    trajectory.update(cond.to(latents.device))
    return LogProbPipelineOutput(images=images, trajectory=trajectory)
