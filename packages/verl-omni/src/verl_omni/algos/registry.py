"""The policy-loss registry: `register_loss(name)`, `get_loss(name)`, keyed by `actor.diffusion_loss.loss_mode`.

A loss is a function `loss_fn(inputs: PolicyLossInput, config) -> PolicyLossOutput` called by the training engine
once per micro-batch and trained window step. `config` is the `actor_rollout_ref.actor` config
(`verl_omni.config.DiffusionActorConfig`): the loss reads its own knobs from `config.diffusion_loss` and the KL
settings from `config.use_kl_loss`, `config.kl_loss_coef` and `config.diffusion_loss.kl_type`. A new loss plugs in
by registering itself; the engine does not change::

    from verl_omni.algos import PolicyLossInput, PolicyLossOutput, register_loss

    @register_loss("my_loss")
    def my_loss(inputs: PolicyLossInput, config) -> PolicyLossOutput: ...

A loss that reads an optional input of `PolicyLossInput` names it in `needs` (the engine then keeps it: e.g.
`"old_prev_sample_mean"` makes the old-log-prob pass also return the old transition means), and a loss whose math
holds only for some samplers names them in `sde_types` (the trainer config rejects any other
`rollout.algo.sde_type`); `loss_spec(name)` returns both.

The module that registers a loss must be imported before the trainer config naming it is built: the trainer's config
check (`verl_omni.trainer.config.DiffusionTrainerConfig`) looks `loss_mode` up here; the config package itself does not
import this registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import torch

from verl_core.registry import Registry

if TYPE_CHECKING:  # type-only: the config package does not import this registry, and this module needs no config
    from verl_omni.config import DiffusionActorConfig

__all__ = [
    "ForwardLossInput",
    "LossSpec",
    "PolicyLossFn",
    "PolicyLossInput",
    "PolicyLossOutput",
    "get_loss",
    "loss_spec",
    "register_loss",
    "registered_losses",
    "unknown_loss",
]


@dataclasses.dataclass
class PolicyLossInput:
    """What the engine hands a loss for one trained window step of one micro-batch of `B` samples.

    Args:
        log_prob (`torch.Tensor` of shape `(B,)`):
            Current-policy log-probs ℓ_θ of the stored transitions (carry the gradient).
        old_log_prob (`torch.Tensor` of shape `(B,)`):
            Behaviour-policy log-probs ℓ_old (`old_log_probs[:, j]` of the batch).
        advantages (`torch.Tensor` of shape `(B,)`):
            Advantages of the samples at this step (unclipped).
        prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`):
            Transition mean μ_θ of the current policy (carries the gradient), the scheduler's `prev_sample_mean`.
        std_dev_t (`torch.Tensor` of shape `(B,)`):
            The scheduler's `std_dev_t` (σ_t for sde, s for cps).
        std (`torch.Tensor` of shape `(B,)`):
            The true per-element transition std s (the scheduler's `std`).
        ref_prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`, *optional*):
            Transition mean μ_ref of the reference policy at the same input; given when `actor.use_kl_loss`.
        old_prev_sample_mean (`torch.Tensor` of shape `(B, *latent)`, *optional*):
            Transition mean μ_old of the behaviour policy at the same input (from the old-log-prob pass, or the
            update's own detached forward when it is on-policy); given when the loss lists it in `needs`.
    """

    log_prob: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    prev_sample_mean: torch.Tensor
    std_dev_t: torch.Tensor
    std: torch.Tensor
    ref_prev_sample_mean: torch.Tensor | None = None
    old_prev_sample_mean: torch.Tensor | None = None


@dataclasses.dataclass
class ForwardLossInput:
    """What the engine hands a forward-process loss (`trains_on="clean"`) for one trained timestep of a micro-batch.

    Args:
        velocity (`torch.Tensor` of shape `(B, *latent)`): v_θ at `x_t` without CFG (carries the gradient).
        old_velocity (`torch.Tensor` of shape `(B, *latent)`, *optional*): v_old of the old (behaviour) policy at the
            same input; given when the loss lists `"old_velocity"` in `needs`.
        ref_velocity (`torch.Tensor` of shape `(B, *latent)`, *optional*): v_ref of the reference (LoRA adapters
            disabled) at the same input; given when `actor.diffusion_loss.ref_kl_coef > 0`, and always to a
            `"pairs"` loss (`dpo`).
        clean_latents (`torch.Tensor` of shape `(B, *latent)`): the rollout's final latents x₀.
        noise (`torch.Tensor` of shape `(B, *latent)`): ε of `x_t = (1 − t)·x₀ + t·ε`.
        sigma (`torch.Tensor` of shape `(B,)`): t (= timestep / 1000).
        advantages (`torch.Tensor` of shape `(B,)`): the advantages after `algorithm.adv_mode`.
    """

    velocity: torch.Tensor
    clean_latents: torch.Tensor
    noise: torch.Tensor
    sigma: torch.Tensor
    advantages: torch.Tensor
    old_velocity: torch.Tensor | None = None
    ref_velocity: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """What a registered loss needs beyond the inputs every loss gets.

    Args:
        needs (`frozenset[str]`): optional `PolicyLossInput` fields the loss reads (`"old_prev_sample_mean"`).
        sde_types (`tuple[str, ...]`, *optional*): the `rollout.algo.sde_type` values the loss is valid for;
            `None` = any.
        trains_on (`str`, *optional*, defaults to `"transitions"`): what the loss trains on. `"transitions"`: the
            rollout's SDE-window transitions and their log-probs (`PolicyLossInput`; old log-prob pass, reference
            means with `actor.use_kl_loss`). `"clean"`: forward-noised copies of the rollout's final clean latents
            (`ForwardLossInput`; the rollout samples without log-probs and returns only the clean latents, the
            timestep grid and the prompt embeddings; no old log-prob pass, no reference pass, no CFG in training).
            `"pairs"`: like `"clean"`, on (chosen, rejected) pairs picked from each group by reward, in adjacent rows
            sharing their noise and noise level, with the reference velocity always (online Diffusion-DPO).
    """

    needs: frozenset[str] = frozenset()
    sde_types: tuple[str, ...] | None = None
    trains_on: str = "transitions"

    @property
    def needs_log_probs(self) -> bool:
        """Whether the rollout must record the SDE window with log-probs (`trains_on == "transitions"`)."""
        return self.trains_on == "transitions"


_OPTIONAL_INPUTS = {
    "transitions": frozenset({"old_prev_sample_mean"}),
    "clean": frozenset({"old_velocity"}),
    "pairs": frozenset(),
}


@dataclasses.dataclass
class PolicyLossOutput:
    """What a loss returns.

    Args:
        loss (`torch.Tensor`, scalar):
            The differentiable loss of this step (KL included); the engine scales and back-propagates it.
        pg_loss (`torch.Tensor`, scalar, detached):
            The policy-gradient part, reported as `actor/pg_loss`.
        kl (`torch.Tensor`, scalar, detached, or `None`):
            The KL term before its coefficient, reported as `actor/kl_loss` when not `None`.
        metrics (`dict[str, torch.Tensor]`):
            Detached scalars reported as `actor/<name>`: averaged over steps and micro-batches, except names
            ending in `_min` / `_max`, which take the min / max.
    """

    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl: torch.Tensor | None
    metrics: dict[str, torch.Tensor]


class PolicyLossFn(Protocol):
    """A registered loss: `(inputs, config) -> PolicyLossOutput`."""

    def __call__(self, inputs: PolicyLossInput, config: DiffusionActorConfig) -> PolicyLossOutput:
        """Compute the loss of one trained step of one micro-batch."""


_LOSSES: Registry[PolicyLossFn] = Registry(
    "loss",
    key="actor.diffusion_loss.loss_mode",
    hint=" (register one with verl_omni.algos.register_loss, imported before the config is built)",
)
"""`loss_mode` -> loss function."""
_SPECS: dict[str, LossSpec] = {}


def register_loss(
    name: str,
    *,
    needs: tuple[str, ...] = (),
    sde_types: tuple[str, ...] | None = None,
    trains_on: str = "transitions",
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Function decorator: register a loss under `name` (the value of `actor.diffusion_loss.loss_mode`).

    Args:
        name (`str`): the `loss_mode` value.
        needs (`tuple[str, ...]`, *optional*): optional `PolicyLossInput` fields the loss reads
            (`"old_prev_sample_mean"`).
        sde_types (`tuple[str, ...]`, *optional*): the samplers (`rollout.algo.sde_type`) the loss is valid for.
        trains_on (`str`, *optional*, defaults to `"transitions"`): `"transitions"` (`PolicyLossInput`), `"clean"` or
            `"pairs"` (`ForwardLossInput`), see `LossSpec`.

    Raises:
        ValueError: `name` is already registered to another function, `trains_on` is unknown, or `needs` names an
            unknown input.
    """
    if trains_on not in _OPTIONAL_INPUTS:
        raise ValueError(f"trains_on: expected one of {sorted(_OPTIONAL_INPUTS)}, got {trains_on!r}")
    optional = _OPTIONAL_INPUTS[trains_on]
    unknown = sorted(set(needs) - optional)
    if unknown:
        raise ValueError(
            f"needs: {unknown} are not optional PolicyLossInput fields of a {trains_on!r} loss ({sorted(optional)})"
        )

    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        _LOSSES.add(name, fn)
        _SPECS[name] = LossSpec(needs=frozenset(needs), sde_types=sde_types, trains_on=trains_on)
        return fn

    return deco


def loss_spec(name: str) -> LossSpec:
    """The `LossSpec` of the loss registered as `name` (a `KeyError` like `get_loss` when it is not)."""
    get_loss(name)
    return _SPECS[name]


def registered_losses() -> list[str]:
    """Every registered loss name, sorted."""
    return _LOSSES.names()


def unknown_loss(name: str) -> str:
    """Why `name` is not a loss: `unknown loss 'x'; did you mean 'y'? registered: ...` (the config check's message)."""
    return _LOSSES.unknown_text(name)


def get_loss(name: str) -> PolicyLossFn:
    """Return the loss registered as `name`.

    Raises:
        KeyError: `name` is not registered (the message names `actor.diffusion_loss.loss_mode`, suggests a close
            name and lists the registered ones).
    """
    return _LOSSES.get(name)
