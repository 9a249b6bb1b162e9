"""Worker pools that score reward chunks: threads in this process, or Ray CPU actors.

Both take a list of chunks (`RewardBatch` slices) and return their `RewardOutput`s in order, within a
timeout. A reward function failure comes back as `RewardFunctionError`; a worker that does not answer in
time is a `TimeoutError` naming it; a Ray worker that died is a `RewardWorkerError` naming it. Ray is
imported only when a `RayRewardPool` is built.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from verl_core.best_effort import best_effort
from verl_omni.reward.batch import RewardBatch, RewardFunctionError, RewardOutput, _add_note
from verl_omni.reward.config import RewardConfig
from verl_omni.reward.reward_model import RewardModelEndpoint

__all__ = ["RayRewardPool", "RewardPool", "RewardWorker", "RewardWorkerError", "ThreadRewardPool"]

logger = logging.getLogger(__name__)


class RewardWorkerError(RuntimeError):
    """A reward worker died or failed to start; the message names it."""


class RewardPool(Protocol):
    """Scores chunks on `num_workers` workers (chunk `i` on worker `i`)."""

    num_workers: int

    def score_chunks(self, chunks: Sequence[RewardBatch], *, timeout_s: float) -> list[RewardOutput]:
        """Score `chunks` (at most `num_workers`) and return their outputs in order.

        Raises:
            RewardFunctionError: a reward function failed (the lowest failing sample index is reported).
            TimeoutError: a worker did not answer within `timeout_s` (names it and `reward.timeout_s`).
            RewardWorkerError: a worker died (names it).
        """
        ...

    def close(self) -> None:
        """Stop the workers."""
        ...


def _span(chunk: RewardBatch) -> str:
    return f"samples {chunk.offset}..{chunk.offset + len(chunk) - 1}"


class ThreadRewardPool:
    """`num_workers` threads of this process running one scorer (tests, the quickstart, small runs).

    Args:
        scorer (`Callable[[RewardBatch], RewardOutput]`): what each thread runs on its chunk.
        num_workers (`int`): threads.

    A thread that hangs cannot be stopped: after a timeout the pool is closed and the error raised.
    """

    def __init__(self, scorer: Callable[[RewardBatch], RewardOutput], num_workers: int) -> None:
        if num_workers < 1:
            raise ValueError(f"reward.num_workers: expected an int >= 1, got {num_workers}")
        self.scorer = scorer
        self.num_workers = num_workers
        self._executor = concurrent.futures.ThreadPoolExecutor(num_workers, thread_name_prefix="verl-omni-reward")

    def score_chunks(self, chunks: Sequence[RewardBatch], *, timeout_s: float) -> list[RewardOutput]:
        """See `RewardPool.score_chunks`."""
        futures = [self._executor.submit(self.scorer, c) for c in chunks]
        _, pending = concurrent.futures.wait(futures, timeout=timeout_s)
        if pending:
            late = [i for i, f in enumerate(futures) if f in pending]
            self.close()
            names = ", ".join(f"reward thread {i} ({_span(chunks[i])})" for i in late)
            raise TimeoutError(f"{names} did not finish within {timeout_s:g} s (reward.timeout_s)")
        errors = [f.exception() for f in futures if f.exception() is not None]
        func_errors = [e for e in errors if isinstance(e, RewardFunctionError)]
        if func_errors:
            raise min(func_errors, key=lambda e: e.index)
        if errors:
            raise errors[0]  # a bug outside the reward function: keep its own type and traceback
        return [f.result() for f in futures]

    def close(self) -> None:
        """Shut the executor down without waiting for running chunks."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class RewardWorker:
    """The body of one Ray reward actor: builds the scorer from `reward.*` and scores chunks.

    Args:
        config (`RewardConfig`): the reward config (file paths already absolute).
        rank (`int`): the worker's index in its pool.
        reward_model (`RewardModelEndpoint`, *optional*): the running reward model.
    """

    def __init__(self, config: RewardConfig, rank: int, reward_model: RewardModelEndpoint | None = None) -> None:
        from verl_omni.reward.scorers import build_scorer

        self.rank = rank
        self.scorer = build_scorer(config, reward_model=reward_model)

    def ready(self) -> dict[str, Any]:
        """Where this worker runs: `rank`, `pid`, `node` (IP address)."""
        import ray

        return {"rank": self.rank, "pid": os.getpid(), "node": ray.util.get_node_ip_address()}

    def score(self, chunk: RewardBatch) -> tuple[str, Any]:
        """`("ok", RewardOutput)`, or `("error", (RewardFunctionError, cause, remote traceback))`."""
        try:
            return "ok", self.scorer(chunk)
        except RewardFunctionError as e:
            cause = e.__cause__
            tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__)) if cause else ""
            return "error", (e, _picklable(cause), tb)


def _picklable(exc: BaseException | None) -> BaseException | None:
    if exc is None:
        return None
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception as e:  # any __reduce__ or __init__ may raise: send its type and message instead
        logger.debug("%s does not pickle (%s: %s); sending its text", type(exc).__name__, type(e).__name__, e)
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _absolute_paths(config: RewardConfig) -> RewardConfig:
    """A copy of `config` whose reward-function file paths are absolute (Ray workers run elsewhere)."""

    def fix(path: str | None) -> str | None:
        if path is None or path.startswith("pkg://"):
            return path
        return os.path.abspath(os.path.expanduser(path))

    custom = dataclasses.replace(config.custom_reward_function, path=fix(config.custom_reward_function.path))
    terms = {k: dataclasses.replace(t, path=fix(t.path)) for k, t in config.reward_functions.items()}
    return dataclasses.replace(config, custom_reward_function=custom, reward_functions=terms)


