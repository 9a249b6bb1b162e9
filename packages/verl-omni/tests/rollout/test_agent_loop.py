"""The diffusion agent loop: prompt groups to requests to one TensorDict, window pinning, errors naming the request."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from verl_core.rollout.client import RolloutClient
from verl_core.rollout.replica import RolloutRouter
from verl_core.testing.server_contract import canonical, hung_variant, run
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.rollout import (
    DiffusersHttpServer,
    DiffusionAgentLoop,
    get_agent_loop,
    pin_sde_window,
)
from verl_omni.rollout.agent_loop import AgentLoopError

PIPELINE = {"height": 32, "width": 32, "num_inference_steps": 4, "max_sequence_length": 32}
PROMPTS = ["a cat on a red chair", "two dogs in the snow", "an astronaut riding a horse"]


def _config(path, **overrides) -> DiffusionRolloutConfig:
    algo = {"noise_level": 0.7, "sde_window_size": 2, "sde_window_range": [0, 3]}
    base = {"dtype": "float32", "device": "cpu", "pipeline": PIPELINE, "algo": algo, "n": 2}
    return DiffusionRolloutConfig(**{**base, **overrides}).with_model(str(path))


@pytest.fixture(scope="module")
def config(tiny_qwen_image_path) -> DiffusionRolloutConfig:
    return _config(tiny_qwen_image_path)


@pytest.fixture(scope="module")
def server(config):
    server = DiffusersHttpServer(config, rank=3)
    run(server.launch())
    yield server
    run(server.shutdown())


@pytest.fixture
def sampling(config) -> DiffusionSamplingConfig:
    return pin_sde_window(config.sampling_config("qwen_image"), step=5, seed=0)


def test_groups_come_back_prompt_major_with_global_indices(server, sampling):
    out = run(DiffusionAgentLoop(server).generate(PROMPTS, sampling=sampling, seed=100))
    traj = out.trajectory
    assert traj.batch_size == torch.Size([6])
    assert traj["prompt_index"].tolist() == [0, 0, 1, 1, 2, 2]
    assert traj["seed"].tolist() == [100, 101, 102, 103, 104, 105]
    assert traj["server_rank"].tolist() == [3] * 6 and out.server_ranks == [3, 3, 3]
    assert out.weight_versions == [0, 0, 0] and traj["weight_version"].tolist() == [0] * 6
    assert out.seeds == [100, 102, 104]
    # each group is exactly what one direct request for that prompt returns
    direct = run(server.generate({"prompt": PROMPTS[1], "seed": 102, "sampling_params": _params(sampling)}))
    assert canonical(traj[2:4].exclude("prompt_index", "seed", "weight_version", "server_rank")) == canonical(
        direct.trajectory.exclude("prompt_index")
    )


def _params(sampling: DiffusionSamplingConfig) -> dict:
    return {k: v for k, v in sampling.to_dict().items() if k not in ("seed", "negative_prompt")}


def test_pinned_window_is_shared_by_every_request_of_a_step(server, sampling):
    out = run(DiffusionAgentLoop(server).generate(PROMPTS, sampling=sampling, seed=7))
    first = out.trajectory["step_indices"][0]
    assert (out.trajectory["step_indices"] == first).all()
    start = sampling.sde_window_range[0]
    assert first.tolist() == [start, start + 1]


def test_pin_sde_window_depends_only_on_seed_and_step(config):
    base = config.sampling_config("qwen_image")  # K = 2 in [0, 3]: start in {0, 1}
    starts = [pin_sde_window(base, step, seed=1).sde_window_range[0] for step in range(40)]
    assert set(starts) == {0, 1}
    assert starts == [pin_sde_window(base, step, seed=1).sde_window_range[0] for step in range(40)]
    assert starts != [pin_sde_window(base, step, seed=2).sde_window_range[0] for step in range(40)]
    assert all(pin_sde_window(base, s, seed=1).sde_window_range[1] - st == 2 for s, st in enumerate(starts))
    no_window = base.evolve(sde_window_size=0, sde_window_range=None)
    assert pin_sde_window(no_window, 3) is no_window


def test_negative_prompts_are_sent_per_prompt(server, sampling):
    cfg = sampling.evolve(guidance_scale=4.0)
    loop = DiffusionAgentLoop(server)
    plain = run(loop.generate(PROMPTS[:2], sampling=cfg, seed=1))
    negative = run(loop.generate(PROMPTS[:2], sampling=cfg, seed=1, negative_prompts=[None, "blurry, low quality"]))
    assert torch.equal(plain.trajectory["latents"][:2], negative.trajectory["latents"][:2])
    assert not torch.equal(plain.trajectory["latents"][2:], negative.trajectory["latents"][2:])


def test_through_a_router_over_http(server, sampling):
    async def routed():
        router = RolloutRouter([RolloutClient(server.address, rank=9)])
        try:
            return await DiffusionAgentLoop(router, max_concurrency=2).generate(PROMPTS, sampling=sampling, seed=100)
        finally:
            await router.aclose()

    over_http = run(routed())
    in_process = run(DiffusionAgentLoop(server).generate(PROMPTS, sampling=sampling, seed=100))
    assert over_http.server_ranks == [9, 9, 9]
    volatile = ("server_rank",)
    assert canonical(over_http.trajectory.exclude(*volatile)) == canonical(in_process.trajectory.exclude(*volatile))


def test_a_failed_request_names_the_prompt_and_the_server(server, sampling):
    async def routed():
        router = RolloutRouter([RolloutClient(server.address, rank=4)])
        try:
            return await DiffusionAgentLoop(router).generate(["a cat", ""], sampling=sampling, seed=0)
        finally:
            await router.aclose()

    with pytest.raises(AgentLoopError, match=r"prompt 1 failed on server rank 4: BadRequestError.*prompt") as info:
        run(routed())
    assert info.value.prompt_index == 1 and info.value.server_rank == 4


def test_a_hung_server_is_an_error_within_the_timeout(config, sampling):
    server = hung_variant(DiffusersHttpServer)(dataclasses.replace(config, request_timeout_s=30), rank=2)
    run(server.launch())
    try:
        with pytest.raises(
            AgentLoopError, match=r"prompt 0 failed on server rank 2: EngineTimeoutError.*0\.5 s"
        ) as info:
            run(DiffusionAgentLoop(server, timeout_s=0.5).generate(PROMPTS[:1], sampling=sampling, seed=0))
        assert info.value.prompt_index == 0 and info.value.server_rank == 2
    finally:
        run(server.shutdown())


def test_registry_has_the_old_name_and_lists_the_known_ones():
    assert get_agent_loop("diffusion_single_turn_agent") is DiffusionAgentLoop
    with pytest.raises(KeyError, match="diffusion_single_turn_agent"):
        get_agent_loop("single_turn_agent")


def test_bad_arguments_are_refused(server, sampling):
    loop = DiffusionAgentLoop(server)
    with pytest.raises(ValueError, match="prompts"):
        run(loop.generate("a cat", sampling=sampling, seed=0))
    with pytest.raises(ValueError, match="negative_prompts: 1 given for 2 prompts"):
        run(loop.generate(PROMPTS[:2], sampling=sampling, seed=0, negative_prompts=["x"]))
    with pytest.raises(ValueError, match="timeout_s"):
        DiffusionAgentLoop(server, timeout_s=0)
