"""Typed configs of verl-omni (`actor_rollout_ref.actor.*`, `.ref.*`, `.model.*`, `.rollout.*`)."""

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
from verl_omni.config.rollout import (
    DiffusionAgentLoopConfig,
    DiffusionPipelineConfig,
    DiffusionRolloutAlgoConfig,
    DiffusionRolloutConfig,
    DiffusionValAlgoConfig,
    DiffusionValKwargsConfig,
    DiffusionValPipelineConfig,
)
from verl_omni.config.sampler import SDESamplerConfig

__all__ = [
    "CheckpointConfig",
    "DiffusionActorConfig",
    "DiffusionAgentLoopConfig",
    "DiffusionLossConfig",
    "DiffusionModelConfig",
    "DiffusionPipelineConfig",
    "DiffusionRefConfig",
    "DiffusionRolloutAlgoConfig",
    "DiffusionRolloutConfig",
    "DiffusionValAlgoConfig",
    "DiffusionValKwargsConfig",
    "DiffusionValPipelineConfig",
    "FSDPEngineConfig",
    "OptimConfig",
    "SDESamplerConfig",
    "WrapPolicyConfig",
    "torch_dtype_name",
]
