"""Fast weight export: gather and cast on the device, pack into one flat buffer, one transfer, views out.

`export_state` is what `verl_omni.engine.lora.export_weights` runs. It gathers the full tensors (FSDP2's
dim-0 shards: one all-gather per batch of tensors, in `state_dict` order on every rank; none on a single rank)
and copies them, cast to the target dtype, in batched `_foreach_copy_` calls into their slots of a flat byte
buffer on the parameters' device. That buffer crosses to the host in one transfer (chunks of at most
`chunk_bytes` for large full-model exports) into pinned memory, and the result is a dict of views into the host
buffer. When the target is the parameters' own device (in-process rollout on the same GPU) or the parameters
already live on the CPU (CPU training, `param_offload`), the tensors are copied straight into a buffer on the
target: no host hop.

The returned tensors are always a snapshot (copies), never views of live parameters. `ExportBuffer` keeps the flat
buffers between calls and hands one out again only when no tensor of an earlier result still points into it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any

import torch
from torch import nn

from verl_omni.engine.state_entries import entry_cache, select_entries

__all__ = ["ExportBuffer", "export_state"]

_ALIGN = 64  # bytes: every slot starts aligned, so a byte slice can be viewed as any dtype
_CHUNK_BYTES = 512 << 20  # device staging size of a host export (bounds the extra device memory of a full export)


def _storage_refs(t: torch.Tensor) -> int | None:
    """References to `t`'s storage (every view holds one); None when this torch cannot tell."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return None if count is None else int(count(t.untyped_storage()._cdata))


