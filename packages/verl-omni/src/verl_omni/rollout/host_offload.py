"""`HostOffload`: move modules' parameters and buffers to host copies allocated once and reused across sleeps.

`module.to("cpu")` allocates fresh pageable host memory on every call, and copies from pageable memory are slow
and synchronous. `HostOffload` keeps one host tensor per parameter / buffer (pinned on CUDA, same shape, dtype
and strides), copies into it with `non_blocking=True` and a single synchronize, then points the tensor at it
(`t.data = host`): the Parameter / buffer objects stay the same, so anything holding them (tied weights, weight
tables, LoRA bookkeeping) keeps working, and their device storage is freed by reference counting. `onload`
allocates device tensors, copies back non-blocking, synchronizes once, and keeps the host copies for the next
`offload`. Tensors are deduplicated by identity: a Parameter shared by two modules is moved once and stays shared.
"""

from __future__ import annotations

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
        self._host: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}

    def host_copy(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The host copy kept for `tensor` (None when it has none)."""
        entry = self._host.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def host_bytes(self) -> int:
        """Bytes of host memory held by the kept copies."""
        return sum(h.untyped_storage().nbytes() for _, h in self._host.values())

    def _host_for(self, tensor: torch.Tensor) -> torch.Tensor:
        host = self.host_copy(tensor)
        layout = (tensor.shape, tensor.dtype, tensor.stride())
        if host is not None and (host.shape, host.dtype, host.stride()) == layout:
            return host
        host = torch.empty_strided(
            tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu", pin_memory=self.pin
        )  # fmt: skip
        self._host[id(tensor)] = (weakref.ref(tensor), host)
        return host

    @torch.no_grad()
    def offload(self, modules: Iterable[torch.nn.Module]) -> int:
        """Copy every parameter and buffer of `modules` that is not already on the host copy into it, repoint it.

        Returns:
            The number of tensors moved.

        Raises:
            RuntimeError: a host copy could not be allocated (e.g. pinning without CUDA); no tensor was repointed.
        """
        tensors = list(module_tensors(modules))
        live = {id(t) for t in tensors}
        self._host = {k: v for k, v in self._host.items() if k in live and v[0]() is not None}
        moves: list[tuple[torch.Tensor, torch.Tensor]] = []
        devices: set[torch.device] = set()
        for tensor in tensors:
            host = self.host_copy(tensor)
            if host is not None and tensor.data_ptr() == host.data_ptr():
                continue  # already on its host copy
            host = self._host_for(tensor)
            host.copy_(tensor, non_blocking=True)
            moves.append((tensor, host))
            devices.add(tensor.device)
        for device in devices:
            _synchronize(device)
        for tensor, host in moves:
            tensor.data = host  # the device storage is freed here (no other reference)
        return len(moves)

    @torch.no_grad()
    def onload(self, modules: Iterable[torch.nn.Module], device: str | torch.device) -> int:
        """Copy every parameter and buffer of `modules` on a host copy or not on `device` to fresh `device` memory.

        The host copies are kept for the next `offload`. Tensors created while offloaded (an adapter added, a
        pristine copy registered) have no host copy and move too (a plain, pageable copy).

        Returns:
            The number of tensors moved.
        """
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # tensors report `cuda:N`
            device = torch.device("cuda", torch.cuda.current_device())
        moves: list[tuple[torch.Tensor, torch.Tensor]] = []
        for tensor in module_tensors(modules):
            host = self.host_copy(tensor)
            if tensor.device == device and (host is None or tensor.data_ptr() != host.data_ptr()):
                continue  # already there (on a "cpu" target: not on its host copy)
            target = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=device)
            target.copy_(tensor, non_blocking=True)
            moves.append((tensor, target))
        _synchronize(device)
        for tensor, target in moves:
            tensor.data = target
        return len(moves)
