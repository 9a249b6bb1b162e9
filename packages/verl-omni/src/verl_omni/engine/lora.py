"""LoRA on the denoiser through peft: attach with a binding check, disable for the reference, export as tensors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from verl_omni.config import DiffusionModelConfig
from verl_omni.engine.weight_export import ExportBuffer, export_state

__all__ = [
    "ADAPTER_NAME",
    "LoRABindingError",
    "adapters_disabled",
    "apply_lora",
    "count_lora_modules",
    "export_weights",
]

ADAPTER_NAME = "default"


class LoRABindingError(ValueError):
    """A LoRA config bound no module of the model (it would silently train nothing)."""


def count_lora_modules(module: nn.Module) -> int:
    """Number of peft LoRA layers inside `module`."""
    from peft.tuners.lora import LoraLayer

    return sum(isinstance(m, LoraLayer) for m in module.modules())


def _linear_names(module: nn.Module) -> list[str]:
    """Distinct name suffixes of the model's `nn.Linear` modules, in the form `target_modules` matches."""
    names = set()
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear) and name:
            parts = name.split(".")
            # a numbered child (`to_out.0`, `net.2`) is matched with its parent's name
            names.add(".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1])
    return sorted(names)


def _binding_error(module: nn.Module, config: DiffusionModelConfig, cause: str) -> LoRABindingError:
    known = _linear_names(module)
    cause = cause.rstrip(".")
    return LoRABindingError(
        f"actor_rollout_ref.model.target_modules={config.target_modules!r} "
        f"(exclude_modules={config.exclude_modules!r}) bound no module of {type(module).__name__}: {cause}. "
        f"Its linear module names are: {', '.join(known)}; set target_modules to some of them or 'all-linear'."
    )


def apply_lora(module: nn.Module, config: DiffusionModelConfig) -> int:
    """Attach a LoRA adapter to a diffusers model (before sharding); freeze everything else.

    Args:
        module (`nn.Module`):
            A diffusers model with peft support (`add_adapter` / `load_lora_adapter`).
        config (`DiffusionModelConfig`):
            `lora_rank`, `lora_alpha`, `lora_init_weights`, `target_modules`, `exclude_modules`,
            `lora_adapter_path`.

    Returns:
        The number of LoRA-wrapped modules (> 0).

    Raises:
        LoRABindingError: the config binds no module; the message names the target modules and lists the
            model's linear module names.
    """
    from peft import LoraConfig
    from peft.utils.error import NoMatchingPeftModuleError

    try:
        if config.lora_adapter_path is not None:
            module.load_lora_adapter(config.lora_adapter_path, adapter_name=ADAPTER_NAME, prefix=None)
        else:
            lora_config = LoraConfig(
                r=config.lora_rank,
                lora_alpha=config.lora_alpha,
                init_lora_weights=config.lora_init_weights,
                target_modules=config.target_modules,
                exclude_modules=config.exclude_modules,
                bias="none",
            )
            module.add_adapter(lora_config, adapter_name=ADAPTER_NAME)
    except (NoMatchingPeftModuleError, ValueError) as e:
        if count_lora_modules(module) == 0:
            raise _binding_error(module, config, str(e)) from e
        raise
    count = count_lora_modules(module)
    if count == 0:
        raise _binding_error(module, config, "peft wrapped 0 modules")
    for name, param in module.named_parameters():
        param.requires_grad_("lora_" in name)
    return count


@contextlib.contextmanager
def adapters_disabled(module: nn.Module) -> Iterator[None]:
    """Run the base model: every peft tuner layer of `module` skips its adapters inside the block.

    The trainable state is left exactly as found. peft's `enable_adapters(False)` also sets `requires_grad=False`
    on the adapter weights, and FSDP2 fixes each parameter group's reduce dtype from the parameters that require
    grad when it lazily initialises (at the first forward): a reference pass run first would leave no trainable
    parameter in that record, and the next backward would reduce bf16 gradients into fp32 shards. So the
    `requires_grad` flags of every parameter are put back before the block runs, and after it each layer's own
    enabled / disabled state and the flags are restored (also on error).

    Raises:
        ValueError: `module` has no peft tuner layer, or a layer has its adapter merged into the base weights
            (disabling it would unmerge, i.e. change the weights).
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in module.modules() if isinstance(m, BaseTunerLayer)]
    if not layers:
        raise ValueError(f"adapters_disabled: {type(module).__name__} has no peft adapter layer to disable")
    merged = [name for name, m in module.named_modules() if isinstance(m, BaseTunerLayer) and m.merged]
    if merged:
        raise ValueError(f"adapters_disabled: adapters are merged into the base weights of {merged[:3]}; unmerge first")
    flags = [(p, p.requires_grad) for p in module.parameters()]
    was_disabled = [layer.disable_adapters for layer in layers]
    try:
        for layer in layers:
            layer.enable_adapters(False)
        _restore_requires_grad(flags)
        yield
    finally:
        for layer, disabled in zip(layers, was_disabled, strict=True):
            layer.enable_adapters(not disabled)
        _restore_requires_grad(flags)


def _restore_requires_grad(flags: list[tuple[nn.Parameter, bool]]) -> None:
    for param, requires_grad in flags:
        if param.requires_grad != requires_grad:
            param.requires_grad_(requires_grad)


def export_weights(
    module: nn.Module,
    *,
    lora_only: bool,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    buffer: ExportBuffer | None = None,
) -> dict[str, torch.Tensor]:
    """Gather the weights for the rollout engine: LoRA tensors in PEFT naming, or the full base weights.

    Every rank must call this (the gather of a sharded tensor is a collective); every rank gets the dict. The
    tensors are gathered and cast on the parameters' device, packed into one flat buffer and moved in one
    transfer (`verl_omni.engine.weight_export`); they are views into that buffer and a snapshot: later optimizer
    steps do not change them.

    Args:
        module (`nn.Module`):
            The (possibly FSDP2-sharded, possibly LoRA-wrapped) denoiser.
        lora_only (`bool`):
            `True`: only `lora_A` / `lora_B` weights, named like `transformer_blocks.0.attn.to_q.lora_A.weight`
            (peft's saved-adapter naming, adapter name removed). `False`: the base model's weights with the
            peft wrapping removed from the names (`...to_q.weight`), LoRA not merged.
        dtype (`torch.dtype`, *optional*):
            Cast to this dtype (e.g. bfloat16 for the rollout engine) on the device; default keeps the master dtype.
        device (`str` or `torch.device`, *optional*, defaults to `"cpu"`):
            Where the returned tensors live: `"cpu"` (pinned memory when the parameters are on a GPU), or the
            parameters' accelerator (`"cuda"`), which skips the host hop.
        buffer (`ExportBuffer`, *optional*):
            Reuses its flat buffer when no earlier result still references it; default: a new buffer per call.

    Returns:
        `dict[str, torch.Tensor]`: name to full (unsharded) tensor.
    """
    return export_state(
        module, lora_only=lora_only, adapter_name=ADAPTER_NAME, dtype=dtype, device=device, buffer=buffer
    )
