"""The interfaces the FlowGRPO trainer drives: prompts, rollout, reward, actor ranks, metrics trackers.

Each is a `Protocol`; the trainer never branches on which implementation it holds. Implement one by writing the
methods (no inheritance needed). The actor ranks are Ray workers: the trainer holds the typed proxy `ActorRanks`
(`verl_omni.trainer.actor_group.ActorGroup`), whose methods come from the per-rank Protocol `ActorWorkerAPI`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from tensordict import TensorDict

from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.trainer.actor_group import ActorGroup, ActorWorkerAPI

__all__ = ["ActorRanks", "ActorWorkerAPI", "MetricsTracker", "PromptSource", "RewardScorer", "RolloutService"]

ActorRanks = ActorGroup
"""The actor engine ranks: the typed proxy `ActorGroup` over `ActorWorkerAPI` (`verl_omni.trainer.actor_group`)."""


class PromptSource(Protocol):
    """Training prompts in a seeded, resumable order."""

    @property
    def epoch(self) -> int:
        """Passes over the dataset started so far (0-based)."""

    def next_batch(self) -> list[Any]:
        """The next `data.train_batch_size` prompt records."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the order after a restart."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()`."""


class RolloutService(Protocol):
    """The rollout servers: sampling with log-probs, sleep/wake, where weights go."""

    def generate(
        self,
        records: Sequence[Any],
        sampling: DiffusionSamplingConfig,
        seed: int,
        on_request_done: Callable[[int, int, TensorDict], None] | None = None,
    ) -> TensorDict:
        """`sampling.n` trajectories per record, prompt-major, with `prompt_index`, `weight_version`, `server_rank`.

        With `reward.stream` the trainer passes `on_request_done(start, count, rows)`, called as each request ends.
        """

    def sleep(self) -> None:
        """Free the servers' accelerator memory (colocated mode, before training)."""

    def wake_up(self) -> None:
        """Restore what `sleep` freed (before the weight sync)."""

    def weight_targets(self) -> list[str]:
        """The servers' HTTP addresses, rank order (actor rank 0 streams `update_weights` to them)."""

    def served_weights(self, names: list[str], kind: str) -> dict[int, dict[str, Any] | BaseException] | None:
        """Server rank -> the tensors it serves under `names` (or its read-back error); None: `kind` unreadable."""

    def check_alive(self, what: str) -> None:
        """Raise `RolloutServiceError` naming the first dead server (after `what` failed: is a server dead?)."""

    def shutdown(self) -> None:
        """Stop every server."""


class RewardScorer(Protocol):
    """Scores a step's images."""

    def score_records(self, images: torch.Tensor, records: Sequence[Any], *, step: int) -> Any:
        """A `RewardOutput`: rewards `(B,)` float32 for uint8 images `(B, 3, H, W)` and their per-sample records."""

    def score(self, batch: Any, *, step: int | None = None) -> Any:
        """A `RewardOutput` for a `RewardBatch` (`reward.stream` scores each group so, `batch.offset` its first row)."""

    def close(self) -> None:
        """Release the scorer's workers."""


class MetricsTracker(Protocol):
    """Where a step's metrics go (console, `metrics.jsonl`, TensorBoard, wandb)."""

    def begin(self, step: int) -> None:
        """Start the run at `step` (0: fresh): forget what an earlier run in the same folder logged after it."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record `metrics` of `step`."""

    def log_images(self, tag: str, images: torch.Tensor, step: int) -> None:
        """Record uint8 images `(B, 3, H, W)` as one grid."""

    def close(self) -> None:
        """Flush and close."""
