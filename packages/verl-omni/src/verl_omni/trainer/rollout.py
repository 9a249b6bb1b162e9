"""Old home of the trainer's colocated rollout, kept so `verl_omni.trainer.rollout.X` imports keep working.

The module moved to `verl_omni.trainer.colocated_rollout` (beside `separate_rollout`): a `trainer/rollout.py` next
to the `verl_omni.rollout` package read as if it were part of it.
"""

from verl_omni.trainer.colocated_rollout import (
    ColocatedRollout,
    RolloutServiceError,
    per_request,
    prompts_per_request,
    request_overhead_metrics,
)

__all__ = ["ColocatedRollout", "RolloutServiceError", "per_request", "prompts_per_request", "request_overhead_metrics"]
