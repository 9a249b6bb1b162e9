"""GRPO group advantages for FlowGRPO (derived in docs/omni/math.md §6, example E5).

One reward per trajectory; trajectories that share a prompt form a group. The advantage of sample `i` is

    A_i = (R_i − mean_{j ∈ g(i)} R_j) / (std + eps)        (norm_adv_by_std_in_grpo=True)
    A_i =  R_i − mean_{j ∈ g(i)} R_j                        (False: Dr.GRPO)

with `std` taken over the whole batch (`global_std=True`, every released config) or over the group.
The advantage clip (`diffusion_loss.adv_clip_max`) is applied inside the loss, not here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import torch

__all__ = ["compute_flow_grpo_advantages", "group_index"]

StdEstimator = Literal["unbiased", "population"]


def group_index(group_ids: torch.Tensor | Sequence[Hashable]) -> torch.Tensor:
    """Map per-sample group ids (prompt uids, ints or strings) to dense int64 indices 0..G-1 in first-seen order."""
    if isinstance(group_ids, torch.Tensor):
        if group_ids.ndim != 1:
            raise ValueError(f"group_ids: expected a 1-D tensor, got shape {tuple(group_ids.shape)}")
        group_ids = group_ids.tolist()
    seen: dict[Hashable, int] = {}
    return torch.tensor([seen.setdefault(g, len(seen)) for g in group_ids], dtype=torch.int64)


def compute_flow_grpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor | Sequence[Hashable],
    *,
    norm_adv_by_std_in_grpo: bool = True,
    global_std: bool = True,
    epsilon: float = 1e-4,
    std_estimator: StdEstimator = "unbiased",
    std_repeat: int = 1,
) -> torch.Tensor:
    """Compute per-sample GRPO advantages, computed in float64 and returned as float32.

    Args:
        rewards (`torch.Tensor` of shape `(B,)`):
            One scalar reward per trajectory.
        group_ids (`torch.Tensor` or sequence of hashables, length `B`):
            The group (prompt uid) of each trajectory.
        norm_adv_by_std_in_grpo (`bool`, *optional*, defaults to `True`):
            Divide the centred reward by `std + epsilon`; `False` is Dr.GRPO (centring only).
        global_std (`bool`, *optional*, defaults to `True`):
            One std over the whole batch; `False` uses the std of each group (a group of one gets std 1).
        epsilon (`float`, *optional*, defaults to `1e-4`):
            Added to the std.
        std_estimator (`str`, *optional*, defaults to `"unbiased"`):
            `"unbiased"` (`torch.std`, as verl / verl-omni) or `"population"` (ddof 0, as flow_grpo).
        std_repeat (`int`, *optional*, defaults to `1`):
            Take the std over the rewards repeated this many times, reproducing verl / verl-omni, which
            compute the unbiased std over the `(B, T_train)` advantage matrix (pass `T_train`). Only changes
            the unbiased estimate: `σ_pop · sqrt(BT / (BT − 1))`.

    Returns:
        `torch.Tensor` of shape `(B,)`, float32: the advantages (broadcast over the trained steps by the caller).

    Raises:
        ValueError: `rewards` is not 1-D, lengths differ, `epsilon` < 0, `std_repeat` < 1 or an unknown estimator.
    """
    if rewards.ndim != 1:
        raise ValueError(f"rewards: expected shape (B,), got {tuple(rewards.shape)}")
    index = group_index(group_ids).to(rewards.device)
    if index.numel() != rewards.numel():
        raise ValueError(f"group_ids: expected {rewards.numel()} ids (one per reward), got {index.numel()}")
    if epsilon < 0:
        raise ValueError(f"epsilon: expected a float >= 0, got {epsilon}")
    if std_repeat < 1:
        raise ValueError(f"std_repeat: expected an int >= 1 (the number of trained steps), got {std_repeat}")
    if std_estimator not in ("unbiased", "population"):
        raise ValueError(f"std_estimator: expected 'unbiased' or 'population', got {std_estimator!r}")

    r = rewards.detach().to(torch.float64)
    num_groups = int(index.max().item()) + 1 if index.numel() else 0
    counts = torch.zeros(num_groups, dtype=torch.float64, device=r.device).index_add_(0, index, torch.ones_like(r))
    sums = torch.zeros(num_groups, dtype=torch.float64, device=r.device).index_add_(0, index, r)
    centred = r - (sums / counts)[index]
    if not norm_adv_by_std_in_grpo:
        return centred.to(torch.float32)

    if global_std:
        std = _std(r - r.mean(), r.numel() * std_repeat, std_estimator, std_repeat)
    else:
        sq = torch.zeros(num_groups, dtype=torch.float64, device=r.device).index_add_(0, index, centred**2)
        n = counts * std_repeat
        denom = n - 1 if std_estimator == "unbiased" else n
        group_std = torch.sqrt(sq * std_repeat / denom.clamp_min(1))
        std = torch.where(counts > 1, group_std, torch.ones_like(group_std))[index]
    return (centred / (std + epsilon)).to(torch.float32)


def _std(dev: torch.Tensor, n: int, estimator: StdEstimator, repeat: int) -> torch.Tensor:
    if n <= 1:
        return torch.ones((), dtype=dev.dtype, device=dev.device)
    denom = n - 1 if estimator == "unbiased" else n
    return torch.sqrt((dev**2).sum() * repeat / denom)
