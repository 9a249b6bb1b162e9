"""Legacy-style script for the world WITH upstream verl installed: only removed paths are served by the shim."""

import verl
import verl.utils.torch_functional  # a real upstream module loads normally
from verl.trainer.diffusion.diffusion_algos import compute_flow_grpo_outcome_advantage
from verl.trainer.ppo import core_algos
from verl.workers import config as workers_config
from verl.workers.config import DiffusionModelConfig
from verl.workers.rollout import base as rollout_base

from verl_compat.adapters import compute_flow_grpo_outcome_advantage as adapter
from verl_compat.adapters import compute_policy_loss_flow_grpo
from verl_omni.config import DiffusionModelConfig as NewModelConfig

assert not getattr(verl, "__verl_compat_facade__", False), "the shim shadowed upstream verl"
assert compute_flow_grpo_outcome_advantage is adapter
assert DiffusionModelConfig is NewModelConfig
assert workers_config.__spec__.origin.endswith("verl/workers/config/__init__.py")  # the real module, patched
assert hasattr(workers_config, "FSDPEngineConfig")  # upstream names untouched
assert core_algos.get_policy_loss_fn("flow_grpo") is compute_policy_loss_flow_grpo
assert core_algos.get_adv_estimator_fn("flow_grpo") is adapter
assert core_algos.get_policy_loss_fn("vanilla") is not None  # upstream registry still works
assert rollout_base._ROLLOUT_REGISTRY[("vllm_omni", "async")].endswith("vLLMOmniHttpServer")
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls  # noqa: E402
from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: E402

from verl_omni.reward import VisualRewardManager  # noqa: E402

assert get_reward_manager_cls("visual") is VisualRewardManager
assert RolloutReplicaRegistry.get("vllm_omni").__name__ == "vLLMOmniHttpServer"
print("OK")
