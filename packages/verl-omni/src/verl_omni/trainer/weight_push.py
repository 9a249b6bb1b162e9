"""`WeightPusher`: the actor's side of the weight sync, over a reused shared-memory segment or the HTTP stream.

Servers at a loopback address get the weights through one `verl_core.rollout.shm_weights.WeightSegment`, written
once per push and kept for the pusher's lifetime; the others (and all of them with `transport="http"`, or once the
segment could not be allocated) get the framed HTTP stream (`RolloutClient.update_weights`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import torch

from verl_core.rollout.client import RolloutClient
from verl_core.rollout.handoff import is_loopback
from verl_core.rollout.shm_weights import SegmentAllocationError, WeightSegment

__all__ = ["WeightPusher"]

logger = logging.getLogger(__name__)


class WeightPusher:
    """Push weight updates to rollout servers; owns the shared-memory segment (call `close` when done).

    Args:
        transport (`str`, *optional*, defaults to `"auto"`): `"auto"` (shared memory for loopback servers) or
            `"http"` (the stream for every server), as `rollout.update_weights_transport`.
    """

    def __init__(self, transport: str = "auto") -> None:
        if transport not in ("auto", "http"):
            raise ValueError(f"rollout.update_weights_transport must be 'auto' or 'http', got {transport!r}")
        self.transport = transport
        self.segment: WeightSegment | None = None
        self._shm_failed = False

    def push(
        self,
        addresses: list[str],
        weights: dict[str, torch.Tensor],
        *,
        version: int,
        peft_config: dict[str, Any] | None,
        bucket_bytes: int,
        timeout_s: float,
    ) -> dict[str, float]:
        """Send `weights` as `version` to every server (each bounded by `timeout_s`); return `{"shm_servers": k}`.

        Raises:
            RolloutError: a server rejected the update or did not answer in time.
        """
        local = [a for a in addresses if self.transport == "auto" and not self._shm_failed and is_loopback(a)]
        descriptor = self._write(weights) if local else None
        shm = {a.rstrip("/") for a in local} if descriptor is not None else set()
        kind = "lora" if peft_config is not None else "full"

        async def one(client: RolloutClient) -> Any:
            if client.address in shm:
                return await client.update_weights_shm(
                    descriptor, version=version, kind=kind, peft_config=peft_config, bucket_bytes=bucket_bytes
                )
            return await client.update_weights(
                weights, version=version, kind=kind, peft_config=peft_config, bucket_bytes=bucket_bytes
            )

        async def all_servers() -> None:
            clients = [RolloutClient(a, rank=r, weight_timeout_s=timeout_s) for r, a in enumerate(addresses)]
            try:
                await asyncio.gather(*(one(c) for c in clients))
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))

        asyncio.run(all_servers())
        return {"shm_servers": float(sum(a.rstrip("/") in shm for a in addresses))}

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
