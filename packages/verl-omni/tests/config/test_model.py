"""Tests for `verl_omni.config.model.DiffusionModelConfig`."""

from __future__ import annotations

import pytest

from verl_core.config import ConfigValueError, omega_conf_to_dataclass
from verl_omni.config import DiffusionModelConfig


def test_model_config_defaults_full_finetune():
    cfg = DiffusionModelConfig(path="/m")
    assert cfg.lora_rank == 0 and not cfg.use_lora and cfg.target_modules == "all-linear"
    assert cfg.fsdp_layer_prefixes is None  # the model adapter's default


def test_model_config_lora_keys():
    cfg = omega_conf_to_dataclass(
        {"path": "/m", "lora_rank": 64, "lora_alpha": 128, "target_modules": ["to_q", "to_k"]}, DiffusionModelConfig
    )
    assert cfg.use_lora and cfg.target_modules == ["to_q", "to_k"]


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"lora_rank": -1}, r"lora_rank: expected an int >= 0 \(0 = full fine-tuning\)"),
        ({"target_modules": []}, r"target_modules: expected a non-empty string"),
        ({"algorithm": "offline_dpo"}, r"algorithm: expected one of flow_grpo, diffusion_nft"),
        ({"fsdp_layer_prefixes": ["blocks"]}, r"fsdp_layer_prefixes: expected null \(the model's default\) or a list"),
    ],
)
def test_model_config_rejects_bad_values(kwargs, pattern):
    with pytest.raises(ConfigValueError, match=pattern):
        DiffusionModelConfig(**kwargs)
