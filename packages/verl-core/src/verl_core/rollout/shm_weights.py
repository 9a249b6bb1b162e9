"""Same-host weight sync through one reused shared-memory file instead of the HTTP byte stream.

The sender (`WeightSegment`) owns one file `verl-weights-<pid>-<pidns>-<uuid>` (mode 0600) under `handoff_dir()`, maps
it read/write and copies each update's tensors into it at `ALIGN`ed offsets; it reuses the file while updates fit and
replaces it (new file, old one unlinked) when one does not. `write` returns a JSON descriptor
`{"path", "size", "inode", "generation", "manifest": [{name, dtype, shape, offset}]}` that the sender POSTs to
`/update_weights_shm` of every server on this host. A server (`MappedSegments`) checks the file and every manifest
entry before it applies a byte, keeps the read-only mapping across updates, and hands views of it to the same
engine hooks as the HTTP stream, in buckets. The sender must not write the segment again before every server
has answered. The file name carries the sender's PID: a sender that was killed (no `close`, no finalizer) leaves its
file, and the next process of its PID namespace that creates its first segment or hand-off file in that directory
removes it (`verl_core.rollout.owned_files`).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
import warnings
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import torch

from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.framing import ALIGN, DTYPES, ITEMSIZE, TensorSpec, align
from verl_core.rollout.handoff import handoff_dir
from verl_core.rollout.owned_files import WEIGHTS_PREFIX, owned_name, sweep_stale_once
from verl_core.rollout.weights import WeightPiece, WeightUpdate, named_tensors, plan_buckets

__all__ = ["PREFIX", "MappedSegment", "MappedSegments", "SegmentAllocationError", "WeightSegment"]

PREFIX = WEIGHTS_PREFIX  # "verl-weights-"; names are `owned_name(PREFIX)`: `verl-weights-<pid>-<pidns>-<uuid hex>`
_GROW_STEP = 1 << 20  # file sizes are multiples of 1 MiB


class SegmentAllocationError(OSError):
    """The segment file could not be created or reserved (e.g. the tmpfs is too small); nothing is left behind."""


class _Mapping:
    """A file and its read/write mapping; `release` unmaps and unlinks it (idempotent, also from a finalizer)."""

    def __init__(self, path: str, size: int, inode: int, mm: mmap.mmap) -> None:
        self.path, self.size, self.inode, self.mm = path, size, inode, mm

    def release(self) -> None:
        mm, self.mm = self.mm, None
        if mm is not None:
            with contextlib.suppress(BufferError):  # a view still alive: the GC unmaps it later
                mm.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class WeightSegment:
    """The sender side: one shared-memory file reused across weight updates.

    Args:
        directory (`str`, *optional*): where the file lives; default `handoff_dir()` (`/dev/shm`). A server
            accepts only segments in its own `handoff_dir()`.
    """

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or handoff_dir()
        self.generation = 0
        self._file: _Mapping | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def path(self) -> str | None:
        """The current file, or `None` before the first `write` and after `close`."""
        return self._file.path if self._file else None

    @property
    def size(self) -> int:
        """Size of the current file in bytes (0 without one)."""
        return self._file.size if self._file else 0

    def write(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> dict[str, Any]:
        """Copy `weights` (CPU or CUDA tensors) into the segment and return the descriptor a server reads.

        Raises:
            SegmentAllocationError: a larger file was needed and could not be reserved (names the directory, the
                size needed and the free space).
            WeightSyncError: a tensor has an unsupported dtype (names it).
        """
        items = named_tensors(weights)
        manifest, pos = [], 0
        for name, tensor in items:
            spec = TensorSpec.of(name, tensor)
            offset = align(pos)
            manifest.append({**spec.to_json(), "offset": offset})
            pos = offset + spec.nbytes
        if self._file is None or pos > self._file.size:
            self._allocate(pos)
        assert self._file is not None and self._file.mm is not None
        buffer = torch.frombuffer(self._file.mm, dtype=torch.uint8)
        try:
            for (_, tensor), entry in zip(items, manifest):
                nbytes = tensor.numel() * tensor.element_size()
                if nbytes:
                    dst = buffer[entry["offset"] : entry["offset"] + nbytes].view(tensor.dtype).view(tensor.shape)
                    dst.copy_(tensor.detach())
        finally:
            del buffer
        self.generation += 1
        return {
            "path": self._file.path,
            "size": self._file.size,
            "inode": self._file.inode,
            "generation": self.generation,
            "manifest": manifest,
        }

    def close(self) -> None:
        """Unmap and unlink the file (idempotent; also runs at garbage collection and interpreter exit)."""
        if self._finalizer is not None:
            self._finalizer()
        self._file = self._finalizer = None

    def _allocate(self, needed: int) -> None:
        size = max(_GROW_STEP, -(-needed // _GROW_STEP) * _GROW_STEP)
        sweep_stale_once(self.directory)  # files of dead processes (a killed sender's), the first time only
        path = os.path.join(self.directory, owned_name(PREFIX))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            raise SegmentAllocationError(e.errno, f"cannot create the weight segment {path}: {e.strerror}") from e
        try:
            try:
                os.posix_fallocate(fd, 0, size)  # reserve now: a full tmpfs is ENOSPC here, never SIGBUS on write
            except OSError as e:
                free = _free_bytes(self.directory)
                hint = " (Docker's default /dev/shm is 64 MB: --shm-size raises it)" if e.errno == errno.ENOSPC else ""
                raise SegmentAllocationError(
                    e.errno,
                    f"cannot reserve {size} bytes for the weight segment in {self.directory}: {e.strerror}; "
                    f"{free} bytes free there{hint}",
                ) from e
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
            inode = os.fstat(fd).st_ino
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.close()  # the old file goes only once the new one exists
        self._file = _Mapping(path, size, inode, mm)
        self._finalizer = weakref.finalize(self, self._file.release)


class MappedSegment:
    """A checked segment descriptor on the server side: the read-only mapping and the manifest with offsets."""

    def __init__(self, mm: mmap.mmap, specs: list[TensorSpec], offsets: list[int]) -> None:
        self.mm, self.specs, self.offsets = mm, specs, offsets

    async def buckets(self, update: WeightUpdate, bucket_bytes: int) -> AsyncIterator[list[WeightPiece]]:
        """Yield the tensors as views of the mapping in buckets of `bucket_bytes` (larger ones as flat slices)."""
        for pieces in plan_buckets(self.specs, bucket_bytes):
            with warnings.catch_warnings():  # the mapping is read-only on purpose: the hooks copy what they keep
                warnings.filterwarnings("ignore", message=".*not writable.*")
                bucket = [self._piece(p.index, p.start, p.numel) for p in pieces]
            yield bucket

    def _piece(self, index: int, start: int, numel: int) -> WeightPiece:
        spec = self.specs[index]
        dtype = DTYPES[spec.dtype]
        if spec.numel == 0:
            return spec.name, torch.empty(spec.shape, dtype=dtype), None
        offset = self.offsets[index] + start * ITEMSIZE[spec.dtype]
        flat = torch.frombuffer(self.mm, dtype=dtype, count=numel, offset=offset)  # warning filtered by `buckets`
        if numel == spec.numel:
            return spec.name, flat.view(spec.shape), None
        return spec.name, flat, start


class MappedSegments:
    """The server side: open and check segment descriptors, caching one read-only mapping across updates.

    Args:
        directory (`str`, *optional*): the only directory segments may live in; default `handoff_dir()`.
    """

    def __init__(self, directory: str | None = None) -> None:
        self.directory = os.path.realpath(directory or handoff_dir())
        self._key: tuple[str, int, int] | None = None
        self._mm: mmap.mmap | None = None

    def open(self, descriptor: Any) -> MappedSegment:
        """Check `descriptor` and the file it names, map it (or reuse the cached mapping) and check the manifest.

        Raises:
            WeightSyncError: a bad descriptor, file or manifest entry, before any byte is applied (`field` names it).
        """
        if not isinstance(descriptor, Mapping):
            raise WeightSyncError(f"segment must be an object, got {type(descriptor).__name__}", field="segment")
        path, size, inode = (descriptor.get(k) for k in ("path", "size", "inode"))
        self._check_path(path)
        for key, value in (("size", size), ("inode", inode)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WeightSyncError(f"segment {key} must be an int >= 1, got {value!r}", field=key)
        specs, offsets = _check_manifest(descriptor.get("manifest"), size)
        if self._key != (path, inode, size) or self._mm is None:
            mm = _map_read_only(path, size, inode)  # a bad file leaves the cached mapping as it was
            self.close()
            self._mm, self._key = mm, (path, inode, size)
        else:  # the cached mapping: the file must still be the one we mapped
            _check_file(path, size, inode)
        return MappedSegment(self._mm, specs, offsets)

    def close(self) -> None:
        """Drop the cached mapping (when a different segment arrives, and at server shutdown)."""
        mm, self._mm, self._key = self._mm, None, None
        if mm is not None:
            with contextlib.suppress(BufferError):  # a view still alive: the GC unmaps it later
                mm.close()

    def _check_path(self, path: Any) -> None:
        if not isinstance(path, str) or not path:
            raise WeightSyncError(f"segment path must be a non-empty string, got {path!r}", field="path")
        if ".." in path.split(os.sep) or not os.path.basename(path).startswith(PREFIX):
            raise WeightSyncError(f"segment path {path!r} is not a {PREFIX}* file name", field="path")
        if os.path.realpath(os.path.dirname(path)) != self.directory:
            raise WeightSyncError(
                f"segment path {path!r} is outside the hand-off directory {self.directory}", field="path"
            )


def _check_manifest(manifest: Any, size: int) -> tuple[list[TensorSpec], list[int]]:
    if not isinstance(manifest, list) or not manifest:
        raise WeightSyncError("segment manifest must be a non-empty list", field="manifest")
    specs, offsets, seen = [], [], set()
    for entry in manifest:
        spec = TensorSpec.from_json(entry, extra=frozenset({"offset"}))
        offset = entry.get("offset")
        if spec.name in seen:
            raise WeightSyncError(f"tensor {spec.name!r} appears twice in the segment manifest", field=spec.name)
        seen.add(spec.name)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or offset % ALIGN:
            raise WeightSyncError(
                f"tensor {spec.name!r}: offset {offset!r} is not an int >= 0 aligned to {ALIGN}", field=spec.name
            )
        if offset + spec.nbytes > size:
            raise WeightSyncError(
                f"tensor {spec.name!r}: bytes [{offset}, {offset + spec.nbytes}) lie outside the {size}-byte segment",
                field=spec.name,
            )
        specs.append(spec)
        offsets.append(offset)
    return specs, offsets


def _check_file(path: str, size: int, inode: int, st: os.stat_result | None = None) -> None:
    if st is None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            raise WeightSyncError(
                f"segment file {path} does not exist (is the sender on this host?)", field="path"
            ) from None
    if not stat.S_ISREG(st.st_mode):
        raise WeightSyncError(f"segment {path} is not a regular file", field="path")
    if st.st_uid != os.getuid():
        raise WeightSyncError(f"segment {path} belongs to uid {st.st_uid}, not to this server's", field="path")
    if st.st_ino != inode:
        raise WeightSyncError(f"segment {path} has inode {st.st_ino}, the descriptor says {inode}", field="inode")
    if st.st_size != size:
        raise WeightSyncError(f"segment {path} has {st.st_size} bytes, the descriptor says {size}", field="size")


def _map_read_only(path: str, size: int, inode: int) -> mmap.mmap:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise WeightSyncError(
            f"segment file {path} does not exist (is the sender on this host?)", field="path"
        ) from None
    except OSError as e:
        raise WeightSyncError(f"cannot open segment {path}: {e.strerror}", field="path") from e
    try:
        _check_file(path, size, inode, os.fstat(fd))
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _free_bytes(directory: str) -> int:
    try:
        st = os.statvfs(directory)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize
