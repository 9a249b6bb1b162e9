"""One home per config default: every key of verl-omni's config dataclasses has its default in one class.

The scan walks the config tree from `DiffusionTrainerConfig` (plus `DiffusionSamplingConfig`, the sampling of one
generate call) and, for each field with a literal default, finds the class that declares it (an inherited field is
declared once). A name declared with a literal default in more than one class fails, unless it is listed below with
the exact classes and the reason they are distinct.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from collections import defaultdict

from verl_core.config import BaseConfig
from verl_omni.config.sampler import SDESamplerConfig
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler
from verl_omni.trainer.config import DiffusionTrainerConfig

_VAL = "validation override (null keeps the training value; this default is validation's own)"
_SAMPLING = (
    "not yet folded (issue 34): DiffusionSamplingConfig's Python-API default beside rollout.pipeline.*; the trainer "
    "always fills the call from rollout.pipeline.*"
)
DISTINCT: dict[str, tuple[frozenset[str], str]] = {
    "noise_level": (frozenset({"SDESamplerConfig", "DiffusionValAlgoConfig"}), _VAL + ": 0.0 = the ODE"),
    "num_inference_steps": (
        frozenset({"DiffusionPipelineConfig", "DiffusionValPipelineConfig", "DiffusionSamplingConfig"}),
        _VAL + "; " + _SAMPLING,
    ),
    "height": (frozenset({"DiffusionPipelineConfig", "DiffusionSamplingConfig"}), _SAMPLING),
    "width": (frozenset({"DiffusionPipelineConfig", "DiffusionSamplingConfig"}), _SAMPLING),
    "num_frames": (frozenset({"DiffusionPipelineConfig", "DiffusionSamplingConfig"}), _SAMPLING),
    "max_sequence_length": (frozenset({"DiffusionPipelineConfig", "DiffusionSamplingConfig"}), _SAMPLING),
    "init_same_noise": (frozenset({"DiffusionRolloutAlgoConfig", "DiffusionSamplingConfig"}), _SAMPLING),
    "n": (
        frozenset({"DiffusionRolloutConfig", "DiffusionValKwargsConfig", "DiffusionSamplingConfig"}),
        "validation's group size is its own; " + _SAMPLING,
    ),
    "strategy": (
        frozenset({"DiffusionActorConfig", "DiffusionRefConfig", "FSDPEngineConfig"}),
        "verl's schema repeats the engine name per role; each is checked to name FSDP2",
    ),
    "dtype": (
        frozenset({"FSDPEngineConfig", "DiffusionRolloutConfig", "RewardModelRolloutConfig"}),
        "training compute dtype, the rollout's weights, the reward model server's weights",
    ),
    "free_cache_engine": (
        frozenset({"DiffusionRolloutConfig", "RewardModelRolloutConfig"}),
        "the policy rollout's servers and the reward model's own server sleep separately",
    ),
    "shuffle": (frozenset({"DiffusionActorConfig", "DataConfig"}), "mini-batch order vs prompt order: two things"),
    "name": (
        frozenset(
            {"DiffusionRolloutConfig", "RewardModelRolloutConfig", "CustomRewardFunctionConfig", "RewardManagerConfig"}
        ),
        "different names: rollout backend, reward model backend, reward function, reward manager",
    ),
    "nnodes": (
        frozenset({"DiffusionRolloutConfig", "RewardModelConfig", "TrainerConfig"}),
        "three different pools: rollout (0 = colocated), reward model, trainer",
    ),
    "n_gpus_per_node": (
        frozenset({"DiffusionRolloutConfig", "RewardModelConfig", "TrainerConfig"}),
        "three different pools: rollout, reward model, trainer",
    ),
}
for _key in ("dpm_apply_strategy", "dpm_post_compress_ratio", "dpm_solver_order"):
    DISTINCT[_key] = (
        frozenset({"DiffusionRolloutAlgoConfig", "DiffusionSamplingConfig"}),
        "MixGRPO-Flash (issue 28): rollout.algo.* beside the call's sampling; " + _SAMPLING,
    )


def _config_classes() -> set[type]:
    seen: set[type] = set()
    todo = [DiffusionTrainerConfig, DiffusionSamplingConfig]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for hint in typing.get_type_hints(cls).values():
            stack = [hint]
            while stack:
                t = stack.pop()
                stack.extend(typing.get_args(t))
                if inspect.isclass(t) and issubclass(t, BaseConfig) and t.__module__.startswith("verl_omni"):
                    todo.append(t)
    return seen


def _literal_defaults() -> dict[str, dict[str, object]]:
    """Field name -> {declaring class name: default} over every config class, literal defaults only."""
    found: dict[str, dict[str, object]] = defaultdict(dict)
    for cls in _config_classes():
        for field in dataclasses.fields(cls):
            owner = next(c for c in cls.__mro__ if field.name in vars(c).get("__annotations__", {}))
            default = field.default
            if owner.__module__.startswith("verl_omni") and isinstance(default, (bool, int, float, str)):
                found[field.name][owner.__name__] = default
    return found


def test_every_config_default_has_one_home():
    defaults = _literal_defaults()
    assert {"noise_level", "sde_type", "cps_logprob", "n"} <= set(defaults)  # the scan reaches the sampler keys
    problems = []
    for name, owners in sorted(defaults.items()):
        allowed, _reason = DISTINCT.get(name, (frozenset(), ""))
        if len(owners) > 1 and not set(owners) <= allowed:
            problems.append(f"{name}: defaults in {owners}")
    stale = [name for name in DISTINCT if len(defaults.get(name, {})) <= 1]
    assert not problems, "a key has a default in more than one class; give it one home:\n" + "\n".join(problems)
    assert not stale, f"DISTINCT lists keys that now have one home; drop them from the list: {stale}"
    assert defaults["noise_level"]["SDESamplerConfig"] == 1.0  # what the trainer has always sampled with


def test_the_scheduler_takes_its_sampler_defaults_from_the_sampler_config():
    source = textwrap.dedent(inspect.getsource(FlowMatchSDEDiscreteScheduler.__init__))
    args = ast.parse(source).body[0].args
    named = dict(zip([a.arg for a in args.args[-len(args.defaults) :]], args.defaults, strict=True))
    for key in ("noise_level", "sde_type", "cps_logprob"):
        assert ast.unparse(named[key]) == f"SDESamplerConfig.{key}", f"scheduler {key}: a second default"
    scheduler = FlowMatchSDEDiscreteScheduler()
    assert scheduler.config.noise_level == SDESamplerConfig().noise_level == DiffusionSamplingConfig().noise_level
