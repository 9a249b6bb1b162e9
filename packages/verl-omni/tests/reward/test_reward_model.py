"""`reward.reward_model.*`: the config's checks, the verl-core server config built from it, and which reward-model
arguments a function receives (`RewardModelEndpoint.kwargs_for`)."""

from __future__ import annotations

import pytest

from verl_core.config import ConfigError
from verl_omni.reward.reward_model import RewardModelConfig, RewardModelEndpoint


def test_disabled_reward_model_needs_nothing():
    config = RewardModelConfig()
    assert not config.enable and not config.colocated and config.rollout.name == "hf"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"enable": True}, r"model_path: expected a model folder"),
        ({"enable": True, "model_path": "/m", "enable_resource_pool": True}, r"nnodes: expected an int >= 1"),
        (
            {"enable": True, "model_path": "/m", "enable_resource_pool": True, "nnodes": 1, "n_gpus_per_node": 3,
             "rollout": {"tensor_model_parallel_size": 2}},
            r"n_gpus_per_node: expected nnodes x n_gpus_per_node a multiple of .*tensor_model_parallel_size \(2\)",
        ),
        ({"rollout": {"dtype": "int8"}}, r"rollout\.dtype: expected one of bfloat16"),
        ({"rollout": {"response_length": 0}}, r"rollout\.response_length: expected an int >= 1"),
        ({"rollout": {"request_timeout_s": 0}}, r"rollout\.request_timeout_s: expected a number of seconds > 0"),
        ({"rollout": {"profiler": {}}}, r"rollout\.profiler: unknown key"),
    ],
)  # fmt: skip
def test_bad_reward_model_config_names_the_key(fields, match):
    with pytest.raises(ConfigError, match=match):
        RewardModelConfig(**fields)


def test_server_config_maps_the_reward_model_keys():
    config = RewardModelConfig(
        enable=True,
        model_path="/models/vlm",
        rollout={"name": "vllm", "dtype": "bf16", "tensor_model_parallel_size": 2, "gpu_memory_utilization": 0.3,
                 "response_length": 64, "prompt_length": 512, "temperature": 0.0, "request_timeout_s": 30},
    )  # fmt: skip
    server = config.server_config("cuda")
    assert (server.name, server.device, server.model.path, server.model.dtype) == ("vllm", "cuda", "/models/vlm",
                                                                                     "bfloat16")  # fmt: skip
    assert (server.tensor_model_parallel_size, server.gpu_memory_utilization) == (2, 0.3)
    assert (server.sampling.max_tokens, server.sampling.temperature, server.max_prompt_len) == (64, 0.0, 512)
    assert server.request_timeout_s == 30 and server.max_request_bytes >= 16 << 20  # images travel inline
    assert config.colocated


def test_a_function_gets_only_the_reward_model_arguments_it_takes(tmp_path):
    from verl_core.testing.tiny_llm import build_tiny_vlm

    path = str(build_tiny_vlm(tmp_path / "vlm"))
    endpoint = RewardModelEndpoint("127.0.0.1:1234", "served-name", path)

    def address_only(data_source, solution_image, ground_truth, extra_info, reward_router_address): ...

    def everything(data_source, solution_image, ground_truth, extra_info, **kwargs): ...

    def nothing(data_source, solution_image, ground_truth, extra_info): ...

    assert endpoint.kwargs_for(address_only) == {"reward_router_address": "127.0.0.1:1234"}
    assert endpoint.kwargs_for(nothing) == {}
    got = endpoint.kwargs_for(everything)
    assert got["reward_router_address"] == "127.0.0.1:1234" and got["model_name"] == "served-name"
    assert got["reward_model_tokenizer"].eos_token == "<|im_end|>"  # the model's own tokenizer


def test_colocated_tensor_parallel_reward_model_on_gpus_is_refused():
    from verl_omni.trainer.reward_model import RewardModelService

    config = RewardModelConfig(enable=True, model_path="/m", rollout={"tensor_model_parallel_size": 2})
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size=2 with a colocated reward model.*"
                                         r"enable_resource_pool=true"):  # fmt: skip
        RewardModelService(config, device="cuda", slots=[object(), object()])


def test_preflight_refuses_a_missing_reward_model_folder_and_several_nodes(tmp_path):
    from verl_omni.trainer.components import _check_reward_model
    from verl_omni.trainer.config import load_config

    def config(*overrides):
        base = ["actor_rollout_ref.model.path=unused", "reward.reward_model.enable=true"]
        return load_config([*base, *overrides], config_name="diffusion_trainer")

    with pytest.raises(FileNotFoundError, match=r"reward\.reward_model\.model_path: /no/such/vlm is not a folder"):
        _check_reward_model(config("reward.reward_model.model_path=/no/such/vlm"))
    folder = f"reward.reward_model.model_path={tmp_path}"
    _check_reward_model(config(folder))  # an existing folder passes
    with pytest.raises(ValueError, match=r"trainer\.nnodes=2 with reward\.reward_model\.enable=true"):
        _check_reward_model(config(folder, "trainer.nnodes=2", "actor_rollout_ref.rollout.host=0.0.0.0"))
    own_pool = ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.n_gpus_per_node=1"]
    with pytest.raises(ValueError, match=r"reward\.reward_model\.nnodes=2 with"):
        _check_reward_model(config(folder, *own_pool, "reward.reward_model.nnodes=2"))
