"""Tests for `verl_core.rollout.tensor_payload`: binary generate responses (codec, route, client)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import torch
from pydantic import ConfigDict
from tensordict import NonTensorStack, TensorDict

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import BadResponseError, EngineError, EngineTimeoutError, PayloadTooLargeError
from verl_core.rollout.framing import FRAME_LEN, align
from verl_core.rollout.protocol import GenerateRequest, GenerateResponse
from verl_core.rollout.replica import RolloutRouter
from verl_core.rollout.server import RolloutHttpServer
from verl_core.rollout.tensor_payload import (
    TENSOR_CONTENT_TYPE,
    decode_tensor_body,
    decode_tensor_stream,
    encode_tensor_body,
    has_tensors,
    plan_tensor_body,
    response_fields,
)
from verl_core.testing.server_contract import canonical, hung_variant, run

DTYPES = [
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool,
]  # fmt: skip


def _random(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=gen, dtype=torch.int64).to(dtype)


def _decode_all_ways(body: bytearray, **kwargs: Any) -> list[dict[str, Any]]:
    """Decode in place, from read-only bytes, and from a stream of odd-sized chunks."""

    async def chunks():
        for i in range(0, len(body), 13):
            yield bytes(body[i : i + 13])

    return [
        decode_tensor_body(body, **kwargs),
        decode_tensor_body(bytes(body), **kwargs),
        asyncio.run(decode_tensor_stream(chunks(), **kwargs)),
    ]


def _trajectory() -> TensorDict:
    return TensorDict(
        {
            "latents": _random((4, 3, 8, 16), torch.float32),
            "log_probs": _random((4, 2), torch.float32, 1),
            "images": _random((4, 3, 8, 8), torch.uint8, 2),
            "step_indices": _random((4, 2), torch.int64, 3),
            "cond": TensorDict(
                {"embeds": _random((4, 5, 6), torch.bfloat16, 4), "mask": _random((4, 5), torch.bool)},
                batch_size=[4, 5],
            ),
            "prompt": NonTensorStack.from_list(["a", "b", "c", "d"]),
        },
        batch_size=[4],
        device="cpu",
    )


# ---- codec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 7)], ids=["0d", "empty", "empty-3d", "1d", "3d"])
def test_tensor_round_trip_keeps_dtype_shape_and_bits(dtype, shape):
    tensor = _random(shape, dtype)
    body = encode_tensor_body({"x": tensor, "finish_reason": "stop"})
    for out in _decode_all_ways(body):
        assert out["finish_reason"] == "stop"
        assert out["x"].dtype == dtype and out["x"].shape == torch.Size(shape)
        assert canonical(out["x"]) == canonical(tensor)


def test_nested_tensordict_round_trip_keeps_batch_sizes_keys_and_values():
    traj = _trajectory()
    body = encode_tensor_body({"trajectory": traj, "weight_version": 3, "extra": {"a": [1, 2]}})
    for out in _decode_all_ways(body):
        got = out["trajectory"]
        assert isinstance(got, TensorDict) and got.batch_size == torch.Size([4]) and got.device == torch.device("cpu")
        assert got["cond"].batch_size == torch.Size([4, 5])
        assert list(got.keys(include_nested=True)) == list(traj.keys(include_nested=True))
        assert got.get("prompt").tolist() == ["a", "b", "c", "d"]
        assert canonical(got.exclude("prompt")) == canonical(traj.exclude("prompt"))
        assert out["weight_version"] == 3 and out["extra"] == {"a": [1, 2]}


def test_tensordict_without_device_stays_without_device():
    out = decode_tensor_body(encode_tensor_body({"t": TensorDict({"a": torch.ones(2)}, batch_size=[2])}))
    assert out["t"].device is None


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: torch.arange(24.0).reshape(4, 6).t(), id="transposed"),
        pytest.param(lambda: torch.arange(40, dtype=torch.int64)[::3], id="strided"),
        pytest.param(lambda: torch.tensor([1.5, 2.5]).expand(3, 2), id="expanded"),
        pytest.param(lambda: torch.arange(60.0).reshape(3, 4, 5).permute(2, 0, 1)[1:, :, ::2], id="permuted-slice"),
    ],
)
def test_non_contiguous_inputs_round_trip(make):
    tensor = make()
    assert not tensor.is_contiguous()
    out = decode_tensor_body(encode_tensor_body({"x": tensor}))
    assert torch.equal(out["x"], tensor) and out["x"].shape == tensor.shape


def test_expanded_tensors_travel_once_and_come_back_expanded():
    row = torch.arange(6, dtype=torch.float32).reshape(1, 2, 3)
    expanded = row.expand(500, 2, 3)
    body = encode_tensor_body({"x": expanded, "y": torch.ones(3).expand(4, 2, 3)})
    assert len(body) < 500  # one row of x, not 500
    for out in _decode_all_ways(body):
        assert out["x"].shape == (500, 2, 3) and out["x"].stride(0) == 0 and torch.equal(out["x"], expanded)
        assert out["y"].shape == (4, 2, 3) and torch.equal(out["y"], torch.ones(4, 2, 3))


def test_in_place_decode_views_the_body_and_offsets_are_aligned():
    body = encode_tensor_body({"a": torch.ones(3, dtype=torch.uint8), "b": torch.arange(5, dtype=torch.int64)})
    header = json.loads(bytes(body[FRAME_LEN.size : FRAME_LEN.size + FRAME_LEN.unpack(body[:8])[0]]))
    assert all(e["offset"] % 64 == 0 for e in header["entries"])
    out = decode_tensor_body(body)
    start = torch.frombuffer(body, dtype=torch.uint8).data_ptr()
    for tensor in out.values():
        assert start <= tensor.data_ptr() < start + len(body)  # a view of the body: no copy
    out["b"][0] = 42  # the buffer is writable
    assert decode_tensor_body(body)["b"][0] == 42


def test_streamed_chunks_equal_the_whole_body_and_are_bounded():
    fields = {"trajectory": _trajectory(), "odd": torch.arange(7, dtype=torch.int16)[::2], "s": torch.tensor(True)}
    body = plan_tensor_body(fields)
    chunks = [bytes(c) for c in body.chunks(chunk_bytes=100)]
    assert b"".join(chunks) == bytes(body.encode()) and len(b"".join(chunks)) == body.size
    assert max(len(c) for c in chunks[1:]) <= 100  # after the header frame


def test_has_tensors_only_for_tensor_or_tensordict_values():
    assert has_tensors({"a": 1, "b": torch.zeros(1)})
    assert has_tensors({"t": TensorDict({}, batch_size=[])})
    assert not has_tensors({"a": [1.0, 2.0], "b": None})


def test_response_fields_reads_json_and_binary_bodies():
    assert response_fields(b'{"a": 1}', "application/json") == {"a": 1}
    body = encode_tensor_body({"x": torch.ones(2)})
    assert torch.equal(response_fields(bytes(body), f"{TENSOR_CONTENT_TYPE}; charset=utf-8")["x"], torch.ones(2))


# ---- bad bodies ----------------------------------------------------------------------------------


def _split(body: bytearray) -> tuple[dict, bytes]:
    (length,) = FRAME_LEN.unpack(body[:8])
    header = json.loads(bytes(body[8 : 8 + length]))
    return header, bytes(body[align(8 + length) :])


def _join(header: dict, data: bytes) -> bytearray:
    raw = json.dumps(header).encode()
    frame = FRAME_LEN.pack(len(raw)) + raw
    return bytearray(frame + bytes(align(len(frame)) - len(frame)) + data)


def _mutated(mutate) -> bytearray:
    header, data = _split(encode_tensor_body({"trajectory": _trajectory(), "finish_reason": "stop"}))
    mutate(header)
    return _join(header, data)


def _tensor_entry(header: dict, name: str) -> dict:
    return next(e for e in header["entries"] if e["path"][-1] == name)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        pytest.param(lambda b: b[:5], "shorter than a frame", id="no-frame"),
        pytest.param(lambda b: b[:40], "truncated", id="truncated-header"),
        pytest.param(lambda b: b[:-10], "truncated", id="truncated-data"),
        pytest.param(lambda b: b + b"xyz", "trailing bytes", id="trailing-bytes"),
        pytest.param(lambda b: bytearray(FRAME_LEN.pack(4) + b"{no}"), "not valid JSON", id="bad-json"),
        pytest.param(lambda b: bytearray(FRAME_LEN.pack(2) + b"[]"), "expected a tensors frame", id="not-an-object"),
    ],
)
def test_truncated_or_malformed_body_is_a_clear_error(body, needle):
    good = encode_tensor_body({"trajectory": _trajectory(), "finish_reason": "stop"})
    with pytest.raises(BadResponseError, match=needle):
        decode_tensor_body(body(good))


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        pytest.param(lambda h: h.update(format=2), "format", id="format"),
        pytest.param(lambda h: h.update(nbytes=-1), "nbytes", id="nbytes"),
        pytest.param(lambda h: h.pop("entries"), "'entries' list", id="no-entries"),
        pytest.param(lambda h: _tensor_entry(h, "latents").update(offset=1 << 30), "latents.*outside", id="offset"),
        pytest.param(lambda h: _tensor_entry(h, "latents").update(offset=3), "multiple of 4", id="misaligned"),
        pytest.param(lambda h: _tensor_entry(h, "images").update(dtype="complex32"), "complex32", id="dtype"),
        pytest.param(lambda h: _tensor_entry(h, "images").update(shape=[4, -3]), "shape", id="shape"),
        pytest.param(lambda h: _tensor_entry(h, "images").update(shape=[2, 3, 8, 8]), "images.*fit", id="batch"),
        pytest.param(lambda h: _tensor_entry(h, "images").update(path=[]), "no valid path", id="path"),
        pytest.param(lambda h: _tensor_entry(h, "images").update(kind="blob"), "unknown kind", id="kind"),
        pytest.param(lambda h: _tensor_entry(h, "images").update(expand=[4, 3, 9, 8]), "cannot expand", id="expand"),
        pytest.param(lambda h: h["entries"].append(dict(h["entries"][1])), "twice", id="duplicate"),
        pytest.param(lambda h: h["entries"].pop(0), "before its TensorDict", id="orphan"),
    ],
)
def test_inconsistent_header_is_a_clear_error(mutate, needle):
    with pytest.raises(BadResponseError, match=needle):
        decode_tensor_body(_mutated(mutate))


def test_stream_that_breaks_is_a_bad_response():
    body = encode_tensor_body({"x": torch.zeros(100)})

    async def chunks():
        yield bytes(body[:100])
        raise ConnectionResetError("peer went away")

    with pytest.raises(BadResponseError, match=r"broke.*peer went away"):
        asyncio.run(decode_tensor_stream(chunks()))


def test_size_limit_on_both_sides():
    fields = {"x": torch.zeros(1000)}  # 4000 bytes of data
    with pytest.raises(EngineError, match="max_response_bytes=1000"):
        encode_tensor_body(fields, max_bytes=1000)
    body = encode_tensor_body(fields, max_bytes=5000)
    with pytest.raises(PayloadTooLargeError, match="max_response_bytes=3999") as info:
        decode_tensor_body(body, max_bytes=3999)
    assert info.value.field == "max_response_bytes"
    assert torch.equal(decode_tensor_body(body, max_bytes=4000)["x"], fields["x"])


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        pytest.param({"x": torch.zeros(2, dtype=torch.complex64)}, "'x'.*complex64", id="dtype"),
        pytest.param({"t": TensorDict({"c": torch.zeros(2, dtype=torch.complex64)}, [2])}, "'t.c'", id="nested-dtype"),
        pytest.param({"x": torch.zeros(1), "meta": [torch.zeros(1)]}, "not JSON-able", id="tensor-in-json"),
    ],
)
def test_encode_refuses_what_it_cannot_send(fields, needle):
    with pytest.raises(EngineError, match=needle):
        encode_tensor_body(fields)


# ---- through the route and the client ------------------------------------------------------------


class TensorResponse(GenerateResponse):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    rows: TensorDict | None = None
    scale: torch.Tensor | None = None


class TensorEchoServer(RolloutHttpServer):
    """A backend whose answer holds a TensorDict derived from the seed (tests the route, not an engine)."""

    response_model = TensorResponse

    async def _engine_load(self) -> None:
        pass

    async def _engine_generate(self, request_id: str, request: GenerateRequest, params: Any) -> dict[str, Any]:
        if request.prompt == "json only":
            return {"finish_reason": "stop"}
        rows = int(params.get("rows", 2))
        gen = torch.Generator().manual_seed(request.seed or 0)
        traj = TensorDict(
            {"latents": torch.randn(rows, 3, 4, generator=gen), "images": torch.randint(0, 255, (rows, 3, 2, 2),
             dtype=torch.uint8, generator=gen), "cond": TensorDict({"e": torch.ones(rows, 2).bfloat16()}, [rows])},
            batch_size=[rows],
        )  # fmt: skip
        return {"finish_reason": "stop", "rows": traj, "scale": torch.tensor(0.5)}

    async def _engine_abort(self, request_ids: list[str]) -> None:
        pass

    async def _engine_sleep(self, level: int) -> None:
        pass

    async def _engine_wake_up(self, tags: list[str]) -> None:
        pass

    async def _engine_begin_weights(self, update) -> None:
        pass

    async def _engine_load_bucket(self, update, tensors) -> None:
        pass


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    server = TensorEchoServer(RolloutConfig(model={"path": "unused"}, max_response_bytes=1 << 16))
    run(server.launch())
    yield server
    run(server.shutdown())


REQUEST = {"prompt": "a cat", "seed": 3, "sampling_params": {"rows": 3}}


def test_client_decodes_what_the_server_returns_in_process(echo_server):
    async def both():
        client = RolloutClient(echo_server.address)
        try:
            return await client.generate(REQUEST), await echo_server.generate(REQUEST)
        finally:
            await client.aclose()

    over_http, in_process = run(both())
    assert isinstance(over_http["rows"], TensorDict) and over_http["rows"].batch_size == torch.Size([3])
    assert over_http["rows"]["cond", "e"].dtype == torch.bfloat16
    assert canonical(over_http["rows"]) == canonical(in_process.rows)
    assert canonical(over_http["scale"]) == canonical(in_process.scale)
    assert over_http["weight_version"] == in_process.weight_version == 0


def test_route_answers_binary_with_tensors_and_json_without(echo_server):
    with httpx.Client(base_url=echo_server.address, trust_env=False, timeout=30) as http:
        binary = http.post("/generate", json=REQUEST)
        plain = http.post("/generate", json={"prompt": "json only"})
    assert binary.headers["content-type"] == TENSOR_CONTENT_TYPE
    assert b'"latents"' in binary.content and response_fields(binary.content, TENSOR_CONTENT_TYPE)["rows"] is not None
    assert plain.headers["content-type"] == "application/json" and plain.json()["rows"] is None


def test_router_adds_the_rank_to_decoded_answers(echo_server):
    async def route():
        router = RolloutRouter([RolloutClient(echo_server.address, rank=5)])
        try:
            return await router.generate(REQUEST)
        finally:
            await router.aclose()

    out = run(route())
    assert out["server_rank"] == 5 and out["rows"]["latents"].shape == (3, 3, 4)


def test_response_over_the_limits_is_refused_by_server_and_client(echo_server):
    big = {**REQUEST, "sampling_params": {"rows": 2000}}  # 2000 * (48 + 12 + 4) bytes > 64 KiB

    async def ask(**kwargs):
        client = RolloutClient(echo_server.address, **kwargs)
        try:
            return await client.generate(big if not kwargs else REQUEST)
        finally:
            await client.aclose()

    with pytest.raises(EngineError, match=r"rollout\.max_response_bytes=65536"):
        run(ask())
    with pytest.raises(PayloadTooLargeError, match="max_response_bytes=100"):
        run(ask(max_response_bytes=100))


def test_client_keeps_the_server_timeout_message():
    """A 504 from the server surfaces with its own message, not as the client's own timeout."""
    server = hung_variant(TensorEchoServer)(RolloutConfig(model={"path": "unused"}, request_timeout_s=0.3))
    run(server.launch())

    async def ask():
        client = RolloutClient(server.address, timeout_s=30)
        try:
            return await client.generate(REQUEST)
        finally:
            await client.aclose()

    try:
        with pytest.raises(
            EngineTimeoutError, match=r"generate did not finish within 0\.3 s \(rollout\.request_timeout_s\)"
        ):
            run(ask())
    finally:
        run(server.shutdown())
