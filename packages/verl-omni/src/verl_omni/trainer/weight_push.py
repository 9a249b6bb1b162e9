"""`WeightPusher`: the actor's side of the weight sync, over CUDA IPC, a reused shared-memory segment or HTTP.

Servers at a loopback address get weights exported on the GPU as CUDA IPC handles (`verl_core.rollout.
cuda_ipc_weights`: the server copies device to device) and host weights through one
`verl_core.rollout.shm_weights.WeightSegment`, written once per push and kept for the pusher's lifetime. A server
that cannot open the sender's GPU (another GPU, not visible to it) is told so once and gets the segment from then
on. The others (and all of them with `transport="http"`, or once the segment could not be allocated) get the
framed HTTP stream (`RolloutClient.update_weights`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import torch

from verl_core.rollout.client import RolloutClient
from verl_core.rollout.cuda_ipc_weights import share_cuda
from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.handoff import is_loopback
from verl_core.rollout.shm_weights import SegmentAllocationError, WeightSegment

__all__ = ["WeightPusher"]

logger = logging.getLogger(__name__)


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
            clients = [RolloutClient(a, rank=r, weight_timeout_s=timeout_s) for r, a in enumerate(addresses)]
            try:
                return await asyncio.gather(*(one(c) for c in clients))
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))

        answers = asyncio.run(all_servers())
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

    def close(self) -> None:
        """Unlink the segment (idempotent)."""
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
            self.close()
            return None


def _on_gpu(weights: dict[str, torch.Tensor]) -> bool:
    """True when every tensor is on a CUDA device (the push can share them by CUDA IPC)."""
    return bool(weights) and all(t.device.type == "cuda" for t in weights.values())
