"""Weight sync: tensor manifests, size-bounded bucket planning, and the framed byte stream that carries them.

Stream layout (little-endian): a sequence of frames `u64 header_len | JSON header | payload`. Frames:
`begin` (version, kind, peft_config and the manifest of every tensor: name, dtype, shape), then one
`bucket` frame per bucket (its tensors with byte offsets, followed by `nbytes` payload bytes), then
`end` (tensor count, to detect truncation). The receiver checks the whole manifest before it applies a
byte, and holds one bucket in memory at a time.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, Literal

import torch

from verl_core.rollout.errors import PayloadTooLargeError, WeightSyncError
from verl_core.rollout.framing import (
    ALIGN,
    DTYPES,
    ITEMSIZE,
    FrameReader,
    TensorSpec,
    align,
    encode_frame,
    tensor_bytes,
)

__all__ = [
    "Piece",
    "TensorSpec",
    "WeightPiece",
    "WeightStreamReader",
    "WeightUpdate",
    "check_manifest",
    "encode_weight_stream",
    "iter_buckets",
    "named_tensors",
    "plan_buckets",
]

WeightKind = Literal["full", "lora"]
WeightPiece = tuple[str, torch.Tensor, "int | None"]
_CHUNK = 4 << 20


@dataclasses.dataclass
class WeightUpdate:
    """One weight update as the engine hooks see it: version, kind, PEFT config and the full manifest."""

    version: int
    kind: WeightKind
    manifest: list[TensorSpec]
    peft_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 0:
            raise WeightSyncError(f"version must be an int >= 0, got {self.version!r}", field="version")
        if self.kind not in ("full", "lora"):
            raise WeightSyncError(f"kind must be 'full' or 'lora', got {self.kind!r}", field="kind")
        if self.kind == "lora" and not isinstance(self.peft_config, Mapping):
            raise WeightSyncError("kind 'lora' needs the adapter's peft_config (a dict)", field="peft_config")
        if not self.manifest:
            raise WeightSyncError("the update carries no tensors", field="manifest")

    @property
    def nbytes(self) -> int:
        """Total payload size."""
        return sum(s.nbytes for s in self.manifest)

    def spec(self, name: str) -> TensorSpec:
        """The manifest entry of `name`."""
        if not hasattr(self, "_by_name"):
            self._by_name = {s.name: s for s in self.manifest}
        return self._by_name[name]


def named_tensors(weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, Any]]:
    """Normalise a state dict or an iterable of `(name, tensor)` pairs to a list of pairs."""
    items = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
    for i, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor)):
            raise WeightSyncError(f"weights[{i}] must be a (name, torch.Tensor) pair, got {type(item).__name__}")
    return items


@dataclasses.dataclass(frozen=True)
class Piece:
    """A flat element range `[start, start + numel)` of tensor `index`; whole tensors have one piece."""

    index: int
    start: int
    numel: int


def plan_buckets(specs: list[TensorSpec], bucket_bytes: int) -> list[list[Piece]]:
    """Group tensors, in order, into buckets of at most `bucket_bytes` (aligned) bytes.

    Tensors stay whole when they fit in a bucket; a tensor larger than `bucket_bytes` is split into
    flat element ranges of at most `bucket_bytes`, each travelling in a bucket of its own.

    Raises:
        ValueError: `bucket_bytes` is smaller than 64 bytes.
    """
    if bucket_bytes < ALIGN:
        raise ValueError(f"bucket_bytes must be >= {ALIGN}, got {bucket_bytes}")
    buckets: list[list[Piece]] = []
    current: list[Piece] = []
    used = 0
    for i, spec in enumerate(specs):
        if spec.nbytes > bucket_bytes:
            if current:
                buckets.append(current)
                current, used = [], 0
            step = max(1, bucket_bytes // ITEMSIZE[spec.dtype])
            buckets.extend([Piece(i, s, min(step, spec.numel - s))] for s in range(0, spec.numel, step))
            continue
        start = align(used)
        if current and start + spec.nbytes > bucket_bytes:
            buckets.append(current)
            current, start = [], 0
        current.append(Piece(i, 0, spec.numel))
        used = start + spec.nbytes
    if current:
        buckets.append(current)
    return buckets


def iter_buckets(
    weights: list[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Yield the `(name, tensor)` pairs of `weights` bucket by bucket (in-process path, no copy)."""
    current: list[tuple[str, torch.Tensor]] = []
    used = 0
    for name, tensor in weights:  # in-process tensors are already in memory: never split them
        size = tensor.numel() * tensor.element_size()
        if current and used + size > bucket_bytes:
            yield current
            current, used = [], 0
        current.append((name, tensor))
        used += size
    if current:
        yield current


