"""`DiffusersHttpServer` batching: coalesced requests and multi-prompt requests, each row as if served alone."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from verl_core.rollout.errors import BadRequestError, EngineError, EngineTimeoutError
from verl_core.testing.server_contract import canonical, run
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.rollout import DiffusersHttpServer
from verl_omni.rollout.diffusers.coalesce import coalescable
from verl_omni.rollout.protocol import DiffusionGenerateRequest
from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer

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


# ---- multi-prompt requests ----------------------------------------------------------------------

MULTI = [r["prompt"] for r in REQUESTS] + ["an astronaut riding a horse"]
N = SAMPLING["n"]


@pytest.fixture
def plain(tiny_pipeline_paths):
    """Servers with coalescing off (the default): a multi-prompt request's rows depend on it alone."""
    servers = []

    def start(model: str = "qwen_image"):
        servers.append(_server(tiny_pipeline_paths[model]))
        return servers[-1]

    yield start
    for server in servers:
        run(server.shutdown())


def _count_calls(server, monkeypatch) -> list[int]:
    """Record the prompt count of every engine call."""
    calls, original = [], server._engine.generate

    def generate(prompts, *args, **kwargs):
        calls.append(len(prompts))
        return original(prompts, *args, **kwargs)

    monkeypatch.setattr(server._engine, "generate", generate)
    return calls


def _part(response, i: int):
    """Prompt `i`'s rows of a multi-prompt response, as a one-prompt request returns them."""
    part = response.trajectory.reshape(-1)[i * N : (i + 1) * N].clone()
    part.set("prompt_index", part.get("prompt_index") - i)
    return part


def _single(server, prompt: str, seed: int, negative: str | None, sampling=SAMPLING):
    request = {"prompt": prompt, "seed": seed, "sampling_params": sampling}
    if negative is not None:
        request["negative_prompt"] = negative
    return run(server.generate(request))


@pytest.mark.parametrize("model", ["sd3", "qwen_image"])
def test_multi_prompt_rows_equal_one_prompt_requests(plain, monkeypatch, model):
    server = plain(model)
    calls = _count_calls(server, monkeypatch)
    request = {"prompt": MULTI, "seed": 7, "negative_prompt": "blurry", "sampling_params": SAMPLING}
    once, twice = run(server.generate(request)), run(server.generate(request))
    assert calls == [3, 3]  # one engine call each
    assert canonical(once.trajectory) == canonical(twice.trajectory)  # bit-equal: fixed by the request alone
    assert once.seed == 7 and once.trajectory.batch_size == torch.Size([3, N])
    assert once.trajectory["prompt_index"].reshape(-1).tolist() == [0, 0, 1, 1, 2, 2]
    assert server.metrics_snapshot()["images_generated"] == 2 * 3 * N
    for i, prompt in enumerate(MULTI):  # row j seeded 7 + j: prompt i is the one-prompt request seeded 7 + i*n
        got = once.model_copy(update={"trajectory": _part(once, i)})
        _assert_same(got, _single(server, prompt, 7 + i * N, "blurry"))


@pytest.mark.parametrize("model", ["sd3", "qwen_image"])
def test_multi_prompt_conditioning_travels_once_per_prompt_over_http(plain, model):
    """Batch `[k, n]`: each prompt's embeddings are one row expanded over its n rows, over HTTP too."""
    from verl_core.rollout.client import RolloutClient

    server = plain(model)
    adapter = server._engine.pipeline.adapter
    request = {"prompt": MULTI, "seed": 7, "negative_prompt": "blurry", "sampling_params": SAMPLING}
    local = run(server.generate(request)).trajectory

    async def over_http():
        client = RolloutClient(server.address)
        try:
            return await client.generate(request)
        finally:
            await client.aclose()

    remote = run(over_http())["trajectory"]
    keys = [k for k in (*adapter.cond_keys, *adapter.negative_cond_keys) if k in local.keys()]  # noqa: SIM118
    assert keys and remote.batch_size == local.batch_size == torch.Size([len(MULTI), N])
    for key in keys:
        for got in (local.get(key), remote.get(key)):
            assert got.stride(1) == 0, key  # sent and held once per prompt
            if key in adapter.cond_keys and key.endswith("embeds"):  # not the masks, nor the one negative text
                assert not torch.equal(got[0, 0], got[1, 0]), key  # ... and per prompt, not once for all
    assert canonical(remote) == canonical(local)


