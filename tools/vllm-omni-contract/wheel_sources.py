"""Where the contract checker reads sources from: a wheel on disk, or a remote wheel read by HTTP range requests.

CI tooling beside `contract_check.py`, not shipped in any dist. Standard library only (loaded by path from
`contract_check.py`): `nox -s vllm_omni-<minor>` runs it with nox's own interpreter, where httpx and tenacity
are not installed, hence `urllib` and the three-try loop of `_http_get` (docs/architecture.md, "Libraries we
use and why"). A remote wheel is never downloaded whole: the zip's central directory and the members asked for
are fetched in 1 MiB blocks and the members are cached on disk, so a later run needs no network.
"""

from __future__ import annotations

import io
import json
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["RemoteWheelSource", "ZipSource", "find_wheel"]

_HTTP_TIMEOUT_S = 60
_BLOCK = 1 << 20


class ZipSource:
    """Python files of a wheel on disk."""

    def __init__(self, path: str | Path) -> None:
        self._zip = zipfile.ZipFile(path)
        self.names = set(self._zip.namelist())
        self.label = Path(path).name

    def read(self, member: str) -> str | None:
        """Text of `member`, or None when the wheel has no such file."""
        if member not in self.names:
            return None
        return self._zip.read(member).decode("utf-8")

    def metadata(self) -> str:
        """The wheel's METADATA file."""
        name = next(n for n in self.names if n.endswith(".dist-info/METADATA"))
        return self.read(name) or ""


class _HTTPRangeFile(io.RawIOBase):
    """A seekable read-only view of a remote file, fetched in 1 MiB blocks by HTTP range requests."""

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.pos = url, size, 0
        self._blocks: dict[int, bytes] = {}
        self.fetched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _block(self, index: int) -> bytes:
        if index not in self._blocks:
            start = index * _BLOCK
            end = min(self.size, start + _BLOCK) - 1
            self._blocks[index] = _http_get(self.url, {"Range": f"bytes={start}-{end}"})
            self.fetched += end - start + 1
        return self._blocks[index]

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        out = bytearray()
        while self.pos < end:
            block = self._block(self.pos // _BLOCK)
            offset = self.pos % _BLOCK
            chunk = block[offset : offset + (end - self.pos)]
            out += chunk
            self.pos += len(chunk)
        return bytes(out)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _http_get(url: str, headers: dict[str, str] | None = None) -> bytes:
    """GET with a timeout and three tries; raises `OSError` naming the URL."""
    error: Exception | None = None
    for attempt in range(3):
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers or {}), timeout=_HTTP_TIMEOUT_S
            ) as r:
                return r.read()
        except OSError as e:  # URLError, timeouts and connection resets are OSErrors
            error = e
            time.sleep(1 + attempt)
    raise OSError(f"GET {url} failed after 3 tries: {error}")


def find_wheel(project: str, version: str) -> tuple[str, int]:
    """URL and size of the `manylinux x86_64` (else any) wheel of `project==version` (PyPI simple JSON API)."""
    body = _http_get(f"https://pypi.org/simple/{project}/", {"Accept": "application/vnd.pypi.simple.v1+json"})
    files = [f for f in json.loads(body)["files"] if f["filename"].endswith(".whl") and f"-{version}-" in f["filename"]]
    if not files:
        raise KeyError(f"{project}=={version}: no wheel on PyPI")
    best = next((f for f in files if "x86_64" in f["filename"]), files[0])
    return best["url"], int(best["size"])


class RemoteWheelSource:
    """Python files of a remote wheel: only the members asked for are fetched, then cached in `cache_dir`."""

    def __init__(self, project: str, version: str, cache_dir: str | Path) -> None:
        self.project, self.version = project, version
        self.cache = Path(cache_dir) / f"{project}-{version}"
        self.label = f"{project}-{version} (cached at {self.cache})"
        self._zip: zipfile.ZipFile | None = None
        self._file: _HTTPRangeFile | None = None
        listing = self.cache / "_members.txt"
        if listing.exists():
            self.names = set(listing.read_text().split("\n")) - {""}
        else:
            self.names = set(self._remote().namelist())
            self.cache.mkdir(parents=True, exist_ok=True)
            listing.write_text("\n".join(sorted(self.names)))

    def _remote(self) -> zipfile.ZipFile:
        if self._zip is None:
            url, size = find_wheel(self.project, self.version)
            self._file = _HTTPRangeFile(url, size)
            self._zip = zipfile.ZipFile(self._file)  # reads the central directory only
        return self._zip

    @property
    def fetched_bytes(self) -> int:
        """Bytes fetched over the network by this instance."""
        return self._file.fetched if self._file is not None else 0

    def read(self, member: str) -> str | None:
        """Text of `member` (from the cache, else fetched and cached), or None when the wheel has no such file."""
        if member not in self.names:
            return None
        path = self.cache / member
        if not path.exists():
            data = self._remote().read(member)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return path.read_text(encoding="utf-8")
