"""`WeightPusher`: the trainer's side of the weight sync, over CUDA IPC, a reused shared-memory segment or HTTP.

Model-agnostic: it sends named tensors (full weights, or LoRA adapters with their peft config) that the caller
exported; the servers' side is `server_weights` (with `shm_weights` / `cuda_ipc_weights`).

Servers at a loopback address get weights exported on the GPU as CUDA IPC handles (`verl_core.rollout.
cuda_ipc_weights`: the server copies device to device) and host weights through one
`verl_core.rollout.shm_weights.WeightSegment`, written once per push and kept for the pusher's lifetime. A server
that cannot open the sender's GPU (another GPU, not visible to it) is told so once and gets the segment from then
on. The others (and all of them with `transport="http"`, or once the segment could not be allocated) get the
framed HTTP stream (`RolloutClient.update_weights`).

The pusher keeps one HTTP client per server, on an event loop thread of its own, from push to push: a push reuses
their connections instead of building a client and connecting again (milliseconds a push).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import weakref
from typing import Any

import torch

from verl_core.rollout.client import RolloutClient
from verl_core.rollout.cuda_ipc_weights import share_cuda
from verl_core.rollout.errors import EngineTimeoutError, WeightSyncError
from verl_core.rollout.handoff import is_loopback
from verl_core.rollout.shm_weights import SegmentAllocationError, WeightSegment

__all__ = ["WeightPusher"]

logger = logging.getLogger(__name__)

_GRACE_S = 10.0  # beyond the per-call timeout: the loop thread's own bound


class WeightPusher:
    """Push weight updates to rollout servers; owns the shared-memory segment (call `close` when done).

    Args:
        transport (`str`, *optional*, defaults to `"auto"`): `"auto"` (CUDA IPC or shared memory for loopback
            servers) or `"http"` (the stream for every server), as `rollout.update_weights_transport`.
    """

    def __init__(self, transport: str = "auto") -> None:
        if transport not in ("auto", "http"):
            raise ValueError(f"rollout.update_weights_transport must be 'auto' or 'http', got {transport!r}")
        self.transport = transport
        self.segment: WeightSegment | None = None
        self._shm_failed = False
        self._no_ipc: set[str] = set()  # servers that could not open this process's GPU handles
        self._clients: dict[tuple[str, int, float], RolloutClient] = {}  # kept between pushes, used on `_loop`
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._finalizer: weakref.finalize | None = None

    def wants_device_tensors(self, addresses: list[str]) -> bool:
        """True when a push of GPU tensors would reach some server by CUDA IPC (export on the GPU then)."""
        return self.transport == "auto" and any(is_loopback(a) and a.rstrip("/") not in self._no_ipc for a in addresses)

    def push(
        self,
        addresses: list[str],
        weights: dict[str, torch.Tensor],
        *,
        version: int,
        peft_config: dict[str, Any] | None,
        bucket_bytes: int,
        timeout_s: float,
    ) -> dict[str, Any]:
        """Send `weights` as `version` to every server (each bounded by `timeout_s`).

        Returns:
            `{"shm_servers": k, "cuda_ipc_servers": m, "served_versions": [...]}`: how many servers got the segment
            and the GPU handles, and the weight version each server (in `addresses` order) answered it serves now.

        Raises:
            RolloutError: a server rejected the update or did not answer in time.
        """
        on_gpu = _on_gpu(weights)
        auto = [a.rstrip("/") for a in addresses if self.transport == "auto" and is_loopback(a)]
        ipc = {a for a in auto if on_gpu and a not in self._no_ipc}
        shared = self._share(weights, ipc) if ipc else None
        if shared is None:
            ipc = set()
        written: list[dict[str, Any] | None] = []  # the segment descriptor, written on first need

        def segment() -> dict[str, Any] | None:
            if not written:
                written.append(None if self._shm_failed else self._write(weights))
            return written[0]

        shm: set[str] = set()  # the servers that got the segment
        kind = "lora" if peft_config is not None else "full"
        update = {"version": version, "kind": kind, "peft_config": peft_config, "bucket_bytes": bucket_bytes}

        async def host_path(client: RolloutClient) -> Any:
            descriptor = segment() if client.address in auto else None
            if descriptor is not None:
                shm.add(client.address)
                return await client.update_weights_shm(descriptor, **update)
            return await client.update_weights(weights, **update)

        async def one(client: RolloutClient) -> Any:
            if client.address not in ipc:
                return await host_path(client)
            try:
                return await client.update_weights_cuda_ipc(shared, **update)
            except WeightSyncError as e:
                if e.field not in ("device_uuid", "cuda_ipc"):
                    raise
                logger.warning(
                    "weight sync: server %s cannot open this process's GPU memory (%s); it gets the weights "
                    "through shared memory or HTTP from now on",
                    client.address,
                    e,
                )
                self._no_ipc.add(client.address)
                return await host_path(client)

        async def all_servers() -> list[Any]:
            clients = [self._client(a, r, timeout_s) for r, a in enumerate(addresses)]
            await self._close_other_clients(clients)  # e.g. a replica restarted on a new port
            return await asyncio.gather(*(one(c) for c in clients))

        future = asyncio.run_coroutine_threadsafe(all_servers(), self._running_loop())
        try:
            answers = future.result(timeout_s + _GRACE_S)  # each call is bounded by timeout_s; this bounds the rest
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EngineTimeoutError(
                f"the weight push to {addresses} did not finish within {timeout_s + _GRACE_S:g} s "
                "(actor_rollout_ref.rollout.weight_sync_timeout_s)"
            ) from None
        served = [a.rstrip("/") for a in addresses]
        return {
            "shm_servers": float(sum(a in shm for a in served)),
            "cuda_ipc_servers": float(sum(a in ipc and a not in self._no_ipc for a in served)),
            "served_versions": [int(answer["weight_version"]) for answer in answers],
        }

    def _share(self, weights: dict[str, torch.Tensor], servers: set[str]) -> dict[str, Any] | None:
        """`share_cuda(weights)`, or None (and no CUDA IPC from now on) when this process cannot share them."""
        try:
            return share_cuda(weights)
        except RuntimeError as e:  # e.g. an allocator whose memory cannot be exported; WeightSyncError is a bug
            if isinstance(e, WeightSyncError):
                raise
            logger.warning(
                "weight sync: cannot share this process's GPU memory by CUDA IPC (%s); the servers on this host get "
                "the weights through shared memory or HTTP from now on",
                e,
            )
            self._no_ipc.update(servers)
            return None

    def _client(self, address: str, rank: int, timeout_s: float) -> RolloutClient:
        key = (address.rstrip("/"), rank, timeout_s)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = RolloutClient(address, rank=rank, weight_timeout_s=timeout_s)
        return client

    async def _close_other_clients(self, keep: list[RolloutClient]) -> None:
        """Close and forget the kept clients not in `keep` (servers this push does not address); on `_loop`."""
        kept = {id(c) for c in keep}
        stale = [key for key, c in self._clients.items() if id(c) not in kept]
        if stale:
            gone = [self._clients.pop(key) for key in stale]
            await asyncio.gather(*(c.aclose() for c in gone), return_exceptions=True)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="weight-push", daemon=True)
            self._thread.start()
            self._finalizer = weakref.finalize(self, _stop, self._loop)  # a pusher dropped unclosed
        return self._loop

    def close(self) -> None:
        """Close the clients, stop their loop thread and unlink the segment (idempotent)."""
        if self._loop is not None:
            loop, clients = self._loop, list(self._clients.values())
            if self._finalizer is not None:
                self._finalizer.detach()
            self._loop, self._clients = None, {}

            async def close_all() -> None:
                await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

            try:
                asyncio.run_coroutine_threadsafe(close_all(), loop).result(_GRACE_S)
            except Exception as e:  # closing loopback connections does not fail; never block the shutdown on it
                logger.warning("weight sync: closing the push clients: %s", e)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=_GRACE_S)
            if not loop.is_running():
                loop.close()
            self._thread = None
        self._close_segment()

    def _close_segment(self) -> None:
        if self.segment is not None:
            self.segment.close()
            self.segment = None

    def _write(self, weights: dict[str, torch.Tensor]) -> dict[str, Any] | None:
        if self.segment is None:
            self.segment = WeightSegment()
        try:
            return self.segment.write(weights)
        except SegmentAllocationError as e:
            size = sum(t.numel() * t.element_size() for t in weights.values())
            logger.warning(
                "weight sync: no shared-memory segment of %d bytes in %s (%s); streaming the weights over HTTP "
                "from now on (set rollout.update_weights_transport=http to skip the attempt)",
                size,
                self.segment.directory,
                e,
            )
            self._shm_failed = True
            self._close_segment()
            return None


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)


def _on_gpu(weights: dict[str, torch.Tensor]) -> bool:
    """True when every tensor is on a CUDA device (the push can share them by CUDA IPC)."""
    return bool(weights) and all(t.device.type == "cuda" for t in weights.values())