def test_per_prompt_negative_prompts_split_the_call_where_they_change(plain, monkeypatch):
    server = plain()
    calls = _count_calls(server, monkeypatch)
    negatives = ["blurry", "blurry", None]
    out = run(server.generate({"prompt": MULTI, "seed": 3, "negative_prompt": negatives, "sampling_params": SAMPLING}))
    assert calls == [2, 1]  # the engine takes one negative prompt per call
    assert out.sampling_params["negative_prompt"] == negatives
    assert out.trajectory["prompt_index"].reshape(-1).tolist() == [0, 0, 1, 1, 2, 2]
    for i, prompt in enumerate(MULTI):
        got = out.model_copy(update={"trajectory": _part(out, i)})
        _assert_same(got, _single(server, prompt, 3 + i * N, negatives[i]))


def test_a_window_drawn_per_call_gives_each_prompt_its_own_call(plain, monkeypatch):
    server = plain()
    calls = _count_calls(server, monkeypatch)
    drawn = {**SAMPLING, "sde_window_range": [0, 3]}  # two possible starts: drawn from the call's first generator
    out = run(server.generate({"prompt": MULTI, "seed": 11, "sampling_params": drawn}))
    assert calls == [1, 1, 1]
    for i, prompt in enumerate(MULTI):  # each call is the one-prompt request's call: bit-equal
        single = _single(server, prompt, 11 + i * N, None, drawn)
        assert canonical(_part(out, i)) == canonical(single.trajectory)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"prompt": []}, "prompt"),
        ({"prompt": ["a cat", ""]}, "prompt"),
        ({"prompt": "a cat", "negative_prompt": ["blurry"]}, "negative_prompt"),
        ({"prompt": ["a cat", "a dog"], "negative_prompt": ["blurry"]}, "negative_prompt"),
        ({"prompt": ["a cat", 3]}, "prompt"),
    ],
)
def test_bad_prompt_combinations_are_refused_naming_the_field(plain, fields, field):
    server = plain()
    with pytest.raises(BadRequestError) as info:
        run(server.generate({**fields, "seed": 0, "sampling_params": SAMPLING}))
    assert info.value.status_code == 422 and info.value.field.split(".")[0] == field
    assert field in str(info.value)


def test_a_multi_prompt_request_is_never_coalesced(launch):
    server = launch(coalesce=True)
    multi = {"prompt": MULTI[:2], "seed": 7, "negative_prompt": "blurry", "sampling_params": SAMPLING}
    together = _concurrently(server, [REQUESTS[0], multi, REQUESTS[1]])  # same sampling, negative prompt and n
    metrics = server.metrics_snapshot()
    assert metrics["coalesced_calls"] == 1 and metrics["coalesced_requests"] == 2  # the two one-prompt requests
    assert canonical(together[1].trajectory) == canonical(run(server.generate(multi)).trajectory)


def test_abort_and_timeout_stop_a_multi_prompt_request(plain, monkeypatch):
    server = plain()
    images = server.metrics_snapshot()["images_generated"]
    started, go = _pause_mid_batch(server, monkeypatch)
    multi = {"prompt": MULTI, "seed": 7, "sampling_params": SAMPLING, "request_id": "m"}

    async def abort_mid_call() -> None:
        assert await asyncio.to_thread(started.wait, 60)
        assert await server.abort(["m"]) == ["m"]
        go.set()

    (aborted,) = _concurrently(server, [multi], during=abort_mid_call)
    assert aborted.finish_reason == "abort" and aborted.trajectory is None
    assert server.metrics_snapshot()["images_generated"] == images
    started.clear()
    go.clear()

    async def hold_past_the_timeout() -> None:
        assert await asyncio.to_thread(started.wait, 60)
        await asyncio.sleep(1.0)
        go.set()

    (timed_out,) = _concurrently(server, [{**multi, "timeout_s": 0.6}], during=hold_past_the_timeout)
    assert isinstance(timed_out, EngineTimeoutError)


def test_vllm_omni_refuses_a_prompt_list_naming_the_field():
    server = object.__new__(vLLMOmniHttpServer)  # the check runs before the engine is touched
    request = DiffusionGenerateRequest(prompt=["a cat", "a dog"], seed=0)
    with pytest.raises(BadRequestError, match="vllm_omni backend serves one prompt per request") as info:
        run(server._engine_generate("r", request, None))
    assert info.value.field == "prompt" and info.value.status_code == 422
