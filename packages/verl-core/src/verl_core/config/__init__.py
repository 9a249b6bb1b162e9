"""Config base classes: `BaseConfig` and building config trees from OmegaConf via `_target_`."""

from verl_core.config.base import BaseConfig
from verl_core.config.builder import omega_conf_to_dataclass, resolve_target
from verl_core.config.errors import ConfigError, ConfigKeyError, ConfigTypeError, ConfigValueError

__all__ = [
    "BaseConfig",
    "ConfigError",
    "ConfigKeyError",
    "ConfigTypeError",
    "ConfigValueError",
    "omega_conf_to_dataclass",
    "resolve_target",
]

from verl_core.config.rollout import (
    LLMRolloutConfig,
    LoRAConfig,
    ModelConfig,
    RolloutBaseConfig,
    RolloutConfig,
    SamplingConfig,
)

__all__ += ["LLMRolloutConfig", "LoRAConfig", "ModelConfig", "RolloutBaseConfig", "RolloutConfig", "SamplingConfig"]
