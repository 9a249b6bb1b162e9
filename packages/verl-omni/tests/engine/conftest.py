"""Fixtures of the engine tests: trajectories sampled by the tiny log-prob pipelines, and an engine factory."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict

ENGINE_SAMPLING = {
    "n": 2,
    "num_inference_steps": 4,
    "height": 64,
    "width": 64,
    "max_sequence_length": 32,
    "noise_level": 0.7,
    "sde_window_size": 2,
    "seed": 0,
}


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """The tiny models run faster on one thread (2-core CI, small matmuls); restored after each test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def sample_trajectory(pipe: Any, *, guidance_scale: float = 1.0, seed: int = 0, **overrides: Any) -> TensorDict:
    """Sample 2 prompts x 2 images (K = 2 window steps) with a tiny log-prob pipeline; return the trajectory."""
    params = {**ENGINE_SAMPLING, "guidance_scale": guidance_scale, "seed": seed, **overrides}
    out = pipe.generate_with_logprob(["a cat on a red chair", "two dogs in the snow"], **params)
    return out.trajectory.exclude("images")


@pytest.fixture(scope="session")
def qwen_trajectory(tiny_qwen_image_pipe: Any) -> TensorDict:
    return sample_trajectory(tiny_qwen_image_pipe)


@pytest.fixture
def make_engine(tiny_qwen_image_path: pathlib.Path) -> Callable[..., Any]:
    """`make_engine(actor=..., model=..., path=..., **engine_kwargs)`: a `DiffusersFSDPEngine` on the tiny
    Qwen-Image folder, fp32, on the CPU."""
    from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
    from verl_omni.engine import DiffusersFSDPEngine

    def factory(
        *, actor: dict | None = None, model: dict | None = None, path: pathlib.Path | None = None, **engine_kwargs: Any
    ) -> Any:
        actor_cfg = {
            "rollout_n": 2,
            "ppo_mini_batch_size": 2,
            "ppo_micro_batch_size_per_gpu": 2,
            "optim": {"lr": 1e-3, "weight_decay": 0.0},
            "fsdp_config": {"dtype": "float32"},
            **(actor or {}),
        }
        model_cfg = {
            "path": str(path or tiny_qwen_image_path),
            "enable_gradient_checkpointing": False,
            **(model or {}),
        }
        return DiffusersFSDPEngine.from_pretrained(
            DiffusionModelConfig(**model_cfg), DiffusionActorConfig(**actor_cfg), device="cpu", **engine_kwargs
        )

    return factory
