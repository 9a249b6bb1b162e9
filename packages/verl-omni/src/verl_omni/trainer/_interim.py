"""INTERIM stand-ins for pieces another helper is building (the rollout config and the `diffusers` server).

Each class mirrors the interface announced for the real piece, with the narrowest behaviour the trainer needs;
this module is deleted once `verl_omni.config.DiffusionRolloutConfig` and the `diffusers` rollout backend land.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict

from verl_core.config import BaseConfig
from verl_omni.pipelines import DiffusionSamplingConfig


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
