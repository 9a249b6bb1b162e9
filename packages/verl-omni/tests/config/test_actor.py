"""Tests for `verl_omni.config.actor`: defaults, verl-omni key names, validation messages."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_core.config import ConfigKeyError, ConfigValueError, omega_conf_to_dataclass
from verl_omni.config import (
    DiffusionActorConfig,
    DiffusionLossConfig,
    DiffusionRefConfig,
    FSDPEngineConfig,
    OptimConfig,
    torch_dtype_name,
)


def test_actor_config_defaults_match_verl_omni():
    cfg = DiffusionActorConfig()
    assert cfg.diffusion_loss.clip_ratio == 1e-4 and cfg.diffusion_loss.adv_clip_max == 5.0
    assert cfg.diffusion_loss.loss_mode == "flow_grpo" and cfg.diffusion_loss.kl_type == "historical"
    assert (cfg.use_kl_loss, cfg.kl_loss_coef, cfg.grad_clip, cfg.ppo_epochs) == (False, 0.001, 1.0, 1)
    assert cfg.optim.betas == [0.9, 0.999] and cfg.optim.lr_scheduler_type == "constant"
    assert cfg.fsdp_config.model_dtype == "fp32" and cfg.fsdp_config.dtype == "bfloat16"
    assert cfg.checkpoint.resolved_load_contents == ["model", "optimizer", "extra"]


def test_actor_config_builds_from_verl_omni_yaml_keys():
    node = OmegaConf.create(
        """
        _target_: verl_omni.config.DiffusionActorConfig
        strategy: fsdp2
        rollout_n: 16
        ppo_mini_batch_size: 32
        ppo_micro_batch_size_per_gpu: 16
        use_kl_loss: true
        kl_loss_coef: 0.04
        grad_clip: 1.0
        diffusion_loss: {loss_mode: flow_grpo, clip_ratio: 1.0e-5, adv_clip_max: 5.0}
        optim: {lr: 3.0e-4, weight_decay: 1.0e-4, betas: [0.9, 0.999], clip_grad: 1.0}
        fsdp_config: {param_offload: true, optimizer_offload: true, reshard_after_forward: true, fsdp_size: -1,
                      model_dtype: fp32, dtype: bfloat16, wrap_policy: {min_num_params: 0}}
        checkpoint: {save_contents: [model, optimizer, extra]}
        """
    )
    cfg = omega_conf_to_dataclass(node)
    assert isinstance(cfg, DiffusionActorConfig)
    assert cfg.diffusion_loss.clip_ratio == 1e-5 and cfg.optim.lr == 3e-4
    assert cfg.fsdp_config.cpu_offload and cfg.fsdp_config.optimizer_offload


@pytest.mark.parametrize(
    ("node", "error", "pattern"),
    [
        ({"diffusion_loss": {"clip_ratioo": 1e-4}}, ConfigKeyError, r"diffusion_loss\.clip_ratioo.*Did you mean"),
        ({"diffusion_loss": {"clip_ratio": 0}}, ConfigValueError, r"diffusion_loss\.clip_ratio: expected a float > 0"),
        ({"grad_clip": 0.5}, ConfigValueError, r"grad_clip: expected the same value as optim\.clip_grad"),
        ({"ppo_mini_batch_size": 0}, ConfigValueError, r"ppo_mini_batch_size: expected an int >= 1, got 0"),
        ({"fsdp_config": {"dtype": "fp8"}}, ConfigValueError, r"fsdp_config\.dtype: expected one of fp32"),
        (
            {"fsdp_config": {"ulysses_sequence_parallel_size": 2}},
            ConfigValueError,
            r"ulysses_sequence_parallel_size: expected 1 \(sequence parallelism is not implemented",
        ),
        ({"optim": {"betas": [0.9]}}, ConfigValueError, r"optim\.betas: expected two floats"),
        (
            {"optim": {"lr_scheduler_type": "cosine"}},
            ConfigValueError,
            r"optim\.total_training_steps: expected an int > 0 when lr_scheduler_type is 'cosine'",
        ),
        ({"optim": {"warmup_style": "cosine"}}, ConfigValueError, r"optim\.warmup_style: expected null or equal"),
        ({"checkpoint": {"async_save": True}}, ConfigValueError, r"checkpoint\.async_save: expected false"),
        ({"profiler": {"enable": False}}, ConfigKeyError, r"profiler: unknown key"),
    ],
)
def test_actor_config_rejects_bad_values_naming_the_key(node, error, pattern):
    with pytest.raises(error, match=pattern):
        omega_conf_to_dataclass(node, DiffusionActorConfig)


def test_ref_config_is_forward_only_by_default():
    assert DiffusionRefConfig().fsdp_config.forward_only
    assert not FSDPEngineConfig().forward_only


def test_loss_and_optim_configs_standalone():
    assert DiffusionLossConfig(kl_type="exact").kl_type == "exact"
    assert OptimConfig(lr_scheduler_type="cosine", total_training_steps=10).num_cycles == 0.5


@pytest.mark.parametrize(("name", "want"), [("fp32", "float32"), ("bf16", "bfloat16"), ("float16", "float16")])
def test_torch_dtype_name(name, want):
    assert torch_dtype_name(name) == want


def test_torch_dtype_name_rejects_unknown():
    with pytest.raises(ValueError, match=r"unknown dtype 'int8'; expected one of fp32"):
        torch_dtype_name("int8")
