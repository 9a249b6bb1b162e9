"""AdamW and its learning-rate schedule from `actor.optim.*`."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from verl_omni.config import OptimConfig

__all__ = ["build_lr_scheduler", "build_optimizer", "lr_factor"]


def build_optimizer(params: Iterable[torch.nn.Parameter], config: OptimConfig) -> torch.optim.AdamW:
    """AdamW over `params` with `lr`, `betas`, `eps`, `weight_decay` and `override_optimizer_config` extras.

    Raises:
        ValueError: `params` is empty (nothing is trainable).
    """
    params = list(params)
    if not params:
        raise ValueError("actor optimizer: no trainable parameter (lora_rank > 0 bound nothing, or all are frozen)")
    extra = dict(config.override_optimizer_config or {})
    # foreach AdamW on sharded fp32 params; fused is CUDA only and left to override_optimizer_config
    return torch.optim.AdamW(
        params,
        lr=config.lr,
        betas=(config.betas[0], config.betas[1]),
        eps=config.eps,
        weight_decay=config.weight_decay,
        **extra,
    )


def lr_factor(step: int, config: OptimConfig) -> float:
    """Multiplier of `lr` at optimizer step `step` (0-based): linear warm-up, then constant or cosine."""
    if not config.zero_indexed_step:
        step += 1
    warmup = config.lr_warmup_steps
    if warmup < 0:
        warmup = int(config.lr_warmup_steps_ratio * max(config.total_training_steps, 0))
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if config.lr_scheduler_type == "constant":
        return 1.0
    progress = (step - warmup) / max(1, config.total_training_steps - warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * config.num_cycles * min(progress, 1.0)))
    return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * max(0.0, cosine)


def build_lr_scheduler(optimizer: torch.optim.Optimizer, config: OptimConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """`LambdaLR` applying `lr_factor`; step it once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, config))
