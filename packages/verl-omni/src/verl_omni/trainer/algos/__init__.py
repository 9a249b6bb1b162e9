"""FlowGRPO algorithm: group advantages, clipped surrogate, KL to the reference, consistency metrics."""

from verl_omni.trainer.algos.advantages import compute_flow_grpo_advantages, group_index
from verl_omni.trainer.algos.flow_grpo import (
    FlowGRPOLossOutput,
    flow_grpo_policy_loss,
    kl_penalty,
    kl_penalty_exact,
    kl_penalty_historical,
    rollout_consistency_metrics,
)

__all__ = [
    "FlowGRPOLossOutput",
    "compute_flow_grpo_advantages",
    "flow_grpo_policy_loss",
    "group_index",
    "kl_penalty",
    "kl_penalty_exact",
    "kl_penalty_historical",
    "rollout_consistency_metrics",
]
