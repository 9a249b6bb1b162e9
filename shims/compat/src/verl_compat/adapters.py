"""Old call signatures kept for code written against pre-#6200 verl (served under the old names).

Each adapter converts the old arguments and calls verl-omni; the mapping row of the old name says what changed.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

__all__ = ["DiffusionAdvantageEstimator", "compute_flow_grpo_outcome_advantage", "compute_policy_loss_flow_grpo"]


class DiffusionAdvantageEstimator(str, enum.Enum):
    """The old enum of diffusion advantage estimators (verl-omni takes the plain string)."""

    FLOW_GRPO = "flow_grpo"


def compute_flow_grpo_outcome_advantage(
    sample_level_rewards: torch.Tensor,
    response_mask: torch.Tensor | None = None,
    index: Any = None,
    epsilon: float = 1e-4,
    norm_adv_by_std_in_grpo: bool = True,
    global_std: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The old FlowGRPO outcome advantage: `(advantages, returns)`, both the same tensor.

    Calls `verl_omni.algos.compute_flow_grpo_advantages(rewards, index, ...)`. With `response_mask` (`(B, T)`, the
    old second argument) the `(B,)` advantages are broadcast over `T` and multiplied by the mask, as verl did;
    without it they stay `(B,)`. `config` is accepted and unused, as before.

    Raises:
        TypeError: `index` (the group id of each sample) is missing.
    """
    from verl_omni.algos import compute_flow_grpo_advantages

    if index is None:
        raise TypeError("compute_flow_grpo_outcome_advantage: `index` (group id of each sample) is required")
    rewards = sample_level_rewards.reshape(-1) if sample_level_rewards.dim() > 1 else sample_level_rewards
    ids = index.tolist() if hasattr(index, "tolist") else list(index)
    adv = compute_flow_grpo_advantages(
        rewards, ids, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, global_std=global_std, epsilon=epsilon
    )
    if response_mask is not None:
        adv = adv.unsqueeze(-1).to(response_mask.dtype if response_mask.is_floating_point() else adv.dtype)
        adv = adv * response_mask
    return adv, adv


def compute_policy_loss_flow_grpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor | None = None,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The old FlowGRPO policy loss: `(loss, metrics)`, reading `config.clip_ratio` and `config.clip_ratio_high`.

    Entries where `response_mask` is 0 are left out, then `verl_omni.algos.flow_grpo_policy_loss` averages the
    rest (= the old `token-mean`). `config.clip_ratio` is the ratio clip, `config.clip_ratio_high` the advantage
    clamp (their new names: `actor.diffusion_loss.clip_ratio` / `.adv_clip_max`).

    Raises:
        ValueError: `config` is missing, `loss_agg_mode` is not `token-mean`, or `rollout_is_weights` is given
            (verl-omni's FlowGRPO loss has no importance weights).
    """
    from verl_omni.algos import flow_grpo_policy_loss

    if config is None:
        raise ValueError("compute_policy_loss_flow_grpo: `config` (with clip_ratio, clip_ratio_high) is required")
    if loss_agg_mode != "token-mean":
        raise ValueError(f"compute_policy_loss_flow_grpo: loss_agg_mode {loss_agg_mode!r} is not supported")
    if rollout_is_weights is not None:
        raise ValueError("compute_policy_loss_flow_grpo: rollout_is_weights is not supported by verl-omni")
    if response_mask is not None:
        keep = response_mask.bool()
        old_log_prob, log_prob, advantages = old_log_prob[keep], log_prob[keep], advantages[keep]
    out = flow_grpo_policy_loss(
        log_prob.reshape(-1),
        old_log_prob.reshape(-1),
        advantages.reshape(-1),
        clip_ratio=float(config.clip_ratio),
        adv_clip_max=float(config.clip_ratio_high),
    )
    metrics = {f"actor/{k}": v.item() for k, v in out.metrics.items()}
    metrics["actor/pg_loss"] = out.pg_loss.item()
    return out.loss, metrics
