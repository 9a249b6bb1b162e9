"""DiffusionNFT (arXiv:2509.16117): negative-aware fine-tuning on the forward process of clean samples.

No log-probs and no reverse-process transitions: the rollout samples clean latents `x₀` (any solver, no CFG), the
reward becomes an optimality probability `p ∈ [0, 1]`, and the loss is flow matching on forward-noised copies
`x_t = (1 − t)·x₀ + t·ε` with two implicit policies built around the old (behaviour) velocity:

* `v⁺ = β·v_θ + (1 − β)·v_old`, `v⁻ = (1 + β)·v_old − β·v_θ` (β = `diffusion_loss.mix_beta`);
* `e^± = t·(u − v^±)`, `u = ε − x₀` (the x₀-space error of `x̂₀ = x_t − t·v^±`);
* `L^± = mean_elem((e^±)²) / max(mean_elem|e^±|, adaptive_weight_min)` (the weight is not differentiated);
* `ℓ_i = (p_i·L⁺_i + (1 − p_i)·L⁻_i) / β`; `loss = c·mean_i ℓ_i + ref_kl_coef·mean_i mean_elem((v_θ − v_ref)²)`.

The formulas, worked numbers and the decisions where the sources differ are in docs/omni/math.md (§DiffusionNFT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

from verl_omni.algos.flow_grpo import _upcast
from verl_omni.algos.registry import ForwardLossInput, PolicyLossOutput, register_loss

if TYPE_CHECKING:
    from verl_omni.config import DiffusionActorConfig

__all__ = [
    "ADV_MODES",
    "OLD_POLICY_DECAY_SCHEDULES",
    "apply_adv_mode",
    "diffusion_nft_loss",
    "diffusion_nft_policy_loss",
    "nft_optimality",
    "old_policy_decay",
    "select_train_timesteps",
]

ADV_MODES = ("continuous", "positive_only", "negative_only", "one_only", "binary")
OLD_POLICY_DECAY_SCHEDULES = ("copy", "linear_to_0_5", "delayed_linear_to_0_999")


def apply_adv_mode(advantages: torch.Tensor, mode: str, adv_clip_max: float) -> torch.Tensor:
    """Clip the advantages to ±`adv_clip_max`, then apply `algorithm.adv_mode`.

    Args:
        advantages (`torch.Tensor` of shape `(B,)`): group-normalised advantages.
        mode (`str`): `continuous` (unchanged), `positive_only` (max(Ā, 0)), `negative_only` (min(Ā, 0)),
            `one_only` (1 where Ā > 0, else 0) or `binary` (sign Ā).
        adv_clip_max (`float`): c > 0.

    Raises:
        ValueError: `mode` is not one of `ADV_MODES`.
    """
    if mode not in ADV_MODES:
        raise ValueError(f"algorithm.adv_mode: expected one of {ADV_MODES}, got {mode!r}")
    a = advantages.clamp(-adv_clip_max, adv_clip_max)
    if mode == "positive_only":
        return a.clamp(min=0)
    if mode == "negative_only":
        return a.clamp(max=0)
    if mode == "one_only":
        return (a > 0).to(a.dtype)
    if mode == "binary":
        return torch.sign(a)
    return a


def nft_optimality(advantages: torch.Tensor, adv_clip_max: float) -> torch.Tensor:
    """Optimality probability `p = clip(Ā / (2c) + ½, 0, 1)` of (clipped, mode-applied) advantages `Ā`."""
    a = advantages.clamp(-adv_clip_max, adv_clip_max)
    return (a / (2.0 * adv_clip_max) + 0.5).clamp(0.0, 1.0)


def old_policy_decay(step: int, schedule: str, decay: float | None = None) -> float:
    """EMA decay `d` of the old policy after training step `step` (`θ_old ← d·θ_old + (1 − d)·θ`).

    `decay` (`algorithm.old_policy_decay`) wins when set; else `schedule` (`algorithm.old_policy_decay_schedule`):
    `copy` → 0; `linear_to_0_5` → min(0.001·step, 0.5); `delayed_linear_to_0_999` → 0 before step 75, then
    min(0.0075·(step − 75), 0.999).

    Raises:
        ValueError: `schedule` unknown, or `decay` outside [0, 1).
    """
    if decay is not None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"algorithm.old_policy_decay: expected null or a float in [0, 1), got {decay!r}")
        return float(decay)
    if schedule == "copy":
        return 0.0
    if schedule == "linear_to_0_5":
        return min(0.001 * step, 0.5)
    if schedule == "delayed_linear_to_0_999":
        return 0.0 if step < 75 else min(0.0075 * (step - 75), 0.999)
    raise ValueError(
        f"algorithm.old_policy_decay_schedule: expected one of {OLD_POLICY_DECAY_SCHEDULES}, got {schedule!r}"
    )


def select_train_timesteps(timesteps: torch.Tensor, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """Per row, a random subset of `max(1, ⌊T·fraction⌋)` of the `T` sampler timesteps, in sampling order.

    Args:
        timesteps (`torch.Tensor` of shape `(B, T)`): the sampler's grid per row (`1000·σ_k`).
        fraction (`float`): `algorithm.timestep_fraction`, in (0, 1]; 1 keeps every timestep (no draw).
        generator (`torch.Generator`): a CPU generator; one permutation per row is drawn from it.

    Returns:
        `torch.Tensor` of shape `(B, max(1, ⌊T·fraction⌋))`.
    """
    b, t = timesteps.shape
    keep = max(1, int(t * fraction))
    if keep == t:
        return timesteps.clone()
    cols = torch.stack([torch.randperm(t, generator=generator)[:keep].sort().values for _ in range(b)])
    return timesteps.gather(1, cols.to(timesteps.device))


def diffusion_nft_policy_loss(
    velocity: torch.Tensor,
    old_velocity: torch.Tensor,
    clean_latents: torch.Tensor,
    noise: torch.Tensor,
    sigma: torch.Tensor,
    optimality: torch.Tensor,
    *,
    mix_beta: float,
    adv_clip_max: float,
    adaptive_weight_min: float,
    ref_velocity: torch.Tensor | None = None,
    ref_kl_coef: float = 0.0,
) -> PolicyLossOutput:
    """DiffusionNFT loss of one trained timestep of a micro-batch of `B` samples.

    Args:
        velocity (`torch.Tensor` of shape `(B, *latent)`): v_θ at `x_t`, carries the gradient.
        old_velocity (`torch.Tensor` of shape `(B, *latent)`): v_old at the same input (detached inside).
        clean_latents (`torch.Tensor` of shape `(B, *latent)`): x₀.
        noise (`torch.Tensor` of shape `(B, *latent)`): ε of `x_t = (1 − t)·x₀ + t·ε`.
        sigma (`torch.Tensor` of shape `(B,)`): t = timestep / 1000, in (0, 1].
        optimality (`torch.Tensor` of shape `(B,)`): p ∈ [0, 1] (`nft_optimality`).
        mix_beta (`float`): β > 0.
        adv_clip_max (`float`): c > 0, the loss scale.
        adaptive_weight_min (`float`): floor of the adaptive weights.
        ref_velocity (`torch.Tensor` of shape `(B, *latent)`, *optional*): v_ref; needed when `ref_kl_coef > 0`.
        ref_kl_coef (`float`, *optional*, defaults to `0.0`): λ_ref.

    Returns:
        [`PolicyLossOutput`]: `loss` differentiable (float32, float64 for float64 input); `pg_loss` = `c·mean ℓ`;
        `kl` = `mean (v_θ − v_ref)²` when `ref_velocity` is given; `metrics`: `nft_loss_pos|neg` (mean L^±),
        `nft_optimality_mean`, `nft_velocity_gap_max` (max |v_θ − v_old|: 0 when θ = θ_old) and
        `nft_velocity_gap_mean`.

    Raises:
        ValueError: shapes differ, `mix_beta` is not positive, or `ref_kl_coef > 0` without `ref_velocity`.
    """
    b = velocity.shape[0]
    shapes = [tuple(x.shape) for x in (velocity, old_velocity, clean_latents, noise)]
    if len(set(shapes)) != 1 or sigma.shape != (b,) or optimality.shape != (b,):
        raise ValueError(
            "velocity, old_velocity, clean_latents, noise, sigma, optimality: expected (B, *latent) x4 and (B,) x2, "
            f"got {shapes}, {tuple(sigma.shape)}, {tuple(optimality.shape)}"
        )
    if mix_beta <= 0:
        raise ValueError(f"actor.diffusion_loss.mix_beta: expected a float > 0, got {mix_beta!r}")
    if ref_kl_coef > 0 and ref_velocity is None:
        raise ValueError("ref_velocity: actor.diffusion_loss.ref_kl_coef > 0 needs the reference velocity")
    v = _upcast(velocity)
    dtype = v.dtype
    v_old = old_velocity.detach().to(dtype)
    x0, eps = clean_latents.detach().to(dtype), noise.detach().to(dtype)
    t = sigma.detach().to(dtype).reshape(b, *([1] * (v.dim() - 1)))
    p = optimality.detach().to(dtype)
    target = eps - x0
    step = mix_beta * (v - v_old)  # v^± = v_old ± β(v_θ − v_old): exactly v_old when θ = θ_old
    v_pos, v_neg = v_old + step, v_old - step
    e_pos, e_neg = t * (target - v_pos), t * (target - v_neg)
    w_pos = e_pos.detach().abs().flatten(1).mean(1).clamp(min=adaptive_weight_min)
    w_neg = e_neg.detach().abs().flatten(1).mean(1).clamp(min=adaptive_weight_min)
    l_pos = (e_pos**2).flatten(1).mean(1) / w_pos
    l_neg = (e_neg**2).flatten(1).mean(1) / w_neg
    per_sample = (p * l_pos + (1.0 - p) * l_neg) / mix_beta
    pg_loss = adv_clip_max * per_sample.mean()
    kl = None
    loss = pg_loss
    if ref_velocity is not None:
        kl = ((v - ref_velocity.detach().to(dtype)) ** 2).flatten(1).mean(1).mean()
        loss = pg_loss + ref_kl_coef * kl
    with torch.no_grad():
        gap = (v.detach() - v_old).abs()
        metrics = {
            "nft_loss_pos": l_pos.detach().mean(),
            "nft_loss_neg": l_neg.detach().mean(),
            "nft_optimality_mean": p.mean(),
            "nft_velocity_gap_max": gap.max(),
            "nft_velocity_gap_mean": gap.mean(),
        }
    return PolicyLossOutput(
        loss=loss, pg_loss=pg_loss.detach(), kl=None if kl is None else kl.detach(), metrics=metrics
    )


@register_loss("diffusion_nft", trains_on="clean", needs=("old_velocity",))
def diffusion_nft_loss(inputs: ForwardLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
    """The registered loss `"diffusion_nft"`: `diffusion_nft_policy_loss` with the `actor.diffusion_loss` knobs.

    `inputs.advantages` are the clipped, mode-applied advantages (`apply_adv_mode`); p is `nft_optimality` of them.

    Raises:
        ValueError: `inputs.old_velocity` is missing, or `ref_kl_coef > 0` and `inputs.ref_velocity` is missing.
    """
    if inputs.old_velocity is None:
        raise ValueError(
            "old_velocity: actor.diffusion_loss.loss_mode='diffusion_nft' needs the old policy's velocity at the same "
            "input; the engine computes it for this loss mode"
        )
    cfg = config.diffusion_loss
    return diffusion_nft_policy_loss(
        inputs.velocity,
        inputs.old_velocity,
        inputs.clean_latents,
        inputs.noise,
        inputs.sigma,
        nft_optimality(inputs.advantages, cfg.adv_clip_max),
        mix_beta=cfg.mix_beta,
        adv_clip_max=cfg.adv_clip_max,
        adaptive_weight_min=cfg.adaptive_weight_min,
        ref_velocity=inputs.ref_velocity if cfg.ref_kl_coef > 0 else None,
        ref_kl_coef=cfg.ref_kl_coef,
    )


AdvMode = Literal["continuous", "positive_only", "negative_only", "one_only", "binary"]
OldPolicyDecaySchedule = Literal["copy", "linear_to_0_5", "delayed_linear_to_0_999"]
