"""Weights for weight-sync tests: a perturbed copy of a pipeline's transformer and a random LoRA adapter on it."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import torch

__all__ = ["TINY_LORA", "perturbed_transformer_weights", "random_transformer_lora"]

TINY_LORA: dict[str, Any] = {"r": 4, "lora_alpha": 8, "target_modules": ["to_q", "to_k", "to_v"]}
"""A small LoRA config (dict form) that binds the attention projections of the Qwen-Image and SD3 transformers."""


def perturbed_transformer_weights(
    path: str | pathlib.Path, *, seed: int, scale: float = 0.05
) -> dict[str, torch.Tensor]:
    """The transformer state dict of the pipeline folder `path`, every floating tensor plus `scale` x N(0, 1) noise.

    Names are those of the transformer's state dict (persistent buffers included), as a trainer sends them.
    """
    from safetensors.torch import load_file

    folder = pathlib.Path(path) / "transformer"
    state: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(file)))
    gen = torch.Generator().manual_seed(seed)
    return {
        name: t + scale * torch.randn(t.shape, generator=gen, dtype=t.dtype) if t.is_floating_point() else t.clone()
        for name, t in state.items()
    }


def random_transformer_lora(
    path: str | pathlib.Path, *, seed: int, config: dict[str, Any] | None = None, std: float = 0.3
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A random LoRA adapter for the transformer of the pipeline folder `path`.

    Args:
        path (`str` or `Path`): a diffusers pipeline folder.
        seed (`int`): seed of the adapter weights (`lora_A` and `lora_B` drawn with std `std`, so outputs change).
        config (`dict`, *optional*, defaults to `TINY_LORA`): peft `LoraConfig` keyword arguments.
        std (`float`, *optional*, defaults to `0.3`): std of the drawn weights.

    Returns:
        `tuple[dict[str, torch.Tensor], dict]`: the adapter tensors (as `peft.get_peft_model_state_dict` names them)
        and the peft config as plain JSON data.
    """
    from diffusers import AutoModel
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    config = dict(TINY_LORA if config is None else config)
    transformer = AutoModel.from_pretrained(str(path), subfolder="transformer")
    transformer.add_adapter(LoraConfig(**config))
    gen = torch.Generator().manual_seed(seed)
    tensors = {
        name: torch.randn(t.shape, generator=gen, dtype=t.dtype) * std
        for name, t in get_peft_model_state_dict(transformer).items()
    }
    return tensors, json.loads(json.dumps(config))
