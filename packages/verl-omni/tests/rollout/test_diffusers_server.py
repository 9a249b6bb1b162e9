"""`DiffusersHttpServer` beyond the contract: request checks, seeding, binary trajectories, sleep levels, LoRA swaps."""

from __future__ import annotations

import os

import httpx
import pytest
import torch
from tensordict import TensorDict

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import BadRequestError, EngineError, WeightSyncError
from verl_core.rollout.registry import get_backend
from verl_core.rollout.tensor_payload import TENSOR_CONTENT_TYPE
from verl_core.testing.server_contract import canonical, run
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.pipelines import GenerationAborted, make_generators
from verl_omni.rollout import DiffusersHttpServer, DiffusersRolloutEngine
from verl_omni.testing import TINY_LORA, perturbed_transformer_weights, random_transformer_lora

SAMPLING = {"n": 2, "num_inference_steps": 3, "height": 32, "width": 32, "max_sequence_length": 32}
REQUEST = {"prompt": "a cat on a red chair", "seed": 7, "sampling_params": SAMPLING}


def _config(path, **overrides) -> DiffusionRolloutConfig:
    pipeline = {"height": 32, "width": 32, "num_inference_steps": 3, "max_sequence_length": 32}
    base = {"dtype": "float32", "device": "cpu", "pipeline": pipeline, "n": 2}
    return DiffusionRolloutConfig(**{**base, **overrides}).with_model(str(path))


@pytest.fixture
def launch(tiny_qwen_image_path):
    """Launch servers on the tiny Qwen-Image folder; every one is shut down after the test."""
    servers = []

    def start(**overrides) -> DiffusersHttpServer:
        server = DiffusersHttpServer(_config(tiny_qwen_image_path, **overrides))
        run(server.launch())
        servers.append(server)
        return server

    yield start
    for server in servers:
        run(server.shutdown())


@pytest.fixture(scope="module")
def server(tiny_qwen_image_path):
    """One server that the read-only tests share (no weight updates, no sleep)."""
    server = DiffusersHttpServer(_config(tiny_qwen_image_path))
    run(server.launch())
    yield server
    run(server.shutdown())


def _latents(server, **changes) -> torch.Tensor:
    return run(server.generate({**REQUEST, **changes})).trajectory["latents"]


# ---- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "field", "needle"),
    [
        pytest.param({"num_inference_step": 3}, "num_inference_step", "did you mean 'num_inference_steps'", id="typo"),
        pytest.param({"seed": 3}, "seed", "request's `seed` field", id="seed"),
        pytest.param({"negative_prompt": "x"}, "negative_prompt", "`negative_prompt` field", id="negative"),
        pytest.param({"height": 8}, "height", "an int >= 16", id="height"),
        pytest.param({"sde_type": "ode"}, "sde_type", "sde_type.*'sde', 'cps'.*'ode'", id="sde-type"),
    ],
)
def test_sampling_params_are_checked_by_name(server, params, field, needle):
    with pytest.raises(BadRequestError, match=needle) as info:
        run(server.generate({**REQUEST, "sampling_params": {**SAMPLING, **params}}))
    assert info.value.field == f"sampling_params.{field}"


def test_token_ids_are_refused_over_http(server):
    with httpx.Client(base_url=server.address, trust_env=False, timeout=30) as http:
        response = http.post("/generate", json={"prompt_ids": [1, 2], "sampling_params": SAMPLING})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "prompt_ids" and "text `prompt`" in response.json()["error"]["message"]


def test_rows_are_seeded_seed_plus_row(server):
    pair = _latents(server, seed=11)
    single = _latents(server, seed=12, sampling_params={**SAMPLING, "n": 1})
    assert torch.equal(pair[1, 0], single[0, 0])  # the initial noise of row 1 is the noise of seed 11 + 1
    assert not torch.equal(pair[0, 0], pair[1, 0])


def test_request_without_seed_reports_the_seed_it_used(server):
    drawn = run(server.generate({"prompt": "a dog", "sampling_params": SAMPLING}))
    again = run(server.generate({"prompt": "a dog", "seed": drawn.seed, "sampling_params": SAMPLING}))
    assert drawn.sampling_params["seed"] == drawn.seed
    assert canonical(again.trajectory) == canonical(drawn.trajectory)


