"""Defaults decided at run time: what `fsdp_config.compile_blocks`, `reshard_after_forward`, `cudnn_sdpa: null` mean.

`compile_blocks: null` compiles the transformer blocks on CUDA and not on the CPU, as the `diffusers` rollout does
(`engine_kwargs.diffusers.compile_blocks`): the compile costs tens of seconds once and pays back within a few steps
of a real model, while a tiny CPU model never earns it back.

`reshard_after_forward: null` keeps the gathered (unsharded) block parameters between a micro-batch's forward and
its backward (FSDP2 `reshard_after_forward=False`: no second all-gather in the backward) when that fits comfortably
in the device's free memory, measured just before the engine's first forward:

    keep  iff  device is CUDA  and  gathered + activations + gradients <= KEEP_BUDGET (0.5) x free

with `gathered` the whole model in the compute dtype (every block held at once instead of one at a time),
`activations` what one micro-batch saves for its backward (`activation_bytes`: 34 bytes per token, hidden unit and
layer in bf16, the usual estimate for a transformer layer with a fused attention kernel; the block inputs only with
gradient checkpointing) and `gradients` the rank's fp32 shard of the trainable ones (LoRA: the adapter's). Half the free
memory leaves room for the allocator's fragmentation, the optimizer step and the rollout waking up. On the CPU
(gloo), or when the free memory is unknown, it reshards (True). An explicit true/false always decides.

`cudnn_sdpa: null` is the model adapter's `cudnn_sdpa_in_training` for a training engine (False for FLUX: cuDNN's
fused attention backward fails in its compiled blocks, pytorch/pytorch#134001) and True for a forward-only one;
`disable_cudnn_sdpa` applies a False to the process (`torch.backends.cuda.enable_cudnn_sdp(False)`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KEEP_BUDGET",
    "CudnnSdpaChoice",
    "ReshardChoice",
    "activation_bytes",
    "choose_reshard_after_forward",
    "disable_cudnn_sdpa",
    "resolve_compile_blocks",
    "resolve_cudnn_sdpa",
]

logger = logging.getLogger(__name__)

KEEP_BUDGET = 0.5
"""Fraction of the free device memory that the gathered model, activations and gradients may take to keep params."""

_GIB = 2**30


def resolve_compile_blocks(value: bool | None, device_type: str) -> bool:
    """`fsdp_config.compile_blocks`: an explicit value, else True on CUDA and False elsewhere."""
    return value if value is not None else device_type == "cuda"


def activation_bytes(
    transformer_config: Mapping[str, Any], *, tokens: int, samples: int, elem_bytes: int, checkpointing: bool
) -> int:
    """Bytes one micro-batch of `samples` sequences of `tokens` tokens saves for the backward (an estimate).

    34 bytes per token, hidden unit and layer in 16-bit (17 elements); with gradient checkpointing only each block's
    input is kept (1 element) plus one block's full set during its recompute. FLUX's single-stream blocks count as
    layers.
    """
    width = int(transformer_config["num_attention_heads"]) * int(transformer_config["attention_head_dim"])
    layers = int(transformer_config.get("num_layers", 0)) + int(transformer_config.get("num_single_layers", 0))
    per_layer = tokens * samples * width * elem_bytes
    return per_layer * (layers + 17) if checkpointing else per_layer * 17 * layers


@dataclasses.dataclass(frozen=True)
class ReshardChoice:
    """The resolved `reshard_after_forward` and the numbers it was chosen from (None where not measured)."""

    reshard_after_forward: bool
    reason: str
    free_bytes: int | None = None
    gathered_bytes: int | None = None
    activation_bytes: int | None = None
    grad_bytes: int | None = None

    def describe(self) -> str:
        """One log line: the choice, why, and the memory figures in GiB."""
        figures = [
            f"{name} {value / _GIB:.2f} GiB"
            for name, value in (("free", self.free_bytes), ("gathered model", self.gathered_bytes),
                                ("micro-batch activations", self.activation_bytes), ("gradients", self.grad_bytes))
            if value is not None
        ]  # fmt: skip
        keep = "true (reshard)" if self.reshard_after_forward else "false (keep gathered params)"
        return f"reshard_after_forward={keep}: {self.reason}" + (f" [{', '.join(figures)}]" if figures else "")


def choose_reshard_after_forward(
    value: bool | None,
    *,
    device_type: str,
    free_bytes: int | None,
    gathered_bytes: int,
    activation_bytes: int,
    grad_bytes: int = 0,
    budget: float = KEEP_BUDGET,
) -> ReshardChoice:
    """Resolve `fsdp_config.reshard_after_forward` (see the module docstring for the rule).

    Args:
        value (`bool`, *optional*): the configured value; true/false decide, None applies the rule.
        device_type (`str`): the engine's device type (`"cuda"`, `"cpu"`).
        free_bytes (`int`, *optional*): free device memory now (None: unknown).
        gathered_bytes (`int`): the whole model in the compute dtype.
        activation_bytes (`int`): one micro-batch's saved activations (`activation_bytes`; 0 for forward-only).
        grad_bytes (`int`, *optional*, defaults to `0`): this rank's gradients.
        budget (`float`, *optional*, defaults to `KEEP_BUDGET`): fraction of `free_bytes` they may take.

    Returns:
        `ReshardChoice`.
    """
    if value is not None:
        return ReshardChoice(value, "set in the config")
    if device_type != "cuda":
        return ReshardChoice(True, f"{device_type} device (params are resharded on the CPU / gloo)")
    if not free_bytes or free_bytes <= 0:
        return ReshardChoice(True, "free device memory unknown")
    need = gathered_bytes + activation_bytes + grad_bytes
    keep = need <= budget * free_bytes
    verdict = "fits" if keep else "does not fit"
    reason = f"gathered model + activations + gradients {verdict} in {budget:.0%} of the free memory"
    return ReshardChoice(not keep, reason, free_bytes, gathered_bytes, activation_bytes, grad_bytes)


@dataclasses.dataclass(frozen=True)
class CudnnSdpaChoice:
    """The resolved `fsdp_config.cudnn_sdpa`: whether the process may keep cuDNN SDPA, why, and the key that decides."""

    enabled: bool
    reason: str
    key: str


def resolve_cudnn_sdpa(value: Any, adapter: Any, *, training: bool) -> CudnnSdpaChoice:
    """Resolve `fsdp_config.cudnn_sdpa` (see the module docstring for the rule).

    Args:
        value (`bool`, *optional*): the configured value; true/false decide, None takes the default.
        adapter (`DiffusionModelBase`): the model adapter (its `cudnn_sdpa_in_training` and `name`).
        training (`bool`): a training engine (the actor's) rather than a forward-only one (the reference's).

    Raises:
        ValueError: `value` is not a bool or None (names the key).
    """
    key = f"actor_rollout_ref.{'actor' if training else 'ref'}.fsdp_config.cudnn_sdpa"
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{key}: expected true, false or null (the model's choice), got {value!r}")
    if value is not None:
        return CudnnSdpaChoice(value, f"{key}={str(value).lower()}", key)
    if not training:
        return CudnnSdpaChoice(True, f"{key}=null: a forward-only engine keeps it", key)
    allowed = bool(getattr(adapter, "cudnn_sdpa_in_training", True))
    name = getattr(adapter, "name", "") or type(adapter).__name__
    if allowed:
        return CudnnSdpaChoice(True, f"{key}=null: the {name} adapter allows it in training", key)
    why = "its attention backward fails in cuDNN's fused kernel, pytorch/pytorch#134001"
    return CudnnSdpaChoice(False, f"{key}=null: the {name} adapter turns it off for training ({why})", key)


def disable_cudnn_sdpa(choice: CudnnSdpaChoice) -> None:
    """Turn cuDNN's SDPA backend off for this process when `choice` says so; log it once (when the flag flips).

    The flag is process-wide and steers only CUDA's `scaled_dot_product_attention`; it must be off before any
    block is compiled (inductor bakes the backend chosen while tracing into the graph). Never turns it back on.
    """
    import torch

    if choice.enabled:
        return
    was_on = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    if was_on:
        logger.info(
            "cuDNN SDPA backend off in this process (attention uses flash / memory-efficient kernels): %s; "
            "set %s=true to keep it",
            choice.reason,
            choice.key,
        )
