"""Tests for `verl_core.config.rollout`: defaults, validation messages, building from OmegaConf."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_core.config import (
    ConfigKeyError,
    ConfigValueError,
    LoRAConfig,
    RolloutConfig,
    SamplingConfig,
    omega_conf_to_dataclass,
)


def test_rollout_config_defaults_bind_loopback():
    cfg = RolloutConfig(model={"path": "/m"})
    assert cfg.host == "127.0.0.1" and cfg.port == 0 and cfg.name == "hf"
    assert cfg.model.path == "/m" and not cfg.lora.enabled


def test_rollout_config_from_omegaconf_nested():
    node = OmegaConf.create(
        {"model": {"path": "/m", "dtype": "bfloat16"}, "lora": {"rank": 16}, "sampling": {"top_p": 0.9}}
    )
    cfg = omega_conf_to_dataclass(node, RolloutConfig)
    assert cfg.model.dtype == "bfloat16" and cfg.lora.enabled and cfg.sampling.top_p == 0.9


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        pytest.param({"sleep_level": 3}, "RolloutConfig.sleep_level", id="sleep-level"),
        pytest.param({"request_timeout_s": 0}, "RolloutConfig.request_timeout_s", id="timeout"),
        pytest.param({"port": 70000}, "RolloutConfig.port", id="port"),
        pytest.param({"device": "tpu"}, "RolloutConfig.device", id="device"),
        pytest.param(
            {"update_weights_bucket_bytes": 10, "max_bucket_bytes": 5}, "update_weights_bucket_bytes", id="bucket"
        ),
        pytest.param({"update_weights_bucket_bytes": 32}, r"update_weights_bucket_bytes.*\[64,", id="bucket-under-64"),
        pytest.param({"update_weights_transport": "nccl"}, r"update_weights_transport.*auto.*http", id="transport"),
    ],
)
def test_rollout_config_rejects_bad_values(kwargs, needle):
    with pytest.raises(ConfigValueError, match=needle):
        RolloutConfig(model={"path": "/m"}, **kwargs)


def test_rollout_config_requires_model_path():
    with pytest.raises(ConfigKeyError, match="model"):
        omega_conf_to_dataclass({"name": "hf"}, RolloutConfig)
    with pytest.raises(ConfigValueError, match=r"model\.path"):
        RolloutConfig(model={"path": ""})


def test_sampling_and_lora_configs_validate():
    with pytest.raises(ConfigValueError, match=r"SamplingConfig\.top_p"):
        SamplingConfig(top_p=0)
    with pytest.raises(ConfigValueError, match=r"LoRAConfig\.rank"):
        LoRAConfig(rank=-1)
