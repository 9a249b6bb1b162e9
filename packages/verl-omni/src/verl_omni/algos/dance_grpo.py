"""DanceGRPO (arXiv:2505.07818): the random subset of stored SDE steps each sample trains on.

DanceGRPO's other ingredient, the shared initial noise of a prompt's group, is a sampler setting
(`rollout.algo.init_same_noise`, in `verl_omni.pipelines.sample_with_logprob`); its loss is FlowGRPO's clipped
surrogate. The formulas and decisions are in docs/omni/math.md (§DanceGRPO).
"""

from __future__ import annotations

import torch

__all__ = ["timestep_subset_mask", "timesteps_per_sample"]


def timesteps_per_sample(num_steps: int, fraction: float) -> int:
    """How many of `num_steps` stored SDE steps each sample trains on: `max(1, ⌊num_steps · fraction⌋)`.

    Args:
        num_steps (`int`): K, the stored (stochastic) steps of each trajectory (>= 1).
        fraction (`float`): τ in (0, 1] (`algorithm.timestep_fraction`).

    Raises:
        ValueError: `num_steps` < 1 or `fraction` outside (0, 1].
    """
    if num_steps < 1:
        raise ValueError(f"num_steps: expected an int >= 1 stored SDE steps, got {num_steps}")
    if not 0 < fraction <= 1:
        raise ValueError(f"algorithm.timestep_fraction: expected a float in (0, 1], got {fraction}")
    return max(1, int(num_steps * fraction))


def timestep_subset_mask(batch: int, num_steps: int, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """Per sample, a uniformly random subset of `timesteps_per_sample(num_steps, fraction)` of its stored steps.

    Each row permutes `range(num_steps)` with `generator` (rows in order) and keeps the first `m` entries, as
    DanceGRPO's `train_grpo_flux.py` does per sample.

    Args:
        batch (`int`): B rows.
        num_steps (`int`): K stored steps per row.
        fraction (`float`): τ in (0, 1].
        generator (`torch.Generator`): the (CPU) source of the permutations; seed it per training step.

    Returns:
        `torch.Tensor` of shape `(B, K)`, bool: True where the row trains the step; every row has `m` Trues.
    """
    m = timesteps_per_sample(num_steps, fraction)
    mask = torch.zeros(batch, num_steps, dtype=torch.bool)
    for row in range(batch):
        mask[row, torch.randperm(num_steps, generator=generator)[:m]] = True
    return mask
