"""Old home of the actor's weight push, kept so `verl_omni.trainer.weight_push.WeightPusher` imports keep working.

The transport is model-agnostic and moved to `verl_core.rollout.weight_push`, beside the servers' side of the
weight sync (`shm_weights`, `cuda_ipc_weights`, `server_weights`); what stays in `verl_omni` is the diffusion
actor's export (`verl_omni.trainer.workers.ActorWorker.push_weights`).
"""

from verl_core.rollout.weight_push import WeightPusher

__all__ = ["WeightPusher"]
