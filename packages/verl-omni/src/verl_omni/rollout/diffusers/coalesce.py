"""Request coalescing for the diffusers rollout server: queued requests with equal sampling run as one batch.

A request is a prompt, its `DiffusionSamplingConfig` and a seed (row `r` uses generator `seed + r`). Requests whose
configs are equal apart from `seed` run as ONE `engine.generate(prompts, sampling, generators)` call: the prompts
in queue order, the generators the concatenation of each request's own `make_generators(seed, n)`; the trajectory
is split back by rows `[i * n, (i + 1) * n)`. Every row then sees the noise it would see alone, except for a
window drawn from the call's first generator: so requests coalesce only when their SDE window is drawn per row or
needs no draw (`coalescable`). The floats are not bit-identical to a solo run (a larger batch rounds its matrix
products differently: about 1e-6 in float32), so a request's result depends on what shared its call; that is why
coalescing is opt-in.

A multi-prompt request (`k` prompts) is one job of `k * n` rows that is never coalesced with others: its rows
are fixed by the request alone. It runs as the engine calls `segments` lists (one call in the common case).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tensordict import TensorDict

from verl_omni.pipelines import DiffusionSamplingConfig

__all__ = ["Coalescer", "Job", "coalescable", "segments", "split_rows"]


@dataclass(eq=False)
class Job:
    """One waiting request: its prompts, sampling (first prompt's negative prompt included), seed and abort flag.

    `negatives` holds one negative prompt per prompt (None: `sampling.negative_prompt` for every prompt).
    """

    prompts: list[str]
    sampling: DiffusionSamplingConfig
    seed: int
    flag: threading.Event
    future: asyncio.Future = field(repr=False)
    negatives: list[str | None] | None = None

    @property
    def images(self) -> int:
        """Rows the job makes: `len(prompts) * n`."""
        return len(self.prompts) * self.sampling.n

    @property
    def single(self) -> bool:
        """A one-prompt request: the only kind that is coalesced."""
        return len(self.prompts) == 1

    @property
    def key(self) -> DiffusionSamplingConfig:
        """What must be equal for two jobs to share a call: the sampling config without its seed."""
        return self.sampling.evolve(seed=None)


def coalescable(sampling: DiffusionSamplingConfig) -> bool:
    """Whether a job may share a call: its SDE window is drawn per row, or has one possible start (no draw).

    A window drawn once per call comes from the call's first generator, so the other requests' first generators
    would not advance and their noise would differ from a solo run.
    """
    if sampling.sde_window_per_row or sampling.sde_window_size == 0:
        return True
    rng = sampling.sde_window_range
    return rng is not None and rng[1] - rng[0] == sampling.sde_window_size


def segments(job: Job) -> list[tuple[int, int, str | None]]:
    """The engine calls of one job as `(first prompt, end prompt, negative prompt)`, in prompt order.

    Consecutive prompts with one negative prompt share a call (the engine takes one per call); when the SDE window
    is drawn once per call (not `coalescable`), every prompt gets its own call, so each prompt's window comes from
    its own first generator (`seed + i * n`), as for a one-prompt request. Depends on the request alone.
    """
    negatives = job.negatives or [job.sampling.negative_prompt] * len(job.prompts)
    if len(negatives) != len(job.prompts):
        raise ValueError(f"job: {len(negatives)} negative prompts for {len(job.prompts)} prompts")
    per_prompt = not coalescable(job.sampling)
    out: list[tuple[int, int, str | None]] = []
    for i, negative in enumerate(negatives):
        if out and not per_prompt and out[-1][2] == negative:
            out[-1] = (out[-1][0], i + 1, negative)
        else:
            out.append((i, i + 1, negative))
    return out


def split_rows(trajectory: TensorDict, count: int, n: int) -> list[TensorDict]:
    """Split a coalesced trajectory of `count * n` rows into `count` trajectories of `n` rows, as served alone."""
    if trajectory.batch_size[0] != count * n:
        raise ValueError(f"coalesced trajectory has {trajectory.batch_size[0]} rows, expected {count} x n={n}")
    parts = []
    for i in range(count):
        part = trajectory[i * n : (i + 1) * n].clone()
        if "prompt_index" in part.keys():  # noqa: SIM118 - TensorDict refuses `in`
            part.set("prompt_index", part.get("prompt_index") - i)
        parts.append(part)
    return parts


RunBatch = Callable[[list[Job]], Awaitable[list[Any]]]


class Coalescer:
    """A FIFO of jobs, drained by one worker task on the server loop, one batch at a time.

    When the engine is free (`engine_idle` returned) and `gather_s` more has passed, so that requests sent
    together have all arrived, the worker takes the oldest job and every other queued job with the same `key`
    (oldest first) while the batch stays within `max_images` (a job larger than the cap still runs, alone);
    multi-prompt jobs always run alone. Jobs
    whose flag is set before their batch starts get `None` (aborted) without running. `run_batch(jobs)` returns one
    result per job (a trajectory or `None` for an aborted one); an exception fails every job of the batch.

    Args:
        run_batch: runs one batch on the engine (awaited on the server loop).
        engine_idle: returns once the engine has finished the work queued before it.
        enabled (`bool`, *optional*, defaults to `False`): False = every job runs alone, in arrival order.
        max_images (`int`, *optional*, defaults to `32`): cap on `sum(n)` of a coalesced call.
        gather_s (`float`, defaults to 0.005): wait after the engine is free; requests of one agent-loop step
            arrive within a few milliseconds, a call takes a second or more.
    """

    def __init__(
        self,
        run_batch: RunBatch,
        engine_idle: Callable[[], Awaitable[Any]],
        *,
        enabled: bool = False,
        max_images: int = 32,
        gather_s: float = 0.005,
    ) -> None:
        self._run_batch = run_batch
        self._engine_idle = engine_idle
        self.gather_s = gather_s
        self.enabled = enabled
        self.max_images = max_images
        self._queue: list[Job] = []
        self._worker: asyncio.Task | None = None
        self.calls = 0  # coalesced calls (batches of two or more requests)
        self.requests = 0  # requests served by coalesced calls

    async def submit(self, job: Job) -> Any:
        """Queue `job` and wait for its result; cancelling the wait sets the job's flag (it stops, as `abort`)."""
        self._queue.append(job)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._drain())
        try:
            return await asyncio.shield(job.future)
        finally:
            job.flag.set()
            job.future.add_done_callback(_retrieve)  # a cancelled caller leaves the batch's error unread

    def _take(self) -> list[Job]:
        first = self._queue.pop(0)
        batch, images = [first], first.images
        if self.enabled and first.single and coalescable(first.sampling):
            key = first.key
            for job in list(self._queue):
                if job.single and job.key == key:
                    if images + job.sampling.n > self.max_images:
                        break  # equal keys, equal n: no later one fits either
                    self._queue.remove(job)
                    batch.append(job)
                    images += job.sampling.n
        return batch

    async def _drain(self) -> None:
        while self._queue:
            if self.enabled:
                await self._engine_idle()
                await asyncio.sleep(self.gather_s)
            batch = self._take()
            live = [job for job in batch if not job.flag.is_set()]
            for job in batch:
                if job.flag.is_set():
                    _resolve(job, None)
            if not live:
                continue
            try:
                results = await self._run_batch(live)
            except BaseException as e:  # every job of the batch gets the error
                for job in live:
                    _fail(job, e)
                if isinstance(e, asyncio.CancelledError):
                    raise
                continue
            if len(live) > 1:
                self.calls += 1
                self.requests += len(live)
            for job, result in zip(live, results, strict=True):
                _resolve(job, result)


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _resolve(job: Job, result: Any) -> None:
    if not job.future.done():
        job.future.set_result(result)


def _fail(job: Job, error: BaseException) -> None:
    if not job.future.done():
        job.future.set_exception(error)
