"""The policy update of a loss that trains on clean samples (`LossSpec.trains_on == "clean"`, e.g. DiffusionNFT).

The engine's FlowGRPO update scores stored SDE transitions; this one trains on forward-noised copies of the
rollout's final latents: for every row and each of its trained timesteps `t` (`train_timesteps / 1000`) it draws
`ε`, builds `x_t = (1 − t)·x₀ + t·ε`, and hands the registered loss the velocity of the trained policy at `x_t`
(without CFG) together with the old policy's (`OldPolicy`, a copy of the trainable weights refreshed by the trainer
after each step) and, with `diffusion_loss.ref_kl_coef > 0`, the reference's (LoRA adapters disabled). The old and
reference velocities are computed for the whole batch before the first optimizer step, so every mini-batch of the
update sees the same old policy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed.checkpoint as dcp
from tensordict import TensorDict

from verl_omni.algos import ForwardLossInput, get_loss
from verl_omni.engine.distributed import all_reduce_metrics

if TYPE_CHECKING:
    from verl_omni.engine.fsdp_engine import DiffusersFSDPEngine

__all__ = ["OldPolicy", "update_on_clean_samples"]

_NOISE_SEED_STRIDE = 1_000_003  # the noise of engine step s, rank r: seed + s·stride + r (restored with the step)


class OldPolicy:
    """θ_old: a detached copy of the module's trainable parameters (LoRA tensors, or every weight), same sharding.

    Args:
        module (`torch.nn.Module`): the (FSDP2-sharded) trained module; the copy is taken now, so θ_old = θ.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self._params = {name: p for name, p in module.named_parameters() if p.requires_grad}
        self._old = {name: p.detach().clone() for name, p in self._params.items()}
        self.refreshes = 0

    @contextlib.contextmanager
    @torch.no_grad()
    def active(self) -> Iterator[None]:
        """Run the module with θ_old in place of θ; θ is put back on exit (bit for bit)."""
        saved = {name: p.detach().clone() for name, p in self._params.items()}
        for name, p in self._params.items():
            p.copy_(self._old[name])
        try:
            yield
        finally:
            for name, p in self._params.items():
                p.copy_(saved[name])

    @torch.no_grad()
    def refresh(self, decay: float) -> None:
        """`θ_old ← decay·θ_old + (1 − decay)·θ` (decay 0 copies θ)."""
        for name, p in self._params.items():
            if decay == 0.0:
                self._old[name].copy_(p.detach())
            else:
                self._old[name].mul_(decay).add_(p.detach(), alpha=1.0 - decay)
        self.refreshes += 1

    def max_abs_diff(self) -> float:
        """The largest |θ − θ_old| over every trained tensor (0.0 right after a copy)."""
        diffs = [(p.detach() - self._old[n]).abs().max() for n, p in self._params.items()]
        value = torch.stack([d.full_tensor() if hasattr(d, "full_tensor") else d for d in diffs]).max()
        return float(value)

    def save(self, path: Path) -> None:
        """DCP-save θ_old and the refresh count under `path` (a collective)."""
        dcp.save({**self._old, "refreshes": torch.tensor(self.refreshes)}, checkpoint_id=str(path))

    def load(self, path: Path) -> None:
        """Load what `save` wrote (a collective).

        Raises:
            FileNotFoundError: `path` does not exist (a checkpoint of a run whose loss had no old policy).
        """
        if not path.is_dir():
            raise FileNotFoundError(
                f"{path}: the checkpoint holds no old policy (saved under a loss without one); resume it with its "
                "own actor.diffusion_loss.loss_mode"
            )
        state = {**self._old, "refreshes": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(path))
        self.refreshes = int(state["refreshes"])


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
    from verl_omni.engine.fsdp_engine import _accumulate

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
                    _accumulate(acc, "pg_loss", res.pg_loss)
                    if res.kl is not None:
                        _accumulate(acc, "kl_loss", res.kl)
                    for name, value in res.metrics.items():
                        _accumulate(acc, name, value)
                    n_terms += 1
            lr = engine.optimizer.param_groups[0]["lr"]
            grad_norms.append(engine._clip_and_step())
    metrics = {
        f"actor/{name}": total if name.endswith(("_min", "_max")) else total / n_terms for name, total in acc.items()
    }
    metrics["actor/grad_norm"] = torch.stack(grad_norms).mean()
    metrics["actor/lr"] = torch.tensor(lr)
    return all_reduce_metrics(metrics, engine.device)


def _noised(micro: TensorDict, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(t (B,), ε, x_t)` of trained timestep `j`: `t = train_timesteps / 1000`, `x_t = (1 − t)·x₀ + t·ε`."""
    x0 = micro["latents_clean"].float()
    t = micro["train_timesteps"][:, j].float() / 1000.0
    noise = micro["nft_noise"][:, j]
    tb = t.reshape(-1, *([1] * (x0.dim() - 1)))
    return t, noise, (1.0 - tb) * x0 + tb * noise


def _velocity(engine: DiffusersFSDPEngine, micro: TensorDict, x_t: torch.Tensor, j: int) -> torch.Tensor:
    """The velocity of `engine.module` at `x_t`, timestep `j` of the row, without CFG (float32)."""
    return engine.adapter.velocity(
        engine.module,
        x_t,
        micro["train_timesteps"][:, j],
        engine.adapter.conditioning(micro),
        guidance_scale=1.0,
        height=int(micro["height"][0]),
        width=int(micro["width"][0]),
        dtype=engine.param_dtype,
    )


@torch.no_grad()
def _velocities(engine: DiffusersFSDPEngine, batch: TensorDict) -> torch.Tensor:
    """Velocities `(B, T, *latent)` of the module as it stands (no grad) at every row's noised latents."""
    engine.module.eval()
    size = engine.config.log_prob_micro_batch_size_per_gpu or engine.config.ppo_micro_batch_size_per_gpu
    k = batch["train_timesteps"].shape[1]
    out = []
    for micro in engine._micro_batches(batch, size):
        micro = engine._to_device(micro, update=True)
        out.append(torch.stack([_velocity(engine, micro, _noised(micro, j)[2], j) for j in range(k)], dim=1))
    return torch.cat(out)
