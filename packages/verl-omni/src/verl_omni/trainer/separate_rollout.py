"""The producer side of `trainer.mode: separate`: rollout servers on their own pool generating into a bounded queue.

`SeparateRollout` drives a `ColocatedRollout` whose servers sit on the rollout's own resource pool
(`actor_rollout_ref.rollout.nnodes` x `n_gpus_per_node` bundles, never asleep) from a thread of the driver: it draws
the next prompt batch, generates it with the weights the servers hold, and puts each prompt's finished group in a
`ray.util.queue.Queue` tagged with that weight version (`VersionedGroup`). It stays at most
`max_off_policy_threshold` versions ahead of the actor (batch `k` starts only once the servers hold version
`>= k − 1 − threshold`), so threshold 0 is the colocated schedule. The trainer pushes new weights inside `pause()`,
which waits for the request in flight: the servers switch weights between requests, never inside one.
After a rollout server dies, `resume` (on relaunched servers) rewinds the sampler to before the lost batch and
generates it again; the groups already queued stay. When the trainer's weight push met the dead server first (inside
`pause()`, the producer between two requests), `resume` hands the running producer the relaunched servers instead.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from verl_core.rollout.errors import WeightSyncError
from verl_omni.trainer.colocated_rollout import RolloutServiceError
from verl_omni.trainer.staleness import VersionedGroup

__all__ = ["SeparateRollout"]

logger = logging.getLogger(__name__)

_WAKE_S = 0.2
"""How often the producer thread re-checks a wait (stop, pause, version gate, a full queue)."""


class SeparateRollout:
    """A thread generating batch after batch into a bounded Ray queue of versioned groups.

    Args:
        rollout (`ColocatedRollout`): the servers (on their own pool) and the agent loop.
        prompts (`PromptSource`): the seeded prompt sampler; only this thread draws from it once started.
        plan (`Callable[[int], tuple[DiffusionSamplingConfig, int, int]]`): batch index -> (sampling config, SDE
            window start, request seed), the colocated step's.
        threshold (`int`): `trainer.separate.max_off_policy_threshold`.
        queue_size (`int`): most groups the queue holds.
        version (`int`): the weight version the servers hold now.
        first_batch (`int`): the index of the first batch to draw (the step after the one resumed from, 1-based).
    """

    def __init__(
        self,
        rollout: Any,
        prompts: Any,
        plan: Callable[[int], tuple[Any, int, int]],
        *,
        threshold: int,
        queue_size: int,
        version: int,
        first_batch: int,
    ) -> None:
        from ray.util.queue import Queue

        self.rollout = rollout
        self.prompts = prompts
        self.plan = plan
        self.threshold = threshold
        self.queue = Queue(maxsize=queue_size, actor_options={"num_cpus": 0})
        self.version = version
        self.next_batch = first_batch
        self.sampler_state = prompts.state_dict()  # after the last batch the actor trained (what a checkpoint saves)
        self.error: BaseException | None = None
        self._rewind: dict[str, Any] | None = None  # the sampler's state before the batch in flight (see `resume`)
        self._lock = threading.Lock()  # held while a request is in flight; the weight push takes it
        self._cond = threading.Condition()
        self._paused = 0
        self._stop = threading.Event()
        self._busy_s = 0.0
        self._since = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="separate-rollout", daemon=True)

    def start(self) -> None:
        """Start generating (once)."""
        if not self._thread.is_alive() and not self._stop.is_set():
            self._since = time.perf_counter()
            self._thread.start()

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Hold the rollout between two requests (the weight push, validation): waits for the request in flight."""
        with self._cond:
            self._paused += 1
        self._lock.acquire()
        try:
            yield
        finally:
            self._lock.release()
            with self._cond:
                self._paused -= 1
                self._cond.notify_all()

    def set_version(self, version: int) -> None:
        """The servers now hold `version` (called inside `pause()` after a push)."""
        with self._cond:
            self.version = version
            self._cond.notify_all()

    def check(self) -> None:
        """Raise the producer's failure (a dead or failed rollout server, named by the rollout's error)."""
        if isinstance(self.error, WeightSyncError):
            raise self.error
        if self.error is not None:
            raise RolloutServiceError(f"the separate rollout stopped: {self.error}") from self.error

    def describe(self) -> str:
        """The rollout servers, for error messages."""
        addresses = ", ".join(f"rank {r} at {a}" for r, a in enumerate(self.rollout.weight_targets()))
        return f"rollout server(s) {addresses} (actor_rollout_ref.rollout.nnodes x n_gpus_per_node)"

    def idle_metrics(self) -> dict[str, float]:
        """`async/rollout_idle_frac` since the last call: the share of time no request was in flight; queue depth."""
        now = time.perf_counter()
        span, busy = max(now - self._since, 1e-9), self._busy_s
        self._since, self._busy_s = now, 0.0
        return {"async/rollout_idle_frac": max(0.0, 1.0 - busy / span), "async/queue_depth": float(self.queue.qsize())}

    def resume(self, rollout: Any, version: int) -> None:
        """After a failure: continue on `rollout` (relaunched, holding `version`).

        A producer stopped by the failure generates again from the lost batch (the sampler rewound to before it);
        one that met no failure (the weight push met the dead server, inside `pause()`) takes `rollout` for its next
        request and loses nothing.

        Raises:
            RuntimeError: the producer failed nothing and is not paused, or its thread is still running.
        """
        if self.error is None and self._thread.is_alive():  # set under `_lock`: a paused producer has not failed
            if self._paused == 0:
                raise RuntimeError("SeparateRollout.resume: a running producer switches servers only inside pause()")
            with self._cond:
                self.rollout, self.version = rollout, version
                self._cond.notify_all()
            return
        self._thread.join(timeout=_WAKE_S * 10)  # it sets `error` as its last act
        if self._thread.is_alive():
            raise RuntimeError("SeparateRollout.resume: the producer thread is still running")
        if self._rewind is not None:  # the batch drawn when the server died: draw it again
            self.prompts.load_state_dict(self._rewind)
            self._rewind = None
        self.rollout, self.version, self.error = rollout, version, None
        self._since, self._busy_s = time.perf_counter(), 0.0
        self._thread = threading.Thread(target=self._run, name="separate-rollout", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after the request in flight) and the queue actor (safe to call twice)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=self.rollout.config.request_timeout_s + 30)
        with contextlib.suppress(Exception):
            self.queue.shutdown()

    # ---- the thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                index = self.next_batch

                def ready(i: int = index) -> bool:
                    return self._paused == 0 and i - 1 - self.version <= self.threshold

                if not self._wait(ready):
                    return
                self._rewind = self.prompts.state_dict()
                records = self.prompts.next_batch()
                state = self.prompts.state_dict()
                sampling, window_start, seed = self.plan(index)
                with self._lock:
                    version = self.version
                    start = time.perf_counter()
                    try:
                        batch = self.rollout.generate(records, sampling, seed=seed)
                    except BaseException as e:
                        self.error = e  # before the lock goes: a push inside `pause()` sees the failure (`resume`)
                        raise
                    self._busy_s += time.perf_counter() - start
                served = batch["weight_version"]
                if bool((served != version).any()):
                    raise WeightSyncError(
                        f"rollout server(s) {sorted({int(r) for r in batch['server_rank'][served != version]})} "
                        f"served weight version(s) {sorted({int(v) for v in served[served != version]})} for batch "
                        f"{index}; the actor pushed version {version}"
                    )
                index_of = batch["prompt_index"]
                for i, record in enumerate(records):
                    group = VersionedGroup(
                        batch_index=index,
                        version=version,
                        record=record,
                        rows=batch[index_of == i],
                        window_start=window_start,
                        sampler_state=state if i == len(records) - 1 else None,
                    )
                    if not self._put(group):
                        return
                self.next_batch = index + 1
                self._rewind = None
        except BaseException as e:  # the consumer raises it, naming the server (the thread itself cannot)
            logger.error("separate rollout stopped: %s", e)
            self.error = e

    def _wait(self, ready: Callable[[], bool]) -> bool:
        """Wait until `ready()` (False when stopped first)."""
        with self._cond:
            while not ready():
                if self._stop.is_set():
                    return False
                self._cond.wait(_WAKE_S)
        return not self._stop.is_set()

    def _put(self, group: VersionedGroup) -> bool:
        """Put `group`, waiting while the queue is full (False when stopped first)."""
        from ray.util.queue import Full

        while not self._stop.is_set():
            try:
                self.queue.put(group, block=True, timeout=_WAKE_S)
                return True
            except Full:
                continue
        return False
