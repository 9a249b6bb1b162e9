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
    out = run(DiffusionAgentLoop(server, prompts_per_request=1).generate(PROMPTS, sampling=sampling, seed=100))
    traj = out.trajectory
    assert traj.batch_size == torch.Size([6])
    assert traj["prompt_index"].tolist() == [0, 0, 1, 1, 2, 2]
    assert traj["seed"].tolist() == [100, 101, 102, 103, 104, 105]
    assert traj["server_rank"].tolist() == [3] * 6 and out.server_ranks == [3, 3, 3]
    assert out.weight_versions == [0, 0, 0] and traj["weight_version"].tolist() == [0] * 6
    assert out.seeds == [100, 102, 104] and out.request_index == [0, 1, 2]
    # each group is exactly what one direct request for that prompt returns
    direct = run(server.generate({"prompt": PROMPTS[1], "seed": 102, "sampling_params": _params(sampling)}))
    assert canonical(traj[2:4].exclude("prompt_index", "seed", "weight_version", "server_rank")) == canonical(
        direct.trajectory.exclude("prompt_index")
    )


class _Recorder:
    """A backend that records the requests and answers each through `server`; `num_servers` as a replica has."""

    def __init__(self, server, num_servers: int | None = None) -> None:
        self.server, self.requests = server, []
        if num_servers is not None:
            self.num_servers = num_servers

    async def generate(self, request):
        self.requests.append(dict(request))
        return await self.server.generate(request)


@pytest.mark.parametrize(
    ("servers", "per_request", "max_images", "groups"),
    [
        (2, 0, 32, [["p0", "p1", "p2"], ["p3", "p4"]]),  # auto: ceil(5 / 2) prompts a request
        (None, 0, 32, [["p0", "p1", "p2", "p3", "p4"]]),  # servers unknown: one
        (1, 0, 4, [["p0", "p1"], ["p2", "p3"], "p4"]),  # capped at 4 // n=2 prompts
        (2, 1, 32, ["p0", "p1", "p2", "p3", "p4"]),  # 1: one request per prompt, a plain `prompt` text
        (2, 2, 32, [["p0", "p1"], ["p2", "p3"], "p4"]),
    ],
)
def test_prompts_are_grouped_into_requests_seeded_by_their_first_row(server, sampling, servers, per_request,
                                                                     max_images, groups):  # fmt: skip
    backend = _Recorder(server, servers)
    loop = DiffusionAgentLoop(backend, prompts_per_request=per_request, max_images_per_request=max_images)
    prompts = [f"p{i}" for i in range(5)]
    out = run(loop.generate(prompts, sampling=sampling, seed=100, negative_prompts=[None, "x", None, None, "y"]))
    assert [r["prompt"] for r in backend.requests] == groups
    sizes = [1 if isinstance(g, str) else len(g) for g in groups]
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    assert [r["seed"] for r in backend.requests] == [100 + 2 * f for f in firsts]
    negatives = [None, "x", None, None, "y"]
    for r, f, k in zip(backend.requests, firsts, sizes, strict=True):
        want = negatives[f : f + k]
        want = None if want == [None] * k else want[0] if isinstance(r["prompt"], str) else want
        assert r.get("negative_prompt") == want
    traj = out.trajectory
    assert traj["prompt_index"].tolist() == [i // 2 for i in range(10)]
    assert traj["seed"].tolist() == list(range(100, 110))
    assert out.seeds == [100, 102, 104, 106, 108]
    assert out.request_index == [i for i, k in enumerate(sizes) for _ in range(k)]


def test_grouped_rows_equal_one_request_per_prompt(server, sampling):
    per_prompt = run(DiffusionAgentLoop(server, prompts_per_request=1).generate(PROMPTS, sampling=sampling, seed=5))
    grouped = DiffusionAgentLoop(server, prompts_per_request=3)
    once, twice = (run(grouped.generate(PROMPTS, sampling=sampling, seed=5)) for _ in range(2))
    assert once.request_index == [0, 0, 0]
    assert canonical(once.trajectory) == canonical(twice.trajectory)  # bit-equal: fixed by the request
    for key in ("prompt_index", "seed", "step_indices"):
        assert torch.equal(once.trajectory[key], per_prompt.trajectory[key]), key
    for key in ("latents", "log_probs"):
        torch.testing.assert_close(once.trajectory[key], per_prompt.trajectory[key], rtol=0, atol=1e-5, msg=key)


def test_a_grouping_option_out_of_range_is_refused(server):
    with pytest.raises(ValueError, match="prompts_per_request"):
        DiffusionAgentLoop(server, prompts_per_request=-1)
    with pytest.raises(ValueError, match="max_images_per_request"):
        DiffusionAgentLoop(server, max_images_per_request=0)


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
    for per_request in (1, 2):  # one request per prompt; one request of both (two engine calls on the server)
        loop = DiffusionAgentLoop(server, prompts_per_request=per_request)
        plain = run(loop.generate(PROMPTS[:2], sampling=cfg, seed=1))
        negatives = [None, "blurry, low quality"]
        negative = run(loop.generate(PROMPTS[:2], sampling=cfg, seed=1, negative_prompts=negatives))
        a, b = plain.trajectory["latents"], negative.trajectory["latents"]
        torch.testing.assert_close(a[:2], b[:2], rtol=0, atol=1e-5)
        assert (a[2:] - b[2:]).abs().max() > 1e-3


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
            return await DiffusionAgentLoop(router, prompts_per_request=1).generate(
                ["a cat", ""], sampling=sampling, seed=0
            )
        finally:
            await router.aclose()

    with pytest.raises(AgentLoopError, match=r"prompt 1 failed on server rank 4: BadRequestError.*prompt") as info:
        run(routed())
    assert info.value.prompt_index == 1 and info.value.server_rank == 4


def test_a_failed_grouped_request_names_its_prompts(server, sampling):
    loop = DiffusionAgentLoop(server, prompts_per_request=2)
    with pytest.raises(AgentLoopError, match=r"prompts 2-3 failed on server rank 3: BadRequestError.*`prompt`") as info:
        run(loop.generate(["a", "b", "c", ""], sampling=sampling, seed=0))
    assert info.value.prompt_index == 2


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
