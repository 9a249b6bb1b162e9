"""What the diffusers rollout backend reads from its `RolloutConfig` besides sampling: device, dtype, engine options.

`rollout.device` (`auto`, `cpu`, `cuda[:i]`), the weight dtype of a plain `RolloutConfig` (`model.dtype`) and
`rollout.engine_kwargs.diffusers`, checked by name and type and split into `DiffusersRolloutEngine` arguments
(`merge_lora`, `compile_blocks`) and `Coalescer` arguments (`coalesce`, `coalesce_max_images`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["COALESCE_OPTIONS", "DTYPES", "ENGINE_OPTIONS", "engine_options"]

DTYPES = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ENGINE_OPTIONS: dict[str, type] = {
    "merge_lora": bool,
    "compile_blocks": bool,
    "coalesce": bool,
    "coalesce_max_images": int,
}
COALESCE_OPTIONS = {"coalesce": "enabled", "coalesce_max_images": "max_images"}  # key -> `Coalescer` argument


def engine_options(engine_kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`rollout.engine_kwargs.diffusers`, checked by name and type: (`DiffusersRolloutEngine`, `Coalescer` arguments).

    Raises:
        ValueError: `diffusers` is not a mapping, or holds an unknown key or a value of the wrong type.
    """
    given = (engine_kwargs or {}).get("diffusers") or {}
    if not isinstance(given, Mapping):
        raise ValueError(f"rollout.engine_kwargs.diffusers: expected a mapping, got {type(given).__name__}")
    for key, value in given.items():
        if key not in ENGINE_OPTIONS:
            raise ValueError(
                f"rollout.engine_kwargs.diffusers.{key} is not an option of the diffusers backend; "
                f"known: {sorted(ENGINE_OPTIONS)}"
            )
        expected = ENGINE_OPTIONS[key]
        if not isinstance(value, expected) or (expected is int and (isinstance(value, bool) or value < 1)):
            what = "an int >= 1" if expected is int else expected.__name__
            raise ValueError(f"rollout.engine_kwargs.diffusers.{key}: expected {what}, got {value!r}")
    options = dict(given)
    coalesce = {arg: options.pop(key) for key, arg in COALESCE_OPTIONS.items() if key in options}
    return options, coalesce
