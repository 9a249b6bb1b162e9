"""Same-GPU weight sync through CUDA IPC: the server copies the sender's device tensors, device to device.

A colocated actor and rollout server are two processes on one GPU. Instead of a host round trip (device → pinned
host → shared-memory file → pinned host → device), the sender exports its weights on the GPU and `share_cuda`
turns the CUDA allocations that hold them into IPC handles (torch's `reduce_tensor`, the mechanism of
`torch.multiprocessing`): a JSON descriptor `{"device_uuid", "storages": [...], "manifest": [{name, dtype, shape,
storage, offset}]}` that is POSTed to `/update_weights_cuda_ipc`. The server (`open_cuda_ipc`) checks it, finds the
sender's GPU among its own visible devices by UUID, opens the handles and hands device views to the engine hooks,
which copy what they keep. The sender must keep the tensors alive and unchanged until every server has answered;
the server drops its views before it answers, once the copies that read them are done (the engine's own later work,
e.g. a LoRA merge, may still be running on the device then).

The descriptor carries no pickle: only ints, strings and base64 bytes, rebuilt with explicit classes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import torch

from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.framing import DTYPES, ITEMSIZE, TensorSpec
from verl_core.rollout.weights import WeightPiece, WeightUpdate, named_tensors, plan_buckets

__all__ = ["CudaIpcMappings", "CudaIpcUpdate", "device_uuid", "open_cuda_ipc", "share_cuda"]

_HANDLES = ("handle", "ref_counter_handle", "event_handle")
_INTS = ("size_bytes", "offset_bytes", "ref_counter_offset", "nbytes")


def device_uuid(device: torch.device | int) -> str:
    """The UUID of CUDA `device` as `torch.cuda.get_device_properties(...).uuid` prints it."""
    return str(torch.cuda.get_device_properties(device).uuid)


def share_cuda(weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """The descriptor that lets a process on this host read `weights` (contiguous tensors on ONE CUDA device).

    Tensors that share an allocation (views of one flat export buffer) share one handle. Keep the tensors alive and
    unwritten until every receiver has answered.

    Raises:
        WeightSyncError: a tensor is not on CUDA, not contiguous, on another device than the first, or of an
            unsupported dtype (names it).
    """
    from torch.multiprocessing.reductions import reduce_tensor

    items = named_tensors(weights)
    if not items:
        raise WeightSyncError("a CUDA IPC update needs at least one tensor", field="weights")
    device = items[0][1].device
    storages: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    manifest = []
    for name, tensor in items:
        spec = TensorSpec.of(name, tensor)
        if tensor.device.type != "cuda" or tensor.device != device:
            raise WeightSyncError(f"tensor {name!r} is on {tensor.device}, not on {device} (CUDA)", field=name)
        if not tensor.is_contiguous():
            raise WeightSyncError(f"tensor {name!r} is not contiguous", field=name)
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in index:
            index[key] = len(storages)
            whole = torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (storage.nbytes(),))
            storages.append(_storage_entry(reduce_tensor(whole)[1], storage.nbytes()))
        manifest.append(
            {**spec.to_json(), "storage": index[key], "offset": tensor.storage_offset() * tensor.element_size()}
        )
    return {"device_uuid": device_uuid(device), "storages": storages, "manifest": manifest}


def _storage_entry(args: tuple[Any, ...], nbytes: int) -> dict[str, Any]:
    """The JSON fields of `rebuild_cuda_tensor`'s arguments for one uint8 tensor over a whole storage."""
    (_, _, _, _, _, _, _, handle, size_bytes, offset_bytes, _, ref_handle, ref_offset, event_handle, event_sync) = args
    return {
        "handle": _b64(handle),
        "size_bytes": int(size_bytes),
        "offset_bytes": int(offset_bytes),
        "ref_counter_handle": _b64(ref_handle),
        "ref_counter_offset": int(ref_offset),
        "event_handle": _b64(event_handle),
        "event_sync_required": bool(event_sync),
        "nbytes": nbytes,
    }


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


