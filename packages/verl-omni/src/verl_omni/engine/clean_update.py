"""The policy update of a loss that trains on clean samples (`LossSpec.trains_on == "clean"`, e.g. DiffusionNFT).

The engine's FlowGRPO update scores stored SDE transitions; this one trains on forward-noised copies of the
rollout's final latents: for every row and each of its trained timesteps `t` (`train_timesteps / 1000`) it draws
`ε`, builds `x_t = (1 − t)·x₀ + t·ε`, and hands the registered loss the velocity of the trained policy at `x_t`
(without CFG) together with the old policy's (`engine/old_policy.py`'s `OldPolicy`, a copy of the trainable
weights refreshed by the trainer after each step) and, with `diffusion_loss.ref_kl_coef > 0`, the reference's (LoRA
adapters disabled). The old and reference velocities are computed for the whole batch before the first optimizer step,
so every mini-batch of the update sees the same old policy. It registers itself as the engine's update for
`trains_on="clean"`; the noising and the velocity are `engine/velocity.py`'s.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl_omni.algos import ForwardLossInput, get_loss
from verl_omni.engine.distributed import all_reduce_metrics
from verl_omni.engine.fsdp_engine import DiffusersFSDPEngine
from verl_omni.engine.metrics import accumulate_loss_output, update_metrics
from verl_omni.engine.old_policy import OldPolicy  # re-exported: its path before it moved
from verl_omni.engine.velocity import no_grad_velocities, noised_latents, sigma_of, unguided_velocity

__all__ = ["OldPolicy", "update_on_clean_samples"]

_NOISE_SEED_STRIDE = 1_000_003  # the noise of engine step s, rank r: seed + s·stride + r (restored with the step)


@DiffusersFSDPEngine.register_update("clean")
def update_on_clean_samples(engine: DiffusersFSDPEngine, batch: TensorDict) -> dict[str, float]:
    """One policy update of `engine` with its clean-sample loss on a local batch (see the module docstring).

    Args:
        engine (`DiffusersFSDPEngine`): a trainable engine whose `old_policy` is set.
        batch (`TensorDict`, batch `[B]`): `latents_clean` `(B, *latent)`, `train_timesteps` `(B, T)` (1000·σ),
            `advantages` `(B,)` (after `algorithm.adv_mode`), the prompt embeddings, `height`, `width`.

    Returns:
        Metrics averaged over trained timesteps, micro-batches and ranks: `actor/pg_loss`, `actor/kl_loss` (with
        `ref_kl_coef > 0`), `actor/<name>` of the loss's metrics, `actor/grad_norm`, `actor/lr`.

    Raises:
        ValueError: a required key is missing, or the batch does not split into mini-batches.
    """
    cfg = engine.config
    missing = [k for k in ("latents_clean", "train_timesteps", "advantages") if k not in batch]
    if missing:
        raise ValueError(
            f"update_policy: actor.diffusion_loss.loss_mode={cfg.diffusion_loss.loss_mode!r} trains on clean samples; "
            f"the batch lacks {missing} (it has {sorted(batch.keys())})"
        )
    use_ref = cfg.diffusion_loss.ref_kl_coef > 0
    # 1. noise of every (row, trained timestep), from the engine's seed and step (a resume draws the same)
    n, k = batch["train_timesteps"].shape
    x0 = batch["latents_clean"]
    gen = torch.Generator().manual_seed(
        cfg.fsdp_config.seed + engine.global_step * _NOISE_SEED_STRIDE + engine.rank
    )  # fmt: skip
    batch = batch.clone(recurse=False)
    batch["nft_noise"] = torch.randn((n, k, *x0.shape[1:]), generator=gen, dtype=torch.float32).to(x0.device)
    # 2. old (and reference) velocities under θ_old for the whole batch, before any optimizer step
    with engine.old_policy.active():
        batch["old_velocity"] = _velocities(engine, batch)
    if use_ref:
        with engine._reference_mode():
            batch["ref_velocity"] = _velocities(engine, batch)
    # 3. the update: one optimizer step per mini-batch, the loss ÷ (micro share · T) so the step sees the mean
    loss_fn = get_loss(cfg.diffusion_loss.loss_mode)
    acc: dict[str, torch.Tensor] = {}
    n_terms, grad_norms = 0, []
    lr = engine.optimizer.param_groups[0]["lr"]
    engine.module.train()
    for epoch in range(cfg.ppo_epochs):
        for mini in engine._mini_batches(batch, epoch):
            mini_size = mini.batch_size[0]
            engine.optimizer.zero_grad(set_to_none=True)
            for micro in engine._micro_batches(mini, cfg.ppo_micro_batch_size_per_gpu):
                micro = engine._to_device(micro, update=True)
                scale = micro.batch_size[0] / mini_size / k * (cfg.loss_scale_factor or 1.0)
                for j in range(k):
                    t, noise, x_t = _noised(micro, j)
                    res = loss_fn(
                        ForwardLossInput(
                            velocity=_velocity(engine, micro, x_t, j),
                            clean_latents=micro["latents_clean"],
                            noise=noise,
                            sigma=t,
                            advantages=micro["advantages"],
                            old_velocity=micro["old_velocity"][:, j],
                            ref_velocity=micro["ref_velocity"][:, j] if use_ref else None,
                        ),
                        cfg,
                    )
                    (res.loss * scale).backward()
                    accumulate_loss_output(acc, res)
                    n_terms += 1
            lr = engine.optimizer.param_groups[0]["lr"]
            grad_norms.append(engine._clip_and_step())
    return all_reduce_metrics(update_metrics(acc, n_terms, grad_norms, lr), engine.device)


def _noised(micro: TensorDict, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(t (B,), ε, x_t)` of trained timestep `j`: `t = train_timesteps / 1000`, `x_t = (1 − t)·x₀ + t·ε`."""
    t = sigma_of(micro["train_timesteps"][:, j])
    noise = micro["nft_noise"][:, j]
    return t, noise, noised_latents(micro["latents_clean"], noise, t)


def _velocity(engine: DiffusersFSDPEngine, micro: TensorDict, x_t: torch.Tensor, j: int) -> torch.Tensor:
    """The velocity of `engine.module` at `x_t`, at the row's trained timestep `j` (`train_timesteps`: 1000·σ)."""
    return unguided_velocity(engine, micro, x_t, micro["train_timesteps"][:, j])


def _velocities(engine: DiffusersFSDPEngine, batch: TensorDict) -> torch.Tensor:
    """Velocities `(B, T, *latent)` of the module as it stands (no grad) at every row's noised latents."""
    k = batch["train_timesteps"].shape[1]

    def per_micro(micro: TensorDict) -> torch.Tensor:
        return torch.stack([_velocity(engine, micro, _noised(micro, j)[2], j) for j in range(k)], dim=1)

    return no_grad_velocities(engine, batch, per_micro)
