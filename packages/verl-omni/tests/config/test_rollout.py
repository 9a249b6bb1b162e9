"""`DiffusionRolloutConfig`: verl-omni's `actor_rollout_ref.rollout.*` keys and their `DiffusionSamplingConfig`s."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from verl_core.config import RolloutBaseConfig, RolloutConfig, omega_conf_to_dataclass
from verl_core.config.errors import ConfigError, ConfigKeyError, ConfigValueError
from verl_omni.config import DiffusionRolloutConfig

# the rollout subtree as verl-omni's diffusion_trainer (a1139baf) writes it, for the keys this project has
VERL_OMNI_ROLLOUT = """
_target_: verl_omni.config.DiffusionRolloutConfig
name: diffusers
n: 16
dtype: bfloat16
seed: null
gpu_memory_utilization: 0.5
enforce_eager: false
tensor_model_parallel_size: 1
free_cache_engine: true
external_lib: null
pipeline:
  height: 512
  width: 512
  num_inference_steps: 10
  true_cfg_scale: 4.0
  max_sequence_length: 512
  guidance_scale: null
algo:
  noise_level: 1.2
  sde_type: sde
  sde_window_size: 2
  sde_window_range: [0, 5]
  sde_contiguous: true
  sample_strategy: random
  sde_window_seed: 0
val_kwargs:
  n: 1
  pipeline:
    num_inference_steps: 50
  algo:
    noise_level: 0.0
agent:
  default_agent_loop: diffusion_single_turn_agent
