"""FlowGRPO math on tensors: group advantages, the registered losses (clipped surrogate + KL), their metrics.

This layer sits below the engine and the trainer and imports neither. The engine takes its loss from the
registry (`get_loss(actor.diffusion_loss.loss_mode)`); `"flow_grpo"` is registered on import.
"""

from verl_omni.algos.advantages import compute_flow_grpo_advantages, group_index
from verl_omni.algos.flow_grpo import (
    flow_grpo_loss,
    flow_grpo_policy_loss,
    kl_penalty,
    kl_penalty_exact,
    kl_penalty_historical,
    rollout_consistency_metrics,
)
from verl_omni.algos.registry import (
    PolicyLossFn,
    PolicyLossInput,
    PolicyLossOutput,
    get_loss,
    register_loss,
    registered_losses,
)

__all__ = [
    "PolicyLossFn",
    "PolicyLossInput",
    "PolicyLossOutput",
    "compute_flow_grpo_advantages",
    "flow_grpo_loss",
    "flow_grpo_policy_loss",
    "get_loss",
    "group_index",
    "kl_penalty",
    "kl_penalty_exact",
    "kl_penalty_historical",
    "register_loss",
    "registered_losses",
    "rollout_consistency_metrics",
]
