"""The one sampling loop of the log-prob pipelines: images plus the trajectory as a `TensorDict`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from diffusers.utils import BaseOutput
from tensordict import TensorDict

from verl_omni.models.base import DiffusionModelBase
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.schedulers.flow_match_dpm import FlowMatchDPMSolver, post_window_sigmas
from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler, draw_sde_window
from verl_omni.schedulers.settings import setting_code

__all__ = ["GenerationAborted", "LogProbPipelineOutput", "make_generators", "sample_with_logprob"]


class GenerationAborted(RuntimeError):
    """Raised by `sample_with_logprob` when its `should_abort` callback asked it to stop before step `step`."""

    def __init__(self, step: int, num_steps: int) -> None:
        self.step = step
        self.num_steps = num_steps
        super().__init__(f"generation aborted before denoising step {step} of {num_steps}")


@dataclass
class LogProbPipelineOutput(BaseOutput):
    """Output of the log-prob pipelines.

    Args:
        images (`torch.Tensor` of shape `(B, 3, H, W)`, uint8): the decoded images, `B = len(prompts) * n`; a video
            model's videos are `(B, num_frames, 3, H, W)`.
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
    should_abort: Callable[[], bool] | None = None,
) -> LogProbPipelineOutput:
    """Generate `config.n` images per prompt and record the SDE-window trajectory.

    Steps inside the window `[start, start + K)` use `config.noise_level`; the others are exact Euler (ODE)
    steps. The window is drawn once per call from the first row's generator (no draw when only one start is
    possible, see `draw_sde_window`). With `config.calculate_log_probs=False` every step is Euler and only the
    clean latents, the timestep grid and the prompt embeddings are recorded. With `config.dpm_algorithm_type`
    (MixGRPO-Flash) the ODE steps after the window (`"post"`, on a compressed grid) or all of them (`"all"`) take
    DPM-Solver++ instead; the window's steps, latents and log-probs are the same as without it.

    Args:
        pipe: a loaded `QwenImagePipeline` / `StableDiffusion3Pipeline` (or subclass).
        adapter (`DiffusionModelBase`): the model adapter (velocity, latents, decode).
        scheduler (`FlowMatchSDEDiscreteScheduler`): the SDE scheduler (its schedule is set here).
        prompts (`list[str]`): the prompts; rows are prompt-major (`prompt_index = row // n`).
        config (`DiffusionSamplingConfig`): sampling parameters.
        generator (`torch.Generator` or list of `B`, *optional*): noise source; `config.seed` builds one
            generator per row when this is None.
        decode (`bool`, defaults to `True`): decode images (else `images` is an empty uint8 tensor).
        should_abort (`Callable[[], bool]`, *optional*): checked before every denoising step and before decoding;
            when it returns True the call stops and raises `GenerationAborted` (a rollout server's abort).

    Returns:
        [`LogProbPipelineOutput`].

    Raises:
        ValueError: empty or non-string prompts, a generator list of the wrong length.
        GenerationAborted: `should_abort` returned True.
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

    # 3. Prepare latents (float32) and the schedule; DanceGRPO shares each prompt's first x_T with its group
    latents = _prepare_latents(adapter, config, batch, generator, device)
    if config.init_same_noise and n > 1:
        latents = latents[::n].repeat_interleave(n, dim=0)
    adapter.set_timesteps(scheduler, steps, height, width, device=device)
    timesteps = scheduler.timesteps
    sigmas = scheduler.sigmas

    # 4. Draw the SDE window: one per call (from the first row's generator) or one per row; none without log-probs
    if not config.calculate_log_probs:
        windows = [(0, 0)] * batch
    elif config.sde_window_per_row:
        if not isinstance(generator, list):
            raise ValueError("sde_window_per_row: needs one generator per row (set seed or pass a generator list)")
        windows = [draw_sde_window(steps, config.sde_window_size, config.sde_window_range, g) for g in generator]
    else:
        window_gen = generator[0] if isinstance(generator, list) else generator
        windows = [draw_sde_window(steps, config.sde_window_size, config.sde_window_range, window_gen)] * batch
    starts = [w[0] for w in windows]
    k = windows[0][1] - windows[0][0]
    window_latents = latents.new_empty(batch, k + 1, *latents.shape[1:])
    window_log_probs = latents.new_zeros(batch, k)
    # MixGRPO-Flash: DPM-Solver++ outside the window (one window per call); "post" stops the loop at its end
    flash = None
    if config.dpm_algorithm_type is not None and k > 0 and config.noise_level > 0:
        flash = FlowMatchDPMSolver(config.dpm_solver_order)
    post_from = starts[0] + k if flash is not None and config.dpm_apply_strategy == "post" else steps

    # 5. Denoising loop (then, for "post", the ODE after the window on its compressed grid)
    for i in range(post_from):
        if should_abort is not None and should_abort():
            raise GenerationAborted(i, steps)
        begins = [r for r in range(batch) if starts[r] == i]
        if begins:
            window_latents[begins, 0] = latents[begins]
        inside = [r for r in range(batch) if starts[r] <= i < starts[r] + k]
        stochastic = bool(inside) and config.noise_level > 0
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
        new_latents = out.prev_sample
        if flash is not None and stochastic:
            flash.reset()  # the multistep history belongs to one ODE path
        elif flash is not None:
            new_latents = flash.step(v, latents, float(sigmas[i]), float(sigmas[i + 1]))
        if stochastic and len(inside) < batch:  # per-row windows: rows outside take the exact Euler step
            euler = scheduler.step(v, t, latents, noise_level=0.0, step_index=i, return_logprobs=False).prev_sample
            keep = torch.zeros(batch, dtype=torch.bool)
            keep[inside] = True
            new_latents = torch.where(_expand_rows(keep.to(latents.device), latents), new_latents, euler)
        latents = new_latents
        if inside:
            pos = [i - starts[r] for r in inside]
            window_latents[inside, [p + 1 for p in pos]] = latents[inside]
            if stochastic:
                window_log_probs[inside, pos] = out.log_prob[inside].to(window_log_probs.dtype)
    if post_from < steps:
        latents = _post_window_ode(adapter, transformer, scheduler, latents, cond, config, post_from, should_abort)

    # 6. Decode
    if should_abort is not None and should_abort():
        raise GenerationAborted(steps, steps)
    images = adapter.decode(pipe, latents, height, width) if decode else torch.empty(0, dtype=torch.uint8)
    pipe.maybe_free_model_hooks()

    # 7. Trajectory
    dev = latents.device
    if not config.calculate_log_probs:
        trajectory = _clean_trajectory(config, latents, timesteps, sigmas, batch, cond)
        if decode:
            trajectory["images"] = images
        return LogProbPipelineOutput(images=images, trajectory=trajectory)
    idx = (torch.tensor(starts, dtype=torch.long)[:, None] + torch.arange(k)[None, :]).to(dev)
    sig = sigmas.float().to(dev)
    rows = torch.arange(batch, device=dev)
    traj = {
        "latents": window_latents,
        "log_probs": window_log_probs,
        "timesteps": timesteps.float().to(dev)[idx],
        "step_indices": idx,
        "sigmas": sig[idx],
        "sigmas_next": sig[idx + 1],
        "noise_level": torch.full((batch,), float(config.noise_level), device=latents.device),
        "sde_type": torch.full((batch,), setting_code("sde_type", config.sde_type), dtype=torch.long, device=dev),
        "cps_logprob": torch.full(
            (batch,), setting_code("cps_logprob", config.cps_logprob), dtype=torch.long, device=dev
        ),
        "guidance_scale": torch.full((batch,), float(config.guidance_scale), device=latents.device),
        "num_inference_steps": torch.full((batch,), steps, dtype=torch.long, device=latents.device),
        "height": torch.full((batch,), height, dtype=torch.long, device=latents.device),
        "width": torch.full((batch,), width, dtype=torch.long, device=latents.device),
        "prompt_index": rows // n,
    }
    if getattr(adapter, "is_video", False):
        traj["num_frames"] = torch.full((batch,), config.num_frames, dtype=torch.long, device=dev)
    if decode:
        traj["images"] = images
    trajectory = TensorDict(traj, batch_size=[batch], device=dev)
    trajectory.update(cond.to(dev))
    return LogProbPipelineOutput(images=images, trajectory=trajectory)


def _post_window_ode(
    adapter: DiffusionModelBase,
    transformer: Any,
    scheduler: FlowMatchSDEDiscreteScheduler,
    latents: torch.Tensor,
    cond: Any,
    config: DiffusionSamplingConfig,
    start: int,
    should_abort: Callable[[], bool] | None,
) -> torch.Tensor:
    """MixGRPO-Flash's `"post"` strategy: the ODE from the end of the window to σ = 0 with DPM-Solver++.

    The grid is `post_window_sigmas` from step `start`: `max(1, round((N - start) * dpm_post_compress_ratio))`
    forwards instead of `N - start`.
    """
    grid = post_window_sigmas(scheduler.sigmas, start, config.dpm_post_compress_ratio).tolist()
    solver = FlowMatchDPMSolver(config.dpm_solver_order)
    batch, scale = latents.shape[0], scheduler.config.num_train_timesteps
    for sigma, sigma_next in itertools.pairwise(grid):
        if should_abort is not None and should_abort():
            raise GenerationAborted(start, config.num_inference_steps)
        t = torch.full((batch,), sigma * scale, dtype=scheduler.timesteps.dtype, device=latents.device)
        v = adapter.velocity(
            transformer, latents, t, cond, guidance_scale=config.guidance_scale, height=config.height,
            width=config.width,
        )  # fmt: skip
        latents = solver.step(v, latents, sigma, sigma_next)
    return latents


def _clean_trajectory(
    config: DiffusionSamplingConfig,
    latents: torch.Tensor,
    timesteps: torch.Tensor,
    sigmas: torch.Tensor,
    batch: int,
    cond: TensorDict,
) -> TensorDict:
    """The trajectory of a call without log-probs: what a loss on clean samples reads, nothing more.

    `latents_clean` `(B, *latent)` (the final latents x₀), `timesteps` / `sigmas` `(B, N)` (the sampler's grid,
    `1000·σ_k` and `σ_k`, k < N), `guidance_scale`, the sizes, `prompt_index` and the prompt embeddings.
    """
    dev = latents.device
    n_steps = config.num_inference_steps
    full = {"dtype": torch.long, "device": dev}
    traj = {
        "latents_clean": latents,
        "timesteps": timesteps.float().to(dev)[:n_steps].expand(batch, n_steps).clone(),
        "sigmas": sigmas.float().to(dev)[:n_steps].expand(batch, n_steps).clone(),
        "guidance_scale": torch.full((batch,), float(config.guidance_scale), device=dev),
        "num_inference_steps": torch.full((batch,), n_steps, **full),
        "height": torch.full((batch,), config.height, **full),
        "width": torch.full((batch,), config.width, **full),
        "prompt_index": torch.arange(batch, device=dev) // config.n,
    }
    trajectory = TensorDict(traj, batch_size=[batch], device=dev)
    trajectory.update(cond.to(dev))
    return trajectory


def _prepare_latents(
    adapter: DiffusionModelBase,
    config: DiffusionSamplingConfig,
    batch: int,
    generator: torch.Generator | list[torch.Generator] | None,
    device: Any,
) -> torch.Tensor:
    """The initial noise; a video adapter (`is_video`) also gets `config.num_frames`, an image adapter refuses it."""
    if getattr(adapter, "is_video", False):
        return adapter.prepare_latents(batch, config.height, config.width, generator, device,
                                       num_frames=config.num_frames)  # fmt: skip
    if config.num_frames != 1:
        raise ValueError(
            f"num_frames: {adapter.name} generates images, got num_frames={config.num_frames}; set "
            "rollout.pipeline.num_frames to 1 (only video models such as wan take frames)"
        )
    return adapter.prepare_latents(batch, config.height, config.width, generator, device)


def _expand_rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a per-row mask `(B,)` to broadcast against `like` `(B, ...)`."""
    return mask.reshape(mask.shape[0], *([1] * (like.dim() - 1)))