"""


def _build(text: str = VERL_OMNI_ROLLOUT, **dotted) -> DiffusionRolloutConfig:
    node = OmegaConf.create(text)
    for key, value in dotted.items():
        OmegaConf.update(node, key.replace("__", "."), value, force_add=True)
    return omega_conf_to_dataclass(node)


def test_verl_omni_rollout_subtree_builds_and_maps_to_sampling():
    config = _build()
    assert isinstance(config, RolloutBaseConfig) and not isinstance(config, RolloutConfig)
    assert config.name == "diffusers" and config.n == 16
    sampling = config.sampling_config("qwen_image")
    assert (sampling.n, sampling.num_inference_steps, sampling.height, sampling.max_sequence_length) == (
        16,
        10,
        512,
        512,
    )
    assert (sampling.noise_level, sampling.sde_type, sampling.sde_window_size) == (1.2, "sde", 2)
    assert sampling.sde_window_range == [0, 5] and sampling.guidance_scale == 4.0


def test_validation_sampling_takes_val_kwargs_over_the_training_keys():
    val = _build().val_sampling_config("qwen_image")
    assert (val.n, val.num_inference_steps, val.noise_level) == (1, 50, 0.0)
    assert (val.height, val.guidance_scale, val.sde_type) == (512, 4.0, "sde")  # inherited


@pytest.mark.parametrize(
    ("model", "pipeline", "expected"),
    [
        pytest.param("qwen_image", {"true_cfg_scale": 4.0}, 4.0, id="qwen-true-cfg"),
        pytest.param("sd3", {"guidance_scale": 4.5, "true_cfg_scale": 1.0}, 4.5, id="sd3-cfg"),
        pytest.param("sd3", {"guidance_scale": None, "true_cfg_scale": 1.0}, 1.0, id="sd3-null-is-off"),
        pytest.param("flux", {"guidance_scale": 3.5, "true_cfg_scale": 1.0}, 3.5, id="flux-distilled-guidance"),
        pytest.param("wan", {"guidance_scale": 5.0, "true_cfg_scale": 1.0}, 5.0, id="wan-cfg"),
        pytest.param(None, {"guidance_scale": 3.0, "true_cfg_scale": 1.0}, 3.0, id="other-guidance"),
        pytest.param(None, {"guidance_scale": None, "true_cfg_scale": 2.0}, 2.0, id="other-true-cfg"),
    ],
)
def test_guidance_maps_per_model(model, pipeline, expected):
    config = DiffusionRolloutConfig(pipeline=pipeline)
    assert config.sampling_config(model).guidance_scale == expected


@pytest.mark.parametrize(
    ("model", "pipeline", "key"),
    [
        pytest.param("qwen_image", {"guidance_scale": 3.5}, "pipeline.guidance_scale", id="qwen-guidance"),
        pytest.param("sd3", {"true_cfg_scale": 4.0}, "pipeline.true_cfg_scale", id="sd3-true-cfg"),
        pytest.param(
            "flux",
            {"true_cfg_scale": 4.0},
            r"FLUX's distilled guidance .* is pipeline\.guidance_scale",
            id="flux-true-cfg",
        ),
    ],
)
def test_the_other_models_guidance_key_is_refused(model, pipeline, key):
    with pytest.raises(ConfigValueError, match=key):
        DiffusionRolloutConfig(pipeline=pipeline).sampling_config(model)


@pytest.mark.parametrize(
    ("dotted", "error", "needle"),
    [
        pytest.param({"pipeline__frame_rate": 24.0}, ConfigKeyError, "pipeline.frame_rate", id="video-key"),
        pytest.param({"algo__sde_windw_size": 2}, ConfigKeyError, "Did you mean 'sde_window_size'", id="typo"),
        pytest.param({"temperature": 1.0}, ConfigKeyError, "temperature", id="llm-key"),
        pytest.param({"algo__sample_strategy": "decay"}, ConfigError, "sample_strategy", id="unknown-strategy"),
        pytest.param({"algo__iters_per_group": 0}, ConfigValueError, "iters_per_group", id="iters-per-group"),
        pytest.param({"algo__sde_contiguous": False}, ConfigValueError, "sde_contiguous", id="non-contiguous"),
        pytest.param({"algo__sde_window_range": [0, 12]}, ConfigValueError, "algo.sde_window_range", id="range"),
        pytest.param({"dtype": "fp8"}, ConfigValueError, "dtype", id="dtype"),
        pytest.param({"n": 0}, ConfigValueError, "n", id="n"),
        pytest.param(
            {"sampling__temperature": 0.5}, ConfigValueError, "sampling: expected the LLM defaults", id="llm-sampling"
        ),
        pytest.param({"sampling": 3}, ConfigValueError, "sampling", id="llm-sampling-not-a-mapping"),
    ],
)
def test_bad_keys_and_values_are_refused_by_name(dotted, error, needle):
    with pytest.raises(error, match=needle):
        _build(**dotted)


def test_window_null_means_all_steps_but_the_last():
    sampling = DiffusionRolloutConfig().sampling_config("qwen_image")
    assert sampling.sde_window_size == 0 and sampling.sde_window_range is None


@pytest.mark.parametrize("section", ["algo", "val_kwargs__algo"])
def test_a_window_range_without_a_window_size_is_accepted_unused_and_silent(section, caplog, recwarn):
    """Old FlowGRPO scripts set `sde_window_range` (its old default [0, 5]) and no size: no window, no warning."""
    caplog.set_level("WARNING")
    config = _build(algo__sde_window_size=None, **{f"{section}__sde_window_range": [0, 5]})
    for sampling in (config.sampling_config("qwen_image"), config.val_sampling_config("qwen_image")):
        assert sampling.sde_window_size == 0 and sampling.sde_window_range is None  # all steps but the last
    assert not caplog.records and not recwarn.list


def test_with_model_fills_the_model_path_and_dtype_aliases_resolve():
    config = DiffusionRolloutConfig(dtype="bf16").with_model("/models/qwen")
    assert config.model.path == "/models/qwen" and str(config.torch_dtype) == "torch.bfloat16"
    assert DiffusionRolloutConfig().model is None


def test_num_frames_reaches_training_and_validation_sampling():
    config = DiffusionRolloutConfig(pipeline={"num_frames": 81})
    assert config.sampling_config("wan").num_frames == 81 and config.val_sampling_config("wan").num_frames == 81
    assert DiffusionRolloutConfig(val_kwargs={"pipeline": {"num_frames": 5}}).val_sampling_config("wan").num_frames == 5
    assert DiffusionRolloutConfig().sampling_config("qwen_image").num_frames == 1
    with pytest.raises(ConfigValueError, match=r"pipeline\.num_frames.*an int >= 1"):
        DiffusionRolloutConfig(pipeline={"num_frames": 0})


_LLM_ONLY_KEYS = ("max_prompt_len", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching")


def test_the_diffusion_rollout_has_the_common_keys_and_none_of_the_llm_ones():
    common = {f.name for f in dataclasses.fields(RolloutBaseConfig)}
    llm_only = {f.name for f in dataclasses.fields(RolloutConfig)} - common
    diffusion = {f.name for f in dataclasses.fields(DiffusionRolloutConfig)}
    assert llm_only == {*_LLM_ONLY_KEYS, "sampling"}
    assert common <= diffusion and not llm_only & diffusion
    assert {"engine_kwargs", "free_cache_engine", "gpu_memory_utilization", "update_weights_transport"} <= diffusion


@pytest.mark.parametrize("key", _LLM_ONLY_KEYS)
def test_an_llm_only_key_in_a_diffusion_yaml_is_ignored_with_a_warning_naming_it(key):
    with pytest.warns(UserWarning, match=rf"ignores the key '{key}' \(rollout\.{key} is an LLM rollout key"):
        config = _build(**{key: 7 if key != "enable_prefix_caching" else False})
    assert key not in config and config.n == 16


def test_llm_sampling_at_its_defaults_is_ignored_with_a_warning():
    with pytest.warns(UserWarning, match=r"ignores the key 'sampling'"):
        config = _build(sampling__temperature=1.0, sampling__top_k=-1)
    assert "sampling" not in config
