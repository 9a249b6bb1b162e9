"""Same-host hand-off of a binary generate answer through a tmpfs file instead of the HTTP body (opt-in).

A client that sends `x-verl-handoff: file` asks for it. For a binary answer (`verl_core.rollout.tensor_payload`)
the server writes exactly the bytes it would stream into a fresh file (`verl-rollout-<pid>-<pidns>-<uuid>`, mode
0600) under `/dev/shm` (or `tempfile.gettempdir()` without it) and only then answers with the JSON
`{"path": ..., "size": ...}` under `HANDOFF_CONTENT_TYPE`; JSON answers stay JSON. The client maps the file
(private, copy-on-write), unlinks it and decodes the tensors in place from the mapping. The server unlinks the
files not claimed within `grace_s` and all at shutdown; the files of a server that was killed are removed by the
next process of its PID namespace that creates its first hand-off file or weight segment in that directory
(`verl_core.rollout.owned_files`).
Works only when client and server see the same file system: use it for loopback addresses (`is_loopback`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from verl_core.rollout.errors import BadResponseError, EngineError
from verl_core.rollout.owned_files import ROLLOUT_PREFIX, owned_name, sweep_stale_once
from verl_core.rollout.tensor_payload import TensorBody, decode_tensor_body

__all__ = [
    "HANDOFF_CONTENT_TYPE",
    "HANDOFF_HEADER",
    "PREFIX",
    "HandoffFiles",
    "claim_handoff",
    "handoff_dir",
    "is_loopback",
]

HANDOFF_HEADER = "x-verl-handoff"
HANDOFF_CONTENT_TYPE = "application/vnd.verl.handoff+json"
PREFIX = ROLLOUT_PREFIX  # "verl-rollout-"; names are `owned_name(PREFIX)`: `verl-rollout-<pid>-<pidns>-<uuid hex>`
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def handoff_dir() -> str:
    """`/dev/shm` when it exists (tmpfs: the file never touches a disk), else `tempfile.gettempdir()`."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def is_loopback(address: str) -> bool:
    """Whether a server URL (`http://127.0.0.1:8000`) or host names this host's loopback interface."""
    host = urlsplit(address).hostname if "//" in address else address
    return (host or "").lower() in _LOOPBACK


class HandoffFiles:
    """The server side: write bodies into hand-off files and remove the ones nobody claimed.

    Args:
        grace_s (`float`): a file not claimed (unlinked by its client) this long after it was written is removed
            by the next `write` or `sweep`.
        directory (`str`, *optional*): where the files go; default `handoff_dir()`.
    """

    def __init__(self, grace_s: float, directory: str | None = None) -> None:
        self.grace_s = grace_s
        self.directory = directory or handoff_dir()
        self._pending: dict[str, float] = {}  # path -> monotonic deadline
        self._lock = threading.Lock()
        self._closed = False

    def write(self, body: TensorBody) -> dict[str, Any]:
        """Write `body` (blocking: call it off the event loop) and return `{"path", "size"}` once it is complete.

        Raises:
            EngineError: the file could not be written (e.g. the tmpfs is full); nothing is left behind.
        """
        self.sweep()
        sweep_stale_once(self.directory)  # files of dead processes (a killed server's), the first time only
        path = os.path.join(self.directory, owned_name(PREFIX))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as f:
                for chunk in body.chunks():
                    f.write(chunk)
        except OSError as e:
            _unlink(path)
            raise EngineError(f"could not write the hand-off file {path} ({body.size} bytes): {e}") from e
        with self._lock:
            if not self._closed:
                self._pending[path] = time.monotonic() + self.grace_s
                return {"path": path, "size": body.size}
        _unlink(path)  # finished after `close`: nobody would remove it
        raise EngineError("rollout server shut down while writing a hand-off file")

    def sweep(self, now: float | None = None) -> list[str]:
        """Forget claimed files and unlink those past their grace period; return the paths unlinked."""
        now = time.monotonic() if now is None else now
        removed = []
        with self._lock:
            for path, deadline in list(self._pending.items()):
                if not os.path.exists(path):
                    del self._pending[path]
                elif now >= deadline:
                    del self._pending[path]
                    _unlink(path)
                    removed.append(path)
        return removed

    def pending(self) -> list[str]:
        """Paths handed out and not yet forgotten by a `sweep`."""
        with self._lock:
            return list(self._pending)

    def close(self) -> None:
        """Unlink every file not claimed yet (at server shutdown)."""
        with self._lock:
            self._closed = True
            paths, self._pending = list(self._pending), {}
        for path in paths:
            _unlink(path)


def claim_handoff(meta: Any, *, max_bytes: int | None = None) -> dict[str, Any]:
    """The client side: map the file `meta` names, unlink it, decode the tensors in place from the mapping.

    The mapping is private (copy-on-write): the decoded tensors are writable and never write back. The file is
    unlinked whatever happens (a wrong size, a body that does not decode); its tmpfs pages stay allocated until
    the last decoded tensor is freed. Without `mmap.MAP_PRIVATE` (not Linux) the file is read into one buffer.

    Raises:
        BadResponseError: `meta` is not `{"path": str, "size": int}`, the file is missing (the server runs on
            another host: use the hand-off only for loopback addresses) or its size is not `size`.
        PayloadTooLargeError: the body announces more tensor data than `max_bytes`.
    """
    if not isinstance(meta, dict) or not isinstance(meta.get("path"), str) or not isinstance(meta.get("size"), int):
        raise BadResponseError(f'hand-off answer must be {{"path": str, "size": int}}, got {meta!r}', field="path")
    path, size = meta["path"], meta["size"]
    if not os.path.basename(path).startswith(PREFIX):
        raise BadResponseError(f"hand-off path {path!r} is not a {PREFIX}* file", field="path")
    try:
        try:
            with open(path, "rb", buffering=0) as f:
                found = os.fstat(f.fileno()).st_size
                if found != size:
                    raise BadResponseError(f"hand-off file {path} has {found} bytes, the server announced {size}")
                data = _map_private(f.fileno(), size) if _CAN_MAP and size else _read_all(f, path, size)
        except FileNotFoundError:
            raise BadResponseError(
                f"hand-off file {path} does not exist: is the rollout server on another host? "
                "(file_handoff works only when client and server share /dev/shm)",
                field="path",
            ) from None
        return decode_tensor_body(data, max_bytes=max_bytes)
    finally:
        _unlink(path)


_CAN_MAP = hasattr(mmap, "MAP_PRIVATE")


def _map_private(fd: int, size: int) -> memoryview:
    """A writable copy-on-write view of the file; the decoded tensors keep the mapping alive (no copy, no read)."""
    return memoryview(mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE))


def _read_all(f: Any, path: str, size: int) -> bytearray:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:  # one read per 2 GiB at most (Linux caps a read there)
        n = f.readinto(view[got:])
        if not n:
            raise BadResponseError(f"hand-off file {path}: read {got} of {size} bytes")
        got += n
    return data


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
