"""Typed configs of verl-omni's training side (`actor_rollout_ref.actor.*`, `.ref.*`, `.model.*`)."""

from verl_omni.config.actor import (
    CheckpointConfig,
    DiffusionActorConfig,
    DiffusionLossConfig,
    DiffusionRefConfig,
    FSDPEngineConfig,
    OptimConfig,
    WrapPolicyConfig,
    torch_dtype_name,
)
from verl_omni.config.model import DiffusionModelConfig

__all__ = [
    "CheckpointConfig",
    "DiffusionActorConfig",
    "DiffusionLossConfig",
    "DiffusionModelConfig",
    "DiffusionRefConfig",
    "FSDPEngineConfig",
    "OptimConfig",
    "WrapPolicyConfig",
    "torch_dtype_name",
]
