"""`DataConfig`: verl-omni's `data.*` keys load; keys of missing features are rejected by name."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from verl_core.config import BaseConfig, ConfigError, omega_conf_to_dataclass
from verl_omni.data import DataConfig

# verl-omni HEAD's `data.*` defaults (diffusion_trainer), tool_config_path's interpolation resolved to null
VERL_OMNI_DATA = {
    "tokenizer": None,
    "use_shm": False,
    "train_files": "~/data/rlhf/gsm8k/train.parquet",
    "val_files": "~/data/rlhf/gsm8k/test.parquet",
    "train_max_samples": -1,
    "val_max_samples": -1,
    "prompt_key": "prompt",
    "reward_fn_key": "data_source",
    "max_prompt_length": 512,
    "max_response_length": 512,
    "train_batch_size": 1024,
    "val_batch_size": None,
    "tool_config_path": None,
    "return_raw_input_ids": False,
    "return_raw_chat": True,
    "return_full_prompt": False,
    "shuffle": True,
    "seed": None,
    "dataloader_num_workers": 8,
    "image_patch_size": 14,
    "validation_shuffle": False,
    "filter_overlong_prompts": False,
    "filter_overlong_prompts_workers": 1,
    "truncation": "error",
    "image_key": "images",
    "video_key": "videos",
    "trust_remote_code": False,
    "custom_cls": {"path": None, "name": None, "collate_fn": None},
    "return_multi_modal_inputs": True,
    "sampler": {"class_path": None, "class_name": None},
    "datagen": {"path": None, "name": None},
    "apply_chat_template_kwargs": {},
}


@dataclasses.dataclass
class _Root(BaseConfig):
    """Stands in for the trainer's root config, so errors carry the `data.` prefix."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)


def _build(data: dict) -> DataConfig:
    return omega_conf_to_dataclass(OmegaConf.create({"data": data}), _Root).data


def test_verl_omni_data_keys_load():
    cfg = _build(VERL_OMNI_DATA)
    assert cfg.train_batch_size == 1024 and cfg.resolved_seed == 1
    assert cfg.files("train") == ["~/data/rlhf/gsm8k/train.parquet"]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"custom_cls": {"path": "my_ds.py", "name": "MyDataset"}}, "custom_cls.path"),
        ({"sampler": {"class_path": "pkg://x", "class_name": "S"}}, "sampler.class_path"),
        ({"datagen": {"path": "gen.py", "name": "G"}}, "datagen.path"),
        ({"filter_overlong_prompts": True}, "filter_overlong_prompts"),
        ({"tokenizer": "Qwen/Qwen2.5-VL"}, "tokenizer"),
        ({"apply_chat_template_kwargs": {"enable_thinking": False}}, "apply_chat_template_kwargs"),
        ({"train_batch_size": 0}, "train_batch_size"),
        ({"train_max_samples": 0}, "train_max_samples"),
    ],
)
def test_missing_features_and_bad_values_are_rejected_by_key(override, key):
    with pytest.raises(ConfigError, match=rf"{key}: expected"):
        DataConfig(**override)


def test_misspelt_key_gets_a_suggestion():
    with pytest.raises(ConfigError, match=r"data\.prompt_keys: unknown key.*Did you mean 'prompt_key'"):
        _build({"prompt_keys": "prompt"})
