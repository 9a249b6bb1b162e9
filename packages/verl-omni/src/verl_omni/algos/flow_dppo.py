"""Flow-DPPO (divergence-proximal PPO, arXiv:2606.11025): FlowGRPO with a KL mask in place of the ratio clip.

The old and current transitions of a trained step are Gaussians with the same std `s`, so their KL is exact:
`D_i = mean_elem((μ_θ,i − μ_old,i)²) / (2 s_i²)` (element mean; `s_i = std` of the `sde` step when
`diffusion_loss.add_kl_coefficient`, else 1). For one trained step of a micro-batch of `B` samples:

* `ρ_i = exp(ℓ_θ,i − ℓ_old,i)`, the unclipped surrogate `−A_i ρ_i` (A not clipped by `adv_clip_max`);
* `drop_i = [D_i ≥ τ] ∧ ([ρ_i > 1 ∧ A_i > 0] ∨ [ρ_i < 1 ∧ A_i < 0])`, τ = `diffusion_loss.kl_mask_threshold`: a
  sample-step is dropped when it is already far from the old policy *and* still moving in its advantage's direction;
  corrective moves are always kept;
* `loss = mean_i (drop_i ? 0 : −A_i ρ_i)` (dropped items count in the mean), plus the optional reference KL.

The formulas, worked numbers and decisions are in docs/omni/math.md (§Flow-DPPO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from verl_omni.algos.flow_grpo import _upcast, reference_kl
from verl_omni.algos.registry import PolicyLossInput, PolicyLossOutput, register_loss

if TYPE_CHECKING:
    from verl_omni.config import DiffusionActorConfig

__all__ = ["flow_dppo_loss", "flow_dppo_policy_loss"]


def flow_dppo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    prev_sample_mean: torch.Tensor,
    old_prev_sample_mean: torch.Tensor,
    transition_std: torch.Tensor | None,
    *,
    kl_mask_threshold: float,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> PolicyLossOutput:
    """Flow-DPPO loss of one trained step of a micro-batch of `B` samples.

    Args:
        log_prob (`torch.Tensor` of shape `(B,)`): ℓ_θ, carries the gradient.
        old_log_prob (`torch.Tensor` of shape `(B,)`): ℓ_old (detached inside).
        advantages (`torch.Tensor` of shape `(B,)`): advantages A (detached, not clipped).
        prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`): μ_θ (only the mask reads it; no gradient).
        old_prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`): μ_old.
        transition_std (`torch.Tensor` of shape `(B,)`, *optional*): the step std `s` (> 0); `None` uses 1
            (`diffusion_loss.add_kl_coefficient=false`).
        kl_mask_threshold (`float`): τ >= 0.
        kl (`torch.Tensor`, *optional*): the reference KL term, added as `kl_coef · kl`.
        kl_coef (`float`, *optional*, defaults to `0.0`): `actor.kl_loss_coef`.

    Returns:
        [`PolicyLossOutput`]: `loss` differentiable (float32, float64 for float64 input); `pg_loss` detached;
        `metrics`: `kl_mask_fraction` (share with D ≥ τ), `masked_fraction` (share dropped), `kl_new_old_mean`,
        `kl_new_old_max` (D), `ppo_kl` (mean −Δℓ), `approx_kl` (½·mean Δℓ²), `ratio_mean`, `ratio_min`, `ratio_max`.

    Raises:
        ValueError: shapes differ, `transition_std` is not positive, or `kl_mask_threshold` is negative.
    """
    b = log_prob.shape[0]
    if old_log_prob.shape != (b,) or advantages.shape != (b,) or log_prob.shape != (b,):
        raise ValueError(
            "log_prob, old_log_prob, advantages: expected equal shapes (B,), got "
            f"{tuple(log_prob.shape)}, {tuple(old_log_prob.shape)}, {tuple(advantages.shape)}"
        )
    if prev_sample_mean.shape != old_prev_sample_mean.shape or prev_sample_mean.shape[0] != b:
        raise ValueError(
            "prev_sample_mean, old_prev_sample_mean: expected equal shapes (B, *latent), got "
            f"{tuple(prev_sample_mean.shape)}, {tuple(old_prev_sample_mean.shape)}"
        )
    if transition_std is not None and (transition_std.shape != (b,) or not bool((transition_std > 0).all())):
        raise ValueError(
            f"transition_std: expected (B,) > 0, got shape {tuple(transition_std.shape)}; a trained step with "
            "rollout.algo.noise_level=0 has no transition density (or set diffusion_loss.add_kl_coefficient=false)"
        )
    if kl_mask_threshold < 0:
        raise ValueError(f"actor.diffusion_loss.kl_mask_threshold: expected a float >= 0, got {kl_mask_threshold!r}")
    log_prob = _upcast(log_prob)
    dtype = log_prob.dtype
    adv = advantages.detach().to(dtype)
    log_ratio = log_prob - old_log_prob.detach().to(dtype)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        diff = prev_sample_mean.detach().to(dtype) - old_prev_sample_mean.detach().to(dtype)
        s2 = 1.0 if transition_std is None else transition_std.detach().to(dtype) ** 2
        divergence = (diff**2).flatten(1).mean(1) / (2.0 * s2)
        r = ratio.detach()
        far = divergence >= kl_mask_threshold
        drop = far & (((r > 1) & (adv > 0)) | ((r < 1) & (adv < 0)))
    pg_loss = torch.where(drop, torch.zeros_like(ratio), -adv * ratio).mean()
    loss = pg_loss if kl is None else pg_loss + kl_coef * kl
    with torch.no_grad():
        d = -log_ratio.detach()
        metrics = {
            "kl_mask_fraction": far.to(dtype).mean(),
            "masked_fraction": drop.to(dtype).mean(),
            "kl_new_old_mean": divergence.mean(),
            "kl_new_old_max": divergence.max(),
            "ppo_kl": d.mean(),
            "approx_kl": 0.5 * (d**2).mean(),
            "ratio_mean": r.mean(),
            "ratio_min": r.min(),
            "ratio_max": r.max(),
        }
    return PolicyLossOutput(
        loss=loss, pg_loss=pg_loss.detach(), kl=None if kl is None else kl.detach(), metrics=metrics
    )


@register_loss("flow_dppo", needs=("old_prev_sample_mean",), sde_types=("sde",))
def flow_dppo_loss(inputs: PolicyLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
    """The registered loss `"flow_dppo"`: `flow_dppo_policy_loss` plus, with `actor.use_kl_loss`, `kl_penalty`.

    The step std is the scheduler's `std` (= `std_dev_t · √(−dt)` for `sde_type="sde"`, the only sampler it registers
    for) when `diffusion_loss.add_kl_coefficient`, else 1.

    Raises:
        ValueError: `inputs.old_prev_sample_mean` is missing, or `actor.use_kl_loss` is true and
            `inputs.ref_prev_sample_mean` is missing.
    """
    if inputs.old_prev_sample_mean is None:
        raise ValueError(
            "old_prev_sample_mean: actor.diffusion_loss.loss_mode='flow_dppo' needs the behaviour policy's transition "
            "means; the engine's compute_log_prob returns them for this loss mode"
        )
    loss_cfg = config.diffusion_loss
    return flow_dppo_policy_loss(
        inputs.log_prob,
        inputs.old_log_prob,
        inputs.advantages,
        inputs.prev_sample_mean,
        inputs.old_prev_sample_mean,
        inputs.std if loss_cfg.add_kl_coefficient else None,
        kl_mask_threshold=loss_cfg.kl_mask_threshold,
        kl=reference_kl(config, inputs),
        kl_coef=config.kl_loss_coef,
    )
