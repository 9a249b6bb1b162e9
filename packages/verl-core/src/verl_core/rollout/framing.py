"""Binary framing shared by weight sync and tensor responses: the dtype table, `TensorSpec`, frames, alignment.

A frame is `u64 header_len (little-endian) | JSON header`; raw tensor bytes follow a frame where its header
says so. Tensor data sits at offsets aligned to `ALIGN` bytes, so a receiver can view it in place with
`torch.frombuffer`. `verl_core.rollout.weights` (the weight stream) and `verl_core.rollout.tensor_payload`
(binary generate responses) both build on these pieces.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import torch

from verl_core.rollout.errors import PayloadTooLargeError, RolloutError, WeightSyncError

__all__ = [
    "ALIGN",
    "DTYPES",
    "DTYPE_NAMES",
    "FRAME_LEN",
    "ITEMSIZE",
    "MAX_HEADER_BYTES",
    "FrameReader",
    "TensorSpec",
    "align",
    "encode_frame",
    "parse_header",
    "tensor_bytes",
]

MAX_HEADER_BYTES = 64 << 20
ALIGN = 64
FRAME_LEN = struct.Struct("<Q")
DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
ITEMSIZE = {k: v.itemsize for k, v in DTYPES.items()}
_SPEC_KEYS = frozenset({"name", "dtype", "shape"})

ErrorFactory = Callable[..., RolloutError]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Name, dtype name and shape of one tensor of a weight update or a tensor response."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Size of the tensor's data in bytes."""
        return self.numel * ITEMSIZE[self.dtype]

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor, *, error: ErrorFactory = WeightSyncError) -> TensorSpec:
        """The spec of `tensor` under `name` (`error` is raised, naming it, for an unsupported dtype)."""
        if tensor.dtype not in DTYPE_NAMES:
            raise error(
                f"tensor {name!r} has unsupported dtype {tensor.dtype}; supported: {', '.join(DTYPES)}", field=name
            )
        return cls(name, DTYPE_NAMES[tensor.dtype], tuple(tensor.shape))

    @classmethod
    def from_json(
        cls,
        obj: Any,
        *,
        extra: frozenset[str] = frozenset({"offset", "start", "numel"}),
        error: ErrorFactory = WeightSyncError,
    ) -> TensorSpec:
        """Parse a manifest entry `{"name", "dtype", "shape"}` (plus the `extra` keys), rejecting bad ones by name."""
        if not isinstance(obj, Mapping) or set(obj) - _SPEC_KEYS - extra:
            raise error(f"manifest entry must be {{name, dtype, shape}}, got {obj!r:.200}")
        name, dtype, shape = obj.get("name"), obj.get("dtype"), obj.get("shape")
        if not isinstance(name, str) or not name:
            raise error(f"manifest entry has no tensor name: {obj!r:.200}")
        if dtype not in DTYPES:
            raise error(f"tensor {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}", field=name)
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise error(f"tensor {name!r}: shape must be a list of ints >= 0, got {shape!r}", field=name)
        return cls(name, dtype, tuple(shape))

    def to_json(self) -> dict[str, Any]:
        """The manifest entry of this spec."""
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def align(n: int) -> int:
    """`n` rounded up to a multiple of `ALIGN`."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def encode_frame(header: dict[str, Any]) -> bytes:
    """`u64 length | JSON` of `header` (sets become sorted lists; anything else not JSON raises `TypeError`)."""
    raw = json.dumps(header, separators=(",", ":"), default=_json_default).encode()
    return FRAME_LEN.pack(len(raw)) + raw


def parse_header(raw: bytes | memoryview, allowed: tuple[str, ...], *, error: ErrorFactory) -> dict[str, Any]:
    """Parse a frame's JSON header and check its `type` is one of `allowed`."""
    try:
        header = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"frame header is not valid JSON: {e}", field="header") from e
    if not isinstance(header, dict) or header.get("type") not in allowed:
        got = header.get("type") if isinstance(header, dict) else type(header).__name__
        raise error(f"expected a {' or '.join(allowed)} frame, got {got!r}", field="header")
    return header


def tensor_bytes(tensor: torch.Tensor, start: int, numel: int) -> memoryview:
    """The raw bytes of the flat element range `[start, start + numel)` of `tensor` (host copy if needed)."""
    t = tensor.detach().reshape(-1)[start : start + numel]
    if t.device.type != "cpu":
        t = t.to("cpu")
    t = t.contiguous()
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.view(torch.uint8).numpy()).cast("B")


class FrameReader:
    """Read frames and exact byte counts from an async iterator of byte chunks (an HTTP body).

    Args:
        chunks (`AsyncIterator[bytes]`): the body.
        error (`Callable`, *optional*, defaults to `WeightSyncError`): the error class raised for a malformed or
            truncated stream (called with a message and `field=`).
    """

    def __init__(self, chunks: AsyncIterator[bytes], *, error: ErrorFactory = WeightSyncError) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")
        self._error = error
        self.bytes_read = 0

    @property
    def consumed(self) -> int:
        """Bytes of the stream handed out so far (read minus buffered)."""
        return self.bytes_read - len(self._pending)

    async def read_header(self, *allowed: str) -> dict[str, Any]:
        """Read one frame and return its header (its `type` must be one of `allowed`)."""
        raw = await self.read_exact(FRAME_LEN.size, what=f"{'/'.join(allowed)} frame")
        (length,) = FRAME_LEN.unpack(raw)
        if length > MAX_HEADER_BYTES:
            raise PayloadTooLargeError(f"frame header of {length} bytes exceeds {MAX_HEADER_BYTES}", field="header")
        return parse_header(await self.read_exact(length, what="frame header"), allowed, error=self._error)

    async def read_exact(self, n: int, *, what: str) -> memoryview:
        """Read exactly `n` bytes into a new buffer."""
        out = bytearray(n)
        await self.read_into(memoryview(out), what=what)
        return memoryview(out)

    async def read_into(self, view: memoryview, *, what: str = "bucket payload") -> None:
        """Fill `view` from the stream (one copy per byte), raising on a truncated or broken stream."""
        filled = 0
        while filled < len(view):
            if not self._pending:
                try:
                    chunk = await anext(self._chunks)
                except StopAsyncIteration:
                    raise self._error(
                        f"stream truncated: needed {len(view) - filled} more bytes of the {what}", field="stream"
                    ) from None
                except Exception as e:  # the peer went away (starlette's ClientDisconnect) or the stream broke
                    raise self._error(f"stream broke while reading the {what}: {e!r}", field="stream") from e
                self._pending = memoryview(chunk)
                self.bytes_read += len(chunk)
            take = min(len(self._pending), len(view) - filled)
            view[filled : filled + take] = self._pending[:take]
            self._pending = self._pending[take:]
            filled += take

    async def at_end(self) -> bool:
        """Whether the stream has no bytes left."""
        while not self._pending:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                return True
            self._pending = memoryview(chunk)
            self.bytes_read += len(chunk)
        return False


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot send {type(value).__name__} {value!r:.80} in a frame header")
