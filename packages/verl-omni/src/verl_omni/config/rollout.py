"""`actor_rollout_ref.rollout.*`: the diffusion rollout config, verl-core's `RolloutBaseConfig` plus verl-omni's keys.

Key names follow verl-omni's `diffusion_trainer` schema (flat list in ref/legacy_keys/): `n`, `dtype`,
`pipeline.*`, `algo.*`, `val_kwargs.*`, `external_lib`, `agent.default_agent_loop`, plus verl-core's common server
keys (`RolloutBaseConfig`: timeouts, limits, binding, weight sync, sleep level, engine sizing). The LLM rollout
(`verl_core.config.RolloutConfig`) sits beside it: its token keys are not fields here (`_LLM_ONLY`). Keys of
features this project does not have (video `frame_rate` / `video_flow_shift`, `aspect_ratio`, non-contiguous windows,
LLM sampling) are not accepted; `pipeline.num_frames` is (video models: Wan).
`sampling_config(model)` and `val_sampling_config(model)` turn it into the `DiffusionSamplingConfig` of one
training or validation generate call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from verl_core.config import BaseConfig, ConfigValueError, RolloutBaseConfig
from verl_core.config.rollout import ModelConfig, SamplingConfig
from verl_omni.config.actor import torch_dtype_name
from verl_omni.config.sampler import SDESamplerConfig

if TYPE_CHECKING:
    from verl_omni.config.sampling import DiffusionSamplingConfig

__all__ = [
    "GUIDANCE_KEY",
    "DiffusionAgentLoopConfig",
    "DiffusionPipelineConfig",
    "DiffusionRolloutAlgoConfig",
    "DiffusionRolloutConfig",
    "DiffusionValAlgoConfig",
    "DiffusionValKwargsConfig",
    "DiffusionValPipelineConfig",
]

#: which pipeline key carries the CFG weight of each model (see `DiffusionRolloutConfig.sampling_config`)
GUIDANCE_KEY = {
    "qwen_image": "true_cfg_scale",
    "sd3": "guidance_scale",
    "flux": "guidance_scale",
    "wan": "guidance_scale",
}
_GUIDANCE_WHAT = {
    "sd3": "SD3's CFG weight",
    "flux": "FLUX's distilled guidance (its guidance embedding)",
    "wan": "Wan's CFG weight",
}


@dataclasses.dataclass
class DiffusionPipelineConfig(BaseConfig):
    """`rollout.pipeline.*`: image size, steps and guidance of the rollout pipeline.

    Args:
        height (`int`): image height in pixels.
        width (`int`): image width in pixels.
        num_inference_steps (`int`): denoising steps N.
        num_frames (`int`): frames per sample; 1 for image models, `4k + 1` for Wan videos (81 in its recipes).
        true_cfg_scale (`float`): Qwen-Image's true CFG weight (norm-rescaled); 1 disables it.
        max_sequence_length (`int`): text tokens the prompt embeddings are padded to.
        guidance_scale (`float`, *optional*): SD3's CFG weight, or FLUX's distilled guidance (the value of its
            guidance embedding, one forward per step; FLUX.1-dev's stock default is 3.5); null = 1.0 (no CFG).
            Qwen-Image takes its CFG from `true_cfg_scale` and refuses a non-null value (it has no guidance
            embedding).
    """

    height: int = 512
    width: int = 512
    num_inference_steps: int = 10
    num_frames: int = 1
    true_cfg_scale: float = 1.0
    max_sequence_length: int = 512
    guidance_scale: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("height", self.height >= 16, "an int >= 16")
        self._require("width", self.width >= 16, "an int >= 16")
        self._require("num_inference_steps", self.num_inference_steps >= 1, "an int >= 1")
        self._require("num_frames", self.num_frames >= 1, "an int >= 1 (1 for image models)")
        self._require("true_cfg_scale", self.true_cfg_scale >= 0, "a float >= 0")
        self._require("max_sequence_length", 1 <= self.max_sequence_length <= 1024, "an int in [1, 1024]")
        self._require("guidance_scale", self.guidance_scale is None or self.guidance_scale >= 0, "null or >= 0")


@dataclasses.dataclass
class DiffusionRolloutAlgoConfig(SDESamplerConfig):
    """`rollout.algo.*`: the SDE sampler of training rollouts.

    Args:
        noise_level (`float`): `a` inside the SDE window (default and check: `SDESamplerConfig`).
        sde_type (`str`): `"sde"` (Flow-SDE), `"cps"` (coefficients-preserving) or `"dance_sde"` (`SDESamplerConfig`).
        sde_window_size (`int`, *optional*): K stochastic (trained) steps; null = all steps but the last.
        sde_window_range (`list[int]`, *optional*): `[r0, r1]`, the envelope of the window: each training step
            places one window start in `{r0 .. r1 - K}` (`sample_strategy`) and pins it for every request of that
            step. Null = `[0, N-1]`. Unused without `sde_window_size` (as in old verl, whose scripts often set the
            range alone).
        sde_contiguous (`bool`): only `true` (contiguous windows) is implemented.
        sample_strategy (`str`): how the window moves over training steps (MixGRPO): `"random"` (a start drawn per
            step from `sde_window_seed` and the step) or `"progressive"` (the window slides by K every
            `iters_per_group` steps from `r0` and stays on the last position); see
            `verl_omni.rollout.sde_window_start`.
        iters_per_group (`int`): training steps per window position with `"progressive"` (>= 1).
        sde_window_seed (`int`): seed of the `"random"` window draws.
        init_same_noise (`bool`): DanceGRPO's shared initial noise: the `n` images of a prompt start from the same
            x_T (the group's first row's draw), so they differ only through the SDE noise of the window.
        cps_logprob (`str`): `"exact"` or `"legacy"` (tempered cps log-prob of older releases); this project's key
            (`SDESamplerConfig`).
        dpm_algorithm_type (`str`, *optional*): MixGRPO-Flash: `"dpmsolver++"` takes the ODE steps outside the SDE
            window with DPM-Solver++; null = Euler (MixGRPO's key and default).
        dpm_apply_strategy (`str`): `"post"` (the steps after the window, on a grid compressed by
            `dpm_post_compress_ratio`) or `"all"` (every ODE step, on the sampler's grid).
        dpm_post_compress_ratio (`float`): `"post"`: the `R` steps after the window become `max(1, round(R * ratio))`.
        dpm_solver_order (`int`): 1 (= Euler) or 2 (the 2M multistep).
    """

    sde_window_size: int | None = None
    sde_window_range: list[int] | None = None
    sde_contiguous: bool = True
    sample_strategy: Literal["random", "progressive"] = "random"
    iters_per_group: int = 1
    sde_window_seed: int = 0
    init_same_noise: bool = False
    dpm_algorithm_type: Literal["dpmsolver++"] | None = None
    dpm_apply_strategy: Literal["post", "all"] = "post"
    dpm_post_compress_ratio: float = 0.4
    dpm_solver_order: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("sde_window_size", self.sde_window_size is None or self.sde_window_size >= 1, "null or >= 1")
        rng = self.sde_window_range
        self._require("sde_window_range", rng is None or (len(rng) == 2 and 0 <= rng[0] <= rng[1]), "null or [r0, r1]")
        self._require("sde_contiguous", self.sde_contiguous, "true (non-contiguous SDE windows are not implemented)")
        self._require("iters_per_group", self.iters_per_group >= 1, "an int >= 1 (training steps per window position)")


@dataclasses.dataclass
class DiffusionValPipelineConfig(BaseConfig):
    """`rollout.val_kwargs.pipeline.*`: validation overrides of `rollout.pipeline.*`; null keeps the training value."""

    height: int | None = None
    width: int | None = None
    num_inference_steps: int | None = 50
    num_frames: int | None = None
    true_cfg_scale: float | None = None
    max_sequence_length: int | None = None
    guidance_scale: float | None = None


@dataclasses.dataclass
class DiffusionValAlgoConfig(BaseConfig):
    """`rollout.val_kwargs.algo.*`: validation overrides of `rollout.algo.*`; null keeps the training value.

    The default `noise_level: 0.0` samples validation images with the deterministic ODE.
    """

    noise_level: float | None = 0.0
    sde_type: Literal["sde", "cps", "dance_sde"] | None = None
    sde_window_size: int | None = None
    sde_window_range: list[int] | None = None
    sde_contiguous: bool | None = None


@dataclasses.dataclass
class DiffusionValKwargsConfig(BaseConfig):
    """`rollout.val_kwargs.*`: how validation images are sampled.

    Args:
        n (`int`): images per validation prompt.
        seed (`int`, *optional*): base seed of validation requests (null: the trainer's seed).
        pipeline (`DiffusionValPipelineConfig`): overrides of `rollout.pipeline.*` (default 50 steps).
        algo (`DiffusionValAlgoConfig`): overrides of `rollout.algo.*` (default noise level 0, the ODE).
    """

    n: int = 1
    seed: int | None = None
    pipeline: DiffusionValPipelineConfig = dataclasses.field(default_factory=DiffusionValPipelineConfig)
    algo: DiffusionValAlgoConfig = dataclasses.field(default_factory=DiffusionValAlgoConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("n", self.n >= 1, "an int >= 1")


@dataclasses.dataclass
class DiffusionAgentLoopConfig(BaseConfig):
    """`rollout.agent.*`: the agent loop that turns prompts into requests (`verl_omni.rollout.agent_loop`).

    Args:
        default_agent_loop (`str`): the registered agent loop the trainer uses.
        prompts_per_request (`int`): prompts per generate request; 0 = auto (`ceil(prompts / servers)`), 1 = one
            request per prompt (always 1 on backends other than `diffusers`, unless set).
        max_images_per_request (`int`): caps a request at `max_images_per_request // n` prompts (at least one).
    """

    default_agent_loop: str = "diffusion_single_turn_agent"
    prompts_per_request: int = 0
    max_images_per_request: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("prompts_per_request", self.prompts_per_request >= 0, "an int >= 0 (0 = auto)")
        self._require("max_images_per_request", self.max_images_per_request >= 1, "an int >= 1")


_LLM_ONLY = ("max_prompt_len", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching")
"""`RolloutConfig` (LLM) keys a diffusion rollout YAML may still carry (packaged before issue 34): ignored, warned."""


@dataclasses.dataclass
class DiffusionRolloutConfig(RolloutBaseConfig):
    """The diffusion rollout: verl-core's common server keys plus `n`, `dtype`, `pipeline`, `algo`, `val_kwargs`.

    `RolloutReplica` launches the backend `name` (default `"diffusers"`) with this config; `model` is filled by
    the trainer from `actor_rollout_ref.model.path` (`with_model`). It has none of the LLM rollout's keys: a config
    file that still sets `max_prompt_len`, `max_model_len`, `max_num_seqs`, `max_num_batched_tokens` or
    `enable_prefix_caching` gets a warning that the key is ignored; `sampling` is accepted only at the LLM defaults
    (diffusion sampling is `pipeline.*` / `algo.*`); other LLM keys (`temperature`, `prompt_length`...) are unknown.

    Args:
        n (`int`): images per prompt (the GRPO group size).
        dtype (`str`): rollout weight dtype (`bfloat16`/`bf16`, `float32`/`fp32`, `float16`/`fp16`); trajectories
            are float32 either way.
        seed (`int`, *optional*): seed of requests that carry none (server rank `r` uses `seed + r`); null draws
            from the OS.
        external_lib (`str`, *optional*): module imported to register more model adapters.
        pipeline (`DiffusionPipelineConfig`): image size, steps, guidance.
        algo (`DiffusionRolloutAlgoConfig`): the SDE sampler.
        val_kwargs (`DiffusionValKwargsConfig`): validation overrides.
        agent (`DiffusionAgentLoopConfig`): the agent loop name.
        free_cache_engine (`bool`): sleep the servers between rollout and training (colocated mode).
        nnodes (`int`): nodes of the rollout's own resource pool in `trainer.mode: separate` (0: no pool of its
            own, the colocated default; separate mode needs >= 1).
        n_gpus_per_node (`int`): rollout servers per node of that pool (one GPU each on a GPU cluster, one CPU
            on a CPU one).
        enforce_eager (`bool`): run the rollout eagerly. False: the `diffusers` backend compiles its transformer's
            repeated blocks on CUDA (`engine_kwargs.diffusers.compile_blocks` decides when set); vLLM-Omni keeps
            its CUDA graphs.
        engine_kwargs (`dict`): backend options: `diffusers.{merge_lora,compile_blocks,coalesce,coalesce_max_images}`,
            `vllm_omni.*` (AsyncOmni arguments).

    Raises:
        ConfigValueError: a value out of range, or LLM `sampling` keys set (names the key).
        ConfigKeyError: an unknown key, such as LLM sampling keys at the top level (`temperature`).
    """

    model: ModelConfig | None = None  # type: ignore[assignment]
    name: str = "diffusers"
    seed: int | None = None  # type: ignore[assignment]
    n: int = 1
    dtype: str = "bfloat16"
    external_lib: str | None = None
    free_cache_engine: bool = True
    nnodes: int = 0
    n_gpus_per_node: int = 1
    pipeline: DiffusionPipelineConfig = dataclasses.field(default_factory=DiffusionPipelineConfig)
    algo: DiffusionRolloutAlgoConfig = dataclasses.field(default_factory=DiffusionRolloutAlgoConfig)
    val_kwargs: DiffusionValKwargsConfig = dataclasses.field(default_factory=DiffusionValKwargsConfig)
    agent: DiffusionAgentLoopConfig = dataclasses.field(default_factory=DiffusionAgentLoopConfig)

    _retired_keys: ClassVar[Mapping[str, str]] = {
        **{key: f"rollout.{key} is an LLM rollout key: diffusion has no token limits or KV cache" for key in _LLM_ONLY},
        "sampling": "rollout.sampling is LLM token sampling; diffusion sampling is rollout.pipeline.* / rollout.algo.*",
    }

    @classmethod
    def _retired_key(cls, key: str, value: Any, path: str) -> None:
        """Refuse `sampling` away from the LLM defaults (it would be silently ignored); warn about the others."""
        defaults = SamplingConfig().to_dict()
        if key == "sampling" and (not isinstance(value, Mapping) or {**defaults, **value} != defaults):
            raise ConfigValueError(
                f"expected the LLM defaults (diffusion sampling is pipeline.*/algo.*), got {value!r}",
                key=path,
                owner=cls.__name__,
            )
        super()._retired_key(key, value, path)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("n", self.n >= 1, "an int >= 1 (the group size)")
        self._require("nnodes", self.nnodes >= 0, "an int >= 0 (0: no rollout pool of its own)")
        self._require("n_gpus_per_node", self.n_gpus_per_node >= 1, "an int >= 1")
        try:
            torch_dtype_name(self.dtype)
        except ValueError:
            self._require("dtype", False, "one of bfloat16/bf16, float32/fp32, float16/fp16")
        self.sampling_config(None)  # check the pipeline/algo combination once, at construction
        self.val_sampling_config(None)

    @property
    def torch_dtype(self) -> Any:
        """`dtype` as a `torch.dtype`."""
        import torch

        return getattr(torch, torch_dtype_name(self.dtype))

    def with_model(self, path: str, **model: Any) -> DiffusionRolloutConfig:
        """A copy serving the pipeline folder `path` (`actor_rollout_ref.model.path`); `model` adds ModelConfig keys."""
        return dataclasses.replace(self, model=ModelConfig(path=str(path), **model))

    def sampling_config(self, model: str | None, **overrides: Any) -> DiffusionSamplingConfig:
        """The `DiffusionSamplingConfig` of a training rollout request (see `_sampling` for the mapping)."""
        return _sampling(self.n, self.pipeline.to_dict(), self.algo.to_dict(), model, "", overrides)

    def val_sampling_config(self, model: str | None, **overrides: Any) -> DiffusionSamplingConfig:
        """The `DiffusionSamplingConfig` of a validation request: `val_kwargs` over the training keys."""
        val = self.val_kwargs
        pipeline = {**self.pipeline.to_dict(), **{k: v for k, v in val.pipeline.to_dict().items() if v is not None}}
        algo = {**self.algo.to_dict(), **{k: v for k, v in val.algo.to_dict().items() if v is not None}}
        return _sampling(val.n, pipeline, algo, model, "val_kwargs.", overrides)


_DPM_KEYS = ("dpm_algorithm_type", "dpm_apply_strategy", "dpm_post_compress_ratio", "dpm_solver_order")
"""MixGRPO-Flash's `rollout.algo.*` keys, passed to `DiffusionSamplingConfig` unchanged (it checks them)."""


def _sampling(
    n: int, pipeline: dict[str, Any], algo: dict[str, Any], model: str | None, where: str, overrides: dict[str, Any]
) -> DiffusionSamplingConfig:
    """Map `pipeline.*` / `algo.*` onto `DiffusionSamplingConfig`.

    Guidance: Qwen-Image's `true_cfg_scale` and SD3's `guidance_scale` both become `guidance_scale` (the CFG weight
    the adapter applies: norm-rescaled true CFG for Qwen-Image, plain CFG for SD3). For Qwen-Image a non-null
    `pipeline.guidance_scale` is refused (no guidance embedding); for SD3 a `true_cfg_scale` other than 1 is refused
    (SD3's CFG is `guidance_scale`); FLUX takes its distilled guidance from `guidance_scale` and refuses
    `true_cfg_scale` likewise (its optional true CFG is not supported). Other models (`model=None` or an external
    adapter) take `guidance_scale` when set, else `true_cfg_scale`. A null `sde_window_size` becomes 0 (no window:
    all steps but the last), and then `sde_window_range` is not passed on (it only places a window).
    """
    from verl_core.config.errors import ConfigValueError
    from verl_omni.config.sampling import DiffusionSamplingConfig

    key = GUIDANCE_KEY.get(model or "")
    true_cfg, guidance = pipeline["true_cfg_scale"], pipeline["guidance_scale"]
    if key == "true_cfg_scale" and guidance is not None:
        raise ConfigValueError(
            f"Qwen-Image has no guidance embedding; set its CFG weight with {where}pipeline.true_cfg_scale and leave "
            f"guidance_scale null, got {guidance!r}",
            key=f"{where}pipeline.guidance_scale",
            owner="DiffusionRolloutConfig",
        )
    if key == "guidance_scale" and true_cfg != 1.0:
        raise ConfigValueError(
            f"{_GUIDANCE_WHAT[model]} is {where}pipeline.guidance_scale; true_cfg_scale is Qwen-Image's, got "
            f"{true_cfg!r}",
            key=f"{where}pipeline.true_cfg_scale",
            owner="DiffusionRolloutConfig",
        )
    if key == "true_cfg_scale":
        scale = true_cfg
    elif key == "guidance_scale":
        scale = 1.0 if guidance is None else guidance
    else:
        scale = true_cfg if guidance is None else guidance
    window, steps, rng = algo["sde_window_size"] or 0, pipeline["num_inference_steps"], algo["sde_window_range"]
    most = steps if window and rng is not None else steps - 1  # without a range the last step is never in it
    if window > most:
        raise ConfigValueError(
            f"{window} SDE steps do not fit in {where}pipeline.num_inference_steps={steps} (at most {most}"
            f"{'' if rng is not None else ': the last step is never trained'}); lower {where}algo.sde_window_size or "
            f"raise {where}pipeline.num_inference_steps",
            key=f"{where}algo.sde_window_size",
            owner="DiffusionRolloutConfig",
        )
    if window and rng is not None and len(rng) == 2 and window > rng[1] - rng[0]:
        raise ConfigValueError(
            f"{window} SDE steps do not fit in {where}algo.sde_window_range={list(rng)} (at most {rng[1] - rng[0]}); "
            f"lower {where}algo.sde_window_size or widen {where}algo.sde_window_range",
            key=f"{where}algo.sde_window_size",
            owner="DiffusionRolloutConfig",
        )
    fields = {
        "n": n,
        "num_inference_steps": pipeline["num_inference_steps"],
        "height": pipeline["height"],
        "width": pipeline["width"],
        "num_frames": pipeline["num_frames"],
        "max_sequence_length": pipeline["max_sequence_length"],
        "guidance_scale": float(scale),
        "noise_level": algo["noise_level"],
        "sde_type": algo["sde_type"],
        "cps_logprob": algo["cps_logprob"],
        "sde_window_size": algo["sde_window_size"] or 0,
        "sde_window_range": algo["sde_window_range"] if algo["sde_window_size"] else None,
        "init_same_noise": algo["init_same_noise"],
        **{key: algo[key] for key in _DPM_KEYS},
        **overrides,
    }
    try:
        return DiffusionSamplingConfig(**fields)
    except ConfigValueError as e:
        section = "pipeline" if e.key in pipeline or e.key == "guidance_scale" else "algo"
        raise ConfigValueError(e.body, key=f"{where}{section}.{e.key}", owner="DiffusionRolloutConfig") from e
