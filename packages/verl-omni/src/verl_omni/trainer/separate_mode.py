"""`trainer.mode: separate` inside the trainer: start the producer, take a step's groups, correct, push, report.

`SeparateModeMixin` holds the separate-mode steps of `FlowGRPOTrainer` (the loop itself stays in
`verl_omni.trainer.flow_grpo_trainer`): `_start_separate` builds the producer (`SeparateRollout`) and the consumer
(`GroupConsumer`); `_take_groups` and `_score` are steps 1-4; `_correct_staleness` is step 6b; `_separate_sync` is
step 9 (a push every `trainer.separate.parameter_sync_step` steps, between two requests); `_separate_metrics` the
`async/*` metrics of step 12. `_check_rollout` runs while the actor waits for groups: a producer stopped by a dead
rollout server fails the step, or with `trainer.separate.on_rollout_failure: restart` (at most `max_restarts` times)
the servers are relaunched, given the actor's current weights (checked bit for bit) and the lost batch regenerated.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from tensordict import TensorDict

from verl_omni.trainer.colocated_rollout import RolloutServiceError
from verl_omni.trainer.separate_rollout import SeparateRollout
from verl_omni.trainer.staleness import GroupConsumer, assemble_batch, importance_weights

if TYPE_CHECKING:
    from verl_omni.reward.batch import RewardOutput

__all__ = ["SeparateModeMixin"]

logger = logging.getLogger(__name__)


class SeparateModeMixin:
    """The separate-mode steps of `FlowGRPOTrainer` (uses its `config`, `step`, `weight_version`, `_plan`...)."""

    separate: SeparateRollout | None
    consumer: GroupConsumer | None
    rollout_restarts: int = 0  # `async/rollout_restarts`: relaunches of the rollout servers this run

    def _start_separate(self: Any) -> None:
        """`trainer.mode: separate`: start the producer on the rollout's pool, from the step after `self.step`."""
        c, sep = self._components(), self.config.trainer.separate
        queue_size = sep.queue_size or self.config.data.train_batch_size * (sep.max_off_policy_threshold + 1)
        self.separate = SeparateRollout(
            c.rollout, c.prompts, self._plan, threshold=sep.max_off_policy_threshold, queue_size=queue_size,
            version=self.weight_version, first_batch=self.step + 1,
        )  # fmt: skip
        self.consumer = GroupConsumer(
            self.separate.queue, sep.max_off_policy_threshold, sep.queue_timeout_s, self._check_rollout,
            self.separate.describe,
        )  # fmt: skip
        self.separate.start()

    def _check_rollout(self: Any) -> None:
        """While the actor waits: raise the producer's failure, or relaunch the servers (`on_rollout_failure`).

        Raises:
            RolloutServiceError: the producer stopped (names the dead server) and no restart is left
                (`trainer.separate.max_restarts`), or the relaunch itself failed.
            WeightSyncError: the relaunched servers do not serve the actor's weights.
        """
        separate, sep = self.separate, self.config.trainer.separate
        if separate is None or separate.error is None:
            return
        relaunch = self._components().relaunch_rollout
        if (
            sep.on_rollout_failure != "restart"
            or not isinstance(separate.error, RolloutServiceError)
            or relaunch is None
        ):
            separate.check()
        if self.rollout_restarts >= sep.max_restarts:
            try:
                separate.check()
            except RolloutServiceError as e:
                raise RolloutServiceError(
                    f"{e} (after {self.rollout_restarts} restart(s): trainer.separate.max_restarts={sep.max_restarts})"
                ) from e.__cause__
        logger.warning(
            "rollout restart %d of %d (trainer.separate.max_restarts): %s",
            self.rollout_restarts + 1, sep.max_restarts, separate.error,
        )  # fmt: skip
        self.rollout_restarts += 1
        c = self._components()
        c.rollout = relaunch()  # the base weights: push the actor's current ones, then check them bit for bit
        self._served_weights_checked = False
        self._sync_weights(self.step)
        separate.resume(c.rollout, self.step)

    def _take_groups(self: Any, timing: dict, metrics: dict) -> tuple[list, TensorDict, int]:
        """Separate steps 1-3: `data.train_batch_size` groups of lag <= threshold (`GroupConsumer.take`)."""
        separate, consumer = self.separate, self.consumer
        if separate is None or consumer is None:
            raise RuntimeError("FlowGRPOTrainer: trainer.mode=separate without a started producer")
        metrics["async/queue_depth_before"] = float(separate.queue.qsize())
        # the actor's version is the steps it has trained (`self.weight_version` is what the servers hold)
        groups, queue_metrics = consumer.take(self.config.data.train_batch_size, self.step)
        timing["queue_wait"] = queue_metrics.pop("timing_s/queue_wait")
        metrics.update(queue_metrics)
        states = [g.sampler_state for g in groups if g.sampler_state is not None]
        if states:
            separate.sampler_state = states[-1]
        start = groups[-1].window_start
        self.window_start = start if self.window else None
        records, batch = assemble_batch(groups, self.step)
        return records, batch, start

    def _score(self: Any, records: list, batch: TensorDict, step: int, timing: dict) -> tuple[TensorDict, RewardOutput]:
        """Separate step 4: the rewards of the step's groups (the reward model awake through it)."""
        c = self._components()
        per_sample = [records[int(i)] for i in batch["prompt_index"]]
        start = time.perf_counter()
        with self._reward_model_awake(f"the reward of step {step}"):
            scored = c.reward.score_records(batch["images"], per_sample, step=step)
        timing["reward"] = timing.get("reward", 0.0) + time.perf_counter() - start
        return batch, scored

    def _correct_staleness(self: Any, batch: TensorDict) -> dict[str, float]:
        """Separate step 6b: the gap per lag; with `rollout_is`, advantages weighted by the truncated IS weights.

        The weights multiply the advantages (before the loss's `adv_clip_max` clamp); the clipped ratio then runs
        against the recomputed (proximal) log-probs. Rows of lag 0 weigh exactly 1.
        """
        correction = self.config.algorithm.rollout_correction
        threshold = correction.rollout_is_threshold if correction.rollout_is is not None else None
        metrics = importance_weights(batch, threshold)
        if threshold is not None:
            weights = batch["rollout_is_weights"]
            adv = batch["advantages"]
            batch["advantages"] = (adv.unsqueeze(1) if adv.ndim == 1 else adv) * weights.to(adv.device, adv.dtype)
        return metrics

    def _separate_sync(self: Any, step: int) -> dict[str, float]:
        """Separate step 9: every `parameter_sync_step` steps, push `step`'s weights between two requests."""
        separate = self.separate
        if separate is None or step % self.config.trainer.separate.parameter_sync_step != 0:
            return {}
        with separate.pause():
            metrics = self._sync_weights(step)
            separate.set_version(step)
        return metrics

    def _separate_metrics(self: Any, timing: dict[str, float]) -> dict[str, float]:
        """Separate step 12: the actor's and the rollout's idle shares, the queue depth."""
        if self.separate is None:
            return {}
        metrics = {
            "async/actor_idle_frac": timing.get("queue_wait", 0.0) / timing["step"],
            "async/rollout_restarts": float(self.rollout_restarts),
        }
        metrics.update(self.separate.idle_metrics())
        return metrics
