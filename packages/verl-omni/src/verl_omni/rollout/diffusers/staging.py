"""Move many host tensors to a device in a few large transfers instead of one small, synchronous copy each.

A weight update arrives as host tensors (views of a shared-memory segment, or decoded HTTP buckets): a LoRA is a
few hundred tensors of 0.1-2 MB. `tensor.to("cuda")` from pageable memory is synchronous and slow per call, so
`staged_to_device` packs the tensors of one dtype into one (pinned) flat host buffer, moves it in one copy and hands
back views of the device copy, in chunks of at most `chunk_bytes`. Tensors already on the device, or already in
pinned memory (copied asynchronously as they are), are not packed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

__all__ = ["CHUNK_BYTES", "packed_copy", "staged_to_device"]

CHUNK_BYTES = 256 << 20  # bound on the staging buffers (host and device) held at once


def _chunks(tensors: Sequence[torch.Tensor], chunk_bytes: int) -> Iterator[list[int]]:
    """Indices of `tensors`, in order, grouped so each group holds at most `chunk_bytes` (or one larger tensor)."""
    group, size = [], 0
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if group and size + nbytes > chunk_bytes:
            yield group
            group, size = [], 0
        group.append(i)
        size += nbytes
    if group:
        yield group


def staged_to_device(
    tensors: Sequence[torch.Tensor],
    device: str | torch.device,
    *,
    pin: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[list[tuple[int, torch.Tensor]]]:
    """Yield `(index, tensor on device)` for every input, a chunk at a time, same values, shapes and dtypes.

    Host tensors of one dtype in a chunk travel as one flat buffer (pinned with `pin`, which needs CUDA): the
    yielded tensors are views of its device copy, valid until the caller drops them. The caller consumes a chunk
    before asking for the next, which bounds the staging memory to about `chunk_bytes` on each side.
    """
    device = torch.device(device)
    for chunk in _chunks(tensors, chunk_bytes):
        out: list[tuple[int, torch.Tensor]] = []
        by_dtype: dict[torch.dtype, list[int]] = {}
        for i in chunk:
            t = tensors[i]
            if t.device == device or t.device.type != "cpu":
                out.append((i, t.to(device)))
            elif pin and t.is_pinned():
                out.append((i, t.to(device, non_blocking=True)))
            else:
                by_dtype.setdefault(t.dtype, []).append(i)
        for dtype, idx in by_dtype.items():
            sizes = [tensors[i].numel() for i in idx]
            flat = torch.empty(sum(sizes), dtype=dtype, pin_memory=pin)
            torch.cat([tensors[i].reshape(-1) for i in idx], out=flat)
            moved = flat.to(device, non_blocking=pin)
            out.extend((i, piece.view(tensors[i].shape)) for i, piece in zip(idx, moved.split(sizes)))
        yield sorted(out, key=lambda pair: pair[0])


def packed_copy(
    tensors: Sequence[torch.Tensor], *, pin: bool = False, device: str | torch.device | None = None
) -> list[torch.Tensor]:
    """Copies of `tensors` (same values, shapes, dtypes), packed into one flat buffer per device and dtype.

    One allocation and one pass per group instead of a `clone()` each; with `pin` (needs CUDA) host buffers are
    pinned, so `staged_to_device` moves the copies asynchronously without packing them again. With `device` the
    copies live there (default: each tensor's own device); device-to-pinned-host copies are asynchronous, so
    synchronize the source's stream before reading them on the host.
    """
    target = None if device is None else torch.device(device)
    out: list[torch.Tensor | None] = [None] * len(tensors)
    groups: dict[tuple[torch.device, torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, target or t.device, t.dtype), []).append(i)
    for (source, dest, dtype), idx in groups.items():
        sizes = [tensors[i].numel() for i in idx]
        pinned = pin and dest.type == "cpu"
        flat = torch.empty(sum(sizes), dtype=dtype, device=dest, pin_memory=pinned)
        parts = [tensors[i].reshape(-1) for i in idx]
        if source == dest:
            torch.cat(parts, out=flat)
        else:  # pack on the source's device, then one transfer
            flat.copy_(torch.cat(parts), non_blocking=pinned or dest.type != "cpu")
        for i, piece in zip(idx, flat.split(sizes)):
            out[i] = piece.view(tensors[i].shape)
    return out  # type: ignore[return-value]
