"""The diffusion agent loop: prompts to requests of a few prompts each (`n` images a prompt) to one TensorDict.

Agent loops are registered by name (`register_agent_loop`); `diffusion_single_turn_agent`, the name verl-omni's
`rollout.agent.default_agent_loop` uses, is `DiffusionAgentLoop`. A loop talks to anything with an async
`generate(request)`: a `RolloutReplica`, a `RolloutRouter`, a `RolloutClient` or a server in-process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch
from tensordict import TensorDict

from verl_core.registry import Registry
from verl_core.rollout.errors import RolloutError
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.rollout.protocol import REQUEST_KEYS

__all__ = [
    "AgentLoopError",
    "DiffusionAgentLoop",
    "DiffusionRolloutOutput",
    "GenerateBackend",
    "get_agent_loop",
    "pin_sde_window",
    "register_agent_loop",
    "sde_window_start",
]

_AGENT_LOOPS: Registry[type] = Registry("agent loop", key="rollout.agent.default_agent_loop")
"""Agent loop name -> class."""


def register_agent_loop(name: str) -> Callable[[type], type]:
    """Class decorator: register an agent loop under `name`.

    Raises:
        ValueError: `name` is taken by another class.
    """
    return _AGENT_LOOPS.register(name)


def get_agent_loop(name: str) -> type:
    """The agent loop class registered as `name` (`rollout.agent.default_agent_loop`).

    Raises:
        KeyError: no loop has that name (the message suggests a close name and lists the registered ones).
    """
    return _AGENT_LOOPS.get(name)


class GenerateBackend(Protocol):
    """What an agent loop sends requests to (`RolloutReplica`, `RolloutRouter`, `RolloutClient`, a server)."""

    async def generate(self, request: Mapping[str, Any]) -> Any:
        """Serve one request; return its fields (a mapping or a pydantic response)."""
        ...


class AgentLoopError(RuntimeError):
    """A request of the agent loop failed; the message names the prompt index (its first prompt) and the server."""

    def __init__(self, message: str, *, prompt_index: int, server_rank: int | None) -> None:
        self.prompt_index = prompt_index
        self.server_rank = server_rank
        super().__init__(message)


@dataclasses.dataclass
class DiffusionRolloutOutput:
    """What one agent-loop call returns.

    Args:
        trajectory (`TensorDict` of batch `[len(prompts) * n]`): every request's trajectory, prompt-major, with
            per-row `prompt_index` (global, int64), `seed` (the row's seed), `weight_version` and `server_rank`
            (int64; -1 when the backend does not say) added.
        weight_versions (`list[int]`): per prompt, the weight version its request was served with.
        server_ranks (`list[int]`): per prompt, the server rank that served its request (-1 when unknown).
        seeds (`list[int]`): per prompt, the seed of its first row (its rows used `seed + r`).
        latency_s (`list[float]`): per prompt, seconds its request took, as the agent loop saw it.
        server_latency_s (`list[float]`): per prompt, seconds its request took inside its server (the response's
            `latency_s`; NaN when the backend does not say): `latency_s - server_latency_s` is the transport and
            codec time.
        request_index (`list[int]`): per prompt, the request that carried it (prompts of one request share it and
            the values above).
    """

    trajectory: TensorDict
    weight_versions: list[int]
    server_ranks: list[int]
    seeds: list[int]
    latency_s: list[float]
    server_latency_s: list[float] = dataclasses.field(default_factory=list)
    request_index: list[int] = dataclasses.field(default_factory=list)


def sde_window_start(
    step: int,
    window_size: int,
    window_range: Sequence[int],
    *,
    strategy: str = "random",
    seed: int = 0,
    iters_per_group: int = 1,
) -> int:
    """The SDE window start `s` of training step `step` (the first step is 1): MixGRPO's window schedule.

    With `m = r1 - K` the last start inside the envelope `[r0, r1]`:

    * `"random"`: `s = random.Random(seed + step).randint(r0, m)`, upstream's draw (both ends inclusive);
    * `"progressive"`: `s = min(r0 + ⌊step / iters_per_group⌋ · K, m)`: the window slides by its own size every
      `iters_per_group` steps, from the noisy end towards the clean end, and stays on the last position.

    Args:
        step (`int`): the training step (`global_steps`, 1 for the first).
        window_size (`int`): K >= 1 (`rollout.algo.sde_window_size`).
        window_range (`Sequence[int]`): the envelope `[r0, r1]` (`rollout.algo.sde_window_range`).
        strategy (`str`, *optional*, defaults to `"random"`): `rollout.algo.sample_strategy`.
        seed (`int`, *optional*, defaults to `0`): `rollout.algo.sde_window_seed` (random only).
        iters_per_group (`int`, *optional*, defaults to `1`): `rollout.algo.iters_per_group` (progressive only).

    Raises:
        ValueError: K does not fit in the envelope, an unknown strategy, or `iters_per_group` < 1.
    """
    r0, r1 = int(window_range[0]), int(window_range[1])
    last = r1 - window_size
    if window_size < 1 or last < r0:
        raise ValueError(
            f"rollout.algo.sde_window_size: {window_size} steps do not fit in rollout.algo.sde_window_range "
            f"[{r0}, {r1}]; use a window of at most {r1 - r0} steps or a wider range"
        )
    if strategy == "random":
        return random.Random(seed + step).randint(r0, last)
    if strategy == "progressive":
        if iters_per_group < 1:
            raise ValueError(f"rollout.algo.iters_per_group: expected an int >= 1, got {iters_per_group}")
        return min(r0 + (step // iters_per_group) * window_size, last)
    raise ValueError(f"rollout.algo.sample_strategy: expected 'random' or 'progressive', got {strategy!r}")


def pin_sde_window(
    sampling: DiffusionSamplingConfig,
    step: int,
    seed: int = 0,
    *,
    strategy: str = "random",
    iters_per_group: int = 1,
) -> DiffusionSamplingConfig:
    """Place the SDE window of training step `step` once (`sde_window_start`) and pin it (`[s, s + K]`).

    Every request of a step then shares the window: per-request windows inflate the reward std and collapse
    training (arch_and_perf.md B#8). The start depends only on the schedule and the step (not on batching or
    request order), so a resumed run places the same windows. The envelope is `sde_window_range`, or `[0, N-1]`
    when null. No window (`sde_window_size == 0`) is returned unchanged.
    """
    k = sampling.sde_window_size
    if k == 0:
        return sampling
    r0, r1 = sampling.sde_window_range or (0, sampling.num_inference_steps - 1)
    start = sde_window_start(step, k, (r0, r1), strategy=strategy, seed=seed, iters_per_group=iters_per_group)
    return sampling.evolve(sde_window_range=[start, start + k])


@register_agent_loop("diffusion_single_turn_agent")
class DiffusionAgentLoop:
    """Prompts grouped into requests, all in flight together, each bounded by a timeout; trajectories concatenated.

    The grouping depends only on the prompt count and these arguments (never on timing), and global row `j` is
    always seeded `seed + j`, so a run's rows do not depend on it beyond batch rounding.

    Args:
        backend (`GenerateBackend`): where requests go (a replica, router, client or server in-process).
        timeout_s (`float`, *optional*, defaults to `600.0`): longest one request may take (also sent as the
            request's `timeout_s`, so the server stops working on it too).
        max_concurrency (`int`, *optional*): requests in flight at once; None sends all at once.
        prompts_per_request (`int`, *optional*, defaults to `0`): prompts per request; 0 = auto,
            `ceil(len(prompts) / servers)` (servers: the backend's `num_servers`, or its `clients`, else 1);
            1 = one request per prompt.
        max_images_per_request (`int`, *optional*, defaults to `32`): caps a request at
            `max(1, max_images_per_request // n)` prompts.
    """

    def __init__(
        self,
        backend: GenerateBackend,
        *,
        timeout_s: float = 600.0,
        max_concurrency: int | None = None,
        prompts_per_request: int = 0,
        max_images_per_request: int = 32,
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: expected a timeout in seconds > 0, got {timeout_s!r}")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency: expected None or an int >= 1, got {max_concurrency!r}")
        if isinstance(prompts_per_request, bool) or not isinstance(prompts_per_request, int) or prompts_per_request < 0:
            raise ValueError(f"prompts_per_request: expected an int >= 0 (0 = auto), got {prompts_per_request!r}")
        if (
            isinstance(max_images_per_request, bool)
            or not isinstance(max_images_per_request, int)
            or max_images_per_request < 1
        ):
            raise ValueError(f"max_images_per_request: expected an int >= 1, got {max_images_per_request!r}")
        self.backend = backend
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.prompts_per_request = prompts_per_request
        self.max_images_per_request = max_images_per_request

    def group_size(self, num_prompts: int, n: int) -> int:
        """Prompts per request for a step of `num_prompts` prompts of `n` images (see the class arguments)."""
        size = self.prompts_per_request or math.ceil(num_prompts / _num_servers(self.backend))
        return max(1, min(size, self.max_images_per_request // n, num_prompts))

    async def generate(
        self,
        prompts: Sequence[str],
        *,
        sampling: DiffusionSamplingConfig,
        seed: int,
        negative_prompts: Sequence[str | None] | None = None,
        request_id_prefix: str | None = None,
        on_request_done: Callable[[int, int, TensorDict], None] | None = None,
    ) -> DiffusionRolloutOutput:
        """Send the prompts in requests of `group_size` prompts and return every trajectory in one TensorDict.

        Args:
            prompts (`Sequence[str]`): the prompts, `sampling.n` images each; consecutive prompts share a request.
            sampling (`DiffusionSamplingConfig`): the parameters every request carries (pin the SDE window first
                with `pin_sde_window`); its `seed` and `negative_prompt` are replaced per request.
            seed (`int`): base seed; global row `j` uses `seed + j` (a request is seeded with its first row's seed).
            negative_prompts (`Sequence[str | None]`, *optional*): one per prompt (None = the model's default).
            request_id_prefix (`str`, *optional*): request ids are `{prefix}-{i}` (to abort them by id).
            on_request_done (`Callable`, *optional*): called on the event loop as each request finishes, with its
                first prompt, its prompt count and its rows (`count * n`, prompt-major), before the others are
                back (reward streaming, `reward.stream`); an error it raises fails the request.

        Raises:
            ValueError: no prompts, or `negative_prompts` of another length.
            AgentLoopError: a request failed, timed out or was aborted (names its first prompt and the server).
        """
        if isinstance(prompts, str) or not prompts:
            raise ValueError(f"prompts: expected a non-empty sequence of str, got {prompts!r:.80}")
        if negative_prompts is not None and len(negative_prompts) != len(prompts):
            raise ValueError(f"negative_prompts: {len(negative_prompts)} given for {len(prompts)} prompts")
        n = sampling.n
        params = {k: v for k, v in sampling.to_dict().items() if k not in REQUEST_KEYS}
        size = self.group_size(len(prompts), n)
        starts = list(range(0, len(prompts), size))
        requests = []
        for i, start in enumerate(starts):
            group = list(prompts[start : start + size])
            request: dict[str, Any] = {"prompt": group[0] if len(group) == 1 else group, "seed": seed + start * n,
                                       "sampling_params": params, "timeout_s": self.timeout_s}  # fmt: skip
            negatives = None if negative_prompts is None else list(negative_prompts[start : start + size])
            if negatives is not None and any(neg is not None for neg in negatives):
                request["negative_prompt"] = negatives[0] if len(group) == 1 else negatives
            if request_id_prefix is not None:
                request["request_id"] = f"{request_id_prefix}-{i}"
            requests.append(request)
        limit = asyncio.Semaphore(self.max_concurrency or len(requests))
        counts = [min(size, len(prompts) - start) for start in starts]
        tasks = [
            asyncio.ensure_future(self._one(_what(start, count), start, r, limit, count, on_request_done))
            for start, count, r in zip(starts, counts, requests, strict=True)
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
        if failed:
            await asyncio.gather(*tasks, return_exceptions=True)
            raise failed[0].exception()
        results = [t.result() for t in tasks]
        return _concat(results, starts, counts, [r["seed"] for r in requests], n)

    async def _one(
        self,
        what: str,
        index: int,
        request: dict[str, Any],
        limit: asyncio.Semaphore,
        count: int = 1,
        on_done: Callable[[int, int, TensorDict], None] | None = None,
    ) -> tuple[dict, int, float]:
        result = await self._send(what, index, request, limit)
        if on_done is not None:
            traj = result[0]["trajectory"]
            on_done(index, count, traj.reshape(-1) if traj.batch_dims > 1 else traj)
        return result

    async def _send(
        self, what: str, index: int, request: dict[str, Any], limit: asyncio.Semaphore
    ) -> tuple[dict, int, float]:
        async with limit:
            start = time.perf_counter()
            try:
                response = await asyncio.wait_for(self.backend.generate(request), self.timeout_s + 5.0)
            except asyncio.TimeoutError as e:
                if isinstance(e, RolloutError):  # the server's EngineTimeoutError is a TimeoutError too
                    raise self._failed(what, index, e) from e
                raise AgentLoopError(
                    f"request for {what} got no answer within {self.timeout_s + 5.0:g} s",
                    prompt_index=index,
                    server_rank=None,
                ) from None
            except Exception as e:
                raise self._failed(what, index, e) from e
            fields = dict(response) if not isinstance(response, Mapping) else response
            rank = fields.get("server_rank", getattr(self.backend, "rank", -1))
            if fields.get("finish_reason") != "stop" or fields.get("trajectory") is None:
                raise AgentLoopError(
                    f"request for {what} on server rank {rank} finished with reason "
                    f"{fields.get('finish_reason')!r} and no trajectory",
                    prompt_index=index,
                    server_rank=rank,
                )
            return fields, int(rank if rank is not None else -1), time.perf_counter() - start

    def _failed(self, what: str, index: int, e: Exception) -> AgentLoopError:
        rank = getattr(e, "server_rank", getattr(e, "rank", getattr(self.backend, "rank", None)))
        where = f"server rank {rank}" if rank is not None else "the rollout backend"
        message = f"request for {what} failed on {where}: {type(e).__name__}: {e}"
        return AgentLoopError(message, prompt_index=index, server_rank=rank)


def _what(start: int, count: int) -> str:
    """The prompts of a request, for messages: `prompt 3` or `prompts 2-3`."""
    return f"prompt {start}" if count == 1 else f"prompts {start}-{start + count - 1}"


def _num_servers(backend: Any) -> int:
    """How many servers `backend` spreads requests over: `num_servers` (a replica), `clients` (a router), else 1."""
    count = getattr(backend, "num_servers", None)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    clients = getattr(backend, "clients", None)
    if isinstance(clients, (Mapping, list)) and clients:
        return len(clients)
    return 1


def _concat(
    results: list[tuple[dict, int, float]], starts: list[int], counts: list[int], seeds: list[int], n: int
) -> DiffusionRolloutOutput:
    """Request `i` covered prompts `starts[i] .. starts[i] + counts[i]`; its rows get global indices and seeds."""
    parts = []
    out = DiffusionRolloutOutput(None, [], [], [], [], [], [])  # type: ignore[arg-type]
    for i, ((fields, rank, latency), start, count) in enumerate(zip(results, starts, counts, strict=True)):
        traj = fields["trajectory"]
        if traj.batch_dims > 1:  # a prompt list answers `[k, n]` (per-prompt conditioning sent once): flatten it
            traj = traj.reshape(-1)
        rows = traj.batch_size[0]
        if rows != count * n:
            raise AgentLoopError(
                f"request for {_what(start, count)} on server rank {rank} returned {rows} rows, "
                f"expected {count} prompts x n={n}",
                prompt_index=start,
                server_rank=rank,
            )
        traj = traj.clone(False)  # a shallow copy: the keys set below do not touch the server's object
        traj.set("prompt_index", start + torch.arange(rows, dtype=torch.long) // n)
        traj.set("seed", seeds[i] + torch.arange(rows, dtype=torch.long))
        traj.set("weight_version", torch.full((rows,), int(fields["weight_version"]), dtype=torch.long))
        traj.set("server_rank", torch.full((rows,), rank, dtype=torch.long))
        parts.append(traj)
        server_latency = float(fields.get("latency_s", math.nan))
        for p in range(count):
            out.weight_versions.append(int(fields["weight_version"]))
            out.server_ranks.append(rank)
            out.seeds.append(seeds[i] + p * n)
            out.latency_s.append(latency)
            out.server_latency_s.append(server_latency)
            out.request_index.append(i)
    out.trajectory = torch.cat(parts, dim=0)
    return out