class CudaIpcUpdate:
    """An opened descriptor on the server side: the specs and one device view per tensor.

    Call `close` once the update is applied (before answering): the sender's memory is then released to it.
    """

    def __init__(
        self, specs: list[TensorSpec], tensors: list[torch.Tensor], storages: list[torch.Tensor], mapped: int
    ) -> None:
        self.specs, self._tensors = specs, tensors
        self.storages = storages  # one uint8 tensor over each sender allocation
        self.mapped = mapped  # how many of them this open mapped (the others were mapped already)

    async def buckets(self, update: WeightUpdate, bucket_bytes: int) -> AsyncIterator[list[WeightPiece]]:
        """Yield the tensors as device views in buckets of `bucket_bytes` (larger ones as flat slices)."""
        for pieces in plan_buckets(self.specs, bucket_bytes):
            bucket: list[WeightPiece] = []
            for p in pieces:
                view, spec = self._tensors[p.index], self.specs[p.index]
                if p.numel == spec.numel:
                    bucket.append((spec.name, view, None))
                else:
                    bucket.append((spec.name, view.view(-1)[p.start : p.start + p.numel], p.start))
            yield bucket

    def close(self, read_done: Any = None) -> None:
        """Wait until the views were read, then drop them (idempotent).

        `read_done` is a CUDA event that completes after the last queued read of the views (the engine's copies);
        without it, all the device's queued work is waited for.
        """
        if self._tensors:
            if read_done is not None:
                read_done.synchronize()
            else:
                torch.cuda.synchronize(self._tensors[0].device)
        self._tensors = []


def open_cuda_ipc(descriptor: Any) -> CudaIpcUpdate:
    """Check `descriptor`, open its handles on the sender's GPU (found by UUID) and view every manifest entry.

    Raises:
        WeightSyncError: a bad descriptor or entry, the sender's GPU not visible here, or the handles not opening
            (`field` names the key: `device_uuid`, `storages`, a tensor name, or `cuda_ipc`).
    """
    if not isinstance(descriptor, Mapping):
        raise WeightSyncError(f"cuda_ipc must be an object, got {type(descriptor).__name__}", field="cuda_ipc")
    storages = _check_storages(descriptor.get("storages"))
    specs, places = _check_manifest(descriptor.get("manifest"), storages)
    device = _local_device(descriptor.get("device_uuid"))
    from torch.multiprocessing.reductions import rebuild_cuda_tensor, storage_from_cache

    opened, mapped = [], 0
    try:
        for s in storages:
            cached = storage_from_cache(torch.UntypedStorage, (s["handle"], s["offset_bytes"])) is not None
            mapped += not cached
            opened.append(
                rebuild_cuda_tensor(
                    torch.Tensor,
                    (s["nbytes"],),
                    (1,),
                    0,
                    torch.storage.TypedStorage,
                    torch.uint8,
                    device,
                    s["handle"],
                    s["size_bytes"],
                    s["offset_bytes"],
                    False,
                    s["ref_counter_handle"],
                    s["ref_counter_offset"],
                    s["event_handle"],
                    s["event_sync_required"],
                )
            )
            if cached and s["event_sync_required"] and s["event_handle"] is not None:
                # torch waits for the sender's writes only when it maps an allocation: wait for this share's event
                torch.cuda.Event.from_ipc_handle(device, s["event_handle"]).wait()
    except RuntimeError as e:
        raise WeightSyncError(
            f"cannot open the sender's CUDA IPC handles on cuda:{device}: {e}", field="cuda_ipc"
        ) from e
    tensors = []
    for spec, (storage, offset) in zip(specs, places):
        raw = opened[storage][offset : offset + spec.nbytes]
        tensors.append(
            raw.view(DTYPES[spec.dtype]).view(spec.shape)
            if spec.nbytes
            else torch.empty(spec.shape, dtype=DTYPES[spec.dtype], device=f"cuda:{device}")
        )
    return CudaIpcUpdate(specs, tensors, opened, mapped)


