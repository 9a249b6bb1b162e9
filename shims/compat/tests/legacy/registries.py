"""Legacy-style script: the old registry names resolve through the old registry import paths."""

from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
from verl.trainer.diffusion.diffusion_algos import DiffusionAdvantageEstimator
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.workers.engine import EngineRegistry
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry, get_rollout_replica_class

from verl_compat.adapters import compute_flow_grpo_outcome_advantage, compute_policy_loss_flow_grpo
from verl_omni.engine import DiffusersFSDPEngine
from verl_omni.reward import VisualRewardManager
from verl_omni.rollout.agent_loop import get_agent_loop
from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer

assert get_policy_loss_fn("flow_grpo") is compute_policy_loss_flow_grpo
assert get_adv_estimator_fn("flow_grpo") is compute_flow_grpo_outcome_advantage
assert get_adv_estimator_fn(DiffusionAdvantageEstimator.FLOW_GRPO) is compute_flow_grpo_outcome_advantage
assert get_reward_manager_cls("visual") is VisualRewardManager
target = _agent_loop_registry["diffusion_single_turn_agent"]["_target_"]
module, _, name = target.rpartition(".")
assert getattr(__import__(module, fromlist=[name]), name) is get_agent_loop("diffusion_single_turn_agent")
assert get_rollout_replica_class("vllm_omni") is vLLMOmniHttpServer
assert RolloutReplicaRegistry.get("vllm_omni") is vLLMOmniHttpServer
assert get_rollout_class("vllm_omni", "async") is vLLMOmniHttpServer
assert EngineRegistry.get_engine_cls("diffusion_model", "fsdp2") is DiffusersFSDPEngine
try:
    get_policy_loss_fn("vanilla")
except KeyError as e:
    assert "pip install verl" in str(e)
else:
    raise AssertionError("an LLM loss name resolved without upstream verl")
print("OK")