class RayRewardPool:
    """`reward.num_workers` Ray CPU actors (`RewardWorker`), each with its own scorer built from `reward.*`.

    Needs a running Ray (`ray.init()`); the trainer creates the pool at start-up. The constructor waits
    until every actor has built its scorer (so a broken reward file fails here, naming the worker).

    Args:
        config (`RewardConfig`): `num_workers`, `num_cpus_per_worker` and `timeout_s` are read from it.
        actor_options (`dict`, *optional*): extra `.options(...)` for every actor (e.g. a scheduling strategy).
        start_timeout_s (`float`, *optional*): how long the actors may take to start; None = `reward.timeout_s`.
        reward_model (`RewardModelEndpoint`, *optional*): the running reward model, passed to every worker.

    Raises:
        RuntimeError: Ray is not initialized.
        ValueError: the cluster has fewer CPUs than `num_workers * num_cpus_per_worker` (names both keys).
        TimeoutError: an actor did not start within `start_timeout_s`.
        RewardWorkerError: an actor failed to start (its error is in the message).
    """

    def __init__(
        self,
        config: RewardConfig,
        *,
        actor_options: Mapping[str, Any] | None = None,
        start_timeout_s: float | None = None,
        reward_model: RewardModelEndpoint | None = None,
    ) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayRewardPool needs a running Ray: call ray.init() first (reward.pool: ray)")
        self.num_workers = config.num_workers
        need = config.num_workers * config.num_cpus_per_worker
        have = ray.cluster_resources().get("CPU", 0.0)
        if need > have:
            raise ValueError(
                f"reward.num_workers ({config.num_workers}) x reward.num_cpus_per_worker "
                f"({config.num_cpus_per_worker:g}) = {need:g} CPUs, but the Ray cluster has {have:g}; lower one of them"
            )
        remote_cls = ray.remote(RewardWorker)
        options = {"num_cpus": config.num_cpus_per_worker, "max_restarts": 0, **(actor_options or {})}
        worker_config = _absolute_paths(config)
        self.actors = [remote_cls.options(**options).remote(worker_config, rank, reward_model)
                       for rank in range(self.num_workers)]  # fmt: skip
        self._where: dict[int, dict[str, Any]] = {}
        refs = [a.ready.remote() for a in self.actors]
        start_timeout = config.timeout_s if start_timeout_s is None else start_timeout_s
        try:
            for rank, info in self._collect(refs, list(range(self.num_workers)), start_timeout, "start"):
                self._where[rank] = info
        except BaseException:
            self.close()  # no half-started pool keeps CPUs reserved
            raise

    def worker_name(self, rank: int) -> str:
        """`"reward worker <rank> (Ray actor <id>, pid <pid>, node <ip>)"`."""
        actor_id = self.actors[rank]._actor_id.hex()[:12]
        where = self._where.get(rank)
        extra = f", pid {where['pid']}, node {where['node']}" if where else ""
        return f"reward worker {rank} (Ray actor {actor_id}{extra})"

    def score_chunks(self, chunks: Sequence[RewardBatch], *, timeout_s: float) -> list[RewardOutput]:
        """See `RewardPool.score_chunks` (chunk `i` runs on worker `i`)."""
        if len(chunks) > self.num_workers:
            raise ValueError(f"{len(chunks)} chunks for {self.num_workers} reward workers")
        refs = [self.actors[i].score.remote(c) for i, c in enumerate(chunks)]
        results = dict(self._collect(refs, list(range(len(chunks))), timeout_s, "score"))
        failures = []
        for i in range(len(chunks)):
            status, value = results[i]
            if status == "error":
                err, cause, tb = value
                err.__cause__ = cause
                if tb:
                    _add_note(err, f"traceback in {self.worker_name(i)}:\n{tb.rstrip()}")
                failures.append(err)
        if failures:
            raise min(failures, key=lambda e: e.index)
        return [results[i][1] for i in range(len(chunks))]

    def _collect(self, refs: list[Any], ranks: list[int], timeout_s: float, what: str) -> list[tuple[int, Any]]:
        """Results of `refs` (one per rank) as they arrive; a dead or late worker raises at once."""
        import ray

        rank_of = {ref: rank for ref, rank in zip(refs, ranks)}
        deadline = time.monotonic() + timeout_s
        remaining, out = list(refs), []
        while remaining:
            done, remaining = ray.wait(remaining, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                late = ", ".join(self.worker_name(rank_of[r]) for r in remaining)
                verb = "did not start" if what == "start" else "did not answer"
                raise TimeoutError(f"{late} {verb} within {timeout_s:g} s (reward.timeout_s)")
            for ref in done:
                rank = rank_of[ref]
                try:
                    out.append((rank, ray.get(ref)))
                except ray.exceptions.RayActorError as e:
                    verb = "failed to start" if what == "start" else "died while scoring"
                    raise RewardWorkerError(f"{self.worker_name(rank)} {verb}: {type(e).__name__}: {e}") from e
                except ray.exceptions.RayError as e:
                    raise RewardWorkerError(f"{self.worker_name(rank)} failed to {what}: {e}") from e
        return out

    def close(self) -> None:
        """Kill every actor (safe to call twice)."""
        import ray

        for actor in self.actors:
            with best_effort(logger, "killing a reward actor"):  # already dead, or Ray shut down
                ray.kill(actor)