class CudaIpcMappings:
    """The server side: open descriptors (`open_cuda_ipc`), keeping the last update's sender allocations mapped.

    A sender that exports into the same buffer every update (the trainer's engines do) sends the same handle each
    time. While the earlier mapping is held, torch finds it in its handle cache (and hands the sender that share's
    reference back) instead of mapping the allocation again (`cudaIpcOpenMemHandle`, milliseconds); the receiver
    still waits for the share's event, so it reads what the sender wrote before sharing. The mappings are released
    when an update brings other handles and at `close` (server shutdown); until then the sender cannot free that
    allocation (it keeps it for the next export anyway).
    """

    def __init__(self) -> None:
        self._held: list[torch.Tensor] = []
        self.mapped = 0  # allocations mapped so far (an update that reuses the held ones maps none)

    def open(self, descriptor: Any) -> CudaIpcUpdate:
        """`open_cuda_ipc(descriptor)`, reusing the held mappings; the result's allocations are held from now on."""
        update = open_cuda_ipc(descriptor)
        self.mapped += update.mapped
        self._held = list(update.storages)  # after the open: a repeated handle found the held mapping
        return update

    def close(self) -> None:
        """Release the held mappings."""
        self._held = []


def _local_device(uuid: Any) -> int:
    if not isinstance(uuid, str) or not uuid:
        raise WeightSyncError(f"device_uuid must be a non-empty string, got {uuid!r}", field="device_uuid")
    if not torch.cuda.is_available():
        raise WeightSyncError("this server has no CUDA device: CUDA IPC updates need one", field="device_uuid")
    visible = [device_uuid(i) for i in range(torch.cuda.device_count())]
    if uuid not in visible:
        raise WeightSyncError(
            f"the sender's GPU {uuid} is not among this server's visible devices {visible} (CUDA_VISIBLE_DEVICES)",
            field="device_uuid",
        )
    return visible.index(uuid)


def _check_storages(storages: Any) -> list[dict[str, Any]]:
    if not isinstance(storages, list) or not storages:
        raise WeightSyncError("storages must be a non-empty list", field="storages")
    out = []
    for i, s in enumerate(storages):
        if not isinstance(s, Mapping):
            raise WeightSyncError(f"storages[{i}] must be an object", field="storages")
        entry: dict[str, Any] = {}
        for key in _INTS:
            value = s.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise WeightSyncError(f"storages[{i}].{key} must be an int >= 0, got {value!r}", field="storages")
            entry[key] = value
        for key in _HANDLES:
            value = s.get(key)
            entry[key] = None if value is None and key == "event_handle" else _handle_bytes(value)
            if entry[key] is False:
                raise WeightSyncError(f"storages[{i}].{key} must be non-empty base64, got {value!r}", field="storages")
        if not isinstance(s.get("event_sync_required"), bool):
            raise WeightSyncError(f"storages[{i}].event_sync_required must be a bool", field="storages")
        entry["event_sync_required"] = s["event_sync_required"]
        if entry["nbytes"] > entry["size_bytes"]:
            raise WeightSyncError(f"storages[{i}].nbytes exceeds its size_bytes", field="storages")
        out.append(entry)
    return out


def _handle_bytes(value: Any) -> bytes | bool:
    """The bytes of a non-empty base64 string, else False."""
    if not isinstance(value, str):
        return False
    try:
        return base64.b64decode(value, validate=True) or False
    except binascii.Error:
        return False


def _check_manifest(manifest: Any, storages: list[dict[str, Any]]) -> tuple[list[TensorSpec], list[tuple[int, int]]]:
    if not isinstance(manifest, list) or not manifest:
        raise WeightSyncError("manifest must be a non-empty list", field="manifest")
    specs, places, seen = [], [], set()
    for entry in manifest:
        spec = TensorSpec.from_json(entry, extra=frozenset({"storage", "offset"}))
        if spec.name in seen:
            raise WeightSyncError(f"tensor {spec.name!r} appears twice in the manifest", field=spec.name)
        seen.add(spec.name)
        storage, offset = entry.get("storage"), entry.get("offset")
        if not isinstance(storage, int) or isinstance(storage, bool) or not 0 <= storage < len(storages):
            raise WeightSyncError(
                f"tensor {spec.name!r}: storage {storage!r} is not an index of storages", field=spec.name
            )
        itemsize = ITEMSIZE[spec.dtype]
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or offset % itemsize:
            raise WeightSyncError(
                f"tensor {spec.name!r}: offset {offset!r} is not an int >= 0 aligned to {itemsize}", field=spec.name
            )
        if offset + spec.nbytes > storages[storage]["nbytes"]:
            raise WeightSyncError(
                f"tensor {spec.name!r}: bytes [{offset}, {offset + spec.nbytes}) lie outside storage {storage}",
                field=spec.name,
            )
        specs.append(spec)
        places.append((storage, offset))
    return specs, places
