"""Request coalescing in `DiffusersHttpServer`: concurrent requests run as one call, each row as if served alone."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from verl_core.rollout.errors import EngineError, EngineTimeoutError
from verl_core.testing.server_contract import run
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.rollout import DiffusersHttpServer
from verl_omni.rollout.coalesce import coalescable

# CFG on (guidance_scale > 1) and a pinned SDE window (one possible start: no draw from the first row's generator)
SAMPLING = {
    "n": 2, "num_inference_steps": 4, "height": 32, "width": 32, "max_sequence_length": 32, "guidance_scale": 3.0,
    "noise_level": 0.7, "sde_window_size": 2, "sde_window_range": [1, 3],
}  # fmt: skip
ATOL = 1e-5
REQUESTS = [
    {"prompt": "a cat on a red chair", "seed": 7, "negative_prompt": "blurry", "sampling_params": SAMPLING},
    {"prompt": "a lighthouse at dusk over a stormy sea", "seed": 1000, "negative_prompt": "blurry",
     "sampling_params": SAMPLING},
]  # fmt: skip


def _server(path, **diffusers) -> DiffusersHttpServer:
    pipeline = {"height": 32, "width": 32, "num_inference_steps": 4, "max_sequence_length": 32}
    config = DiffusionRolloutConfig(
        dtype="float32", device="cpu", pipeline=pipeline, n=2, engine_kwargs={"diffusers": diffusers}
    )
    server = DiffusersHttpServer(config.with_model(str(path)))
    run(server.launch())
    return server


@pytest.fixture
def launch(tiny_pipeline_paths):
    servers = []

    def start(model: str = "qwen_image", **diffusers) -> DiffusersHttpServer:
        diffusers.setdefault("coalesce", True)  # opt-in: a request's floats then depend on its batch
        servers.append(_server(tiny_pipeline_paths[model], **diffusers))
        return servers[-1]

    yield start
    for server in servers:
        run(server.shutdown())


def _concurrently(server: DiffusersHttpServer, requests: list[dict], during=None) -> list:
    """Send `requests` while the engine thread is held busy, so they all wait in the queue; then release it."""
    gate = threading.Event()

    async def main() -> list:
        blocker = asyncio.ensure_future(server._on_loop(server._run_blocking(gate.wait, 60)))
        await asyncio.sleep(0.05)
        tasks = [asyncio.ensure_future(server.generate(r)) for r in requests]
        await asyncio.sleep(0.2)  # every request is queued behind the blocker
        gate.set()
        await blocker
        if during is not None:
            await during()
        return await asyncio.gather(*tasks, return_exceptions=True)

    return run(main())


def _assert_same(got, want) -> None:
    assert got.finish_reason == want.finish_reason == "stop"
    assert sorted(got.trajectory.keys()) == sorted(want.trajectory.keys())
    for key in want.trajectory.keys():  # noqa: SIM118 - TensorDict iterates over its rows
        a, b = got.trajectory.get(key), want.trajectory.get(key)
        assert a.shape == b.shape and a.dtype == b.dtype, key
        if a.is_floating_point():  # float32 on the CPU: a batch of another size may round its matmuls differently
            diff = (a - b).abs().max().item() if a.numel() else 0.0
            print(f"{key}: max |diff| {diff:.3g}")  # shown with -s
            torch.testing.assert_close(a, b, rtol=0, atol=ATOL, msg=key)
        elif key == "images":  # uint8 of those floats: a value on a rounding edge may land one step away
            assert (a.int() - b.int()).abs().max() <= 1, key
        else:
            assert torch.equal(a, b), key


@pytest.mark.parametrize("model", ["sd3", "qwen_image"])
def test_coalesced_requests_equal_solo_requests(launch, model):
    server = launch(model)
    solo = [run(server.generate(r)) for r in REQUESTS]
    assert server.metrics_snapshot()["coalesced_calls"] == 0
    together = _concurrently(server, REQUESTS)
    metrics = server.metrics_snapshot()
    assert metrics["coalesced_calls"] == 1 and metrics["coalesced_requests"] == 2
    for got, want in zip(together, solo, strict=True):
        _assert_same(got, want)
    assert together[0].latency_s > 0 and together[0].seed == 7 and together[1].seed == 1000
    assert not torch.equal(together[0].trajectory["latents"], together[1].trajectory["latents"])


def test_switch_off_runs_requests_one_at_a_time(launch):
    server = launch(coalesce=False)
    together = _concurrently(server, REQUESTS)
    assert [r.finish_reason for r in together] == ["stop", "stop"]
    assert server.metrics_snapshot()["coalesced_calls"] == 0


def test_coalescing_is_off_by_default_so_outputs_do_not_depend_on_other_requests(tiny_pipeline_paths):
    server = _server(tiny_pipeline_paths["qwen_image"])
    try:
        solo = run(server.generate(REQUESTS[0]))
        together = _concurrently(server, REQUESTS)
        assert server.metrics_snapshot()["coalesced_calls"] == 0
        assert torch.equal(together[0].trajectory["latents"], solo.trajectory["latents"])  # bit for bit
    finally:
        run(server.shutdown())


@pytest.mark.parametrize(("cap", "calls"), [(2, 0), (4, 1)])
def test_image_cap_bounds_a_call(launch, cap, calls):
    server = launch(coalesce_max_images=cap)
    together = _concurrently(server, REQUESTS)  # n=2 each: 4 images together
    assert [r.finish_reason for r in together] == ["stop", "stop"]
    assert server.metrics_snapshot()["coalesced_calls"] == calls


def test_different_sampling_is_not_coalesced(launch):
    server = launch()
    other = {**REQUESTS[1], "sampling_params": {**SAMPLING, "guidance_scale": 2.0}}
    negative = {**REQUESTS[1], "negative_prompt": "dark"}  # one negative prompt per pipeline call
    together = _concurrently(server, [REQUESTS[0], other, negative])
    assert [r.finish_reason for r in together] == ["stop"] * 3
    assert server.metrics_snapshot()["coalesced_calls"] == 0


def test_window_drawn_per_call_is_not_coalescable():
    base = DiffusionSamplingConfig(num_inference_steps=4)
    assert coalescable(base)  # K = 0
    assert coalescable(base.evolve(sde_window_size=2, sde_window_range=[1, 3]))  # pinned
    assert coalescable(base.evolve(sde_window_size=2, sde_window_per_row=True))
    assert not coalescable(base.evolve(sde_window_size=2, sde_window_range=[0, 3]))  # drawn from row 0


def _pause_mid_batch(server: DiffusersHttpServer, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make the engine stop at its 2nd step check until `go` is set; `started` tells that it got there."""
    started, go = threading.Event(), threading.Event()
    engine = server._engine
    original = engine.generate

    def generate(prompts, sampling, generators, *, should_abort):
        calls = []

        def check() -> bool:
            calls.append(1)
            if len(calls) == 2:
                started.set()
                go.wait(60)
            return should_abort()

        return original(prompts, sampling, generators, should_abort=check)

    monkeypatch.setattr(engine, "generate", generate)
    return started, go