def check_manifest(manifest: list[TensorSpec], expected: Mapping[str, tuple[int, ...]]) -> None:
    """Check every tensor of `manifest` exists in `expected` (name -> shape) with the same shape.

    Raises:
        WeightSyncError: a duplicate or unknown name (with the closest known name) or a wrong shape.
    """
    seen: set[str] = set()
    for spec in manifest:
        if spec.name in seen:
            raise WeightSyncError(f"tensor {spec.name!r} appears twice in the update", field=spec.name)
        seen.add(spec.name)
        shape = expected.get(spec.name)
        if shape is None:
            close = difflib.get_close_matches(spec.name, list(expected), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the model has {len(expected)} tensors"
            raise WeightSyncError(f"unknown tensor name {spec.name!r}{hint}", field=spec.name)
        if tuple(shape) != spec.shape:
            raise WeightSyncError(
                f"tensor {spec.name!r}: expected shape {list(shape)}, got {list(spec.shape)}", field=spec.name
            )


def encode_weight_stream(
    weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
    *,
    version: int,
    kind: WeightKind = "full",
    peft_config: dict[str, Any] | None = None,
    bucket_bytes: int = 256 << 20,
) -> Iterator[bytes | memoryview]:
    """Yield the framed byte stream of a weight update, one tensor's bytes at a time (no full copy).

    Args:
        weights (`Mapping[str, torch.Tensor]` or iterable of `(name, tensor)`):
            The tensors to send; device tensors are copied to host one at a time.
        version (`int`): the weight version the server reports after the update.
        kind (`str`, *optional*, defaults to `"full"`): `"full"` (model tensors) or `"lora"` (adapter tensors).
        peft_config (`dict`, *optional*): the adapter's PEFT config; required for `"lora"`.
        bucket_bytes (`int`, *optional*, defaults to 256 MiB): bucket size; the receiver holds one bucket.
    """
    items = named_tensors(weights)
    specs = [TensorSpec.of(n, t) for n, t in items]
    WeightUpdate(version, kind, specs, peft_config)  # validate before sending anything
    buckets = plan_buckets(specs, bucket_bytes)
    yield encode_frame(
        {
            "type": "begin",
            "version": version,
            "kind": kind,
            "peft_config": peft_config,
            "num_buckets": len(buckets),
            "manifest": [s.to_json() for s in specs],
        }
    )
    for pieces in buckets:
        entries, pos = [], 0
        for piece in pieces:
            pos = align(pos)
            entries.append({**specs[piece.index].to_json(), "offset": pos, "start": piece.start, "numel": piece.numel})
            pos += piece.numel * ITEMSIZE[specs[piece.index].dtype]
        yield encode_frame({"type": "bucket", "nbytes": pos, "tensors": entries})
        sent = 0
        for piece, entry in zip(pieces, entries):
            if entry["offset"] > sent:
                yield bytes(entry["offset"] - sent)
            data = tensor_bytes(items[piece.index][1], piece.start, piece.numel)
            for at in range(0, len(data), _CHUNK):  # bounded chunks: the HTTP stack copies each one
                yield data[at : at + _CHUNK]
            sent = entry["offset"] + piece.numel * ITEMSIZE[specs[piece.index].dtype]
    yield encode_frame({"type": "end", "num_tensors": len(items)})


class WeightStreamReader(FrameReader):
    """Parse a weight stream from an async byte-chunk iterator, one bucket buffer reused throughout.

    Args:
        chunks (`AsyncIterator[bytes]`): the request body.
        max_bucket_bytes (`int`): largest bucket accepted (larger ones raise `PayloadTooLargeError`).
    """

    def __init__(self, chunks: AsyncIterator[bytes], *, max_bucket_bytes: int):
        super().__init__(chunks, error=WeightSyncError)
        self._max_bucket = max_bucket_bytes
        self._buffer = bytearray()

    async def begin(self) -> WeightUpdate:
        """Read the `begin` frame and return the update it announces."""
        header = await self.read_header("begin")
        manifest_json = header.get("manifest")
        if not isinstance(manifest_json, list):
            raise WeightSyncError("begin frame has no manifest list", field="manifest")
        manifest = [TensorSpec.from_json(e) for e in manifest_json]
        return WeightUpdate(header.get("version"), header.get("kind"), manifest, header.get("peft_config"))

    async def buckets(self, update: WeightUpdate) -> AsyncIterator[list[WeightPiece]]:
        """Yield each bucket's pieces (views into the reused buffer: clone what you keep).

        A piece is `(name, tensor, None)` for a whole tensor and `(name, flat_chunk, start)` for a range
        of a tensor too large for one bucket.
        """
        known = {s.name: s for s in update.manifest}
        filled: dict[str, int] = {}
        while True:
            header = await self.read_header("bucket", "end")
            if header["type"] == "end":
                break
            nbytes = header.get("nbytes")
            if not isinstance(nbytes, int) or nbytes < 0:
                raise WeightSyncError(f"bucket frame has a bad nbytes {nbytes!r}", field="nbytes")
            if nbytes > self._max_bucket:
                raise PayloadTooLargeError(
                    f"bucket of {nbytes} bytes exceeds the limit of {self._max_bucket} bytes "
                    "(rollout.max_bucket_bytes); send smaller buckets",
                    field="bucket_bytes",
                )
            if len(self._buffer) < nbytes:
                self._buffer = bytearray(nbytes)
            await self.read_into(memoryview(self._buffer)[:nbytes])
            yield [self._piece(entry, known, filled, nbytes) for entry in header.get("tensors") or []]
        incomplete = [n for n, s in known.items() if filled.get(n, 0) != s.numel]
        if incomplete:
            raise WeightSyncError(
                f"stream ended before {len(incomplete)} of {len(known)} tensors of the manifest arrived, "
                f"e.g. {incomplete[0]!r}",
                field=incomplete[0],
            )

    def _piece(self, entry: Any, known: dict[str, TensorSpec], filled: dict[str, int], nbytes: int) -> WeightPiece:
        spec = TensorSpec.from_json(entry)
        if known.get(spec.name) != spec:
            raise WeightSyncError(f"tensor {spec.name!r} in a bucket does not match the manifest", field=spec.name)
        start, numel, offset = entry.get("start", 0), entry.get("numel", spec.numel), entry.get("offset")
        ints = all(isinstance(v, int) and v >= 0 for v in (start, numel, offset))
        if not ints or start + numel > spec.numel or offset + numel * ITEMSIZE[spec.dtype] > nbytes:
            message = f"tensor {spec.name!r}: range start={start!r} numel={numel!r} offset={offset!r} is out of bounds"
            raise WeightSyncError(message, field=spec.name)
        filled[spec.name] = filled.get(spec.name, 0) + numel
        if filled[spec.name] > spec.numel:
            raise WeightSyncError(f"tensor {spec.name!r} was sent more than once", field=spec.name)
        dtype = DTYPES[spec.dtype]
        if numel == spec.numel:
            if numel == 0:
                return spec.name, torch.empty(spec.shape, dtype=dtype), None
            return (
                spec.name,
                torch.frombuffer(self._buffer, dtype=dtype, count=numel, offset=offset).view(spec.shape),
                None,
            )
        return spec.name, torch.frombuffer(self._buffer, dtype=dtype, count=numel, offset=offset), start
