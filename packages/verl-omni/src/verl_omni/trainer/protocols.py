"""Old home of the trainer's component interfaces, kept so `verl_omni.trainer.protocols.X` imports keep working.

The module moved to `verl_omni.trainer.interfaces`: beside `verl_core.rollout.protocol` and
`verl_omni.rollout.protocol` (the HTTP request/response models), a `protocols` module read as a third wire format.
"""

from verl_omni.trainer.interfaces import ActorRanks, MetricsTracker, PromptSource, RewardScorer, RolloutService

__all__ = ["ActorRanks", "MetricsTracker", "PromptSource", "RewardScorer", "RolloutService"]