@pytest.mark.parametrize("aborted", [["a"], ["a", "b"]])
def test_abort_in_a_coalesced_call_stops_only_that_request(launch, monkeypatch, aborted):
    server = launch()
    solo_b = run(server.generate(REQUESTS[1]))
    images = server.metrics_snapshot()["images_generated"]
    started, go = _pause_mid_batch(server, monkeypatch)
    requests = [{**REQUESTS[0], "request_id": "a"}, {**REQUESTS[1], "request_id": "b"}]

    async def abort_mid_batch() -> None:
        assert await asyncio.to_thread(started.wait, 60)
        assert sorted(await server.abort(aborted)) == aborted
        go.set()

    a, b = _concurrently(server, requests, during=abort_mid_batch)
    metrics = server.metrics_snapshot()
    assert a.finish_reason == "abort" and a.trajectory is None
    if aborted == ["a"]:
        _assert_same(b, solo_b)  # the batch ran on for b
        assert metrics["coalesced_calls"] == 1 and metrics["images_generated"] == images + 4
    else:
        assert b.finish_reason == "abort" and b.trajectory is None
        assert metrics["images_generated"] == images  # all wanted to stop: the call stopped early


def test_timeout_in_a_coalesced_call_stops_only_that_request(launch, monkeypatch):
    server = launch()
    solo_b = run(server.generate(REQUESTS[1]))
    started, go = _pause_mid_batch(server, monkeypatch)

    async def hold_past_the_timeout() -> None:
        assert await asyncio.to_thread(started.wait, 60)
        await asyncio.sleep(1.0)  # request a (timeout 0.6 s) gives up while the call is paused
        go.set()

    a, b = _concurrently(server, [{**REQUESTS[0], "timeout_s": 0.6}, REQUESTS[1]], during=hold_past_the_timeout)
    assert isinstance(a, EngineTimeoutError)
    _assert_same(b, solo_b)
    metrics = server.metrics_snapshot()
    assert metrics["coalesced_calls"] == 1 and metrics["counters"]["timeouts"] == 1


def test_error_in_a_coalesced_call_fails_every_request(launch, monkeypatch):
    server = launch()

    def broken(prompts, *args, **kwargs):
        raise RuntimeError(f"CUDA out of memory for {len(prompts)} prompts")

    monkeypatch.setattr(server._engine, "generate", broken)
    together = _concurrently(server, REQUESTS)
    for error in together:
        assert isinstance(error, EngineError)
        assert "engine failed during generate: RuntimeError: CUDA out of memory for 2 prompts" in str(error)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"coalesce": "yes"}, "diffusers.coalesce: expected bool"),
        ({"coalesce_max_images": 0}, "diffusers.coalesce_max_images: expected an int >= 1"),
        ({"coalesce_max_image": 8}, "coalesce_max_image is not an option.*coalesce_max_images"),
    ],
)
def test_coalesce_options_are_checked(tiny_qwen_image_path, options, needle):
    config = DiffusionRolloutConfig(device="cpu", engine_kwargs={"diffusers": options})
    with pytest.raises(ValueError, match=needle):
        DiffusersHttpServer(config.with_model(str(tiny_qwen_image_path)))
