"""Binary generate responses: fields holding tensors or `TensorDict`s travel as raw bytes, never as JSON numbers.

A backend's `_engine_generate` may return fields whose values are `torch.Tensor`s or `tensordict.TensorDict`s
(nested TensorDicts and non-tensor entries allowed). The `/generate` route then answers with
`content-type: application/vnd.verl.tensors` and this body:

```
u64 header_len | JSON header | zero padding to a 64-byte boundary | nbytes of tensor data
```

using the framing of `verl_core.rollout.framing` (the weight stream's). The header:

```
{"type": "tensors", "format": 1,
 "fields": {...},                  # every field without tensors, as JSON
 "entries": [                      # in the order the encoder walked them
   {"kind": "tensordict", "path": ["trajectory"], "batch_size": [4], "device": "cpu"},
   {"kind": "tensor", "path": ["trajectory", "latents"], "name": "trajectory.latents",
    "dtype": "float32", "shape": [4, 3, 16, 64], "offset": 0},
   {"kind": "non_tensor", "path": ["trajectory", "prompt"], "value": [...], "stack": true},
 ],
 "nbytes": 786432}
```

`offset` counts from the start of the tensor data and is a multiple of 64. A tensor with broadcast dimensions
(stride 0, e.g. from `expand`) is sent once along them, its entry carrying `"expand": [full shape]`, and comes
back as the same expanded view. Decoding restores the same
Python objects (TensorDicts with their batch size, tensors with their dtype and shape) on the CPU; the
tensors are views of one buffer holding the data (no per-tensor copy).

Kept by hand rather than safetensors' layout (`benchmarks/bench_wire_format.py`, 16 images' 188 MB trajectory,
2 CPU threads: this format 0.52 s encode+decode, 0.39 s streamed; `safetensors.torch.save`/`load` 1.00 s):
safetensors holds a flat name -> tensor map with str -> str metadata only (TensorDicts, non-tensors and expanded
shapes would ride in a JSON string anyway), refuses stride-0 and other non-contiguous tensors, `save` builds the
whole body in one `bytes` (no streaming from the tensors' memory) and `load` copies every tensor out of it.
docs/core/rollout.md, "Why not safetensors".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from verl_core.rollout.errors import BadResponseError, EngineError, PayloadTooLargeError
from verl_core.rollout.framing import (
    DTYPES,
    FRAME_LEN,
    ITEMSIZE,
    MAX_HEADER_BYTES,
    FrameReader,
    TensorSpec,
    align,
    encode_frame,
    parse_header,
    tensor_bytes,
)

__all__ = [
    "TENSOR_CONTENT_TYPE",
    "TensorBody",
    "decode_tensor_body",
    "decode_tensor_stream",
    "encode_tensor_body",
    "has_tensors",
    "plan_tensor_body",
    "response_fields",
]

TENSOR_CONTENT_TYPE = "application/vnd.verl.tensors"
FORMAT = 1
_CHUNK = 4 << 20
_TENSOR_KEYS = frozenset({"kind", "path", "offset", "expand"})


def has_tensors(fields: Mapping[str, Any]) -> bool:
    """Whether any top-level value of `fields` is a `torch.Tensor` or a `TensorDict` (so the body is binary)."""
    return any(isinstance(v, (torch.Tensor, TensorDictBase)) for v in fields.values())


@dataclasses.dataclass
class TensorBody:
    """A planned binary body: the header frame, the tensors and their offsets; write it whole or stream it.

    Built by `plan_tensor_body`, which has already checked everything (dtypes, JSON, the size limit), so nothing
    fails once the first byte is sent.
    """

    frame: bytes
    tensors: list[tuple[int, torch.Tensor]]  # (offset from the start of the tensor data, tensor)
    nbytes: int

    @property
    def base(self) -> int:
        """Where the tensor data starts in the body (the frame rounded up to 64 bytes)."""
        return align(len(self.frame))

    @property
    def size(self) -> int:
        """Total body size in bytes."""
        return self.base + self.nbytes

    def encode(self) -> bytearray:
        """The whole body in one buffer (every tensor copied once into it)."""
        body = bytearray(self.size)
        body[: len(self.frame)] = self.frame
        for offset, tensor in self.tensors:
            if tensor.numel():
                dst = torch.frombuffer(body, dtype=tensor.dtype, count=tensor.numel(), offset=self.base + offset)
                dst.view(tensor.shape).copy_(tensor.detach())
        return body

    def chunks(self, chunk_bytes: int = _CHUNK) -> Iterator[bytes | memoryview]:
        """The body as chunks of at most `chunk_bytes`: contiguous CPU tensors are sent from their own memory."""
        yield self.frame
        pos = len(self.frame)
        for offset, tensor in self.tensors:
            if self.base + offset > pos:
                yield bytes(self.base + offset - pos)
            data = tensor_bytes(tensor, 0, tensor.numel())
            for at in range(0, len(data), chunk_bytes):
                yield data[at : at + chunk_bytes]
            pos = self.base + offset + len(data)
        if self.size > pos:
            yield bytes(self.size - pos)


def plan_tensor_body(fields: Mapping[str, Any], *, max_bytes: int | None = None) -> TensorBody:
    """Check response fields and plan their binary body (layout in the module docstring).

    Args:
        fields (`Mapping[str, Any]`): the response fields; values are JSON-able, `torch.Tensor` or `TensorDict`.
        max_bytes (`int`, *optional*): refuse a body larger than this (`rollout.max_response_bytes`).

    Raises:
        EngineError: a tensor of an unsupported dtype, a tensor inside a JSON value, a non-tensor entry that is
            not JSON-able, or a body over `max_bytes` (each names the field).
    """
    plain: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    tensors: list[torch.Tensor] = []
    pos = 0
    for key, value in fields.items():
        if isinstance(value, (torch.Tensor, TensorDictBase)):
            pos = _walk(value, [key], entries, tensors, pos)
        else:
            plain[key] = value
    nbytes = pos
    try:
        frame = encode_frame({"type": "tensors", "format": FORMAT, "fields": plain, "entries": entries,
                              "nbytes": nbytes})  # fmt: skip
    except TypeError as e:
        raise EngineError(f"response fields are not JSON-able outside tensors: {e}", field="response") from e
    if len(frame) - FRAME_LEN.size > MAX_HEADER_BYTES:
        raise EngineError(f"response header of {len(frame)} bytes exceeds {MAX_HEADER_BYTES}", field="response")
    offsets = [e["offset"] for e in entries if e["kind"] == "tensor"]
    body = TensorBody(frame, list(zip(offsets, tensors)), nbytes)
    if max_bytes is not None and body.size > max_bytes:
        raise EngineError(
            f"response of {body.size} bytes exceeds rollout.max_response_bytes={max_bytes}; "
            "ask for fewer images per request or raise the limit",
            field="response",
        )
    return body


def encode_tensor_body(fields: Mapping[str, Any], *, max_bytes: int | None = None) -> bytearray:
    """Encode response fields into one binary body: `plan_tensor_body(fields, max_bytes=...).encode()`.

    Every tensor is copied once, straight into the body (device tensors included; non-contiguous ones are
    gathered by the copy). The HTTP route streams `TensorBody.chunks()` instead (no body-sized buffer).

    Raises:
        EngineError: as `plan_tensor_body`.
    """
    return plan_tensor_body(fields, max_bytes=max_bytes).encode()


def _walk(value: Any, path: list[str], entries: list[dict], tensors: list[torch.Tensor], pos: int) -> int:
    """Append the manifest entries of `value` at `path`; return the data size so far."""
    name = ".".join(path)
    if isinstance(value, torch.Tensor):
        compact = value
        for dim, (size, stride) in enumerate(zip(value.shape, value.stride())):
            if stride == 0 and size > 1:  # a broadcast (expanded) dimension: send one slice
                compact = compact.narrow(dim, 0, 1)
        spec = TensorSpec.of(name, compact, error=EngineError)
        offset = align(pos)
        entry = {"kind": "tensor", "path": path, **spec.to_json(), "offset": offset}
        if compact is not value:
            entry["expand"] = list(value.shape)
        entries.append(entry)
        tensors.append(compact)
        return offset + spec.nbytes
    if isinstance(value, (NonTensorData, NonTensorStack)):
        data = value.tolist() if isinstance(value, NonTensorStack) else value.data
        try:
            json.dumps(data)
        except TypeError as e:
            raise EngineError(f"non-tensor entry {name!r} is not JSON-able: {e}", field=name) from e
        entries.append({"kind": "non_tensor", "path": path, "value": data, "stack": isinstance(value, NonTensorStack)})
        return pos
    if isinstance(value, TensorDictBase):
        device = None if value.device is None else "cpu"
        entries.append({"kind": "tensordict", "path": path, "batch_size": list(value.batch_size), "device": device})
        for key, child in value.items():
            if not isinstance(key, str):
                raise EngineError(f"TensorDict {name!r} has a non-string key {key!r}", field=name)
            pos = _walk(child, [*path, key], entries, tensors, pos)
        return pos
    raise EngineError(f"response entry {name!r} is a {type(value).__name__}; expected a tensor", field=name)


# ---- decoding ----------------------------------------------------------------------------------------------


def decode_tensor_body(body: bytes | bytearray | memoryview, *, max_bytes: int | None = None) -> dict[str, Any]:
    """Decode a whole binary body into the response fields.

    A writable body (`bytearray`, a writable memoryview) is viewed in place (no copy); a read-only `bytes` body has
    its tensor data copied once into a writable buffer.

    Raises:
        BadResponseError: a malformed or truncated body (names the part).
        PayloadTooLargeError: the announced data exceeds `max_bytes`.
    """
    view = memoryview(body).cast("B")
    if len(view) < FRAME_LEN.size:
        raise BadResponseError(f"tensor body of {len(view)} bytes is shorter than a frame", field="header")
    (length,) = FRAME_LEN.unpack(view[: FRAME_LEN.size])
    if length > MAX_HEADER_BYTES:
        raise PayloadTooLargeError(f"frame header of {length} bytes exceeds {MAX_HEADER_BYTES}", field="header")
    end = FRAME_LEN.size + length
    if len(view) < end:
        raise BadResponseError(f"stream truncated: the header needs {end} bytes, got {len(view)}", field="stream")
    header = _check_header(parse_header(view[FRAME_LEN.size : end], ("tensors",), error=BadResponseError), max_bytes)
    base, nbytes = align(end), header["nbytes"]
    if len(view) != base + nbytes:
        raise BadResponseError(
            f"tensor body has {len(view)} bytes; its header announces {base + nbytes}"
            f" ({'truncated' if len(view) < base + nbytes else 'trailing bytes'})",
            field="stream",
        )
    if not view.readonly:
        return _restore(header, body, base)
    data = bytearray(view[base:])
    return _restore(header, data, 0)


async def decode_tensor_stream(chunks: AsyncIterator[bytes], *, max_bytes: int | None = None) -> dict[str, Any]:
    """Decode a binary body arriving as byte chunks (an HTTP response stream) into the response fields.

    The tensor data is read once into one buffer; the restored tensors are views of it.

    Raises:
        BadResponseError: a malformed or truncated stream (names the part).
        PayloadTooLargeError: the announced data exceeds `max_bytes`.
    """
    reader = FrameReader(chunks, error=BadResponseError)
    header = _check_header(await reader.read_header("tensors"), max_bytes)
    await reader.read_exact(align(reader.consumed) - reader.consumed, what="padding")
    data = bytearray(header["nbytes"])
    await reader.read_into(memoryview(data), what="tensor data")
    if not await reader.at_end():
        raise BadResponseError("tensor body has trailing bytes after the announced data", field="stream")
    return _restore(header, data, 0)


def response_fields(body: bytes | bytearray, content_type: str | None, *, max_bytes: int | None = None) -> Any:
    """The fields of a `/generate` answer: decoded tensors for a binary body, parsed JSON otherwise."""
    if (content_type or "").split(";")[0].strip() == TENSOR_CONTENT_TYPE:
        return decode_tensor_body(body, max_bytes=max_bytes)
    return json.loads(body)


def _check_header(header: dict[str, Any], max_bytes: int | None) -> dict[str, Any]:
    if header.get("format") != FORMAT:
        raise BadResponseError(f"tensor body format {header.get('format')!r} is not {FORMAT}", field="format")
    nbytes, fields, entries = header.get("nbytes"), header.get("fields"), header.get("entries")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise BadResponseError(f"tensor body has a bad nbytes {nbytes!r}", field="nbytes")
    if max_bytes is not None and nbytes > max_bytes:
        raise PayloadTooLargeError(
            f"response with {nbytes} bytes of tensors exceeds the client's max_response_bytes={max_bytes}",
            field="max_response_bytes",
        )
    if not isinstance(fields, dict) or not isinstance(entries, list):
        raise BadResponseError("tensor body header needs a 'fields' object and an 'entries' list", field="header")
    return header


def _restore(header: dict[str, Any], data: bytearray, base: int) -> dict[str, Any]:
    """Rebuild the fields from a checked header and the buffer holding the tensor data at `base`."""
    out: dict[str, Any] = dict(header["fields"])
    nodes: dict[tuple[str, ...], TensorDictBase] = {}
    nbytes = header["nbytes"]
    for entry in header["entries"]:
        path = entry.get("path") if isinstance(entry, dict) else None
        if not (isinstance(path, list) and path and all(isinstance(p, str) and p for p in path)):
            raise BadResponseError(f"entry has no valid path: {entry!r:.200}", field="entries")
        name, kind = ".".join(path), entry.get("kind")
        if kind == "tensordict":
            value: Any = _new_tensordict(entry, name)
        elif kind == "tensor":
            value = _tensor(entry, name, data, base, nbytes)
        elif kind == "non_tensor":
            value = _non_tensor(entry, name)
        else:
            raise BadResponseError(f"entry {name!r} has an unknown kind {kind!r}", field=name)
        parent_path, key = tuple(path[:-1]), path[-1]
        if not parent_path:
            if key in out:
                raise BadResponseError(f"field {key!r} appears twice in the tensor body", field=key)
            out[key] = value
        else:
            parent = nodes.get(parent_path)
            if parent is None:
                raise BadResponseError(f"entry {name!r} comes before its TensorDict", field=name)
            if key in parent.keys():  # noqa: SIM118 - TensorDict refuses `key in td`
                raise BadResponseError(f"entry {name!r} appears twice in the tensor body", field=name)
            try:
                parent.set(key, value)
            except (RuntimeError, ValueError, TypeError) as e:
                raise BadResponseError(f"entry {name!r} does not fit its TensorDict: {e}", field=name) from e
        if kind == "tensordict":
            nodes[tuple(path)] = value
    return out


def _non_tensor(entry: dict[str, Any], name: str) -> NonTensorData | NonTensorStack:
    if "value" not in entry:
        raise BadResponseError(f"non-tensor entry {name!r} has no value", field=name)
    if not entry.get("stack"):
        return NonTensorData(entry["value"])
    if not isinstance(entry["value"], list):
        raise BadResponseError(f"non-tensor stack {name!r} must hold a list, got {entry['value']!r:.80}", field=name)
    return NonTensorStack.from_list(entry["value"])


def _new_tensordict(entry: dict[str, Any], name: str) -> TensorDict:
    batch_size, device = entry.get("batch_size"), entry.get("device")
    if not (isinstance(batch_size, list) and all(isinstance(d, int) and d >= 0 for d in batch_size)):
        raise BadResponseError(f"TensorDict {name!r} has a bad batch_size {batch_size!r}", field=name)
    if device not in (None, "cpu"):
        raise BadResponseError(f"TensorDict {name!r} has a bad device {device!r}", field=name)
    return TensorDict({}, batch_size=batch_size, device=device)


def _tensor(entry: dict[str, Any], name: str, data: bytearray, base: int, nbytes: int) -> torch.Tensor:
    spec = TensorSpec.from_json(
        {k: v for k, v in entry.items() if k not in _TENSOR_KEYS} | {"name": name},
        extra=frozenset(),
        error=BadResponseError,
    )
    offset = entry.get("offset")
    itemsize = ITEMSIZE[spec.dtype]
    if not isinstance(offset, int) or offset < 0 or offset % itemsize or offset + spec.nbytes > nbytes:
        raise BadResponseError(
            f"tensor {name!r}: offset {offset!r} with {spec.nbytes} bytes is outside the {nbytes} bytes of data "
            f"or not a multiple of {itemsize}",
            field=name,
        )
    dtype = DTYPES[spec.dtype]
    if spec.numel == 0:
        tensor = torch.empty(spec.shape, dtype=dtype)
    else:
        tensor = torch.frombuffer(data, dtype=dtype, count=spec.numel, offset=base + offset).view(spec.shape)
    expand = entry.get("expand")
    if expand is None:
        return tensor
    ok = isinstance(expand, list) and len(expand) == len(spec.shape)
    if not ok or not all(isinstance(e, int) and (e == d or d == 1) and e >= 0 for e, d in zip(expand, spec.shape)):
        raise BadResponseError(f"tensor {name!r}: cannot expand shape {list(spec.shape)} to {expand!r}", field=name)
    return tensor.expand(expand)
