"""The policy update of a loss on preference pairs (`LossSpec.trains_on == "pairs"`, online Diffusion-DPO).

The trainer hands the engine only the chosen and rejected samples of each prompt group, as adjacent rows
(`2i`: chosen, `2i + 1`: rejected) that share their noise `ε` (`dpo_noise`) and noise level σ (`dpo_sigma`). For every
row this update builds `x_t = (1 − σ)·x₀ + σ·ε`, computes the reference velocity (LoRA adapters disabled, no grad) for
the whole batch before the first optimizer step, then runs the registered loss on micro-batches of whole pairs with the
velocity of the trained policy (no CFG). Rows are never shuffled: a pair must stay in one micro-batch. It registers
itself as the engine's update for `trains_on="pairs"`; the noising and the velocity are `engine/velocity.py`'s.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl_omni.algos import ForwardLossInput, get_loss
from verl_omni.engine.distributed import all_reduce_metrics
from verl_omni.engine.fsdp_engine import DiffusersFSDPEngine
from verl_omni.engine.metrics import accumulate_loss_output, update_metrics
from verl_omni.engine.velocity import no_grad_velocities, noised_latents, timestep_of, unguided_velocity

__all__ = ["update_on_pairs"]

_REQUIRED = ("latents_clean", "dpo_noise", "dpo_sigma")


@DiffusersFSDPEngine.register_update("pairs")
def update_on_pairs(engine: DiffusersFSDPEngine, batch: TensorDict) -> dict[str, float]:
    """One policy update of `engine` with its pair loss on a local batch of adjacent (chosen, rejected) rows.

    Args:
        engine (`DiffusersFSDPEngine`): a trainable LoRA engine (the reference is the model with adapters disabled).
        batch (`TensorDict`, batch `[2P]`): `latents_clean` `(2P, *latent)`, `dpo_noise` `(2P, *latent)` and
            `dpo_sigma` `(2P,)` (equal within a pair), the prompt embeddings, `height`, `width`.

    Returns:
        Metrics averaged over micro-batches and ranks: `actor/pg_loss`, `actor/<name>` of the loss's metrics
        (`_max` names: the max), `actor/grad_norm`, `actor/lr`.

    Raises:
        ValueError: a required key is missing, the batch or a mini-batch is an odd number of rows, or it does not split
            into mini-batches.
    """
    cfg = engine.config
    missing = [k for k in _REQUIRED if k not in batch.keys()]  # noqa: SIM118 - a TensorDict's keys
    if missing:
        raise ValueError(
            f"update_policy: actor.diffusion_loss.loss_mode={cfg.diffusion_loss.loss_mode!r} trains on preference "
            f"pairs; the batch lacks {missing} (it has {sorted(batch.keys())})"
        )
    n = batch.batch_size[0]
    mini = min(cfg.ppo_mini_batch_size * 2 // engine.world_size, n)  # 2 rows per prompt
    if n % 2 or mini % 2 or n % mini:
        raise ValueError(
            f"update_policy: the local batch of {n} rows must split into mini-batches of an even {mini} rows (whole "
            "pairs: actor.ppo_mini_batch_size x 2 / world size)"
        )
    # 1. reference velocities for the whole batch, before any optimizer step
    with engine._reference_mode():
        ref = no_grad_velocities(engine, batch, lambda micro: _velocity(engine, micro, *_noised(micro)))
    batch = batch.clone(recurse=False)
    batch["ref_velocity"] = ref
    # 2. the update: one optimizer step per mini-batch; a micro-batch's loss (a mean over its pairs) ÷ its share
    loss_fn = get_loss(cfg.diffusion_loss.loss_mode)
    acc: dict[str, torch.Tensor] = {}
    n_terms, grad_norms = 0, []
    lr = engine.optimizer.param_groups[0]["lr"]
    engine.module.train()
    for _epoch in range(cfg.ppo_epochs):
        for start in range(0, n, mini):
            mini_batch = batch[start : start + mini]
            engine.optimizer.zero_grad(set_to_none=True)
            for micro in engine._micro_batches(mini_batch, cfg.ppo_micro_batch_size_per_gpu):
                micro = engine._to_device(micro, update=True)
                x_t, sigma = _noised(micro)
                res = loss_fn(
                    ForwardLossInput(
                        velocity=_velocity(engine, micro, x_t, sigma),
                        clean_latents=micro["latents_clean"],
                        noise=micro["dpo_noise"],
                        sigma=sigma,
                        advantages=torch.zeros_like(sigma),
                        ref_velocity=micro["ref_velocity"],
                    ),
                    cfg,
                )
                scale = micro.batch_size[0] / mini * (cfg.loss_scale_factor or 1.0)
                (res.loss * scale).backward()
                accumulate_loss_output(acc, res)
                n_terms += 1
            lr = engine.optimizer.param_groups[0]["lr"]
            grad_norms.append(engine._clip_and_step())
    return all_reduce_metrics(update_metrics(acc, n_terms, grad_norms, lr), engine.device)


def _noised(micro: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """`(x_t, σ (B,))` with `x_t = (1 − σ)·x₀ + σ·ε`."""
    sigma = micro["dpo_sigma"].float()
    return noised_latents(micro["latents_clean"], micro["dpo_noise"], sigma), sigma


def _velocity(engine: DiffusersFSDPEngine, micro: TensorDict, x_t: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """The velocity of `engine.module` at `x_t`, timestep `1000·σ`, without CFG (float32)."""
    return unguided_velocity(engine, micro, x_t, timestep_of(sigma))
