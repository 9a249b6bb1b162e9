"""Online Diffusion-DPO (arXiv:2311.12908, as upstream verl-omni trains it online): best-vs-worst pairs per group.

No log-probs, no SDE, no old policy: the rollout samples clean latents `x₀`, each prompt group of `rollout.n` samples
gives one (chosen, rejected) pair — its best and worst reward — and the pair is forward-noised with one shared `ε`
and one shared `t`. With `u = ε − x₀` the flow-matching target:

* `e_θ = mean_elem((v_θ − u)²)`, `e_ref = mean_elem((v_ref − u)²)` (v_ref: the reference, LoRA adapters disabled);
* `Δ = e_θ − e_ref` for the chosen (`Δ_w`) and the rejected (`Δ_l`) sample;
* `z = −(β/2)·(Δ_w − Δ_l)`, `loss = mean_pairs −log σ(z) = mean_pairs softplus(−z)` (β = `diffusion_loss.dpo_beta`).

Rows come in adjacent pairs: row `2i` is the chosen and row `2i + 1` the rejected sample of pair `i`. The formulas,
worked numbers and the decisions where the sources leave a choice are in docs/omni/math.md (§Online Diffusion-DPO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from verl_omni.algos.flow_grpo import _upcast
from verl_omni.algos.registry import ForwardLossInput, PolicyLossOutput, register_loss

if TYPE_CHECKING:
    from verl_omni.config import DiffusionActorConfig

__all__ = ["diffusion_dpo_loss", "diffusion_dpo_policy_loss", "dpo_train_sigmas", "select_preference_pairs"]


def select_preference_pairs(rewards: torch.Tensor, prompt_index: torch.Tensor) -> torch.Tensor:
    """Row indices of the (chosen, rejected) pairs: per prompt group, the best then the worst reward.

    Groups are taken in order of first appearance. Within a group the rows are sorted by reward, descending and
    stable, and the first (best; the earliest row among equal rewards) and last (worst; the latest row among equal
    rewards) are kept, so a group of equal rewards still gives a pair (as upstream; it carries no preference). Groups
    of one sample give none.

    Args:
        rewards (`torch.Tensor` of shape `(B,)`): one reward per rollout sample.
        prompt_index (`torch.Tensor` of shape `(B,)`): the prompt group of each sample.

    Returns:
        `torch.Tensor` of shape `(2G,)`, int64: `[chosen_0, rejected_0, chosen_1, rejected_1, ...]` for the `G`
        groups of two or more samples.

    Raises:
        ValueError: shapes differ, or no group has two samples (`actor_rollout_ref.rollout.n` must be >= 2).
    """
    if rewards.ndim != 1 or prompt_index.shape != rewards.shape:
        raise ValueError(
            "rewards, prompt_index: expected equal shapes (B,), got "
            f"{tuple(rewards.shape)}, {tuple(prompt_index.shape)}"
        )
    r = rewards.detach().double().cpu()
    groups = prompt_index.detach().cpu().tolist()
    order: dict[int, list[int]] = {}
    for row, g in enumerate(groups):
        order.setdefault(int(g), []).append(row)
    pairs: list[int] = []
    for rows in order.values():
        if len(rows) < 2:
            continue
        idx = torch.tensor(rows)
        ranked = idx[torch.sort(r[idx], descending=True, stable=True).indices]
        pairs += [int(ranked[0]), int(ranked[-1])]
    if not pairs:
        raise ValueError(
            "select_preference_pairs: no prompt group has two samples, so no (chosen, rejected) pair exists; "
            "set actor_rollout_ref.rollout.n >= 2"
        )
    return torch.tensor(pairs, dtype=torch.long)


def dpo_train_sigmas(num_pairs: int, generator: torch.Generator, num_train_timesteps: int = 1000) -> torch.Tensor:
    """One training noise level per pair: `u ~ logit-normal(0, 1)`, `σ = 1 − ⌊N·u⌋ / N` on the N-step training table.

    The table is diffusers' `FlowMatchEulerDiscreteScheduler` training grid without a shift, `σ_k = (N − k) / N`
    (k = 0 … N − 1, so σ ∈ {1/N, …, 1}), indexed by `k = ⌊N·u⌋` as upstream's DPO trainer does.

    Args:
        num_pairs (`int`): G.
        generator (`torch.Generator`): a CPU generator (the trainer seeds it from the run seed and the step).
        num_train_timesteps (`int`, *optional*, defaults to `1000`): N.

    Returns:
        `torch.Tensor` of shape `(G,)`, float32, in `[1/N, 1]`.
    """
    u = torch.sigmoid(torch.randn(num_pairs, generator=generator, dtype=torch.float64))
    k = (u * num_train_timesteps).floor().clamp(max=num_train_timesteps - 1)
    return ((num_train_timesteps - k) / num_train_timesteps).float()


def diffusion_dpo_policy_loss(
    velocity: torch.Tensor,
    ref_velocity: torch.Tensor,
    clean_latents: torch.Tensor,
    noise: torch.Tensor,
    *,
    beta: float,
) -> PolicyLossOutput:
    """Diffusion-DPO loss of a micro-batch of `P` adjacent (chosen, rejected) pairs (`B = 2P` rows).

    Args:
        velocity (`torch.Tensor` of shape `(2P, *latent)`): v_θ at each row's `x_t`, carries the gradient.
        ref_velocity (`torch.Tensor` of shape `(2P, *latent)`): v_ref at the same input (detached inside).
        clean_latents (`torch.Tensor` of shape `(2P, *latent)`): x₀.
        noise (`torch.Tensor` of shape `(2P, *latent)`): ε (the same for both rows of a pair).
        beta (`float`): β > 0 (`diffusion_loss.dpo_beta`).

    Returns:
        [`PolicyLossOutput`]: `loss` = `mean_pairs softplus(−z)` (float32, float64 for float64 input); `kl` None;
        `metrics`: `dpo_implicit_acc` (share of pairs with z > 0), `dpo_reward_chosen` (mean −(β/2)Δ_w),
        `dpo_reward_rejected` (mean −(β/2)Δ_l), `dpo_reward_margin` (mean z; 0 when θ = reference),
        `dpo_reward_margin_max` (max |z|), `dpo_model_error_chosen|rejected` (mean e_θ), `dpo_ref_error_chosen`.

    Raises:
        ValueError: shapes differ, the batch is not an even number of rows, or `beta` is not positive.
    """
    shapes = {tuple(x.shape) for x in (velocity, ref_velocity, clean_latents, noise)}
    b = velocity.shape[0]
    if len(shapes) != 1 or b == 0 or b % 2:
        raise ValueError(
            "velocity, ref_velocity, clean_latents, noise: expected equal shapes (2P, *latent) with an even, non-zero "
            f"number of rows (adjacent chosen/rejected pairs), got {sorted(shapes)}"
        )
    if beta <= 0:
        raise ValueError(f"actor.diffusion_loss.dpo_beta: expected a float > 0, got {beta!r}")
    v = _upcast(velocity)
    dtype = v.dtype
    target = noise.detach().to(dtype) - clean_latents.detach().to(dtype)
    err = ((v - target) ** 2).flatten(1).mean(1)
    ref_err = ((ref_velocity.detach().to(dtype) - target) ** 2).flatten(1).mean(1)
    delta = err - ref_err
    delta_w, delta_l = delta[0::2], delta[1::2]
    z = -0.5 * beta * (delta_w - delta_l)
    pg_loss = torch.nn.functional.softplus(-z).mean()
    with torch.no_grad():
        zd = z.detach()
        metrics = {
            "dpo_implicit_acc": (zd > 0).to(dtype).mean(),
            "dpo_reward_chosen": (-0.5 * beta * delta_w.detach()).mean(),
            "dpo_reward_rejected": (-0.5 * beta * delta_l.detach()).mean(),
            "dpo_reward_margin": zd.mean(),
            "dpo_reward_margin_max": zd.abs().max(),
            "dpo_model_error_chosen": err.detach()[0::2].mean(),
            "dpo_model_error_rejected": err.detach()[1::2].mean(),
            "dpo_ref_error_chosen": ref_err[0::2].mean(),
        }
    return PolicyLossOutput(loss=pg_loss, pg_loss=pg_loss.detach(), kl=None, metrics=metrics)


@register_loss("dpo", trains_on="pairs")
def diffusion_dpo_loss(inputs: ForwardLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
    """The registered loss `"dpo"`: `diffusion_dpo_policy_loss` with `actor.diffusion_loss.dpo_beta`.

    Raises:
        ValueError: `inputs.ref_velocity` is missing, or the two rows of a pair do not share their noise and noise
            level (the pairs were re-ordered or split between the reference pass and the update).
    """
    if inputs.ref_velocity is None:
        raise ValueError(
            "ref_velocity: actor.diffusion_loss.loss_mode='dpo' needs the reference velocity at the same input; the "
            "engine computes it (LoRA adapters disabled) for this loss mode"
        )
    noise, sigma = inputs.noise, inputs.sigma
    if noise.shape[0] % 2 or not (torch.equal(noise[0::2], noise[1::2]) and torch.equal(sigma[0::2], sigma[1::2])):
        raise ValueError(
            "dpo: rows 2i and 2i+1 must be one (chosen, rejected) pair with the same noise and noise level; got a "
            f"batch of {noise.shape[0]} rows whose neighbours differ (keep actor.shuffle=false and an even "
            "actor.ppo_micro_batch_size_per_gpu)"
        )
    return diffusion_dpo_policy_loss(
        inputs.velocity, inputs.ref_velocity, inputs.clean_latents, noise, beta=config.diffusion_loss.dpo_beta
    )
