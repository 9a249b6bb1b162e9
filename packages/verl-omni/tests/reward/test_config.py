"""`RewardConfig`: verl-omni's `reward.*` keys load; custom manager classes are refused."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from verl_core.config import BaseConfig, ConfigError, omega_conf_to_dataclass
from verl_omni.reward import RewardConfig

# verl-omni HEAD's `reward.*` defaults (diffusion_trainer); `_target_`s dropped, the reward-model rollout trimmed and
# its mandatory `name: ???` filled in (the builder refuses missing values)
VERL_OMNI_REWARD = {
    "reward_model": {
        "enable": False,
        "enable_resource_pool": False,
        "n_gpus_per_node": 8,
        "nnodes": 0,
        "model_path": None,
        "rollout": {"name": "vllm", "dtype": "bfloat16", "tensor_model_parallel_size": 2},
    },
    "num_workers": 8,
    "custom_reward_function": {"path": None, "name": "compute_score"},
    "reward_functions": {},
    "aggregation": "weighted_sum",
    "reward_manager": {
        "source": "importlib",
        "name": "VisualRewardManager",
        "module": {"path": "pkg://verl_omni.reward_loop.reward_manager"},
    },
    "sandbox_fusion": {"url": None, "max_concurrent": 64, "memory_limit_mb": 1024},
}


@dataclasses.dataclass
class _Root(BaseConfig):
    """Stands in for the trainer's root config, so errors carry the `reward.` prefix."""

    reward: RewardConfig = dataclasses.field(default_factory=RewardConfig)


def _build(reward: dict) -> RewardConfig:
    return omega_conf_to_dataclass(OmegaConf.create({"reward": reward}), _Root).reward


def test_verl_omni_reward_keys_load():
    cfg = _build(VERL_OMNI_REWARD)
    assert cfg.reward_manager.name == "VisualRewardManager" and not cfg.uses_custom_function


def test_verl_omni_multi_reward_recipe_loads():
    cfg = _build(
        {
            "custom_reward_function": {
                "path": "pkg://verl_omni.reward_loop.reward_manager.multi",
                "name": "_multi_reward_placeholder",
            },
            "reward_manager": {"source": "importlib", "name": "MultiVisualRewardManager"},
            "reward_functions": {
                "jpeg": {
                    "path": "pkg://verl_omni.utils.reward_score.jpeg_compressibility",
                    "name": "compute_score",
                    "weight": 0.5,
                },
            },
        }
    )
    assert not cfg.uses_custom_function and cfg.reward_functions["jpeg"].weight == 0.5


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            {"reward_model": {"enable": True}},
            r"reward_model\.model_path: expected a model folder \(a vision-language model\) with enable=true",
        ),
        ({"sandbox_fusion": {"url": "http://x"}}, r"sandbox_fusion\.url: expected null"),
        (
            {"reward_manager": {"source": "importlib", "name": "Mine", "module": {"path": "my_manager.py"}}},
            r"reward_manager\.module\.path: .*custom reward manager classes are not implemented",
        ),
        ({"reward_manager": {"name": "MultiVisualRewardManager"}}, r"reward_functions: expected at least one entry"),
        ({"reward_functions": {"a": {"path": "a.py", "required": False}}}, r"required: expected true"),
        (
            {"custom_reward_function": {"path": "r.py"}, "reward_functions": {"a": {"path": "a.py"}}},
            r"custom_reward_function\.path: expected null when reward_functions is set",
        ),
        (
            {"reward_functions": {"a": {"weight": 1.0}}},
            r"reward_functions\.a\.path: expected a \.py file .*or set builtin",
        ),
        (
            {"reward_functions": {"a": {"builtin": "jpeg"}}},
            r"reward_functions\.a\.builtin: expected one of jpeg_compressibility",
        ),
        (
            {"reward_functions": {"a": {"builtin": "http", "path": "a.py"}}},
            r"reward_functions\.a\.path: expected null with builtin 'http'",
        ),
        (
            {"reward_functions": {"a": {"builtin": "http", "name": "f"}}},
            r"reward_functions\.a\.name: expected null with builtin 'http'",
        ),
        ({"reward_functions": {"a": {"builtin": "http", "weight": "heavy"}}}, r"reward_functions\.a\.weight"),
        ({"reward_functions": {"a": {"builtin": "http", "wieght": 1}}}, r"reward_functions\.a\.wieght: unknown key"),
        ({"num_workers": 0}, r"num_workers: expected an int >= 1"),
        ({"timeout_s": 0}, r"timeout_s: expected a number of seconds > 0"),
        ({"aggregation": "mean"}, r"aggregation: expected one of 'weighted_sum'"),
        ({"num_worker": 2}, r"reward\.num_worker: unknown key.*Did you mean 'num_workers'"),
    ],
)
def test_rejections_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        _build(override)
