"""The `diffusion_trainer` Hydra config (YAML in this folder) and its dataclasses (`algorithm.*`, `trainer.*`, root)."""

from verl_omni.trainer.config.algorithm import DiffusionAlgoConfig, RolloutCorrectionConfig
from verl_omni.trainer.config.loader import CONFIG_DIR, compose_config, load_config
from verl_omni.trainer.config.root import ActorRolloutRefConfig, DiffusionTrainerConfig
from verl_omni.trainer.config.trainer import RayInitConfig, RayKwargsConfig, SeparateRolloutConfig, TrainerConfig

__all__ = [
    "CONFIG_DIR",
    "ActorRolloutRefConfig",
    "DiffusionAlgoConfig",
    "DiffusionTrainerConfig",
    "RayInitConfig",
    "RayKwargsConfig",
    "RolloutCorrectionConfig",
    "SeparateRolloutConfig",
    "TrainerConfig",
    "compose_config",
    "load_config",
]