def test_negative_prompt_is_used_under_cfg(server):
    cfg = {**SAMPLING, "guidance_scale": 4.0}
    default = run(server.generate({**REQUEST, "sampling_params": cfg}))
    negative = run(server.generate({**REQUEST, "sampling_params": cfg, "negative_prompt": "blurry, low quality"}))
    assert "negative_prompt_embeds" in default.trajectory.keys()  # noqa: SIM118 - TensorDict refuses `in`
    assert not torch.equal(default.trajectory["negative_prompt_embeds"], negative.trajectory["negative_prompt_embeds"])
    assert not torch.equal(default.trajectory["latents"], negative.trajectory["latents"])
    assert negative.sampling_params["negative_prompt"] == "blurry, low quality"


def _generate_over_http(server, request: dict) -> dict:
    """`request` through a `RolloutClient` (the binary HTTP path), not the in-process call."""

    async def go():
        client = RolloutClient(server.address, timeout_s=60)
        try:
            return await client.generate(request)
        finally:
            await client.aclose()

    return run(go())


def test_trajectory_travels_binary_with_uint8_images(server):
    with httpx.Client(base_url=server.address, trust_env=False, timeout=30) as http:
        assert http.post("/generate", json=REQUEST).headers["content-type"] == TENSOR_CONTENT_TYPE
    out = _generate_over_http(server, {**REQUEST, "sampling_params": {**SAMPLING, "sde_window_size": 2}})
    traj = out["trajectory"]
    assert isinstance(traj, TensorDict) and traj.batch_size == torch.Size([2])
    assert traj["images"].dtype == torch.uint8 and traj["images"].shape == (2, 3, 32, 32)
    assert traj["latents"].dtype == torch.float32 and traj["latents"].shape[:2] == (2, 3)
    assert traj["log_probs"].shape == (2, 2) and traj["step_indices"].dtype == torch.int64
    assert torch.equal(traj["prompt_index"], torch.zeros(2, dtype=torch.long))
    assert traj["prompt_embeds"].stride(0) == 0  # one prompt per request: its embeddings travel once, expanded
    assert out["finish_reason"] == "stop" and out["seed"] == 7 and out["sampling_params"]["sde_window_size"] == 2


def test_trajectory_through_the_tmpfs_handoff_equals_the_http_body(server, monkeypatch):
    written, real = [], server.handoff_files.write
    monkeypatch.setattr(server.handoff_files, "write", lambda body: written.append(real(body)) or written[-1])

    async def both():
        plain, handoff = RolloutClient(server.address), RolloutClient(server.address, file_handoff=True)
        try:
            return await plain.generate(REQUEST), await handoff.generate(REQUEST)
        finally:
            await plain.aclose()
            await handoff.aclose()

    over_http, via_file = run(both())
    volatile = ("request_id", "latency_s")
    assert canonical({k: v for k, v in via_file.items() if k not in volatile}) == canonical(
        {k: v for k, v in over_http.items() if k not in volatile}
    )
    assert via_file["trajectory"]["latents"].dtype == torch.float32 and via_file["trajectory"].batch_size == (2,)
    assert len(written) == 1 and not os.path.exists(written[0]["path"])  # handed over by file, claimed, unlinked


def test_should_abort_stops_sampling_before_the_next_step(tiny_qwen_image_path):
    engine = DiffusersRolloutEngine(tiny_qwen_image_path)
    calls = []

    def should_abort() -> bool:
        calls.append(1)
        return len(calls) > 2  # let steps 0 and 1 run, stop before step 2

    sampling = engine.sampling.evolve(**{**SAMPLING, "num_inference_steps": 5})
    with pytest.raises(GenerationAborted, match="before denoising step 2 of 5") as info:
        engine.generate(["a cat"], sampling, make_generators(0, 2), should_abort=should_abort)
    assert info.value.step == 2 and len(calls) == 3


# ---- sleep levels --------------------------------------------------------------------------------


def test_sleep_level_2_reloads_and_reapplies_the_lora_adapter(launch):
    server = launch()
    tensors, peft_config = random_transformer_lora(server.config.model.path, seed=1)
    run(server.update_weights(tensors, version=3, kind="lora", peft_config=peft_config))
    before = run(server.generate(REQUEST))
    run(server.sleep(level=2))
    assert server.metrics_snapshot()["weights_resident"] is False
    run(server.wake_up())
    after = run(server.generate(REQUEST))
    assert after.weight_version == 3
    assert canonical(after.trajectory) == canonical(before.trajectory)
    served = run(server.served_weights(list(tensors), kind="lora"))
    assert all(torch.equal(served[n], t) for n, t in tensors.items())


def test_sleep_level_2_is_refused_after_a_full_update(launch):
    server = launch()
    run(server.update_weights(perturbed_transformer_weights(server.config.model.path, seed=1), version=4))
    with pytest.raises(BadRequestError, match=r"level=2.*version 4.*use level 1") as info:
        run(server.sleep(level=2))
    assert info.value.field == "level"
    run(server.sleep(level=1))
    run(server.wake_up())
    assert run(server.generate(REQUEST)).weight_version == 4


