"""`RolloutRouter` (least-outstanding-requests routing over server clients) and `RolloutReplica` (Ray placement).

A replica starts N servers of one backend as Ray actors in a placement group (one bundle per server:
GPUs when the cluster has them, CPUs otherwise) and routes requests across them over HTTP. A server that
stops answering is marked dead with its rank and skipped; the others keep serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch

from verl_core.config.rollout import RolloutBaseConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import ServerDeadError
from verl_core.rollout.handoff import is_loopback
from verl_core.rollout.registry import get_backend

__all__ = ["RolloutReplica", "RolloutRouter"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class RolloutRouter:
    """Route generates to the live server with the fewest outstanding requests; broadcast lifecycle calls.

    Args:
        clients (`list[RolloutClient]`): one client per server; `client.rank` names the server.
    """

    def __init__(self, clients: list[RolloutClient]) -> None:
        if not clients:
            raise ValueError("RolloutRouter needs at least one server client")
        self.clients = {c.rank: c for c in clients}
        self.outstanding = dict.fromkeys(self.clients, 0)
        self.served = dict.fromkeys(self.clients, 0)
        self.dead: dict[int, str] = {}

    @property
    def live_ranks(self) -> list[int]:
        """Ranks not marked dead."""
        return [r for r in self.clients if r not in self.dead]

    def _pick(self, exclude: set[int]) -> int | None:
        ranks = [r for r in self.live_ranks if r not in exclude]
        return min(ranks, key=lambda r: (self.outstanding[r], self.served[r], r)) if ranks else None

    def mark_dead(self, rank: int, reason: str) -> None:
        """Stop routing to `rank` and remember why."""
        if rank not in self.dead:
            logger.warning("rollout server rank %d is dead: %s", rank, reason)
        self.dead[rank] = reason

    async def generate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Serve `request` on the least-loaded live server; `server_rank` in the result says which.

        Responses are dicts (tensor fields decoded, see `RolloutClient.generate`). Another error of the chosen
        server is raised with a `server_rank` attribute naming it.

        Raises:
            ServerDeadError: every server is dead (the message lists the dead ranks).
        """
        rank, response = await self._route(lambda client: client.generate(request))
        return {**response, "server_rank": rank}

    async def chat(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve an OpenAI chat request (`RolloutClient.chat`) on the least-loaded live server.

        Returns:
            `(server_rank, answer)`: the rank that served it and its `ChatCompletion` as parsed JSON.

        Raises:
            ServerDeadError: every server is dead (the message lists the dead ranks).
        """
        return await self._route(lambda client: client.chat(body))

    async def _route(self, call: Callable[[RolloutClient], Awaitable[T]]) -> tuple[int, T]:
        """Run `call` on the least-loaded live server, skipping (and marking) dead ones; return `(rank, result)`."""
        tried: set[int] = set()
        while True:
            rank = self._pick(tried)
            if rank is None:
                raise ServerDeadError(f"no live rollout server left; dead ranks: {self._dead_text()}", rank=-1)
            self.outstanding[rank] += 1
            try:
                response = await call(self.clients[rank])
            except ServerDeadError as e:
                self.mark_dead(rank, e.message)
                tried.add(rank)
                continue
            except Exception as e:
                e.server_rank = rank  # type: ignore[attr-defined] # callers name the server in their errors
                raise
            finally:
                self.outstanding[rank] -= 1
            self.served[rank] += 1
            return rank, response

    async def broadcast(self, method: str, *args: Any, **kwargs: Any) -> dict[int, Any]:
        """Call `method` of every live client concurrently; dead servers are marked and left out."""
        ranks = self.live_ranks
        results = await asyncio.gather(
            *(getattr(self.clients[r], method)(*args, **kwargs) for r in ranks), return_exceptions=True
        )
        out: dict[int, Any] = {}
        for rank, result in zip(ranks, results):
            if isinstance(result, ServerDeadError):
                self.mark_dead(rank, result.message)
            elif isinstance(result, BaseException):
                result.server_rank = rank  # type: ignore[attr-defined] # callers name the server in their errors
                raise result
            else:
                out[rank] = result
        return out

    async def check_health(self) -> dict[int, str]:
        """Probe every live server's /health; mark the unreachable ones dead. Returns rank -> state."""
        states = await self.broadcast("health")
        return {rank: h.get("state", "?") for rank, h in states.items()}

    async def aclose(self) -> None:
        """Close every client."""
        await asyncio.gather(*(c.aclose() for c in self.clients.values()))

    def _dead_text(self) -> str:
        return ", ".join(f"{r} ({why})" for r, why in sorted(self.dead.items())) or "none"


class RolloutReplica:
    """N rollout servers of one backend as Ray actors in a placement group, behind a `RolloutRouter`.

    By default the replica creates its own placement group (one bundle per server). A trainer that colocates
    servers with its own workers passes `placement` instead: server `r` goes into bundle `placement[r]` of the
    caller's placement group and asks for `num_cpus` / `num_gpus` of it (fractions share a bundle, e.g. 0.5 GPU
    beside a training rank on the same device); the caller keeps and frees that placement group.

    Args:
        config (`RolloutBaseConfig`): server config; `config.name` picks the backend.
        num_servers (`int`, *optional*, defaults to `1`): servers (ranks 0..N-1).
        use_gpu (`bool`, *optional*): one bundle of `tensor_model_parallel_size` GPUs per server; default:
            when the Ray cluster has enough GPUs.
        name_prefix (`str`, *optional*, defaults to `"verl"`): actor names are `{prefix}_server_{rank}`.
        placement (`list[tuple[PlacementGroup, int]]`, *optional*): `(placement_group, bundle_index)` per server.
        num_cpus (`float`, *optional*, defaults to `1.0`): CPUs each server asks for.
        num_gpus (`float`, *optional*): GPUs each server asks for; default `tensor_model_parallel_size` on GPUs.
        runtime_env (`dict`, *optional*): Ray runtime environment of the server actors (e.g. `{"env_vars":
            {"OMP_NUM_THREADS": "1"}}` to bound an embedded backend's CPU threads).
        file_handoff (`bool`, *optional*, defaults to `False`): the clients of servers at a loopback address ask
            for binary generate answers through a tmpfs file (`RolloutClient(file_handoff=True)`); others use HTTP.

    Raises:
        ValueError: `num_servers < 1`, a `placement` list of another length, or a negative resource.
    """

    def __init__(
        self,
        config: RolloutBaseConfig,
        *,
        num_servers: int = 1,
        use_gpu: bool | None = None,
        name_prefix: str = "verl",
        placement: Sequence[tuple[Any, int]] | None = None,
        num_cpus: float = 1.0,
        num_gpus: float | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        file_handoff: bool = False,
    ) -> None:
        if num_servers < 1:
            raise ValueError(f"num_servers must be >= 1, got {num_servers}")
        if placement is not None and len(placement) != num_servers:
            raise ValueError(f"placement: {len(placement)} bundles for num_servers={num_servers}; give one per server")
        if num_cpus < 0 or (num_gpus is not None and num_gpus < 0):
            raise ValueError(f"num_cpus / num_gpus must be >= 0, got {num_cpus} / {num_gpus}")
        self.config = config
        self.num_servers = num_servers
        self.use_gpu = use_gpu
        self.name_prefix = name_prefix
        self.placement = list(placement) if placement is not None else None
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.file_handoff = file_handoff
        self.server_cls = get_backend(config.name)
        self.actors: list[Any] = []
        self.router: RolloutRouter | None = None
        self._placement_group: Any = None

    async def launch(self) -> list[str]:
        """Place and launch the servers; return their addresses (rank order).

        Raises:
            RuntimeError: Ray is not initialised.
            TimeoutError: placement or launch took longer than `rollout.launch_timeout_s`.
        """
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not ray.is_initialized():
            raise RuntimeError("RolloutReplica.launch() needs a running Ray: call ray.init() first")
        gpus = self.config.tensor_model_parallel_size
        use_gpu = self.use_gpu
        if use_gpu is None:
            use_gpu = ray.cluster_resources().get("GPU", 0) >= gpus * self.num_servers
        timeout = self.config.launch_timeout_s
        slots = self.placement
        if slots is None:
            bundle = {"CPU": self.num_cpus, "GPU": gpus} if use_gpu else {"CPU": self.num_cpus}
            self._placement_group = placement_group([dict(bundle) for _ in range(self.num_servers)], strategy="PACK")
            have = {k: ray.cluster_resources().get(k, 0.0) for k in ("CPU", "GPU")}
            free = {k: ray.available_resources().get(k, 0.0) for k in ("CPU", "GPU")}
            what = (
                f"{self.name_prefix}: placing {self.num_servers} servers with {bundle} each (the cluster has {have}, "
                f"{free} free)"
            )
            await _within(self._placement_group.ready(), timeout, what)
            slots = [(self._placement_group, rank) for rank in range(self.num_servers)]
        num_gpus = (gpus if self.num_gpus is None else self.num_gpus) if use_gpu else 0
        remote_cls = ray.remote(self.server_cls)
        extra = {"runtime_env": self.runtime_env} if self.runtime_env else {}
        for rank, (group, index) in enumerate(slots):
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
            self.actors.append(
                remote_cls.options(
                    name=f"{self.name_prefix}_server_{rank}",
                    num_cpus=self.num_cpus,
                    num_gpus=num_gpus,
                    scheduling_strategy=strategy,
                    max_concurrency=1000,
                    **extra,
                ).remote(self.config, rank=rank)
            )
        addresses = await _within(asyncio.gather(*(a.launch.remote() for a in self.actors)), timeout, "server launch")
        self.router = RolloutRouter([self._client(rank, addr) for rank, addr in enumerate(addresses)])
        return list(addresses)

    def _client(self, rank: int, address: str) -> RolloutClient:
        """The client of server `rank`: rollout timeouts and limits; the tmpfs hand-off only at a loopback address."""
        return RolloutClient(address, rank=rank, timeout_s=self.config.request_timeout_s,
                             weight_timeout_s=self.config.weight_sync_timeout_s,
                             max_response_bytes=self.config.max_response_bytes,
                             file_handoff=self.file_handoff and is_loopback(address))  # fmt: skip

    async def generate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Route one request (see `RolloutRouter.generate`)."""
        return await self._router().generate(request)

    async def chat(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """Route one OpenAI chat request (see `RolloutRouter.chat`)."""
        return await self._router().chat(body)

    async def sleep(self, level: int | None = None) -> dict[int, Any]:
        """Sleep every live server."""
        return await self._router().broadcast("sleep", level)

    async def wake_up(self, tags: list[str] | None = None) -> dict[int, Any]:
        """Wake every live server."""
        return await self._router().broadcast("wake_up", tags)

    async def abort(self, request_ids: list[str] | None = None) -> dict[int, Any]:
        """Abort requests on every live server."""
        return await self._router().broadcast("abort", request_ids)

    async def update_weights(
        self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], **kwargs: Any
    ) -> dict[int, Any]:
        """Stream the same weights to every live server (keyword arguments as `RolloutClient.update_weights`).

        `bucket_bytes` defaults to `rollout.update_weights_bucket_bytes`.
        """
        items = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
        kwargs.setdefault("bucket_bytes", self.config.update_weights_bucket_bytes)
        return await self._router().broadcast("update_weights", items, **kwargs)

    async def shutdown(self) -> None:
        """Shut every server down, kill the actors and free the placement group."""
        import ray

        if self.router is not None:
            await self.router.aclose()
        for actor in self.actors:
            try:
                await asyncio.wait_for(actor.shutdown.remote(), self.config.lifecycle_timeout_s)
            except Exception as e:  # a dead actor cannot shut down; it is killed below anyway
                logger.info("rollout server shutdown failed: %s", e)
            ray.kill(actor)
        self.actors = []
        if self._placement_group is not None:
            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None

    def _router(self) -> RolloutRouter:
        if self.router is None:
            raise RuntimeError("the replica is not launched; await launch() first")
        return self.router


async def _within(awaitable: Any, timeout: float, what: str) -> Any:
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what} took longer than {timeout:g} s (rollout.launch_timeout_s)") from None
