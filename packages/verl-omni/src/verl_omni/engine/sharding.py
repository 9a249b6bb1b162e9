"""FSDP2 wrapping of a diffusers denoiser: its blocks (`model.fsdp_layer_prefixes`), then the root, initialised now.

`layer_prefixes` picks the configured prefixes or the adapter's default; `shard_transformer` is the one place the
engine calls `fully_shard`; `fsdp_blocks` resolves the prefixes (also used to count the compiled blocks); a warning
names repeated blocks the prefixes leave in the root unit.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from verl_omni.config import DiffusionModelConfig, torch_dtype_name

logger = logging.getLogger(__name__)

__all__ = ["fsdp_blocks", "fsdp_lazy_init", "layer_prefixes", "shard_transformer", "warn_unsharded_repeated_blocks"]


def layer_prefixes(model_config: DiffusionModelConfig, adapter: Any) -> list[str]:
    """`model.fsdp_layer_prefixes` when set, else the model adapter's default; logs which one and where it came from."""
    if model_config.fsdp_layer_prefixes is not None:
        prefixes, source = list(model_config.fsdp_layer_prefixes), "actor_rollout_ref.model.fsdp_layer_prefixes"
    else:
        prefixes, source = list(adapter.fsdp_layer_prefixes), f"the {type(adapter).__name__} default"
    logger.info("FSDP2 shards the blocks under %s (%s)", prefixes, source)
    return prefixes


def fsdp_blocks(module: nn.Module, prefixes: list[str]) -> list[nn.Module]:
    """Children of the module lists named by `prefixes` (e.g. `transformer_blocks.0`, `.1`, ...).

    Raises:
        ValueError: a prefix names no submodule (the message lists the module's children), or no block is found.
    """
    found: list[nn.Module] = []
    for prefix in prefixes:
        try:
            container = module.get_submodule(prefix.rstrip("."))
        except AttributeError as e:
            children = ", ".join(name for name, _ in module.named_children())
            raise ValueError(
                f"actor_rollout_ref.model.fsdp_layer_prefixes: {prefix!r} names no submodule of "
                f"{type(module).__name__}; its children are: {children}"
            ) from e
        found.extend(container.children())
    if not found:
        raise ValueError(
            f"actor_rollout_ref.model.fsdp_layer_prefixes={prefixes!r}: no block found in {type(module).__name__}"
        )
    return found


def shard_transformer(
    transformer: nn.Module,
    *,
    mesh: Any,
    fsdp: Any,
    prefixes: list[str],
    param_dtype: torch.dtype,
    compile_blocks: bool = False,
) -> int:
    """`fully_shard` each block named by `prefixes` (compiled first when `compile_blocks`), then the root.

    Args:
        transformer (`nn.Module`): the denoiser, in its master dtype, LoRA applied.
        mesh: the 1-D device mesh over all ranks.
        fsdp: `actor.fsdp_config` (`reduce_dtype`, `cpu_offload`, `reshard_after_forward`).
        prefixes (`list[str]`): `model.fsdp_layer_prefixes`.
        param_dtype (`torch.dtype`): the compute dtype (`fsdp_config.dtype`).
        compile_blocks (`bool`, *optional*, defaults to `False`): `torch.compile` each block before sharding.

    Returns:
        The number of sharded blocks.
    """
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=getattr(torch, torch_dtype_name(fsdp.reduce_dtype)))
    offload = CPUOffloadPolicy(pin_memory=True) if fsdp.cpu_offload else OffloadPolicy()
    kwargs = {"mesh": mesh, "mp_policy": mp, "offload_policy": offload}
    blocks = fsdp_blocks(transformer, prefixes)
    # `reshard_after_forward: null` builds resharded; `ActorWorker` resolves it before the first forward
    reshard = fsdp.reshard_after_forward is not False
    warn_unsharded_repeated_blocks(transformer, blocks, prefixes)
    for block in blocks:
        if compile_blocks:
            block.compile()
        fully_shard(block, reshard_after_forward=reshard, **kwargs)
    fully_shard(transformer, reshard_after_forward=reshard, **kwargs)
    fsdp_lazy_init(transformer)
    return len(blocks)


def fsdp_lazy_init(module: nn.Module) -> None:
    """Run FSDP2's lazy initialisation now instead of at the module's first forward.

    At that initialisation FSDP2 records each parameter group's original and reduce dtypes from the parameters
    that require grad at that moment. Doing it at construction, where `requires_grad` is what training uses, makes
    the engine independent of which forward comes first (e.g. a reference pass with the adapters disabled).
    `_get_fsdp_state()._lazy_init()` is torch's own (private, idempotent) entry point that every root forward
    calls first; it exists in every torch this package supports (>= 2.6).
    """
    module._get_fsdp_state()._lazy_init()


def warn_unsharded_repeated_blocks(transformer: nn.Module, blocks: list[nn.Module], prefixes: list[str]) -> None:
    """Warn when blocks the model repeats (diffusers' `_repeated_blocks`) are outside `fsdp_layer_prefixes`.

    They then sit in the root FSDP unit (gathered whole, never compiled one by one): FLUX's single-stream blocks
    with the default `[transformer_blocks.]`.
    """
    names = set(getattr(transformer, "_repeated_blocks", None) or ())
    chosen = {id(b) for b in blocks}
    left: dict[str, list[str]] = {}
    for name, module in transformer.named_modules():
        if (
            type(module).__name__ in names
            and id(module) not in chosen
            and not any(name.startswith(p) for p in prefixes)
        ):
            left.setdefault(name.rpartition(".")[0] + ".", []).append(type(module).__name__)
    if left:
        lists = ", ".join(f"{prefix} ({len(found)} × {found[0]})" for prefix, found in left.items())
        logger.warning(
            "actor_rollout_ref.model.fsdp_layer_prefixes=%s leaves the repeated blocks of %s under %s in the root "
            "FSDP unit (not sharded or compiled one by one); add those prefixes to the list",
            prefixes, type(transformer).__name__, lists,
        )  # fmt: skip
