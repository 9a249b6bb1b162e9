"""GRPO-Guard (arXiv:2510.22319): FlowGRPO with the ratio normalised per step (RatioNorm) and the loss ÷ |dt|.

The formulas and the decisions where the sources were ambiguous are in docs/omni/math.md (§GRPO-Guard). For one
trained step of a micro-batch of `B` samples with the `sde` sampler:

* `s̄ = mean_B(std_dev_t) · mean_B(√(−dt))`, one scalar (the step std of the transition);
* `b_i = mean_elem((μ_θ,i − μ_old,i)²) / (2 s̄²)` removes the deterministic negative offset of the log-ratio;
* `ρ̃_i = exp(s̄ · (ℓ_θ,i − ℓ_old,i + b_i))` (= `exp(mean_elem(z ⊙ Δμ))` for the rollout noise `z`);
* FlowGRPO's clipped surrogate on `ρ̃`, then `÷ mean_B(√(−dt))² = ÷ |dt|`; the KL term (optional) is not scaled.

`√(−dt)` is not stored in the trajectory: for `sde` the scheduler's transition std is `std = std_dev_t · √(−dt)`,
so `√(−dt) = std / std_dev_t` exactly; the loss is therefore registered for `sde_type="sde"` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from verl_omni.algos.flow_grpo import _upcast, flow_grpo_policy_loss, reference_kl
from verl_omni.algos.registry import PolicyLossInput, PolicyLossOutput, register_loss

if TYPE_CHECKING:
    from verl_omni.config import DiffusionActorConfig

__all__ = ["grpo_guard_loss", "grpo_guard_policy_loss", "grpo_guard_ratio_norm"]


def grpo_guard_ratio_norm(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    prev_sample_mean: torch.Tensor,
    old_prev_sample_mean: torch.Tensor,
    std_dev_t: torch.Tensor,
    sqrt_dt: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """RatioNorm of one trained step: the normalised log-ratio `s̄ · (ℓ_θ − ℓ_old + b)`, the bias `b` and `s̄`.

    Args:
        log_prob (`torch.Tensor` of shape `(B,)`): ℓ_θ, carries the gradient.
        old_log_prob (`torch.Tensor` of shape `(B,)`): ℓ_old (detached inside).
        prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`): μ_θ, carries the gradient (so does `b`).
        old_prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`): μ_old (detached inside).
        std_dev_t (`torch.Tensor` of shape `(B,)`): the `sde` scheduler's `std_dev_t` (σ_t), > 0.
        sqrt_dt (`torch.Tensor` of shape `(B,)`): √(σ − σ'), > 0.

    Returns:
        `(normalised_log_ratio (B,), bias (B,), step_scale s̄ (scalar))`, float32 (float64 for float64 input).

    Raises:
        ValueError: shapes differ, or `std_dev_t` / `sqrt_dt` is not positive (a noise level of 0 has no density).
    """
    b = log_prob.shape[0]
    if old_log_prob.shape != log_prob.shape or prev_sample_mean.shape != old_prev_sample_mean.shape:
        raise ValueError(
            "log_prob/old_log_prob and prev_sample_mean/old_prev_sample_mean: expected equal shapes, got "
            f"{tuple(log_prob.shape)}, {tuple(old_log_prob.shape)}, {tuple(prev_sample_mean.shape)}, "
            f"{tuple(old_prev_sample_mean.shape)}"
        )
    if prev_sample_mean.shape[0] != b or std_dev_t.shape != (b,) or sqrt_dt.shape != (b,):
        raise ValueError(
            f"prev_sample_mean, std_dev_t, sqrt_dt: expected batch {b}, got {tuple(prev_sample_mean.shape)}, "
            f"{tuple(std_dev_t.shape)}, {tuple(sqrt_dt.shape)}"
        )
    if not (bool((std_dev_t > 0).all()) and bool((sqrt_dt > 0).all())):
        raise ValueError(
            "std_dev_t, sqrt_dt: GRPO-Guard needs a stochastic step (both > 0); a trained step with "
            "rollout.algo.noise_level=0 or σ = σ' has no transition density to normalise"
        )
    log_prob = _upcast(log_prob)
    dtype = log_prob.dtype
    scale = std_dev_t.detach().to(dtype).mean() * sqrt_dt.detach().to(dtype).mean()
    diff = _upcast(prev_sample_mean).to(dtype) - old_prev_sample_mean.detach().to(dtype)
    bias = (diff**2).flatten(1).mean(dim=1) / (2.0 * scale**2)
    log_ratio = log_prob - old_log_prob.detach().to(dtype)
    return scale * (log_ratio + bias), bias, scale


def grpo_guard_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    prev_sample_mean: torch.Tensor,
    old_prev_sample_mean: torch.Tensor,
    std_dev_t: torch.Tensor,
    sqrt_dt: torch.Tensor,
    *,
    clip_ratio: float,
    adv_clip_max: float,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> PolicyLossOutput:
    """GRPO-Guard loss of one trained step: FlowGRPO's clipped surrogate on `ρ̃`, divided by `mean_B(√(−dt))²`.

    `loss = mean_i max(−Â_i ρ̃_i, −Â_i clip(ρ̃_i, 1−ε, 1+ε)) / mean_B(√(−dt))² + kl_coef · kl`.

    Args:
        log_prob (`torch.Tensor` of shape `(B,)`): ℓ_θ, carries the gradient.
        old_log_prob (`torch.Tensor` of shape `(B,)`): ℓ_old.
        advantages (`torch.Tensor` of shape `(B,)`): unclipped advantages.
        prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`): μ_θ, carries the gradient.
        old_prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`): μ_old.
        std_dev_t (`torch.Tensor` of shape `(B,)`): the `sde` scheduler's σ_t.
        sqrt_dt (`torch.Tensor` of shape `(B,)`): √(σ − σ').
        clip_ratio (`float`): ε (`diffusion_loss.clip_ratio`; upstream's GRPO-Guard recipe uses 2e-6).
        adv_clip_max (`float`): `diffusion_loss.adv_clip_max`.
        kl (`torch.Tensor`, *optional*): the reference KL term, added unscaled (not divided by |dt|).
        kl_coef (`float`, *optional*, defaults to `0.0`): β (`actor.kl_loss_coef`).

    Returns:
        [`PolicyLossOutput`]: `loss` differentiable; `pg_loss` (after ÷|dt|) detached; `metrics`: those of
        `flow_grpo_policy_loss` on `ρ̃` (`pg_clipfrac*`, `ratio_mean|min|max`), except `ppo_kl` and `approx_kl`,
        which stay those of the raw log-ratio; plus `raw_ratio_mean`, `ratio_norm_bias` (mean `b`),
        `ratio_norm_scale` (s̄) and `step_loss_scale` (1/|dt|).

    Raises:
        ValueError: see `grpo_guard_ratio_norm` and `flow_grpo_policy_loss`.
    """
    norm_log_ratio, bias, scale = grpo_guard_ratio_norm(
        log_prob, old_log_prob, prev_sample_mean, old_prev_sample_mean, std_dev_t, sqrt_dt
    )
    # FlowGRPO's clipped surrogate with ℓ_θ − ℓ_old replaced by the normalised log-ratio (old := 0)
    clipped = flow_grpo_policy_loss(
        norm_log_ratio,
        torch.zeros_like(norm_log_ratio),
        advantages,
        clip_ratio=clip_ratio,
        adv_clip_max=adv_clip_max,
    )
    step_scale = 1.0 / sqrt_dt.detach().to(norm_log_ratio.dtype).mean() ** 2
    pg_loss = clipped.loss * step_scale
    loss = pg_loss if kl is None else pg_loss + kl_coef * kl
    with torch.no_grad():
        raw = (old_log_prob.detach().to(norm_log_ratio.dtype) - _upcast(log_prob.detach())).to(norm_log_ratio.dtype)
        metrics = dict(clipped.metrics)
        metrics.update(
            ppo_kl=raw.mean(),
            approx_kl=0.5 * (raw**2).mean(),
            raw_ratio_mean=torch.exp(-raw).mean(),
            ratio_norm_bias=bias.detach().mean(),
            ratio_norm_scale=scale.detach(),
            step_loss_scale=step_scale.detach(),
        )
    return PolicyLossOutput(
        loss=loss, pg_loss=pg_loss.detach(), kl=None if kl is None else kl.detach(), metrics=metrics
    )


@register_loss("grpo_guard", needs=("old_prev_sample_mean",), sde_types=("sde",))
def grpo_guard_loss(inputs: PolicyLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
    """The registered loss `"grpo_guard"`: `grpo_guard_policy_loss` plus, with `actor.use_kl_loss`, `kl_penalty`.

    `√(−dt)` is `inputs.std / inputs.std_dev_t` (exact for `sde_type="sde"`, the only sampler it registers for).

    Raises:
        ValueError: `inputs.old_prev_sample_mean` is missing, or `actor.use_kl_loss` is true and
            `inputs.ref_prev_sample_mean` is missing.
    """
    if inputs.old_prev_sample_mean is None:
        raise ValueError(
            "old_prev_sample_mean: actor.diffusion_loss.loss_mode='grpo_guard' needs the behaviour policy's "
            "transition means; the engine's compute_log_prob returns them for this loss mode"
        )
    loss_cfg = config.diffusion_loss
    kl = reference_kl(config, inputs)
    std_dev_t = inputs.std_dev_t.detach()
    sqrt_dt = inputs.std.detach().to(std_dev_t.dtype) / std_dev_t
    return grpo_guard_policy_loss(
        inputs.log_prob,
        inputs.old_log_prob,
        inputs.advantages,
        inputs.prev_sample_mean,
        inputs.old_prev_sample_mean,
        std_dev_t,
        sqrt_dt,
        clip_ratio=loss_cfg.clip_ratio,
        adv_clip_max=loss_cfg.adv_clip_max,
        kl=kl,
        kl_coef=config.kl_loss_coef,
    )