class ExportBuffer:
    """Flat byte buffers for `export_state`, one per (device, pinned), reused across exports when safe.

    Contract: `take` returns the held buffer only when it is large enough and no tensor (view) of an earlier
    export still references it, i.e. the caller dropped that earlier result; otherwise it allocates a new buffer
    (and holds that one instead). So two results that are both alive never share memory. Where the storage
    reference count is not available, every `take` allocates.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, bool], tuple[torch.Tensor, int | None]] = {}
        self.allocations = 0  # buffers allocated so far (the tests read it)

    def take(self, nbytes: int, device: torch.device, *, pin: bool) -> torch.Tensor:
        """A uint8 tensor of exactly `nbytes` on `device` (page-locked when `pin`), not referenced elsewhere."""
        key = (str(device), pin)
        held = self._held.get(key)
        if held is not None:
            buf, free_refs = held
            if buf.numel() >= nbytes and free_refs is not None and _storage_refs(buf) == free_refs:
                return buf[:nbytes]
        buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device, pin_memory=pin)
        self._held[key] = (buf, _storage_refs(buf))
        self.allocations += 1
        return buf[:nbytes]

    def release(self) -> None:
        """Drop the held buffers (results still alive keep their own memory)."""
        self._held.clear()


@dataclasses.dataclass(frozen=True)
class _Slot:
    key: str
    value: torch.Tensor  # the state-dict entry (possibly a DTensor shard)
    dtype: torch.dtype
    offset: int
    nbytes: int


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _local_full(t: torch.Tensor) -> torch.Tensor | None:
    """`t`'s data when its local data is the full tensor, else None (it needs `full_tensor()`, a collective).

    Local is full for a plain tensor and for a DTensor replicated or on a mesh of one rank: no collective, on
    every rank alike.
    """
    if not hasattr(t, "full_tensor"):
        return t.detach()
    if _local_is_full(t.device_mesh, tuple(t.placements)):
        return t.to_local().detach()
    return None


@functools.lru_cache(maxsize=64)
def _local_is_full(mesh: Any, placements: tuple[Any, ...]) -> bool:
    """Every placement replicated or on a mesh dimension of one rank (cached: `DeviceMesh.size` is slow)."""
    return all(p.is_replicate() or mesh.size(i) == 1 for i, p in enumerate(placements))


def _row_sharded(t: torch.Tensor) -> bool:
    """A DTensor sharded on dim 0 of a one-dimensional mesh (FSDP2's layout): gathered in batches."""
    from torch.distributed.tensor import Shard

    return t.device_mesh.ndim == 1 and tuple(t.placements) == (Shard(0),) and t.dim() > 0


def _gather_rows(dsts: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    """Gather many dim-0-sharded DTensors of one mesh and dtype with ONE all-gather, then copy into `dsts`.

    Rank r holds rows [r·c, (r+1)·c) of each tensor, c = ceil(rows / world) (DTensor's `Shard(0)` split, the
    last ranks' shards possibly shorter or empty). Each rank packs its shards at fixed offsets padded to c rows;
    the gathered buffer holds rank r's pack at row r.
    """
    mesh, dtype, device = values[0].device_mesh, values[0].dtype, values[0].to_local().device
    world = mesh.size(0)
    offsets, total = [], 0
    for v in values:
        rows = v.shape[0]
        per_row = v.numel() // rows if rows else 0
        offsets.append((total, -(-rows // world) * per_row))
        total += offsets[-1][1]
    send = torch.zeros(total, dtype=dtype, device=device)
    locals_ = [v.to_local() for v in values]
    torch._foreach_copy_([send[o : o + t.numel()].view(t.shape) for (o, _), t in zip(offsets, locals_, strict=True)],
                         locals_)  # fmt: skip
    recv = torch.empty(world * total, dtype=dtype, device=device)
    torch.distributed.all_gather_into_tensor(recv, send, group=mesh.get_group())
    recv = recv.view(world, total)
    for dst, v, (o, padded) in zip(dsts, values, offsets, strict=True):
        dst.copy_(recv[:, o : o + padded].reshape(-1, *v.shape[1:])[: v.shape[0]])


def _copy_all(dsts: list[torch.Tensor], values: list[torch.Tensor], gather_bytes: int = 256 << 20) -> None:
    """Copy (and cast) each value into its slot view.

    Values whose local data is full go in one batched `_foreach_copy_` (a few kernels instead of one per tensor).
    Dim-0-sharded ones (FSDP2) are gathered in batches of one mesh and dtype, one all-gather per batch of at most
    `gather_bytes`; any other sharded value is gathered on its own (`full_tensor`). Which path a value takes
    depends only on its global metadata, so every rank runs the same collectives in the same order.
    """
    batch_dst, batch_src = [], []
    group: list[tuple[torch.Tensor, torch.Tensor]] = []
    group_bytes = 0

    def flush() -> None:
        nonlocal group, group_bytes
        if group:
            _gather_rows([d for d, _ in group], [v for _, v in group])
        group, group_bytes = [], 0

    for dst, value in zip(dsts, values, strict=True):
        local = _local_full(value)
        if local is None and _row_sharded(value):
            key = (value.device_mesh, value.dtype)
            if group and ((group[0][1].device_mesh, group[0][1].dtype) != key or group_bytes > gather_bytes):
                flush()
            group.append((dst, value.detach()))
            group_bytes += value.numel() * value.dtype.itemsize
        elif local is None:
            dst.copy_(value.detach().full_tensor())
        elif local.device != dst.device:
            dst.copy_(local)
        else:
            batch_dst.append(dst)
            batch_src.append(local)
    flush()
    if batch_dst:
        torch._foreach_copy_(batch_dst, batch_src)


class _Typed:
    """`flat` viewed once per dtype, so each slot's view is one slice and one reshape."""

    def __init__(self, flat: torch.Tensor) -> None:
        self.flat, self._by_dtype = flat, {}

    def view(self, slot: _Slot, shape: torch.Size, offset: int = 0) -> torch.Tensor:
        typed = self._by_dtype.get(slot.dtype)
        if typed is None:
            typed = self._by_dtype[slot.dtype] = self.flat.view(slot.dtype)
        start = (slot.offset - offset) // slot.dtype.itemsize
        return typed[start : start + slot.nbytes // slot.dtype.itemsize].view(shape)


class _Plan:
    """The slots of one selection and dtype, with each output view's shape, strides and element offset."""

    def __init__(self, slots: list[_Slot]) -> None:
        self.slots = slots
        self.values = [s.value for s in slots]
        self.metas = [(v.shape, v.dtype, v.device) for v in self.values]  # `module.to(...)` keeps the objects
        self.views = [  # as_strided arguments into the flat buffer viewed as the slot's dtype
            (s.dtype, s.value.shape, _contiguous_strides(s.value.shape), s.offset // s.dtype.itemsize) for s in slots
        ]
        # every value's local data is the full tensor, all on one device: one `_foreach_copy_` reads them
        locals_ = [_local_full(v) for v in self.values]
        devices = {t.device for t in locals_ if t is not None}
        self.local_device = devices.pop() if None not in locals_ and len(devices) == 1 else None
        self._dtensor = [hasattr(v, "full_tensor") for v in self.values]

    def local_sources(self) -> list[torch.Tensor]:
        """The values' local data (each the full tensor: `local_device` is not None), read without `to_local`."""
        return [v._local_tensor if d else v for v, d in zip(self.values, self._dtensor, strict=True)]


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _export_plan(module: nn.Module, lora_only: bool, adapter_name: str, dtype: torch.dtype | None) -> _Plan:
    """The selected entries' slots; reused while the same tensor objects (same shape, dtype, device) fill them."""
    entries = select_entries(module, ("lora" if lora_only else "base",), lambda k: ("lora_" in k) == lora_only)
    cache = entry_cache(module)
    key = (lora_only, adapter_name, dtype)
    plan = cache.get(key)
    values = [v for _, v in entries]
    if (
        plan is not None
        and len(plan.values) == len(values)
        and all(map(operator.is_, plan.values, values))
        and all((v.shape, v.dtype, v.device) == meta for v, meta in zip(values, plan.metas, strict=True))
    ):
        return plan
    slots, offset = [], 0
    suffix = f".{adapter_name}."
    for name, value in entries:
        out_key = name.replace(suffix, ".") if lora_only else name.replace(".base_layer.", ".")
        out_dtype = dtype or value.dtype
        nbytes = value.numel() * out_dtype.itemsize  # a DTensor's numel is the full tensor's
        slots.append(_Slot(out_key, value, out_dtype, offset, nbytes))
        offset = _aligned(offset + nbytes)
    plan = cache[key] = _Plan(slots)
    return plan


def _target(device: str | torch.device, source: torch.device) -> torch.device:
    target = torch.device(device)
    if target.type == source.type and target.index is None and source.type != "cpu":
        return source  # "cuda" means the parameters' own accelerator
    return target


@torch.no_grad()
def export_state(
    module: nn.Module,
    *,
    lora_only: bool,
    adapter_name: str,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    buffer: ExportBuffer | None = None,
    chunk_bytes: int = _CHUNK_BYTES,
) -> dict[str, torch.Tensor]:
    """Names, selection and values as `verl_omni.engine.lora.export_weights`; see the module docstring for how.

    A collective for sharded modules: every rank calls it with the same module structure. `buffer` is where
    the flat buffer comes from (a fresh one per call when None); `chunk_bytes` bounds the device staging buffer
    of a device-to-host export (a tensor larger than it gets its own chunk).
    """
    plan = _export_plan(module, lora_only, adapter_name, dtype)
    slots = plan.slots
    if not slots:
        return {}
    source = slots[0].value.device
    target = _target(device, source)
    staged = source.type != "cpu" and target.type == "cpu"
    total = _aligned(slots[-1].offset + slots[-1].nbytes)
    flat = (buffer or ExportBuffer()).take(total, target, pin=staged and source.type == "cuda")
    typed = {dt: flat.view(dt) for dt in {s.dtype for s in slots}}  # `total` is a multiple of _ALIGN bytes
    out = {
        s.key: typed[dt].as_strided(shape, strides, start)
        for s, (dt, shape, strides, start) in zip(slots, plan.views, strict=True)
    }
    if staged:
        _staged_copy(slots, [shape for shape, _, _ in plan.metas], flat, source, chunk_bytes)
    elif plan.local_device == target:  # a copy (and cast) into the snapshot buffer
        torch._foreach_copy_(list(out.values()), plan.local_sources())
    else:
        _copy_all(list(out.values()), plan.values)
    return out


def _staged_copy(
    slots: list[_Slot], shapes: list[torch.Size], host: torch.Tensor, source: torch.device, chunk_bytes: int
) -> None:
    """Gather + cast each tensor into a device staging buffer; copy each full chunk to `host` in one transfer."""
    size = min(host.numel(), _aligned(max(chunk_bytes, max(s.nbytes for s in slots))))
    stage = _Typed(torch.empty(size, dtype=torch.uint8, device=source))
    non_blocking = source.type == "cuda" and host.is_pinned()
    start, chunk = 0, []  # host offset of the chunk being filled, its slots

    def flush() -> None:
        if not chunk:
            return
        _copy_all([stage.view(slot, shape, offset=start) for slot, shape in chunk], [slot.value for slot, _ in chunk])
        used = chunk[-1][0].offset + chunk[-1][0].nbytes - start
        # same stream as the staging copies: the next chunk's writes wait for this transfer
        host[start : start + used].copy_(stage.flat[:used], non_blocking=non_blocking)

    for slot, shape in zip(slots, shapes, strict=True):
        if slot.offset + slot.nbytes - start > size:
            flush()
            start, chunk = slot.offset, []
        chunk.append((slot, shape))
    flush()
    if non_blocking:
        torch.cuda.current_stream(source).synchronize()
