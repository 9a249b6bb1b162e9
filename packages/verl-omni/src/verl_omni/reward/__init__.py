"""Rewards for diffusion RL: built-in scorers, user reward functions and the `visual` reward manager.

Ray is not imported here; only building a `RayRewardPool` imports it.
"""

from verl_omni.reward.batch import RewardBatch, RewardFunctionError, RewardOutput, Scorer
from verl_omni.reward.builtin import (
    BUILTIN_IMAGE_SCORERS,
    check_builtin_data_sources,
    default_compute_score_image,
    default_compute_score_image_batch,
)
from verl_omni.reward.config import (
    CustomRewardFunctionConfig,
    RewardConfig,
    RewardFunctionConfig,
    RewardManagerConfig,
    RewardManagerModuleConfig,
    RewardModelConfig,
    SandboxFusionConfig,
)
from verl_omni.reward.jpeg import compute_score, jpeg_compressibility, jpeg_incompressibility, jpeg_sizes_kb
from verl_omni.reward.loader import LoadedRewardFunction, batched_reward, load_reward_function
from verl_omni.reward.manager import (
    REWARD_MANAGERS,
    VisualRewardManager,
    build_reward_manager,
    get_reward_manager_class,
    register_reward_manager,
)
from verl_omni.reward.pool import RayRewardPool, RewardPool, RewardWorkerError, ThreadRewardPool
from verl_omni.reward.scorers import BuiltinScorer, FunctionScorer, WeightedSumScorer, build_scorer

__all__ = [
    "BUILTIN_IMAGE_SCORERS",
    "REWARD_MANAGERS",
    "BuiltinScorer",
    "CustomRewardFunctionConfig",
    "FunctionScorer",
    "LoadedRewardFunction",
    "RayRewardPool",
    "RewardBatch",
    "RewardConfig",
    "RewardFunctionConfig",
    "RewardFunctionError",
    "RewardManagerConfig",
    "RewardManagerModuleConfig",
    "RewardModelConfig",
    "RewardOutput",
    "RewardPool",
    "RewardWorkerError",
    "SandboxFusionConfig",
    "Scorer",
    "ThreadRewardPool",
    "VisualRewardManager",
    "WeightedSumScorer",
    "batched_reward",
    "build_reward_manager",
    "build_scorer",
    "check_builtin_data_sources",
    "compute_score",
    "default_compute_score_image",
    "default_compute_score_image_batch",
    "get_reward_manager_class",
    "jpeg_compressibility",
    "jpeg_incompressibility",
    "jpeg_sizes_kb",
    "load_reward_function",
    "register_reward_manager",
]
