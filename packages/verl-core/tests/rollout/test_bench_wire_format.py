"""`benchmarks/bench_wire_format.py` round-trips the same payload through both formats, and safetensors still
lacks what docs/core/rollout.md ("Why not safetensors") says it lacks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_wire_format", ROOT / "benchmarks" / "bench_wire_format.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("way", ["verl", "verl-stream", "safetensors"])
def test_each_way_round_trips_the_payload(bench, way):
    fields = bench.make_payload(images=3, steps=2, tokens=8, channels=4)
    enc, dec = {
        "verl": (bench.verl_encode, bench.decode_tensor_body),
        "verl-stream": (bench.verl_stream_encode, bench.verl_stream_decode),
        "safetensors": (bench.st_encode, bench.st_decode),
    }[way]
    decoded = dec(enc(fields))
    bench._check(fields, decoded)  # values, prompts, and the expanded entry still stride 0
    src, dst = fields["trajectory"], decoded["trajectory"]
    for key in ("log_probs", "timesteps", ("extra", "negative_prompt_embeds")):
        assert torch.equal(dst[key], src[key]), key
    assert decoded["timings"] == fields["timings"] and dst["extra"].batch_size == src["extra"].batch_size


def test_both_formats_send_the_expanded_entry_once(bench):
    fields = bench.make_payload(images=3, steps=2, tokens=8, channels=4)
    one_row = 205 * 4096 * 4  # the expanded entry's one row; materialised it would be 3 rows
    verl, st = len(bench.verl_encode(fields)), len(bench.st_encode(fields))
    assert abs(verl - st) < 4096 and verl < 2 * one_row


def test_safetensors_refuses_stride_0_tensors():
    with pytest.raises(ValueError, match="non contiguous"):
        safetensors_torch.save({"a": torch.randn(1, 4).expand(3, 4)})


def test_safetensors_metadata_holds_strings_only():
    with pytest.raises(TypeError):
        safetensors_torch.save({"a": torch.randn(2)}, metadata={"trajectory": {"batch_size": [2]}})
