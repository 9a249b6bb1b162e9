"""The unguided velocity of the engine's module at forward-noised clean latents, for the updates that train on them.

A loss on clean samples (DiffusionNFT, `engine/clean_update.py`) and a loss on preference pairs (Diffusion-DPO,
`engine/pair_update.py`) both noise the rollout's final latents along the flow, `x_t = (1 − σ)·x₀ + σ·ε`, and read the
velocity of the module at `x_t` without CFG, at the transformer's timestep `1000·σ`. They differ only in where σ comes
from (a row's `train_timesteps`, already `1000·σ`; or `dpo_sigma`). This module is the one home of that noising, the
σ ↔ timestep scale, the velocity call, and the no-grad micro-batched loop that computes the old / reference velocities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

__all__ = ["TIMESTEP_SCALE", "no_grad_velocities", "noised_latents", "sigma_of", "timestep_of", "unguided_velocity"]

TIMESTEP_SCALE = 1000.0  # the transformer's timestep is 1000·σ (the scheduler's `num_train_timesteps`)


def timestep_of(sigma: torch.Tensor) -> torch.Tensor:
    """The transformer timestep `1000·σ` of noise level `sigma` `(B,)`."""
    return sigma * TIMESTEP_SCALE


def sigma_of(timestep: torch.Tensor) -> torch.Tensor:
    """The noise level `σ = timestep / 1000` (float32) of transformer timesteps `(B,)`."""
    return timestep.float() / TIMESTEP_SCALE


def noised_latents(clean: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """`x_t = (1 − σ)·x₀ + σ·ε` in float32.

    Args:
        clean (`torch.Tensor` of shape `(B, *latent)`): the clean latents `x₀`.
        noise (`torch.Tensor` of shape `(B, *latent)`): the noise `ε`.
        sigma (`torch.Tensor` of shape `(B,)`): the noise level of each row.
    """
    x0 = clean.float()
    sb = sigma.float().reshape(-1, *([1] * (x0.dim() - 1)))
    return (1.0 - sb) * x0 + sb * noise.float()


def unguided_velocity(engine: Any, micro: TensorDict, x_t: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
    """The velocity (float32, shape of `x_t`) of `engine.module` at `x_t`, without CFG.

    Args:
        engine (`DiffusersFSDPEngine`): reads `module`, `adapter` and `param_dtype`.
        micro (`TensorDict`, batch `[B]`): the rows' prompt embeddings, `height`, `width`.
        x_t (`torch.Tensor` of shape `(B, *latent)`): the noised latents.
        timestep (`torch.Tensor` of shape `(B,)`): the transformer timestep of each row, `1000·σ` (`timestep_of`).
    """
    return engine.adapter.velocity(
        engine.module,
        x_t,
        timestep,
        engine.adapter.conditioning(micro),
        guidance_scale=1.0,
        height=int(micro["height"][0]),
        width=int(micro["width"][0]),
        dtype=engine.param_dtype,
    )


@torch.no_grad()
def no_grad_velocities(engine: Any, batch: TensorDict, velocity: Callable[[TensorDict], torch.Tensor]) -> torch.Tensor:
    """`velocity(micro)` of the module as it stands (eval mode, no grad) over micro-batches of `batch`, concatenated.

    Args:
        engine (`DiffusersFSDPEngine`): micro-batches of `actor.log_prob_micro_batch_size_per_gpu` (else the update's
            `ppo_micro_batch_size_per_gpu`), moved to the engine's device.
        batch (`TensorDict`, batch `[B]`): the local batch.
        velocity (`Callable[[TensorDict], torch.Tensor]`): the velocities `(b, ...)` of one micro-batch of `b` rows.

    Returns:
        `torch.Tensor` of shape `(B, ...)`.
    """
    engine.module.eval()
    size = engine.config.log_prob_micro_batch_size_per_gpu or engine.config.ppo_micro_batch_size_per_gpu
    return torch.cat([velocity(engine._to_device(micro, update=True)) for micro in engine._micro_batches(batch, size)])
