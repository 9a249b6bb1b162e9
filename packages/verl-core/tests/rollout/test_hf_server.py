"""`HFHttpServer`-specific behaviour: LoRA through peft, sleep level 2, a stuck engine thread, LLM input checks."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import BadRequestError, ConflictError, EngineTimeoutError, NotReadyError, WeightSyncError
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.weights import encode_weight_stream
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import random_lora

GREEDY = {"prompt": "the man said that", "sampling_params": {"max_tokens": 6, "temperature": 0.0}}


@pytest.fixture(scope="module")
def server(tiny_llm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", request_timeout_s=30))
    run(server.launch())
    yield server
    run(server.shutdown())


async def _push(address: str, weights, **kwargs):
    client = RolloutClient(address)
    try:
        return await client.update_weights(weights, **kwargs)
    finally:
        await client.aclose()


def test_hf_lora_update_over_http_changes_output_and_matches_peft(server, tiny_llm_path):
    before = run(server.generate(GREEDY))
    tensors, peft_config = random_lora(tiny_llm_path, seed=1)
    result = run(_push(server.address, tensors, version=5, kind="lora", peft_config=peft_config, bucket_bytes=2048))
    assert result["kind"] == "lora" and result["num_tensors"] == len(tensors)
    after = run(server.generate(GREEDY))
    assert after.weight_version == 5 and after.token_ids != before.token_ids
    # the served adapter equals the trainer's adapter: same greedy tokens from a peft model built from it
    reference = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_llm_path), LoraConfig(**{
        k: v for k, v in peft_config.items() if k in ("r", "lora_alpha", "target_modules")}))  # fmt: skip
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(reference, tensors)
    ids = server._tokenizer(GREEDY["prompt"]).input_ids
    ref = reference.generate(input_ids=torch.tensor([ids]), max_new_tokens=6, do_sample=False, eos_token_id=None)
    assert ref[0, len(ids) :].tolist()[: len(after.token_ids)] == after.token_ids


def test_hf_lora_bad_updates_name_the_problem(server, tiny_llm_path):
    tensors, peft_config = random_lora(tiny_llm_path, seed=2)
    with pytest.raises(WeightSyncError, match="peft_config"):
        run(server.update_weights(tensors, version=9, kind="lora"))
    missing = dict(list(tensors.items())[1:])
    with pytest.raises(WeightSyncError, match="lacks 1 of"):
        run(server.update_weights(missing, version=9, kind="lora", peft_config=peft_config))
    renamed = {k.replace("lora_A", "lora_X"): v for k, v in tensors.items()}
    with pytest.raises(WeightSyncError, match="unknown tensor name"):
        run(server.update_weights(renamed, version=9, kind="lora", peft_config=peft_config))
    assert server.weight_version != 9
    assert run(server.generate(GREEDY)).finish_reason in ("stop", "length")


def test_hf_sleep_level_2_frees_weights_and_wake_reloads_checkpoint(tiny_llm_path, monkeypatch):
    import gc

    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    try:
        # level 1 on the CPU has nothing to free: no full collection (it cost a colocated reward model 0.2-0.8 s a step)
        run(server.sleep(level=1))
        assert collections == [] and server.metrics_snapshot()["weights_resident"] is True
        run(server.wake_up())
        fresh = run(server.generate(GREEDY))
        run(server.update_weights({"model.norm.weight": torch.full((32,), 3.0)}, version=4))
        assert run(server.generate(GREEDY)).weight_version == 4
        run(server.sleep(level=2))
        assert server.metrics_snapshot()["weights_resident"] is False and len(collections) == 1
        with pytest.raises(NotReadyError, match="asleep"):
            run(server.generate(GREEDY))
        with pytest.raises(NotReadyError, match="wake_up"):
            run(server.update_weights({"model.norm.weight": torch.ones(32)}, version=5))
        run(server.wake_up())
        again = run(server.generate(GREEDY))
        assert again.weight_version == 0 and again.token_ids == fresh.token_ids
    finally:
        run(server.shutdown())


def test_hf_stuck_engine_thread_times_out_and_recovers(tiny_llm_path):
    release = threading.Event()

    class StuckThread(HFHttpServer):
        async def _engine_generate(self, request_id, request, params):
            await self._run_blocking(release.wait, 30)
            return await super()._engine_generate(request_id, request, params)

    config = RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", request_timeout_s=0.3)
    server = StuckThread(config)
    run(server.launch())
    try:
        start = time.perf_counter()
        with pytest.raises(EngineTimeoutError, match="request_timeout_s"):
            run(server.generate(GREEDY))
        assert time.perf_counter() - start < 5
        assert httpx.get(server.address + "/health", trust_env=False).status_code == 200
        release.set()
        assert run(server.generate(GREEDY)).finish_reason in ("stop", "length")
        assert server.metrics_snapshot()["counters"]["timeouts"] == 1
    finally:
        release.set()
        run(server.shutdown())


def _params(**params):
    return {"prompt_ids": [1], "sampling_params": params}


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        pytest.param({"prompt_ids": [1, 10_000]}, "prompt_ids", id="out-of-vocab"),
        pytest.param(
            {"prompt_ids": [1], "sampling_params": {"max_tokens": 600}},
            "sampling_params.max_tokens",
            id="context-overflow",
        ),
        pytest.param(
            {"prompt_ids": [1], "sampling_params": {"temperature": -1.0}},
            "sampling_params.temperature",
            id="negative-temperature",
        ),
        pytest.param(
            {"prompt_ids": [1], "sampling_params": {"max_tokens": "8"}},
            "sampling_params.max_tokens",
            id="string-max-tokens",
        ),
    ],
)
def test_hf_rejects_bad_llm_inputs_naming_the_field(server, request_, field):
    with pytest.raises(BadRequestError) as info:
        run(server.generate(request_))
    assert info.value.field == field and info.value.status_code == 422


def test_hf_refuses_a_prompt_over_max_prompt_len(server):
    # the base server reads `max_prompt_len` from LLM configs only (`RolloutBaseConfig` has no token limit)
    with pytest.raises(BadRequestError, match=r"8193 tokens exceeds rollout\.max_prompt_len=8192") as info:
        run(server.generate({"prompt_ids": [1] * 8193}))
    assert info.value.field == "prompt_ids" and info.value.status_code == 422


def test_hf_logprobs_and_text(server):
    out = run(server.generate({**GREEDY, "sampling_params": {"max_tokens": 5, "temperature": 0.0, "logprobs": True}}))
    assert len(out.log_probs) == len(out.token_ids) and all(lp <= 0 for lp in out.log_probs)
    assert out.text == server._tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_hf_capacity_and_duplicate_ids(tiny_llm_path):
    release = threading.Event()

    class Slow(HFHttpServer):
        async def _engine_generate(self, request_id, request, params):
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
            return await super()._engine_generate(request_id, request, params)

    server = Slow(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", max_concurrent_requests=2))
    run(server.launch())

    async def scenario():
        first = asyncio.ensure_future(server.generate({**GREEDY, "request_id": "r1"}))
        while "r1" not in server._inflight:
            await asyncio.sleep(0.005)
        with pytest.raises(ConflictError, match="already in flight") as info:
            await server.generate({**GREEDY, "request_id": "r1"})
        assert info.value.status_code == 409
        second = asyncio.ensure_future(server.generate({**GREEDY, "request_id": "r2"}))
        while "r2" not in server._inflight:
            await asyncio.sleep(0.005)
        with pytest.raises(NotReadyError, match="capacity"):
            await server.generate({**GREEDY, "request_id": "r3"})
        release.set()
        return await asyncio.gather(first, second)

    try:
        assert [r.request_id for r in run(scenario())] == ["r1", "r2"]
    finally:
        release.set()
        run(server.shutdown())


@pytest.mark.parametrize("level", [0, 3])
def test_hf_sleep_rejects_a_bad_level_naming_it(server, level):
    with pytest.raises(BadRequestError, match=f"sleep level must be 1 or 2, got {level}") as info:
        run(server.sleep(level))
    assert info.value.field == "level" and server.state.value == "ready"


@pytest.mark.parametrize("fault", ["missing-tensor", "broken-stream"])
def test_hf_rejected_lora_update_with_a_new_config_keeps_the_served_adapter(tiny_llm_path, fault):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())
    try:
        tensors, peft_config = random_lora(tiny_llm_path, seed=1)
        run(server.update_weights(tensors, version=1, kind="lora", peft_config=peft_config))
        served = run(server.generate(GREEDY)).token_ids
        wider, wider_config = random_lora(tiny_llm_path, seed=3, r=8)  # a new config: the adapter is rebuilt
        if fault == "missing-tensor":
            partial = dict(list(wider.items())[1:])
            with pytest.raises(WeightSyncError, match="lacks 1 of"):
                run(server.update_weights(partial, version=2, kind="lora", peft_config=wider_config))
        else:  # the stream breaks after the manifest was accepted
            chunks = encode_weight_stream(wider, version=2, kind="lora", peft_config=wider_config)
            stream = b"".join(bytes(c) for c in chunks)
            with pytest.raises(WeightSyncError, match="truncated"):
                run(_post_raw(server.address, stream[: len(stream) // 2]))
        after = run(server.generate(GREEDY))
        assert after.weight_version == 1 and after.token_ids == served
    finally:
        run(server.shutdown())


async def _post_raw(address: str, body: bytes):
    client = RolloutClient(address)
    try:
        return await client._post("/update_weights", content=body, headers={"content-type": "application/octet-stream"})
    finally:
        await client.aclose()


def test_hf_wake_up_when_awake_does_not_wait_for_in_flight_generates(tiny_llm_path):
    release = threading.Event()

    class Slow(HFHttpServer):
        async def _engine_generate(self, request_id, request, params):
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
            return await super()._engine_generate(request_id, request, params)

    server = Slow(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", lifecycle_timeout_s=5))
    run(server.launch())

    async def scenario():
        first = asyncio.ensure_future(server.generate({**GREEDY, "request_id": "slow"}))
        while "slow" not in server._inflight:
            await asyncio.sleep(0.005)
        state = await asyncio.wait_for(server.wake_up(), 1.0)  # a no-op: must not wait for "slow"
        ready = server.readiness()
        release.set()
        return state, ready, await first

    try:
        state, ready, first = run(scenario())
    finally:
        release.set()
        run(server.shutdown())
    assert state.value == "ready" and ready == (True, "ready") and first.request_id == "slow"
