"""FlowGRPO loss: clipped surrogate, KL to the reference policy, and the consistency metrics.

The formulas are derived in docs/omni/math.md (§5 KL, §7 loss). All log-probs here are the mean-reduced
per-step Gaussian log-densities of the SDE sampler, one value per (sample, trained step). The engine calls the
registered loss `"flow_grpo"` (`flow_grpo_loss`) once per micro-batch and trained step and scales the result so the
optimizer sees the mean over steps and micro-batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

from verl_omni.algos.registry import PolicyLossInput, PolicyLossOutput, register_loss

if TYPE_CHECKING:
    from verl_omni.config import DiffusionActorConfig

__all__ = [
    "flow_grpo_loss",
    "flow_grpo_policy_loss",
    "kl_penalty",
    "kl_penalty_exact",
    "kl_penalty_historical",
    "rollout_consistency_metrics",
]

KLType = Literal["historical", "exact"]


def flow_grpo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_ratio: float,
    adv_clip_max: float,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> PolicyLossOutput:
    """Clipped PPO surrogate of FlowGRPO for one trained step of a micro-batch.

    `ρ = exp(ℓ_θ − ℓ_old)`, `Â = clip(A, −adv_clip_max, adv_clip_max)`,
    `L^pg_i = max(−Â_i·ρ_i, −Â_i·clip(ρ_i, 1−ε, 1+ε))`, reduced by a plain mean over the batch.
    Computed in float32 (float64 when `log_prob` is float64).

    Args:
        log_prob (`torch.Tensor` of shape `(B,)`):
            Current-policy log-probs ℓ_θ (carry the gradient).
        old_log_prob (`torch.Tensor` of shape `(B,)`):
            Behaviour-policy log-probs ℓ_old (detached inside).
        advantages (`torch.Tensor` of shape `(B,)`):
            Unclipped advantages A.
        clip_ratio (`float`):
            ε of the ratio clip (`diffusion_loss.clip_ratio`), > 0.
        adv_clip_max (`float`):
            Advantage clip (`diffusion_loss.adv_clip_max`), > 0.
        kl (`torch.Tensor`, scalar, *optional*):
            A KL term from `kl_penalty_historical` / `kl_penalty_exact`, added as `kl_coef · kl`.
        kl_coef (`float`, *optional*, defaults to `0.0`):
            β (`actor.kl_loss_coef`).

    Returns:
        [`PolicyLossOutput`]: `loss` = `mean_i L^pg_i` (+ `kl_coef · kl`), differentiable; `pg_loss` and `kl`
        detached; `metrics`: `pg_clipfrac`, `pg_clipfrac_higher`, `pg_clipfrac_lower`, `ppo_kl` (mean −Δℓ,
        verl), `approx_kl` (½·mean Δℓ², flow_grpo), `ratio_mean`, `ratio_min`, `ratio_max`.

    Raises:
        ValueError: shapes differ or `clip_ratio` / `adv_clip_max` is not positive.
    """
    if log_prob.shape != old_log_prob.shape or log_prob.shape != advantages.shape:
        raise ValueError(
            "log_prob, old_log_prob, advantages: expected equal shapes, got "
            f"{tuple(log_prob.shape)}, {tuple(old_log_prob.shape)}, {tuple(advantages.shape)}"
        )
    if clip_ratio <= 0:
        raise ValueError(f"clip_ratio: expected a float > 0, got {clip_ratio}")
    if adv_clip_max <= 0:
        raise ValueError(f"adv_clip_max: expected a float > 0, got {adv_clip_max}")

    log_prob = _upcast(log_prob)
    adv = advantages.detach().to(log_prob.dtype).clamp(-adv_clip_max, adv_clip_max)
    neg_log_ratio = old_log_prob.detach().to(log_prob.dtype) - log_prob
    ratio = torch.exp(-neg_log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
    pg_losses = torch.maximum(unclipped, clipped)
    pg_loss = pg_losses.mean()

    loss = pg_loss
    if kl is not None:
        loss = loss + kl_coef * kl

    with torch.no_grad():
        r = ratio.detach()
        d = neg_log_ratio.detach()
        metrics = {
            "pg_clipfrac": ((r - 1.0).abs() > clip_ratio).float().mean(),
            "pg_clipfrac_higher": (r > 1.0 + clip_ratio).float().mean(),
            "pg_clipfrac_lower": (r < 1.0 - clip_ratio).float().mean(),
            "ppo_kl": d.mean(),
            "approx_kl": 0.5 * (d**2).mean(),
            "ratio_mean": r.mean(),
            "ratio_min": r.min(),
            "ratio_max": r.max(),
        }
    return PolicyLossOutput(
        loss=loss, pg_loss=pg_loss.detach(), kl=None if kl is None else kl.detach(), metrics=metrics
    )


def kl_penalty_historical(
    prev_sample_mean: torch.Tensor, ref_prev_sample_mean: torch.Tensor, std_dev_t: torch.Tensor
) -> torch.Tensor:
    """KL term as flow_grpo / verl / verl-omni compute it ("KL_code"), reproducing the published β.

    `mean_i mean_d (μ_θ − μ_ref)² / (2·std_dev_t²)` where `std_dev_t` is what the scheduler returns: σ_t for
    `sde` (so this equals `h · KL_exact / D`, with h = σ − σ') and the transition std s for `cps`.

    Args:
        prev_sample_mean (`torch.Tensor` of shape `(B, ...)`):
            Transition mean μ_θ of the current policy (carries the gradient).
        ref_prev_sample_mean (`torch.Tensor` of shape `(B, ...)`):
            Transition mean μ_ref of the reference policy at the same input (detached inside).
        std_dev_t (`torch.Tensor`, broadcastable to `(B, ...)`):
            The scheduler's `std_dev_t` for this step.

    Returns:
        `torch.Tensor`, scalar (float32, or float64 for float64 inputs).
    """
    diff = _upcast(prev_sample_mean) - _upcast(ref_prev_sample_mean.detach())
    per_elem = diff**2 / (2.0 * _broadcast(std_dev_t, diff) ** 2)
    return per_elem.flatten(1).mean(dim=1).mean()


def kl_penalty_exact(
    prev_sample_mean: torch.Tensor,
    ref_prev_sample_mean: torch.Tensor,
    transition_std: torch.Tensor,
    *,
    reduction: Literal["mean", "sum"] = "mean",
) -> torch.Tensor:
    """Exact KL between the Gaussian transitions of the current and the reference policy.

    `KL(N(μ_θ, s²I) ‖ N(μ_ref, s²I)) = ‖μ_θ − μ_ref‖² / (2s²)` with `s` the true per-element transition std
    (`std_dev_t · sqrt(h)` for sde, `std_dev_t` for cps). `reduction="mean"` divides by the number of latent
    elements D (the same scale as the mean-reduced log-probs); `"sum"` is the full KL. For sde,
    `β_exact = β_historical · h` gives the same penalty as `kl_penalty_historical` with mean reduction.

    Args:
        prev_sample_mean (`torch.Tensor` of shape `(B, ...)`):
            Transition mean μ_θ (carries the gradient).
        ref_prev_sample_mean (`torch.Tensor` of shape `(B, ...)`):
            Transition mean μ_ref (detached inside).
        transition_std (`torch.Tensor`, broadcastable to `(B, ...)`):
            Per-element transition std s.
        reduction (`str`, *optional*, defaults to `"mean"`):
            `"mean"` or `"sum"` over latent elements; always a mean over the batch.

    Returns:
        `torch.Tensor`, scalar (float32, or float64 for float64 inputs).

    Raises:
        ValueError: unknown `reduction`.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction: expected 'mean' or 'sum', got {reduction!r}")
    diff = _upcast(prev_sample_mean) - _upcast(ref_prev_sample_mean.detach())
    per_elem = (diff**2 / (2.0 * _broadcast(transition_std, diff) ** 2)).flatten(1)
    per_sample = per_elem.mean(dim=1) if reduction == "mean" else per_elem.sum(dim=1)
    return per_sample.mean()


def kl_penalty(
    kl_type: KLType,
    prev_sample_mean: torch.Tensor,
    ref_prev_sample_mean: torch.Tensor,
    std_dev_t: torch.Tensor,
    transition_std: torch.Tensor,
) -> torch.Tensor:
    """Dispatch on `diffusion_loss.kl_type`: `"historical"` (KL_code) or `"exact"` (mean-reduced exact KL)."""
    if kl_type == "historical":
        return kl_penalty_historical(prev_sample_mean, ref_prev_sample_mean, std_dev_t)
    if kl_type == "exact":
        return kl_penalty_exact(prev_sample_mean, ref_prev_sample_mean, transition_std)
    raise ValueError(f"kl_type: expected 'historical' or 'exact', got {kl_type!r}")


@register_loss("dance_grpo")  # upstream's names for FlowGRPO's loss under MixGRPO / DanceGRPO (model.algorithm)
@register_loss("mix_grpo")
@register_loss("flow_grpo")
def flow_grpo_loss(inputs: PolicyLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
    """The registered loss `"flow_grpo"`: `flow_grpo_policy_loss` plus, with `actor.use_kl_loss`, `kl_penalty`.

    Args:
        inputs (`PolicyLossInput`):
            One trained step of one micro-batch; `ref_prev_sample_mean` is required when `config.use_kl_loss`.
        config (`DiffusionActorConfig`):
            Reads `diffusion_loss.clip_ratio`, `.adv_clip_max`, `.kl_type`, `use_kl_loss` and `kl_loss_coef`.

    Returns:
        [`PolicyLossOutput`].

    Raises:
        ValueError: `actor.use_kl_loss` is true but `inputs.ref_prev_sample_mean` is missing.
    """
    loss_cfg = config.diffusion_loss
    kl = reference_kl(config, inputs)
    return flow_grpo_policy_loss(
        inputs.log_prob,
        inputs.old_log_prob,
        inputs.advantages,
        clip_ratio=loss_cfg.clip_ratio,
        adv_clip_max=loss_cfg.adv_clip_max,
        kl=kl,
        kl_coef=config.kl_loss_coef,
    )


def rollout_consistency_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor) -> dict[str, torch.Tensor]:
    """|ℓ_old − ℓ_rollout| mean and max: how far the trainer's recompute is from the sampler's log-probs."""
    if old_log_prob.shape != rollout_log_prob.shape:
        raise ValueError(
            "old_log_prob, rollout_log_prob: expected equal shapes, got "
            f"{tuple(old_log_prob.shape)}, {tuple(rollout_log_prob.shape)}"
        )
    diff = (old_log_prob.detach().double() - rollout_log_prob.detach().double()).abs()
    return {"rollout_logprob_diff_mean": diff.mean().float(), "rollout_logprob_diff_max": diff.max().float()}


def _upcast(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float64 else t.float()


def _broadcast(std: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    std = torch.as_tensor(std, dtype=like.dtype, device=like.device)
    if std.ndim == 1 and like.ndim > 1 and std.shape[0] == like.shape[0]:
        std = std.view(-1, *([1] * (like.ndim - 1)))
    return std


def reference_kl(config: DiffusionActorConfig, inputs: PolicyLossInput) -> torch.Tensor | None:
    """The KL term to the reference policy when `actor.use_kl_loss` is on (None otherwise).

    Raises:
        ValueError: `actor.use_kl_loss` is true but `inputs.ref_prev_sample_mean` is missing.
    """
    if not config.use_kl_loss:
        return None
    if inputs.ref_prev_sample_mean is None:
        raise ValueError(
            "ref_prev_sample_mean: actor.use_kl_loss is true but no reference means were given; "
            "add compute_ref_log_prob's ref_prev_sample_mean to the batch"
        )
    return kl_penalty(
        config.diffusion_loss.kl_type, inputs.prev_sample_mean, inputs.ref_prev_sample_mean, inputs.std_dev_t,
        inputs.std,
    )  # fmt: skip
