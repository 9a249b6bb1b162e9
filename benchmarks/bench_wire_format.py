"""Tensor wire format of `/generate` answers: `verl_core.rollout.tensor_payload` vs safetensors' bytes API.

The payload is shaped like one trajectory answer of 16 images: latents [16, 11, 4096, 64] fp32, log-probs and
timesteps [16, 10], a nested TensorDict (`trajectory`, with `extra`) holding prompt embeddings of 205 x 4096
broadcast from one row (`expand`, stride 0, as CFG's negative prompt is), prompts as non-tensor strings, and
plain JSON fields. Three ways, each encoded and decoded back to the same Python objects:

- `verl`: `plan_tensor_body(...).encode()` then `decode_tensor_body(bytearray)` (tensors are views of the body);
  `verl-stream` encodes with `TensorBody.chunks()` (what the HTTP route sends, no body-sized buffer) and decodes
  what a client reads into one buffer.
- `safetensors`: `safetensors.torch.save(flat, metadata={"verl": JSON of the structure})` then
  `safetensors.torch.load(bytes)`; the structure (TensorDict batch sizes, non-tensor values, plain fields,
  expanded shapes) travels as one JSON string in safetensors' `__metadata__` (its only place for non-tensors:
  a str -> str map), broadcast tensors are sent compact and re-expanded, and the TensorDicts are rebuilt.

Reports the median encode / decode / total time over `--repeats` runs and the body size in bytes.

    python benchmarks/bench_wire_format.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

import safetensors
import safetensors.torch
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from verl_core.rollout.tensor_payload import decode_tensor_body, plan_tensor_body


def make_payload(images: int = 16, steps: int = 10, tokens: int = 4096, channels: int = 64) -> dict[str, Any]:
    """One trajectory answer: ~185 MB of latents plus small tensors, a nested TensorDict and non-tensors."""
    neg = torch.randn(1, 205, 4096)
    trajectory = TensorDict(
        {
            "latents": torch.randn(images, steps + 1, tokens, channels),
            "log_probs": torch.randn(images, steps),
            "timesteps": torch.linspace(1, 0, steps).expand(images, steps),
            "extra": TensorDict({"negative_prompt_embeds": neg.expand(images, 205, 4096)}, batch_size=[images]),
        },
        batch_size=[images],
    )
    trajectory["prompt"] = NonTensorStack.from_list([f"a photo of prompt {i}" for i in range(images)])
    return {"trajectory": trajectory, "seed": 7, "model": "sd3-random", "timings": {"gen_s": 0.75}}


# ---- safetensors: a flat {dotted name: tensor} map plus the structure as JSON metadata ---------------------


def st_encode(fields: dict[str, Any]) -> bytes:
    flat: dict[str, torch.Tensor] = {}
    entries: list[dict[str, Any]] = []
    plain = {k: v for k, v in fields.items() if not isinstance(v, (torch.Tensor, TensorDictBase))}
    for key, value in fields.items():
        if isinstance(value, (torch.Tensor, TensorDictBase)):
            _st_walk(value, [key], flat, entries)
    meta = json.dumps({"fields": plain, "entries": entries})
    return safetensors.torch.save(flat, metadata={"verl": meta})


def _st_walk(value: Any, path: list[str], flat: dict[str, torch.Tensor], entries: list[dict[str, Any]]) -> None:
    name = ".".join(path)
    if isinstance(value, NonTensorStack):
        entries.append({"kind": "non_tensor", "path": path, "value": value.tolist()})
    elif isinstance(value, TensorDictBase):
        entries.append({"kind": "tensordict", "path": path, "batch_size": list(value.batch_size)})
        for key, child in value.items():
            _st_walk(child, [*path, key], flat, entries)
    else:
        compact = value
        for dim, (size, stride) in enumerate(zip(value.shape, value.stride())):
            if stride == 0 and size > 1:
                compact = compact.narrow(dim, 0, 1)
        entry: dict[str, Any] = {"kind": "tensor", "path": path}
        if compact is not value:
            entry["expand"] = list(value.shape)
        entries.append(entry)
        flat[name] = compact.contiguous()  # safetensors refuses non-contiguous tensors


def st_decode(body: bytes) -> dict[str, Any]:
    flat = safetensors.torch.load(body)
    meta = json.loads(_st_metadata(body)["verl"])
    out: dict[str, Any] = dict(meta["fields"])
    nodes: dict[tuple[str, ...], TensorDict] = {}
    for entry in meta["entries"]:
        path = entry["path"]
        if entry["kind"] == "tensordict":
            value: Any = TensorDict({}, batch_size=entry["batch_size"])
            nodes[tuple(path)] = value
        elif entry["kind"] == "non_tensor":
            value = NonTensorStack.from_list(entry["value"])
        else:
            value = flat[".".join(path)]
            if "expand" in entry:
                value = value.expand(entry["expand"])
        if len(path) == 1:
            out[path[0]] = value
        else:
            nodes[tuple(path[:-1])].set(path[-1], value)
    return out


def _st_metadata(body: bytes) -> dict[str, str]:
    """safetensors' `__metadata__` of a body (`safetensors.torch.load` returns the tensors only)."""
    (length,) = struct.unpack("<Q", body[:8])
    return json.loads(body[8 : 8 + length])["__metadata__"]


