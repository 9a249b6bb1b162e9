"""`reward.*`: which function scores the images, the reward manager and its worker pool.

Key names follow verl-omni's `diffusion_trainer` schema (`reward.num_workers`, `reward.reward_manager.*`,
`reward.custom_reward_function.{path,name}`, `reward.reward_kwargs`, `reward.reward_functions.<id>.*`,
`reward.aggregation`, `reward.reward_model.*`: see `verl_omni.reward.reward_model`). Sandbox fusion is not
implemented and is rejected with a message that says so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from verl_core.config import BaseConfig, ConfigValueError
from verl_omni.reward.builtin import BUILTIN_REWARD_FUNCTIONS
from verl_omni.reward.reward_model import RewardModelConfig

__all__ = [
    "CustomRewardFunctionConfig",
    "RewardConfig",
    "RewardFunctionConfig",
    "RewardManagerConfig",
    "RewardManagerModuleConfig",
    "RewardModelConfig",
    "SandboxFusionConfig",
]

#: `reward.reward_manager.module.path` values that name verl-omni's own reward managers; the class named by
#: `reward.reward_manager.name` is then looked up in this project's registry (`verl_omni.reward.manager`).
UPSTREAM_MANAGER_MODULES = (
    "pkg://verl_omni.reward_loop.reward_manager",
    "pkg://verl_omni.reward_loop.reward_manager.visual",
    "pkg://verl_omni.reward_loop.reward_manager.multi",
    "pkg://verl_omni.reward.manager",
)

#: verl-omni's placeholder for `custom_reward_function` when `reward_functions` is used (never called).
MULTI_REWARD_PLACEHOLDER = "_multi_reward_placeholder"


@dataclasses.dataclass
class CustomRewardFunctionConfig(BaseConfig):
    """`reward.custom_reward_function.*`: a reward function from a user file or module.

    Args:
        path (`str`, *optional*): a `.py` file, or `pkg://dotted.module`; null = the built-in scorer
            (`default_compute_score_image`, routed by `data_source`).
        name (`str`): function name in that file (verl's default `compute_score`).
        reward_kwargs (`dict`): extra keyword arguments for every call (verl's
            `custom_reward_function.reward_kwargs`).
    """

    path: str | None = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("path", self.path is None or bool(self.path.strip()), "null or a file / pkg:// path")
        self._require("name", bool(self.name), "a function name")


@dataclasses.dataclass
class RewardFunctionConfig(BaseConfig):
    """`reward.reward_functions.<id>.*`: one term of a weighted multi-reward.

    A term names its function either by `path` + `name` (a user file or module, as verl-omni does) or by
    `builtin` (a name in `verl_omni.reward.builtin.BUILTIN_REWARD_FUNCTIONS`), not both.

    Args:
        path (`str`, *optional*): a `.py` file or `pkg://dotted.module`.
        name (`str`, *optional*): function name in `path`; defaults to `compute_score` (leave it unset with
            `builtin`).
        builtin (`str`, *optional*): a built-in reward function: `jpeg_compressibility`,
            `jpeg_incompressibility`, `vlm_judge`, `http`, ...
        weight (`float`): weight of this term in the sum.
        required (`bool`): must stay true: a term that raises always stops training (verl-omni's `false`
            turned a failure into a silent 0, which this project does not do).
        reward_kwargs (`dict`): extra keyword arguments for this function only.

    Raises:
        ConfigValueError: neither or both of `path` and `builtin`, an unknown `builtin`, `name` with
            `builtin`, a non-finite `weight`, or `required: false`.
    """

    path: str | None = None
    name: str | None = None
    builtin: str | None = None
    weight: float = 1.0
    required: bool = True
    reward_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.builtin is None:
            self._require(
                "path", bool(self.path), f"a .py file or pkg://dotted.module, or set builtin ({_builtin_names()})"
            )
        else:
            self._require("builtin", self.builtin in BUILTIN_REWARD_FUNCTIONS, f"one of {_builtin_names()}")
            self._require("path", self.path is None, f"null with builtin {self.builtin!r}")
            self._require("name", self.name is None, f"null with builtin {self.builtin!r}")
        self._require("name", self.name is None or bool(self.name), "a function name")
        self._require("weight", math.isfinite(self.weight), "a finite number")
        self._require(
            "required",
            self.required,
            "true (a reward function that raises stops training; failures are never scored 0)",
        )

    @property
    def function(self) -> tuple[str, str]:
        """`(path, name)` of the function this term loads (`builtin` resolved)."""
        if self.builtin is not None:
            return BUILTIN_REWARD_FUNCTIONS[self.builtin]
        assert self.path is not None  # __post_init__ checked it
        return self.path, self.name or "compute_score"


def _builtin_names() -> str:
    return ", ".join(BUILTIN_REWARD_FUNCTIONS)


@dataclasses.dataclass
class RewardManagerModuleConfig(BaseConfig):
    """`reward.reward_manager.module.*`: where an importlib-loaded reward manager class lives."""

    path: str | None = None


@dataclasses.dataclass
class RewardManagerConfig(BaseConfig):
    """`reward.reward_manager.*`: which reward manager scores the batch.

    Args:
        source (`str`): `"register"` (look `name` up in the registry) or `"importlib"` (verl-omni's form:
            `module.path` + class `name`; accepted when `module.path` is one of verl-omni's own reward
            manager modules, the class is then taken from this project's registry).
        name (`str`): `visual` (the old registry name), `VisualRewardManager` or `MultiVisualRewardManager`.
        module: see `RewardManagerModuleConfig`.

    Raises:
        ConfigValueError: an importlib module path of a user's own class (custom reward manager classes
            are not implemented; use a custom reward function).
    """

    source: Literal["register", "importlib"] = "register"
    name: str = "visual"
    module: RewardManagerModuleConfig = dataclasses.field(default_factory=RewardManagerModuleConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("name", bool(self.name), "a reward manager name such as 'visual'")
        path = self.module.path
        if self.source == "importlib" and path is not None and path not in UPSTREAM_MANAGER_MODULES:
            raise ConfigValueError(
                f"expected one of {', '.join(UPSTREAM_MANAGER_MODULES)} or null, got {path!r}: custom reward "
                "manager classes are not implemented; put your scoring in a reward function "
                "(reward.custom_reward_function.path)",
                key="module.path",
                owner=type(self).__name__,
            )


@dataclasses.dataclass
class SandboxFusionConfig(BaseConfig):
    """`reward.sandbox_fusion.*`: code-execution scoring for LLMs. Not implemented: `url` must stay null."""

    url: str | None = None
    max_concurrent: int = 64
    memory_limit_mb: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("url", self.url is None, "null (sandbox fusion scores code, not images; not implemented)")


@dataclasses.dataclass
class RewardConfig(BaseConfig):
    """`reward.*`: the reward function, the reward manager and the pool of workers that runs it.

    Args:
        num_workers (`int`): workers of the pool; the batch is split into this many contiguous chunks.
        pool (`str`): `"ray"` (one Ray CPU actor per worker, created by the trainer) or `"thread"` (a thread
            pool in the calling process: tests and small runs).
        timeout_s (`float`): a whole batch must be scored within this many seconds; a worker that has not
            answered by then (hung or dead) is an error naming it.
        num_cpus_per_worker (`float`): Ray CPUs each reward actor reserves.
        stream (`bool`): score each request's groups as soon as they are generated, while the rest of the step is
            still generating (`verl_omni.reward.stream.RewardStream`); the rewards are the same as with false.
        custom_reward_function: see `CustomRewardFunctionConfig`.
        reward_functions (`dict[str, RewardFunctionConfig]`): multi-reward terms by id; when non-empty they
            replace `custom_reward_function` and the score is their `aggregation`.
        aggregation (`str`): `"weighted_sum"` (Σ weight · score).
        reward_kwargs (`dict`): extra keyword arguments for every reward function call (verl's
            `reward_model.reward_kwargs`); a function's own `reward_kwargs` win on a clash.
        reward_manager, reward_model, sandbox_fusion: see their classes.

    Raises:
        ConfigValueError: `num_workers` < 1, `timeout_s` <= 0, `MultiVisualRewardManager` without
            `reward_functions`, or `custom_reward_function.path` set together with `reward_functions`.
    """

    num_workers: int = 8
    pool: Literal["ray", "thread"] = "ray"
    timeout_s: float = 300.0
    num_cpus_per_worker: float = 1.0
    stream: bool = False
    custom_reward_function: CustomRewardFunctionConfig = dataclasses.field(default_factory=CustomRewardFunctionConfig)
    reward_functions: dict[str, RewardFunctionConfig] = dataclasses.field(default_factory=dict)
    aggregation: Literal["weighted_sum"] = "weighted_sum"
    reward_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    reward_manager: RewardManagerConfig = dataclasses.field(default_factory=RewardManagerConfig)
    reward_model: RewardModelConfig = dataclasses.field(default_factory=RewardModelConfig)
    sandbox_fusion: SandboxFusionConfig = dataclasses.field(default_factory=SandboxFusionConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("num_workers", self.num_workers >= 1, "an int >= 1")
        self._require("timeout_s", self.timeout_s > 0, "a number of seconds > 0")
        self._require("num_cpus_per_worker", self.num_cpus_per_worker >= 0, "a float >= 0")
        self._require(
            "reward_functions",
            bool(self.reward_functions) or self.reward_manager.name != "MultiVisualRewardManager",
            "at least one entry (reward.reward_functions.<id>.{path,name,weight}) for MultiVisualRewardManager",
        )
        custom = self.custom_reward_function
        if self.reward_functions and custom.path is not None and custom.name != MULTI_REWARD_PLACEHOLDER:
            raise ConfigValueError(
                f"expected null when reward_functions is set (their weighted sum is the reward), got {custom.path!r}; "
                "drop custom_reward_function.path or move it into reward_functions.<id>",
                key="custom_reward_function.path",
                owner=type(self).__name__,
            )
        if self.reward_functions:
            total = sum(f.weight for f in self.reward_functions.values())
            self._require("reward_functions", total > 0, f"weights summing to > 0 (they sum to {total:g})")

    @property
    def uses_custom_function(self) -> bool:
        """True when `custom_reward_function.path` names a function to load (not verl-omni's placeholder)."""
        c = self.custom_reward_function
        return c.path is not None and c.name != MULTI_REWARD_PLACEHOLDER
