"""`HostOffload`: move modules' parameters and buffers to host copies allocated once and reused across sleeps.

`module.to("cpu")` allocates fresh pageable host memory on every call, and copies from pageable memory are slow
and synchronous. `HostOffload` keeps one host tensor per parameter / buffer (pinned on CUDA, same shape, dtype
and strides), copies into it with `non_blocking=True` and a single synchronize, then points the tensor at it
(`t.data = host`): the Parameter / buffer objects stay the same, so anything holding them (tied weights, weight
tables, LoRA bookkeeping) keeps working, and their device storage is freed by reference counting. `onload`
allocates device tensors, copies back non-blocking, synchronizes once, and keeps the host copies for the next
`offload`. Tensors are deduplicated by identity: a Parameter shared by two modules is moved once and stays shared.

Two things make a sleep cheaper than a full copy. A tensor not written since `onload` is not copied again: its host
copy still holds its values. "Not written" is read from the tensor's version counter, which every in-place op on it
or on a view of it advances (`copy_`, `add_`, `out=`); writes through `tensor.data` do not, so who writes that way
calls `mark_written`. And tensors the caller can recompute (a merged LoRA weight) are passed as `discard`: they are
repointed at their host copies without a copy, and the next `onload` gives them fresh, uninitialised device memory
(listed in `uninitialized`) for the caller to fill.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable, Iterator

import torch

__all__ = ["HostOffload", "module_tensors"]


def module_tensors(modules: Iterable[torch.nn.Module]) -> Iterator[torch.Tensor]:
    """Every parameter and buffer of `modules`, each tensor object once (shared ones are deduplicated by identity)."""
    seen: set[int] = set()
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                yield tensor


@dataclasses.dataclass
class _HostCopy:
    """One tensor's host copy and what is known about it.

    `version`: the tensor's version counter when both copies last held the same values (None: unknown, copy on the
    next offload); `stale`: the host copy holds no valid values (the tensor was discarded).
    """

    ref: weakref.ref[torch.Tensor]
    host: torch.Tensor
    version: int | None = None
    stale: bool = False


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor has no version counter: treat it as always written
        return None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class HostOffload:
    """Host copies of module tensors, allocated on the first `offload` and reused while the tensor lives.

    Args:
        pin (`bool`, defaults to `True`): allocate the host copies in pinned (page-locked) memory; pinning needs
            CUDA. With False the copies are plain host tensors (the CPU code path of tests).

    A host copy is keyed by the tensor object (held weakly) and reused when its shape, dtype and strides still
    match; copies of tensors that are gone (a removed adapter) are dropped on the next `offload`.
    """

    def __init__(self, *, pin: bool = True) -> None:
        self.pin = pin
        self._host: dict[int, _HostCopy] = {}
        self.uninitialized: list[torch.Tensor] = []  # what the last `onload` left without values (discarded tensors)
        self.copied_bytes = 0  # bytes the last `offload` copied to the host

    def _entry(self, tensor: torch.Tensor) -> _HostCopy | None:
        entry = self._host.get(id(tensor))
        return entry if entry is not None and entry.ref() is tensor else None

    def host_copy(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The host copy kept for `tensor` (None when it has none)."""
        entry = self._entry(tensor)
        return entry.host if entry is not None else None

    def host_bytes(self) -> int:
        """Bytes of host memory held by the kept copies."""
        return sum(e.host.untyped_storage().nbytes() for e in self._host.values())

    def mark_written(self, tensors: Iterable[torch.Tensor]) -> None:
        """Record that `tensors` were written in a way their version counter misses (through `.data`)."""
        for tensor in tensors:
            entry = self._entry(tensor)
            if entry is not None:
                entry.version = None

    def _entry_for(self, tensor: torch.Tensor) -> _HostCopy:
        entry = self._entry(tensor)
        layout = (tensor.shape, tensor.dtype, tensor.stride())
        if entry is not None and (entry.host.shape, entry.host.dtype, entry.host.stride()) == layout:
            return entry
        host = torch.empty_strided(
            tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu", pin_memory=self.pin
        )  # fmt: skip
        entry = self._host[id(tensor)] = _HostCopy(weakref.ref(tensor), host)
        return entry

    @torch.no_grad()
    def offload(self, modules: Iterable[torch.nn.Module], *, discard: Iterable[torch.Tensor] = ()) -> int:
        """Repoint every parameter and buffer of `modules` not already on its host copy at it, copying what changed.

        A tensor is copied unless its host copy still holds its values (not written since the last `onload`) or it
        is in `discard` (its values are dropped: the caller recomputes them after `onload`).

        Returns:
            The number of tensors repointed (copied or not).

        Raises:
            RuntimeError: a host copy could not be allocated (e.g. pinning without CUDA); no tensor was repointed.
        """
        tensors = list(module_tensors(modules))
        live = {id(t) for t in tensors}
        self._host = {k: v for k, v in self._host.items() if k in live and v.ref() is not None}
        dropped = {id(t) for t in discard}
        self.copied_bytes = 0
        moves: list[tuple[torch.Tensor, _HostCopy]] = []
        devices: set[torch.device] = set()
        for tensor in tensors:
            entry = self._entry(tensor)
            if entry is not None and tensor.data_ptr() == entry.host.data_ptr():
                continue  # already on its host copy
            entry = self._entry_for(tensor)
            if id(tensor) in dropped:
                entry.stale = True
            elif entry.stale or entry.version is None or entry.version != _version(tensor):
                entry.host.copy_(tensor, non_blocking=True)
                entry.stale = False
                self.copied_bytes += tensor.numel() * tensor.element_size()
                devices.add(tensor.device)
            moves.append((tensor, entry))
        for device in devices:
            _synchronize(device)
        for tensor, entry in moves:
            tensor.data = entry.host  # the device storage is freed here (no other reference)
            entry.version = None
        return len(moves)

    @torch.no_grad()
    def onload(self, modules: Iterable[torch.nn.Module], device: str | torch.device) -> int:
        """Copy every parameter and buffer of `modules` on a host copy or not on `device` to fresh `device` memory.

        The host copies are kept for the next `offload`. Tensors created while offloaded (an adapter added, a
        pristine copy registered) have no host copy and move too (a plain, pageable copy). Tensors discarded by the
        last `offload` get device memory without values; they are listed in `uninitialized` until the next `onload`.

        Returns:
            The number of tensors moved.
        """
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # tensors report `cuda:N`
            device = torch.device("cuda", torch.cuda.current_device())
        moves: list[tuple[torch.Tensor, torch.Tensor, _HostCopy | None]] = []
        self.uninitialized = []
        for tensor in module_tensors(modules):
            entry = self._entry(tensor)
            if entry is None or tensor.data_ptr() != entry.host.data_ptr():
                if tensor.device == device:
                    continue  # already there (on a "cpu" target: not on its host copy)
                entry = None  # moved from elsewhere: its host copy (if any) is not known to match
            target = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=device)
            if entry is not None and entry.stale:
                self.uninitialized.append(tensor)
            else:
                target.copy_(tensor, non_blocking=True)
            moves.append((tensor, target, entry))
        _synchronize(device)
        for tensor, target, entry in moves:
            tensor.data = target
            if entry is not None and not entry.stale:
                entry.version = _version(tensor)  # the device copy now holds the host copy's values
        return len(moves)
