"""The sampler's categorical settings and how a trajectory stores them: `SDE_TYPES`, `CPS_LOGPROBS`.

A trajectory carries every setting that changes the transition density. The two string-valued ones are stored as
per-row int64 tensors of shape `(B,)` holding an index into these public tuples (tensors survive `TensorDict`
indexing, `torch.cat`, Ray and binary wire formats, strings do not):

| trajectory key | tuple | codes |
|---|---|---|
| `"sde_type"` | `SDE_TYPES` | 0 = `"sde"`, 1 = `"cps"`, 2 = `"dance_sde"` |
| `"cps_logprob"` | `CPS_LOGPROBS` | 0 = `"exact"`, 1 = `"legacy"` |

The order of each tuple is part of the stored format: append, never reorder.
"""

from __future__ import annotations

import torch

from verl_omni.config.sampler import CPS_LOGPROB_VALUES, SDE_TYPE_VALUES

__all__ = ["CPS_LOGPROBS", "SDE_TYPES", "TRAJECTORY_SETTINGS", "setting_code", "setting_name"]

SDE_TYPES: tuple[str, ...] = SDE_TYPE_VALUES
"""Transition kinds of `FlowMatchSDEDiscreteScheduler.step`; the trajectory key `"sde_type"` stores the index."""

CPS_LOGPROBS: tuple[str, ...] = CPS_LOGPROB_VALUES
"""Log-prob modes of cps steps; the trajectory key `"cps_logprob"` stores the index."""

TRAJECTORY_SETTINGS: dict[str, tuple[str, ...]] = {"sde_type": SDE_TYPES, "cps_logprob": CPS_LOGPROBS}
"""Trajectory key -> the tuple its int64 codes index."""


def _choices(key: str) -> tuple[str, ...]:
    try:
        return TRAJECTORY_SETTINGS[key]
    except KeyError:
        raise KeyError(f"{key!r} is not a coded sampler setting; known: {', '.join(TRAJECTORY_SETTINGS)}") from None


def setting_code(key: str, value: str) -> int:
    """The int64 code stored under trajectory key `key` for `value` (e.g. `setting_code("sde_type", "cps") == 1`).

    Raises:
        KeyError: `key` is not one of `TRAJECTORY_SETTINGS`.
        ValueError: `value` is not allowed for `key` (the message names the key and lists the allowed values).
    """
    choices = _choices(key)
    if value not in choices:
        raise ValueError(f"{key}: expected one of {choices}, got {value!r}")
    return choices.index(value)


def setting_name(key: str, code: int | torch.Tensor) -> str:
    """The string a stored code of trajectory key `key` stands for (e.g. `setting_name("sde_type", 1) == "cps"`).

    Args:
        key (`str`): `"sde_type"` or `"cps_logprob"`.
        code (`int` or a one-element integer `torch.Tensor`): the stored index.

    Raises:
        KeyError: `key` is not one of `TRAJECTORY_SETTINGS`.
        ValueError: `code` is not an integer index into the tuple of `key` (names the key and the valid codes).
    """
    choices = _choices(key)
    if isinstance(code, torch.Tensor):
        if code.numel() != 1 or code.is_floating_point() or code.is_complex():
            raise ValueError(f"trajectory[{key!r}]: expected one integer code, got {code!r}")
        code = code.item()
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < len(choices):
        valid = ", ".join(f"{i} = {name!r}" for i, name in enumerate(choices))
        raise ValueError(f"trajectory[{key!r}]: unknown code {code!r}; valid codes: {valid}")
    return choices[code]
