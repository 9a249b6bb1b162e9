"""`trainer.mode: separate` inside the trainer: start the producer, take a step's groups, correct, push, report.

`SeparateModeMixin` holds the separate-mode steps of `FlowGRPOTrainer` (the loop itself stays in
`verl_omni.trainer.flow_grpo_trainer`): `_start_separate` builds the producer (`SeparateRollout`) and the consumer
(`GroupConsumer`); `_take_groups` and `_score` are steps 1-4; `_correct_staleness` is step 6b; `_separate_sync` is
step 9 (a push every `trainer.separate.parameter_sync_step` steps, between two requests); `_separate_metrics` the
`async/*` metrics of step 12. A dead rollout server, met by the producer (`_check_rollout`, while the actor waits
for groups) or by the weight push (`_separate_sync`), and a server that hung in the weight push, fail the step, or
with `trainer.separate.on_rollout_failure: restart` (at most `max_restarts` times) `_restart_rollout` relaunches the
servers, gives them the actor's current weights (checked bit for bit) and resumes the producer (a lost batch
regenerated).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from tensordict import TensorDict

from verl_core.rollout.errors import EngineTimeoutError, WeightSyncError
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
        """While the actor waits: raise the producer's failure, or relaunch the servers (`_restart_rollout`).

        Raises:
            RolloutServiceError: the producer stopped (names the dead server) and no restart is left
                (`trainer.separate.max_restarts`), or the relaunch itself failed.
            WeightSyncError: the producer's rows carry another version, or the relaunched servers do not serve the
                actor's weights.
        """
        separate = self.separate
        if separate is None or separate.error is None:
            return
        try:
            separate.check()
        except RolloutServiceError as failure:
            if not isinstance(separate.error, RolloutServiceError):  # not a server's failure (a producer bug)
                raise
            self._restart_rollout(failure, self.step)

    def _restart_rollout(self: Any, failure: RolloutServiceError, version: int) -> dict[str, float]:
        """Relaunch the rollout servers after `failure` (a dead server), push `version` to them, resume the producer.

        The one restart path of both places a death is met (the producer, the weight push): every server shut down
        and launched again on its bundles (`TrainerComponents.relaunch_rollout`), the actor's weights pushed as
        `version` and checked (every server's version; `trainer.check_served_weights` bit for bit), then
        `SeparateRollout.resume`. Counted in `async/rollout_restarts`.

        Returns:
            The push's metrics (`rollout/weight_version`, `perf/weight_sync_bytes`, ...).

        Raises:
            RolloutServiceError: `failure` with `on_rollout_failure: fail`; after `max_restarts` relaunches, `failure`
                naming the limit.
            WeightSyncError: the relaunched servers do not serve the actor's weights.
        """
        separate, sep = self.separate, self.config.trainer.separate
        c = self._components()
        if separate is None or sep.on_rollout_failure != "restart" or c.relaunch_rollout is None:
            raise failure
        if separate.error is not None and not isinstance(separate.error, RolloutServiceError):
            separate.check()  # the producer failed otherwise too (e.g. a served-version mismatch): never resumed over
        if self.rollout_restarts >= sep.max_restarts:
            limit = f"after {self.rollout_restarts} restart(s): trainer.separate.max_restarts={sep.max_restarts}"
            raise RolloutServiceError(f"{failure} ({limit})") from failure.__cause__
        logger.warning(
            "rollout restart %d of %d (trainer.separate.max_restarts): %s",
            self.rollout_restarts + 1, sep.max_restarts, failure,
        )  # fmt: skip
        self.rollout_restarts += 1
        c.rollout = c.relaunch_rollout()  # the base weights: push the actor's current ones, then check them
        self._served_weights_checked = False
        metrics = self._sync_weights(version)
        separate.resume(c.rollout, version)
        return metrics

    def _push_failure(self: Any, error: Exception, version: int) -> RolloutServiceError | None:
        """The push of `version` raised `error`: a `RolloutServiceError` naming the failed server, or None if none.

        The rollout decides. A dead server: `check_alive` (each server's /health, as its router marks a server dead
        for the producer). A hung one: the push timed out on a server (`EngineTimeoutError`, bounded by
        `rollout.weight_sync_timeout_s`) and that server, alive, still serves an older version. A push that failed
        otherwise (a dead actor rank, a rejected payload) is no rollout failure.
        """
        rollout = self._components().rollout
        try:
            rollout.check_alive("update_weights")
            timed_out = _remote_cause(error, EngineTimeoutError)
            if timed_out is None:
                return None
            behind = sorted(rank for rank, served in rollout.weight_versions().items() if served != version)
            if not behind:
                return None
            raise RolloutServiceError(
                f"rollout server rank(s) {behind} did not take it within actor_rollout_ref.rollout."
                f"weight_sync_timeout_s and still serve an older version: hung ({timed_out})"
            )
        except RolloutServiceError as failed:
            failure = RolloutServiceError(f"the weight push of version {version} failed: {failed}")
            failure.__cause__ = error  # the push's own error (the actor rank's traceback)
            return failure

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
        """Separate step 9: every `parameter_sync_step` steps, push `step`'s weights between two requests.

        A push that fails on a dead rollout server relaunches the servers (`_restart_rollout`, which pushes `step`'s
        weights to the new ones) or fails naming the server.

        Raises:
            RolloutServiceError: a server is dead and `on_rollout_failure: fail` or no restart is left.
            WeightSyncError: a server serves another version or other tensors than the actor pushed.
        """
        separate = self.separate
        if separate is None or step % self.config.trainer.separate.parameter_sync_step != 0:
            return {}
        with separate.pause():
            try:
                metrics = self._sync_weights(step)
            except WeightSyncError:  # the servers answered with other weights: no dead server to relaunch
                raise
            except Exception as e:  # the rollout decides whether a server is dead (`_push_failure`)
                failure = self._push_failure(e, step)
                if failure is None:
                    raise
                metrics = self._restart_rollout(failure, step)
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


def _remote_cause(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first `kind` in `error`'s chain: its causes and, through Ray, a task error's original exception."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        each = todo.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        if isinstance(each, kind):
            return each
        remote = getattr(each, "cause", None)  # ray.exceptions.RayTaskError: the worker's exception
        todo += [each.__cause__, each.__context__, remote if isinstance(remote, BaseException) else None]
    return None
