"""Tests for `verl_core.rollout.weights`: bucket planning, the framed stream, manifest checks."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
import torch

from verl_core.rollout.errors import PayloadTooLargeError, WeightSyncError
from verl_core.rollout.weights import (
    TensorSpec,
    WeightStreamReader,
    WeightUpdate,
    check_manifest,
    encode_weight_stream,
    plan_buckets,
)

_SPLIT = [[(0, 0, 10)], [(1, 0, 100)], [(1, 100, 100)], [(1, 200, 50)], [(2, 0, 10)]]


def _specs(*sizes: int) -> list[TensorSpec]:
    return [TensorSpec(f"t{i}", "uint8", (n,)) for i, n in enumerate(sizes)]


@pytest.mark.parametrize(
    ("sizes", "bucket", "expected"),
    [
        pytest.param((10, 10, 10), 1000, [[(0, 0, 10), (1, 0, 10), (2, 0, 10)]], id="all-fit"),
        pytest.param((64, 64, 64), 128, [[(0, 0, 64), (1, 0, 64)], [(2, 0, 64)]], id="aligned-pairs"),
        pytest.param(
            (10, 250, 10),
            100,
            [[(0, 0, 10)], [(1, 0, 100)], [(1, 100, 100)], [(1, 200, 50)], [(2, 0, 10)]],
            id="oversize-split",
        ),
        pytest.param((65, 10), 128, [[(0, 0, 65)], [(1, 0, 10)]], id="alignment-counts"),
    ],
)
def test_plan_buckets_groups_in_order_and_splits_oversize(sizes, bucket, expected):
    got = [[(p.index, p.start, p.numel) for p in b] for b in plan_buckets(_specs(*sizes), bucket)]
    assert got == expected


def test_plan_buckets_never_exceeds_bucket_and_covers_every_element():
    specs = _specs(*[(37 * i) % 600 + 1 for i in range(200)])
    covered = [0] * len(specs)
    for pieces in plan_buckets(specs, 256):
        end = 0
        for p in pieces:
            end = (end + 63) // 64 * 64 + p.numel * 1
            covered[p.index] += p.numel
        assert end <= 256
    assert covered == [s.numel for s in specs]


async def _chunks(data: bytes, size: int):
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def _read_all(data: bytes, *, chunk: int = 7, max_bucket: int = 1 << 20):
    reader = WeightStreamReader(_chunks(data, chunk), max_bucket_bytes=max_bucket)
    update = await reader.begin()
    got = {}
    sizes = []
    async for bucket in reader.buckets(update):
        sizes.append(len(bucket))
        for name, tensor, start in bucket:
            spec = update.spec(name)
            if start is None:
                got[name] = tensor.clone()
            else:
                flat = got.setdefault(name, torch.full((spec.numel,), -1).to(tensor.dtype))
                flat[start : start + tensor.numel()] = tensor
    return update, {n: t.view(update.spec(n).shape) for n, t in got.items()}, sizes


def test_weight_stream_round_trip_all_dtypes():
    weights = {
        "a": torch.randn(3, 5),
        "b": torch.randn(4).to(torch.bfloat16),
        "c": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "d": torch.tensor([True, False]),
        "e": torch.randn(2, 3).t(),  # non-contiguous
        "f": torch.zeros(0, 4),
        "g": torch.randn(50, 7),  # 1400 bytes: split over several 96-byte buckets
    }
    data = b"".join(bytes(c) for c in encode_weight_stream(weights, version=3, bucket_bytes=96))
    update, got, sizes = asyncio.run(_read_all(data))
    assert update.version == 3 and update.kind == "full" and len(sizes) > 1
    for name, tensor in weights.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


def test_weight_stream_lora_carries_peft_config():
    data = b"".join(
        bytes(c)
        for c in encode_weight_stream({"x": torch.ones(2)}, version=1, kind="lora", peft_config={"r": 4, "m": {"q"}})
    )
    update, _, _ = asyncio.run(_read_all(data))
    assert update.kind == "lora" and update.peft_config == {"r": 4, "m": ["q"]}


def test_weight_stream_truncated_is_rejected():
    data = b"".join(bytes(c) for c in encode_weight_stream({"a": torch.randn(100)}, version=1))
    with pytest.raises(WeightSyncError, match="truncated"):
        asyncio.run(_read_all(data[:-30]))
    without_end = data[: data.rindex(b'{"type":"end"') - 8]
    split = b"".join(bytes(c) for c in encode_weight_stream({"a": torch.randn(100)}, version=1, bucket_bytes=64))
    split_without_last = split[: split.rindex(b'{"type":"bucket"') - 8] + split[split.rindex(b'{"type":"end"') - 8 :]
    with pytest.raises(WeightSyncError, match="stream ended before 1 of 1 tensors"):
        asyncio.run(_read_all(split_without_last))
    assert without_end


def test_weight_stream_bucket_over_limit_is_413():
    data = b"".join(bytes(c) for c in encode_weight_stream({"a": torch.randn(1000)}, version=1))
    with pytest.raises(PayloadTooLargeError, match="max_bucket_bytes") as info:
        asyncio.run(_read_all(data, max_bucket=1000))
    assert info.value.status_code == 413


def test_weight_stream_garbage_header_is_rejected():
    raw = b"not json"
    with pytest.raises(WeightSyncError, match="not valid JSON"):
        asyncio.run(_read_all(struct.pack("<Q", len(raw)) + raw))
    raw = json.dumps({"type": "bucket"}).encode()
    with pytest.raises(WeightSyncError, match="expected a begin frame"):
        asyncio.run(_read_all(struct.pack("<Q", len(raw)) + raw))


def test_check_manifest_names_bad_tensor():
    expected = {"layer.weight": (4, 4), "layer.bias": (4,)}
    check_manifest([TensorSpec("layer.bias", "float32", (4,))], expected)
    with pytest.raises(WeightSyncError, match=r"did you mean 'layer\.weight'") as info:
        check_manifest([TensorSpec("layer.weigth", "float32", (4, 4))], expected)
    assert info.value.field == "layer.weigth"
    with pytest.raises(WeightSyncError, match=r"expected shape \[4, 4\], got \[4, 5\]"):
        check_manifest([TensorSpec("layer.weight", "float32", (4, 5))], expected)
    with pytest.raises(WeightSyncError, match="twice"):
        check_manifest([TensorSpec("layer.bias", "float32", (4,))] * 2, expected)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        pytest.param({"version": -1}, "version", id="negative-version"),
        pytest.param({"kind": "delta"}, "kind", id="bad-kind"),
        pytest.param({"kind": "lora"}, "peft_config", id="lora-without-config"),
    ],
)
def test_weight_update_validates(kwargs, needle):
    base = {"version": 1, "kind": "full", "manifest": [TensorSpec("a", "float32", (1,))]}
    with pytest.raises(WeightSyncError, match=needle):
        WeightUpdate(**{**base, **kwargs})