# ---- weight sync ---------------------------------------------------------------------------------


def test_lora_binding_zero_modules_is_refused_and_the_adapter_kept(launch):
    server = launch()
    path = server.config.model.path
    tensors, peft_config = random_transformer_lora(path, seed=1)
    run(server.update_weights(tensors, version=1, kind="lora", peft_config=peft_config))
    before = run(server.generate(REQUEST))
    bad = {**peft_config, "target_modules": ["no_such_module"]}
    with pytest.raises(WeightSyncError, match=r"target_modules.*no_such_module.*wraps no module") as info:
        run(server.update_weights(tensors, version=2, kind="lora", peft_config=bad))
    assert info.value.field == "peft_config.target_modules" and server.weight_version == 1
    assert canonical(run(server.generate(REQUEST)).trajectory) == canonical(before.trajectory)


def test_lora_config_change_swaps_the_adapter_and_a_rejected_one_restores_it(launch):
    server = launch()
    path = server.config.model.path
    small = {**TINY_LORA, "r": 2, "lora_alpha": 4}
    run(server.update_weights(random_transformer_lora(path, seed=1)[0], version=1, kind="lora", peft_config=TINY_LORA))
    r4 = run(server.generate(REQUEST))
    r2_tensors, _ = random_transformer_lora(path, seed=2, config=small)
    run(server.update_weights(r2_tensors, version=2, kind="lora", peft_config=small))
    r2 = run(server.generate(REQUEST))
    assert canonical(r2.trajectory) != canonical(r4.trajectory)
    wide = {**TINY_LORA, "r": 8}
    with pytest.raises(WeightSyncError, match="expected shape"):
        run(server.update_weights(r2_tensors, version=3, kind="lora", peft_config=wide))  # r=2 tensors for r=8
    assert server.weight_version == 2
    assert canonical(run(server.generate(REQUEST)).trajectory) == canonical(r2.trajectory)
    served = run(server.served_weights(list(r2_tensors), kind="lora"))
    assert all(torch.equal(served[n], t) for n, t in r2_tensors.items())


def test_prefixed_full_names_are_accepted_and_read_back(launch):
    server = launch()
    weights = perturbed_transformer_weights(server.config.model.path, seed=5)
    prefixed = {f"transformer.{name}": t for name, t in weights.items()}
    run(server.update_weights(prefixed, version=1, bucket_bytes=1 << 12))
    served = run(server.served_weights(list(weights)))
    assert all(torch.equal(served[n], t) for n, t in weights.items())
    with pytest.raises(BadRequestError, match="not served"):
        run(server.served_weights(["no.such.weight"]))


