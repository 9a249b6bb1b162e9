"""INTERIM stand-ins for pieces other helpers are building (data, reward, rollout config and server).

Each class mirrors the interface announced for the real piece, with the narrowest behaviour the trainer needs;
this module is deleted once `verl_omni.data`, `verl_omni.reward` (manager) and the `diffusers` rollout backend land.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch
from tensordict import TensorDict

from verl_core.config import BaseConfig
from verl_omni.pipelines import DiffusionSamplingConfig

_QUICKSTART = [
    "a red apple on a wooden table",
    "a lighthouse on a rocky coast at dusk",
    "a cat sleeping on a windowsill",
    "a snowy mountain above a pine forest",
    "a yellow taxi on a rainy street",
    "a hot air balloon over green hills",
    "a sailboat on a calm blue lake",
    "a field of sunflowers under a clear sky",
]
_QUICKSTART_VAL = ["a white teapot on a blue tablecloth", "a penguin standing on an ice floe"]
_BUILTIN = {"quickstart": _QUICKSTART, "quickstart_val": _QUICKSTART_VAL}


@dataclasses.dataclass(frozen=True)
class PromptRecord:
    index: int
    prompt: str
    negative_prompt: str | None
    data_source: str | None
    ground_truth: Any
    extra_info: dict[str, Any]
    source: str


@dataclasses.dataclass
class DataConfig(BaseConfig):
    train_files: str | list[str] = "builtin://quickstart"
    val_files: str | list[str] | None = "builtin://quickstart_val"
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    train_batch_size: int = 32
    val_batch_size: int | None = None
    shuffle: bool = True
    seed: int | None = None
    max_prompt_length: int = 512


class PromptDataset(list):
    @classmethod
    def from_config(cls, config: DataConfig, split: str) -> PromptDataset:
        files = config.train_files if split == "train" else config.val_files
        key = f"data.{split}_files"
        if files is None:
            return cls()
        prompts: list[str] = []
        for path in [files] if isinstance(files, str) else files:
            if path.startswith("builtin://"):
                prompts += _BUILTIN[path.removeprefix("builtin://")]
            else:
                try:
                    with open(path) as f:
                        prompts += [line.strip() for line in f if line.strip()]
                except FileNotFoundError:
                    raise FileNotFoundError(f"{key}: {path} does not exist") from None
        return cls(
            PromptRecord(i, p, None, "jpeg_compressibility", None, {}, f"{files}:{i}") for i, p in enumerate(prompts)
        )


class PromptSampler:
    def __init__(self, dataset: list, batch_size: int, *, shuffle: bool = True, seed: int = 1) -> None:
        self.dataset, self.batch_size, self.shuffle, self.seed = dataset, batch_size, shuffle, seed
        self._epoch, self._pos = 0, 0

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def steps_per_epoch(self) -> int:
        return max(1, len(self.dataset) // self.batch_size)

    def next_batch(self) -> list:
        if self._pos + self.batch_size > len(self.dataset):
            self._epoch, self._pos = self._epoch + 1, 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed * 1000 + self._epoch).shuffle(order)
        batch = [self.dataset[i] for i in order[self._pos : self._pos + self.batch_size]]
        self._pos += self.batch_size
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "pos": self._pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._epoch, self._pos = state["epoch"], state["pos"]


def iter_batches(dataset: list, batch_size: int | None, **_: Any):
    size = batch_size or len(dataset)
    for start in range(0, len(dataset), size):
        yield list(dataset[start : start + size])


@dataclasses.dataclass
class RewardConfig(BaseConfig):
    num_workers: int = 1
    timeout_s: float = 300.0


class InterimRewardManager:
    """Scores uint8 images with `jpeg_compressibility` in-process."""

    def __init__(self, config: RewardConfig) -> None:
        self.config = config

    def score(self, images: torch.Tensor, records: list, *, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        from verl_omni.reward import jpeg_compressibility

        return jpeg_compressibility(images).float(), {}

    def close(self) -> None:
        pass


@dataclasses.dataclass
class PipelineConfig(BaseConfig):
    height: int = 512
    width: int = 512
    num_inference_steps: int = 10
    true_cfg_scale: float = 1.0
    guidance_scale: float | None = None
    max_sequence_length: int = 512


@dataclasses.dataclass
class AlgoConfig(BaseConfig):
    noise_level: float = 1.0
    sde_type: str = "sde"
    sde_window_size: int | None = None
    sde_window_range: list[int] | None = None
    sde_window_seed: int = 0


@dataclasses.dataclass
class ValKwargsConfig(BaseConfig):
    n: int = 1
    pipeline: dict[str, Any] = dataclasses.field(default_factory=dict)
    algo: dict[str, Any] = dataclasses.field(default_factory=lambda: {"noise_level": 0.0})


@dataclasses.dataclass
class DiffusionRolloutConfig(BaseConfig):
    name: str = "diffusers"
    n: int = 1
    seed: int | None = None
    dtype: str = "bfloat16"
    request_timeout_s: float = 600.0
    lifecycle_timeout_s: float = 120.0
    weight_sync_timeout_s: float = 600.0
    launch_timeout_s: float = 600.0
    pipeline: PipelineConfig = dataclasses.field(default_factory=PipelineConfig)
    algo: AlgoConfig = dataclasses.field(default_factory=AlgoConfig)
    val_kwargs: ValKwargsConfig = dataclasses.field(default_factory=ValKwargsConfig)

    def sampling_config(self, model: str | None) -> DiffusionSamplingConfig:
        return self._sampling(False)

    def val_sampling_config(self, model: str | None) -> DiffusionSamplingConfig:
        return self._sampling(True)

    def _sampling(self, validate: bool) -> DiffusionSamplingConfig:
        pipe = {**self.pipeline.to_dict(), **(self.val_kwargs.pipeline if validate else {})}
        algo = {**self.algo.to_dict(), **(self.val_kwargs.algo if validate else {})}
        guidance = pipe["guidance_scale"] if pipe["guidance_scale"] is not None else pipe["true_cfg_scale"]
        window = algo["sde_window_size"] or 0
        return DiffusionSamplingConfig(
            n=self.val_kwargs.n if validate else self.n,
            num_inference_steps=pipe["num_inference_steps"],
            height=pipe["height"],
            width=pipe["width"],
            noise_level=algo["noise_level"],
            sde_type=algo["sde_type"],
            sde_window_size=0 if validate else window,
            sde_window_range=None if validate or not window else algo["sde_window_range"],
            guidance_scale=guidance,
            max_sequence_length=pipe["max_sequence_length"],
        )


class InterimRolloutServer:
    """Ray actor: `DiffusersRolloutEngine` in a process, no HTTP (stand-in for `DiffusersHttpServer`)."""

    def __init__(self, model_path: str, device: str, dtype: str, threads: int | None) -> None:
        from verl_omni.rollout import DiffusersRolloutEngine

        if threads:
            torch.set_num_threads(threads)
        torch_dtype = torch.float32 if device == "cpu" else getattr(torch, {"bf16": "bfloat16"}.get(dtype, dtype))
        self.engine = DiffusersRolloutEngine(model_path, device=device, dtype=torch_dtype)
        self.version = 0

    def ping(self) -> int:
        return self.version

    def generate(self, prompt: str, sampling: DiffusionSamplingConfig, seed: int) -> dict[str, Any]:
        traj = self.engine.generate([prompt], sampling.evolve(seed=seed)).to("cpu")
        return {"trajectory": traj, "weight_version": self.version}

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def update_weights(self, weights: dict[str, torch.Tensor], version: int, peft_config: dict | None) -> int:
        self.engine.update_weights(weights, lora_config=peft_config)
        self.version = version
        return version


def concat_trajectories(parts: list[TensorDict], n: int) -> TensorDict:
    """Prompt-major concatenation with a global `prompt_index`."""
    batch = torch.cat(parts)
    batch["prompt_index"] = torch.arange(len(parts)).repeat_interleave(n)
    return batch
