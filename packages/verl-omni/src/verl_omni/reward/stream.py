"""`RewardStream` (`reward.stream`): score each request's groups as soon as they are generated.

The rollout calls `submit(start, count, trajectory)` for each finished request (prompts `start .. start + count`,
`n` rows each, prompt-major); the stream scores those rows on its own threads through the reward manager while the
rest of the batch is still being generated. `collect(rows)` waits for every group and joins their outputs in the
batch's order (by first row, never by completion order), so the rewards are the ones a single `score` of the whole
batch gives. The update stays on-policy: every sample is still scored before the step's advantages.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from tensordict import TensorDict

from verl_omni.reward.batch import RewardBatch, RewardOutput

__all__ = ["RewardStream"]

logger = logging.getLogger(__name__)


class _Scores(Protocol):
    def score(self, batch: RewardBatch, *, step: int | None = None) -> RewardOutput: ...


class RewardStream:
    """Scores one step's groups while the step is still generating; a context manager (closing drops the rest).

    Args:
        reward (`VisualRewardManager`): what scores each group (`score(batch, step=...)`).
        records (`Sequence`): the step's prompt rows, in the order given to the rollout.
        n (`int`): images per prompt (rows of prompt `i` are `i*n .. i*n + n`).
        step (`int`, *optional*): the training step, named in errors.
        timeout_s (`float`): how long `collect` waits for the last group (`reward.timeout_s`).
        max_workers (`int`): groups scored at once.
    """

    def __init__(
        self,
        reward: _Scores,
        records: Sequence[Any],
        *,
        n: int,
        step: int | None = None,
        timeout_s: float = 300.0,
        max_workers: int = 2,
    ) -> None:
        self.reward, self.records, self.n, self.step, self.timeout_s = reward, list(records), n, step, timeout_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max(1, max_workers), thread_name_prefix="reward-stream")
        self._lock = threading.Lock()
        self._futures: dict[int, concurrent.futures.Future[RewardOutput]] = {}  # first row -> its group's scores
        self._first_submit: float | None = None
        self._last_done: float | None = None
        self.events: list[tuple[str, int]] = []  # ("submitted" | "scored", first row), in the order they happened

    def submit(self, start: int, count: int, trajectory: TensorDict) -> None:
        """Score prompts `start .. start + count` (their `count * n` rows of `trajectory`) on the stream's threads."""
        images = trajectory["images"]
        rows = [rec for rec in self.records[start : start + count] for _ in range(self.n)]
        if images.shape[0] != len(rows):
            raise ValueError(f"reward stream: {images.shape[0]} images for prompts {start}..{start + count - 1} x n")
        batch = RewardBatch.from_records(images, rows)
        batch.offset = start * self.n  # errors name the sample's index in the whole step
        with self._lock:
            if self._first_submit is None:
                self._first_submit = time.perf_counter()
            self.events.append(("submitted", batch.offset))
            self._futures[batch.offset] = self._executor.submit(self._score, batch)

    def _score(self, batch: RewardBatch) -> RewardOutput:
        out = self.reward.score(batch, step=self.step)
        with self._lock:
            self._last_done = time.perf_counter()
            self.events.append(("scored", batch.offset))
        return out

    def collect(self, rows: int) -> RewardOutput:
        """Every group's scores, joined in batch order; `rows` is the batch size they must cover.

        Raises:
            RewardFunctionError, TimeoutError, RewardWorkerError: as `VisualRewardManager.score` (the first group
                in batch order that failed); TimeoutError also when a group is not scored within `timeout_s`.
            RuntimeError: the submitted groups do not cover rows `0 .. rows` exactly once.
        """
        with self._lock:
            futures = dict(self._futures)
        _, pending = concurrent.futures.wait(futures.values(), timeout=self.timeout_s)
        if pending:
            late = sorted(first for first, f in futures.items() if f in pending)
            raise TimeoutError(
                f"reward stream: the groups at samples {late} were not scored within {self.timeout_s:g} s "
                "(reward.timeout_s)"
            )
        order = sorted(futures)  # batch order: the rows each group covers, never the order they finished in
        outputs = [futures[first].result() for first in order]  # raises the first failing group's error
        covered, at = [], 0
        for first, out in zip(order, outputs, strict=True):
            covered.append(first == at)
            at = first + len(out.scores)
        if not all(covered) or at != rows:
            raise RuntimeError(f"reward stream: groups at rows {order} do not cover the batch's {rows} rows once")
        return RewardOutput.concat(outputs)

    @property
    def span_s(self) -> float:
        """Seconds from the first group submitted to the last scored (0 before both)."""
        if self._first_submit is None or self._last_done is None:
            return 0.0
        return max(0.0, self._last_done - self._first_submit)

    def close(self) -> None:
        """Drop groups not started yet; running ones finish on their threads (nothing waits for them)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RewardStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