@pytest.mark.parametrize("merge_lora", [True, False])
def test_full_update_under_a_served_lora_reads_back_the_sent_base(launch, merge_lora):
    """Slices of large tensors land in the pristine base; the adapter is merged in again at the end."""
    server = launch(engine_kwargs={"diffusers": {"merge_lora": merge_lora}})
    assert server._require_engine("test").merge_lora is merge_lora
    path = server.config.model.path
    tensors, peft_config = random_transformer_lora(path, seed=1)
    run(server.update_weights(tensors, version=1, kind="lora", peft_config=peft_config))
    full = perturbed_transformer_weights(path, seed=2)
    to_q = next(t for n, t in full.items() if n.endswith("to_q.weight"))
    bucket = to_q.numel() * to_q.element_size() // 2  # over HTTP the LoRA-wrapped weights travel as slices

    async def send() -> None:
        client = RolloutClient(server.address, timeout_s=60)
        try:
            await client.update_weights(full, version=2, kind="full", bucket_bytes=bucket)
        finally:
            await client.aclose()

    run(send())
    served = run(server.served_weights(list(full)))
    differ = [n for n, t in full.items() if not torch.equal(served[n], t)]
    assert not differ, f"{len(differ)} served base tensors differ from the sent ones, e.g. {differ[:3]}"
    served_lora = run(server.served_weights(list(tensors), kind="lora"))
    assert all(torch.equal(served_lora[n], t) for n, t in tensors.items())
    engine = DiffusersRolloutEngine(path, merge_lora=False)  # the same weights, adapter in the forward
    engine.update_weights(full)
    engine.update_weights(tensors, lora_config=peft_config)
    params = server._defaults.evolve(**SAMPLING)
    expected = engine.generate([REQUEST["prompt"]], params, make_generators(REQUEST["seed"], 2))
    torch.testing.assert_close(_latents(server), expected["latents"], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("engine_kwargs", "needle"),
    [
        pytest.param({"diffusers": {"merge_lora": "yes"}}, r"diffusers\.merge_lora: expected bool", id="type"),
        pytest.param({"diffusers": {"merge_loras": True}}, r"diffusers\.merge_loras is not an option", id="key"),
        pytest.param({"diffusers": [1]}, r"engine_kwargs\.diffusers: expected a mapping", id="mapping"),
    ],
)
def test_engine_kwargs_diffusers_are_checked_by_name_and_type(tiny_qwen_image_path, engine_kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        DiffusersHttpServer(_config(tiny_qwen_image_path, engine_kwargs=engine_kwargs))


def test_merge_lora_switch_is_a_trainer_config_override(tiny_qwen_image_path):
    from verl_omni.trainer.config.loader import load_config

    path = str(tiny_qwen_image_path)
    off = "actor_rollout_ref.rollout.engine_kwargs.diffusers.merge_lora=false"
    rollout = load_config([f"actor_rollout_ref.model.path={path}", off]).actor_rollout_ref.rollout
    options = DiffusersHttpServer(rollout.with_model(path))._engine_options
    assert options == {"merge_lora": False, "compile_blocks": False}  # trainer.device=auto is the CPU here
    default = load_config([f"actor_rollout_ref.model.path={path}"]).actor_rollout_ref.rollout
    assert "merge_lora" not in DiffusersHttpServer(default.with_model(path))._engine_options  # the engine's: merged


@pytest.mark.parametrize(
    ("device", "enforce_eager", "engine_kwargs", "compiled"),
    [
        ("cuda", False, {}, True),  # the default on a GPU
        ("cuda", True, {}, False),
        ("cpu", False, {}, False),  # a CPU compiles slower than it samples a tiny model
        ("cuda", False, {"diffusers": {"compile_blocks": False}}, False),  # the explicit option wins
        ("cpu", True, {"diffusers": {"compile_blocks": True}}, True),
    ],
)
def test_compile_blocks_defaults_to_cuda_and_not_enforce_eager(
    tiny_qwen_image_path, monkeypatch, device, enforce_eager, engine_kwargs, compiled
):
    import verl_omni.rollout.diffusers.server as server_module

    monkeypatch.setattr(server_module, "resolve_device", lambda _: torch.device(device))  # no GPU needed to decide
    config = _config(tiny_qwen_image_path, enforce_eager=enforce_eager, engine_kwargs=engine_kwargs)
    assert DiffusersHttpServer(config)._engine_options["compile_blocks"] is compiled


def test_compile_blocks_reaches_the_served_engine(launch):
    server = launch(engine_kwargs={"diffusers": {"compile_blocks": True}})
    engine = server._require_engine("test")
    assert engine.compiled_blocks == len(engine.transformer.transformer_blocks) > 0

    def failing_backend(graph, example_inputs):
        raise ValueError("no compiler for this graph")

    for block in engine.transformer.transformer_blocks:
        block.compile(backend=failing_backend)

    with pytest.raises(EngineError, match=r"enforce_eager=true") as info:  # the client sees the key to turn it off
        _generate_over_http(server, REQUEST)
    assert "no compiler for this graph" in str(info.value)


# ---- config and registry -------------------------------------------------------------------------


def test_backend_is_registered_as_diffusers():
    assert get_backend("diffusers") is DiffusersHttpServer
    assert DiffusionRolloutConfig().name == "diffusers"


def test_config_without_model_path_is_refused():
    with pytest.raises(ValueError, match="with_model"):
        DiffusersHttpServer(DiffusionRolloutConfig())


def test_tensor_parallel_is_reported_as_ignored_naming_the_key(tiny_qwen_image_path):
    config = RolloutConfig(model={"path": str(tiny_qwen_image_path)}, name="diffusers", tensor_model_parallel_size=2)
    with pytest.warns(UserWarning, match=r"rollout\.tensor_model_parallel_size=2 is ignored"):
        DiffusersHttpServer(config)


def test_plain_rollout_config_serves_with_sampling_defaults(tiny_qwen_image_path):
    server = DiffusersHttpServer(
        RolloutConfig(model={"path": str(tiny_qwen_image_path)}, name="diffusers", device="cpu")
    )
    run(server.launch())
    try:
        out = run(server.generate(REQUEST))
        assert out.sampling_params["noise_level"] == 1.0  # SDESamplerConfig's default, as rollout.algo's
        assert server.metrics_snapshot()["dtype"] == "float32"
    finally:
        run(server.shutdown())
