"""FlowGRPO math on tensors: group advantages, the registered losses (clipped surrogate + KL), their metrics.

This layer sits below the engine and the trainer and imports neither. The engine takes its loss from the
registry (`get_loss(actor.diffusion_loss.loss_mode)`); `"flow_grpo"`, `"grpo_guard"`, `"flow_dppo"`,
`"diffusion_nft"` and `"dpo"` are registered on import.
"""

from verl_omni.algos.advantages import compute_flow_grpo_advantages, group_index
from verl_omni.algos.diffusion_dpo import (
    diffusion_dpo_loss,
    diffusion_dpo_policy_loss,
    dpo_train_sigmas,
    select_preference_pairs,
)
from verl_omni.algos.diffusion_nft import (
    apply_adv_mode,
    diffusion_nft_loss,
    diffusion_nft_policy_loss,
    nft_optimality,
    old_policy_decay,
    select_train_timesteps,
)
from verl_omni.algos.flow_dppo import flow_dppo_loss, flow_dppo_policy_loss
from verl_omni.algos.flow_grpo import (
    flow_grpo_loss,
    flow_grpo_policy_loss,
    kl_penalty,
    kl_penalty_exact,
    kl_penalty_historical,
    rollout_consistency_metrics,
)
from verl_omni.algos.grpo_guard import grpo_guard_loss, grpo_guard_policy_loss, grpo_guard_ratio_norm
from verl_omni.algos.registry import (
    ForwardLossInput,
    LossSpec,
    PolicyLossFn,
    PolicyLossInput,
    PolicyLossOutput,
    get_loss,
    loss_spec,
    register_loss,
    registered_losses,
    unknown_loss,
)

__all__ = [
    "ForwardLossInput",
    "LossSpec",
    "PolicyLossFn",
    "PolicyLossInput",
    "PolicyLossOutput",
    "apply_adv_mode",
    "compute_flow_grpo_advantages",
    "diffusion_dpo_loss",
    "diffusion_dpo_policy_loss",
    "diffusion_nft_loss",
    "diffusion_nft_policy_loss",
    "dpo_train_sigmas",
    "flow_dppo_loss",
    "flow_dppo_policy_loss",
    "flow_grpo_loss",
    "flow_grpo_policy_loss",
    "get_loss",
    "group_index",
    "grpo_guard_loss",
    "grpo_guard_policy_loss",
    "grpo_guard_ratio_norm",
    "kl_penalty",
    "kl_penalty_exact",
    "kl_penalty_historical",
    "loss_spec",
    "nft_optimality",
    "old_policy_decay",
    "register_loss",
    "registered_losses",
    "rollout_consistency_metrics",
    "select_preference_pairs",
    "select_train_timesteps",
    "unknown_loss",
]
