"""`WeightSyncMixin`: the weight-sync half of `RolloutHttpServer` (in-process, stream, shm, CUDA IPC, read-back).

`update_weights` (tensors in this process), the `/update_weights` route (a framed byte stream, see
`verl_core.rollout.weights`), `update_weights_shm` (a same-host segment, see `verl_core.rollout.shm_weights`) and
`update_weights_cuda_ipc` (the sender's GPU tensors, see `verl_core.rollout.cuda_ipc_weights`) all end in
`_apply_update`, which feeds the buckets to the `_engine_*` weight hooks under the server's exclusive lifecycle
lock and timeouts. `served_weights` reads the served tensors back for checks.

The mixin sets its own state (`_init_weight_sync`); `RolloutHttpServer` (`verl_core.rollout.server`) provides the
loop, timeout and lock helpers it uses, and `readiness` refuses generates after a full update failed halfway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from verl_core.best_effort import best_effort
from verl_core.rollout.cuda_ipc_weights import CudaIpcMappings
from verl_core.rollout.engine_hooks import EngineHooks
from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.protocol import WeightUpdateResponse
from verl_core.rollout.shm_weights import MappedSegments
from verl_core.rollout.weights import TensorSpec, WeightKind, WeightPiece, WeightUpdate, iter_buckets, named_tensors

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from verl_core.rollout.metrics import ServerMetrics

__all__ = ["WeightSyncMixin"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


class WeightSyncMixin(EngineHooks):
    """Weight sync of a rollout server: load new weights bucket by bucket through the engine hooks.

    Mixed into `RolloutHttpServer`, whose `__init__` calls `_init_weight_sync` and which provides `metrics`,
    `_on_loop`, `_timed` and `_exclusive_op`.
    """

    readable_weight_kinds: ClassVar[tuple[WeightKind, ...]] = ("full", "lora")
    """The weight kinds `served_weights` can read back (a backend that cannot read one back says so here)."""

    if TYPE_CHECKING:  # provided by RolloutHttpServer
        metrics: ServerMetrics

        async def _on_loop(self, coro: Awaitable[T]) -> T: ...

        async def _timed(self, op: str, key: str, awaitable: Awaitable[T], timeout: float | None = None) -> T: ...

        def _exclusive_op(self, op: str) -> AbstractAsyncContextManager[None]: ...

    def _init_weight_sync(self) -> None:
        """Set the weight-sync state: checkpoint weights (version 0), consistent, no segment mapped."""
        self._weight_version = 0
        self._weights_consistent = True  # False after a full update failed halfway (generates are refused)
        self._assembling: dict[str, tuple[torch.Tensor, int]] = {}
        self.weight_segments = MappedSegments()  # the sender's reused weight segment, mapped read-only
        self.cuda_ipc_mappings = CudaIpcMappings()  # the sender's reused export buffer, mapped on the device

    @property
    def weight_version(self) -> int:
        """Version of the weights generates run with (0 = the checkpoint's)."""
        return self._weight_version

    async def update_weights(
        self,
        weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        *,
        version: int,
        kind: WeightKind = "full",
        peft_config: dict[str, Any] | None = None,
        bucket_bytes: int | None = None,
    ) -> WeightUpdateResponse:
        """Load new weights in-process, bucket by bucket; generates then report `version`.

        Args:
            weights (`Mapping[str, torch.Tensor]` or iterable of `(name, tensor)`): full model tensors or
                LoRA tensors (as `peft.get_peft_model_state_dict` names them).
            version (`int`): the new weight version (>= 0).
            kind (`str`, *optional*, defaults to `"full"`): `"full"` or `"lora"`.
            peft_config (`dict`, *optional*): the adapter's PEFT config, required for `"lora"`.
            bucket_bytes (`int`, *optional*): bucket size; defaults to `rollout.update_weights_bucket_bytes`.

        Raises:
            WeightSyncError: unknown tensor name, wrong shape, missing PEFT config (names it).
            ConflictError: another lifecycle call is running.
            EngineTimeoutError: longer than `rollout.weight_sync_timeout_s`.
        """
        items = named_tensors(weights)
        update = WeightUpdate(version, kind, [TensorSpec.of(n, t) for n, t in items], peft_config)
        size = bucket_bytes or self.config.update_weights_bucket_bytes

        async def buckets() -> AsyncIterator[list[WeightPiece]]:
            for bucket in iter_buckets(items, size):
                yield [(name, tensor, None) for name, tensor in bucket]

        return await self._on_loop(self._apply_update(update, buckets()))

    async def update_weights_shm(
        self,
        segment: Mapping[str, Any],
        *,
        version: int,
        kind: WeightKind = "full",
        peft_config: dict[str, Any] | None = None,
        bucket_bytes: int | None = None,
    ) -> WeightUpdateResponse:
        """Load the weights a same-host `WeightSegment` descriptor names (`verl_core.rollout.shm_weights`).

        The file and every manifest entry are checked before a byte is applied; the engine hooks get views of the
        mapping in buckets of `bucket_bytes` (default `rollout.update_weights_bucket_bytes`), as from the stream.

        Raises:
            WeightSyncError: a bad descriptor, file or entry (named by `field`), or what `update_weights` raises.
        """
        size = self._descriptor_bucket_bytes(bucket_bytes)

        async def apply() -> WeightUpdateResponse:
            mapped = self.weight_segments.open(segment)
            update = WeightUpdate(version, kind, mapped.specs, peft_config)
            out = await self._apply_update(update, mapped.buckets(update, size))
            self.metrics.count("weight_updates_shm")
            return out

        return await self._on_loop(apply())

    async def update_weights_cuda_ipc(
        self,
        descriptor: Mapping[str, Any],
        *,
        version: int,
        kind: WeightKind = "full",
        peft_config: dict[str, Any] | None = None,
        bucket_bytes: int | None = None,
    ) -> WeightUpdateResponse:
        """Load the weights a same-host sender shares on its GPU (`verl_core.rollout.cuda_ipc_weights.share_cuda`).

        The descriptor is checked and the handles opened (on the sender's GPU, found by UUID) before a byte is
        applied; the engine hooks get device views in buckets and copy what they keep. The views are dropped, after
        the device copies finished, before this returns.

        Raises:
            WeightSyncError: a bad descriptor or entry, the sender's GPU not visible or its handles not opening
                (named by `field`), or what `update_weights` raises.
        """
        size = self._descriptor_bucket_bytes(bucket_bytes)

        async def apply() -> WeightUpdateResponse:
            opened = self.cuda_ipc_mappings.open(descriptor)
            read_done = None  # a failed update waits for all the device's work before the views go
            try:
                update = WeightUpdate(version, kind, opened.specs, peft_config)
                out = await self._apply_update(update, opened.buckets(update, size))
                read_done = self._engine_sources_read()
            finally:
                opened.close(read_done)
            self.metrics.count("weight_updates_cuda_ipc")
            return out

        return await self._on_loop(apply())

    def _descriptor_bucket_bytes(self, bucket_bytes: int | None) -> int:
        size = bucket_bytes or self.config.update_weights_bucket_bytes
        if not isinstance(size, int) or not 64 <= size <= self.config.max_bucket_bytes:
            raise WeightSyncError(f"bucket_bytes must be in [64, {self.config.max_bucket_bytes}]", field="bucket_bytes")
        return size

    async def served_weights(self, names: Iterable[str], *, kind: WeightKind = "full") -> dict[str, torch.Tensor]:
        """CPU copies of the tensors the engine serves now under `names` (for checks, e.g. the contract suite).

        Args:
            names (iterable of `str`): tensor names as `update_weights` takes them.
            kind (`str`, *optional*, defaults to `"full"`): `"full"` (model tensors) or `"lora"` (adapter tensors).

        Raises:
            BadRequestError: a name the engine does not serve.
            EngineError: the backend has no `_engine_read_weights` hook.
        """
        read = self._timed("served_weights", "lifecycle_timeout_s", self._engine_read_weights(list(names), kind))
        served = await self._on_loop(read)
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in served.items()}

    def _set_weight_version(self, version: int) -> None:
        """For engines whose wake-up reloads the checkpoint: report `version` from now on."""
        self._weight_version = version

    async def _apply_update(
        self, update: WeightUpdate, buckets: AsyncIterator[list[WeightPiece]]
    ) -> WeightUpdateResponse:
        """Feed `buckets` to the engine hooks as one exclusive lifecycle op (runs on the server loop)."""
        start = time.perf_counter()
        loaded = {"buckets": 0, "tensors": 0, "bytes": 0}

        async def run() -> None:
            self._assembling = {}
            await self._engine_begin_weights(update)
            done = False
            try:
                async for bucket in buckets:
                    whole = [(name, t) for name, t, start in bucket if start is None]
                    if whole:
                        await self._engine_load_bucket(update, whole)
                    for name, chunk, start in bucket:
                        if start is not None:
                            await self._engine_load_slice(update, name, start, chunk)
                    loaded["buckets"] += 1
                    loaded["bytes"] += sum(t.numel() * t.element_size() for _, t, _ in bucket)
                await self._engine_finish_weights(update)
                loaded["tensors"] = len(update.manifest)
                done = True
            finally:
                self._assembling = {}
                if not done:
                    if update.kind == "full" and loaded["buckets"]:
                        self._weights_consistent = False
                    with best_effort(logger, f"aborting the unfinished weight update {update.version}"):
                        await asyncio.wait_for(self._engine_abort_weights(update), self.config.lifecycle_timeout_s)

        async with self._exclusive_op("update_weights"):
            await self._timed("update_weights", "weight_sync_timeout_s", run())
            self._weight_version = update.version
            if update.kind == "full":
                self._weights_consistent = True
        seconds = time.perf_counter() - start
        self.metrics.count("weight_updates")
        self.metrics.count("weight_bytes", loaded["bytes"])
        return WeightUpdateResponse(
            weight_version=update.version,
            kind=update.kind,
            num_tensors=loaded["tensors"],
            num_buckets=loaded["buckets"],
            bytes=loaded["bytes"],
            seconds=seconds,
        )