# ---- the project's format ----------------------------------------------------------------------------------


def verl_encode(fields: dict[str, Any]) -> bytearray:
    return plan_tensor_body(fields).encode()


def verl_stream_encode(fields: dict[str, Any]) -> list[bytes | memoryview]:
    return list(plan_tensor_body(fields).chunks())


def verl_stream_decode(chunks: list[bytes | memoryview]) -> dict[str, Any]:
    body = bytearray(sum(len(c) for c in chunks))  # what the client reads the stream into
    pos = 0
    for chunk in chunks:
        body[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    return decode_tensor_body(body)


def _size(encoded: Any) -> int:
    return sum(len(c) for c in encoded) if isinstance(encoded, list) else len(encoded)


def _check(fields: dict[str, Any], decoded: dict[str, Any]) -> None:
    src, dst = fields["trajectory"], decoded["trajectory"]
    assert decoded["seed"] == fields["seed"] and dst.batch_size == src.batch_size
    assert torch.equal(dst["latents"], src["latents"]) and dst["prompt"] == src["prompt"].tolist()
    neg = dst["extra", "negative_prompt_embeds"]
    assert neg.shape == src["extra", "negative_prompt_embeds"].shape and neg.stride()[0] == 0


def bench(name: str, enc: Callable[[Any], Any], dec: Callable[[Any], Any], fields: dict[str, Any], repeats: int):
    encs, decs = [], []
    size = 0
    for _ in range(repeats + 1):  # the first run warms up and is dropped
        t0 = time.perf_counter()
        encoded = enc(fields)
        t1 = time.perf_counter()
        decoded = dec(encoded)
        t2 = time.perf_counter()
        _check(fields, decoded)
        size = _size(encoded)
        encs.append(t1 - t0)
        decs.append(t2 - t1)
        del encoded, decoded
    e, d = statistics.median(encs[1:]), statistics.median(decs[1:])
    print(f"{name:12s} encode {e * 1e3:8.1f} ms  decode {d * 1e3:8.1f} ms  total {(e + d) * 1e3:8.1f} ms  "
          f"body {size:,} bytes")  # fmt: skip
    return e + d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.manual_seed(0)
    fields = make_payload()
    cpu = platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, safetensors {safetensors.__version__}, {cpu}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")  # fmt: skip
    verl = bench("verl", verl_encode, decode_tensor_body, fields, args.repeats)
    bench("verl-stream", verl_stream_encode, verl_stream_decode, fields, args.repeats)
    st = bench("safetensors", st_encode, st_decode, fields, args.repeats)
    print(f"safetensors / verl total time: {st / verl:.2f}x")


if __name__ == "__main__":
    main()
