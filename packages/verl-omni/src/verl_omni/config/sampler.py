"""`SDESamplerConfig`: the one home of the SDE sampler settings that change the transition density.

`noise_level`, `sde_type` and `cps_logprob` are defined, defaulted and checked here only. The training rollout's
`actor_rollout_ref.rollout.algo.*` (`DiffusionRolloutAlgoConfig`) and one generate call's sampling parameters
(`DiffusionSamplingConfig`) inherit them; the scheduler (`FlowMatchSDEDiscreteScheduler`) takes its constructor
defaults from here and checks per-call values with `check_noise_level`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Literal

from verl_core.config import BaseConfig

__all__ = [
    "CPS_LOGPROB_VALUES",
    "DPM_ALGORITHM_TYPES",
    "DPM_APPLY_STRATEGIES",
    "SDE_TYPE_VALUES",
    "SDESamplerConfig",
    "check_noise_level",
    "noise_level_problem",
]

SDEType = Literal["sde", "cps", "dance_sde"]
CPSLogProb = Literal["exact", "legacy"]
SDE_TYPE_VALUES: tuple[str, ...] = typing.get_args(SDEType)
"""`"sde"` (Flow-SDE), `"cps"` (coefficients-preserving) and `"dance_sde"` (DanceGRPO's constant-η SDE); their order is
the trajectory's stored code (append, never reorder)."""
CPS_LOGPROB_VALUES: tuple[str, ...] = typing.get_args(CPSLogProb)
"""`"exact"` and `"legacy"` (the tempered cps log-prob of older releases); their order is the stored code."""


DPM_ALGORITHM_TYPES: tuple[str, ...] = ("dpmsolver++",)
"""Values of `rollout.algo.dpm_algorithm_type` besides null (MixGRPO's names; its `dpmsolver` is not implemented)."""

DPM_APPLY_STRATEGIES: tuple[str, ...] = ("post", "all")
"""`post`: the ODE steps after the SDE window, on a compressed grid; `all`: every ODE step, on the sampler's grid."""


def noise_level_problem(noise_level: float, sde_type: str) -> str | None:
    """The allowed range (for a message) when `noise_level` is invalid for `sde_type`, else `None`."""
    if not isinstance(noise_level, (int, float)) or not math.isfinite(noise_level) or noise_level < 0:
        return "a finite float >= 0"
    if sde_type == "cps" and noise_level > 1:
        return "a float in [0, 1] for sde_type 'cps' (s = σ'·sin(a·π/2))"
    return None


def check_noise_level(noise_level: float, sde_type: str, *, key: str) -> None:
    """Raise `ValueError` naming `key` unless `sde_type` is known and `noise_level` is valid for it.

    Raises:
        ValueError: `sde_type` is not one of `SDE_TYPE_VALUES`, or `noise_level` is negative, not finite, or above 1
            for `"cps"` (names `key`, the value and the allowed range).
    """
    if sde_type not in SDE_TYPE_VALUES:
        raise ValueError(f"sde_type: expected one of {SDE_TYPE_VALUES}, got {sde_type!r}")
    problem = noise_level_problem(noise_level, sde_type)
    if problem is not None:
        raise ValueError(f"{key}: expected {problem}, got {noise_level!r}")


@dataclasses.dataclass
class SDESamplerConfig(BaseConfig):
    """The sampler settings every trajectory carries (`noise_level`, `sde_type`, `cps_logprob`).

    Args:
        noise_level (`float`, defaults to 1.0): `a` inside the SDE window; 0 = the deterministic ODE. The default is
            the one the trainer has always sampled with (`rollout.algo.noise_level: 1.0`); validation overrides it
            with `rollout.val_kwargs.algo.noise_level` (0.0).
        sde_type (`str`, defaults to `"sde"`): `"sde"` (Flow-SDE), `"cps"` (coefficients-preserving, needs
            `noise_level` in [0, 1]) or `"dance_sde"` (DanceGRPO's SDE, step std `η·√(σ − σ')`).
        cps_logprob (`str`, defaults to `"exact"`): `"exact"` or `"legacy"` (the tempered cps log-prob, factor 2s²).

    Raises:
        ConfigValueError: `noise_level` negative, not finite, or above 1 with `sde_type: cps` (names the key).
    """

    noise_level: float = 1.0
    sde_type: SDEType = "sde"
    cps_logprob: CPSLogProb = "exact"

    def __post_init__(self) -> None:
        super().__post_init__()
        problem = noise_level_problem(self.noise_level, self.sde_type)
        self._require("noise_level", problem is None, problem or "")
