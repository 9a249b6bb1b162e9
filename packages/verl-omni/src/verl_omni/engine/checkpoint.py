"""Sharded engine checkpoints with `torch.distributed.checkpoint`: model, optimizer, LR schedule, RNG, step.

Layout of a checkpoint folder:

    <dir>/model/           DCP shards of the trainable weights (LoRA only when LoRA is trained)
    <dir>/optim/           DCP shards of the AdamW state
    <dir>/extra_state_rank{r}.pt   step, LR-scheduler state, CPU and CUDA RNG state of rank r
    <dir>/meta.json        world size, step, contents
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

__all__ = ["load_engine_checkpoint", "save_engine_checkpoint"]

_OPTS = StateDictOptions(ignore_frozen_params=True)
# frozen (base) weights are not saved when a LoRA is trained: load non-strictly, then check what is missing
_LOAD_OPTS = StateDictOptions(ignore_frozen_params=True, strict=False)


def save_engine_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    lr_scheduler: Any,
    step: int,
    contents: list[str],
) -> None:
    """Save the listed `contents` (`model`, `optimizer`, `extra`) under `path`; a collective over all ranks."""
    root = Path(path)
    rank = dist.get_rank()
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    if "model" in contents:
        dcp.save(get_model_state_dict(model, options=_OPTS), checkpoint_id=str(root / "model"))
    if "optimizer" in contents and optimizer is not None:
        dcp.save(get_optimizer_state_dict(model, optimizer, options=_OPTS), checkpoint_id=str(root / "optim"))
    if "extra" in contents:
        extra = {
            "step": step,
            "lr_scheduler": None if lr_scheduler is None else lr_scheduler.state_dict(),
            "cpu_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
        }
        torch.save(extra, root / f"extra_state_rank{rank}.pt")
    if rank == 0:
        meta = {"world_size": dist.get_world_size(), "step": step, "contents": sorted(contents)}
        (root / "meta.json").write_text(json.dumps(meta, indent=1))
    dist.barrier()


def load_engine_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    lr_scheduler: Any,
    contents: list[str],
) -> int | None:
    """Load the listed `contents` from `path` into the (already sharded) model/optimizer; return the saved step.

    Raises:
        FileNotFoundError: `path` is not an engine checkpoint, or lacks a requested part.
        ValueError: `extra` is requested but the checkpoint was saved with a different world size.
    """
    root = Path(path)
    meta_path = root / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{root}: not an engine checkpoint (no meta.json)")
    meta = json.loads(meta_path.read_text())
    missing = [c for c in contents if c not in meta["contents"]]
    if missing:
        raise FileNotFoundError(f"{root}: checkpoint has {meta['contents']}, cannot load {missing}")
    if "model" in contents:
        state = get_model_state_dict(model, options=_OPTS)
        try:
            dcp.load(state, checkpoint_id=str(root / "model"))
        except CheckpointException as e:
            raise ValueError(
                f"{root}/model: does not match the engine's trainable weights ({_last_line(e)}); "
                "was it saved with another LoRA / model config?"
            ) from e
        result = set_model_state_dict(model, state, options=_LOAD_OPTS)
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        missing = sorted(set(result.missing_keys) & trainable)
        if missing or result.unexpected_keys:
            raise ValueError(
                f"{root}/model: does not match the engine's trainable weights; missing {missing[:5]}, "
                f"unexpected {sorted(result.unexpected_keys)[:5]} (was it saved with another LoRA / model config?)"
            )
    if "optimizer" in contents and optimizer is not None:
        state = get_optimizer_state_dict(model, optimizer, options=_OPTS)
        # params that never received a gradient (e.g. the unused text output of the last block) have no AdamW
        # state in the saved optimizer, while the fresh one is initialised for every param: load what exists
        dcp.load(state, checkpoint_id=str(root / "optim"), planner=DefaultLoadPlanner(allow_partial_load=True))
        set_optimizer_state_dict(model, optimizer, state, options=_OPTS)
    step = None
    if "extra" in contents:
        if meta["world_size"] != dist.get_world_size():
            raise ValueError(
                f"{root}: saved with world size {meta['world_size']}, loading with {dist.get_world_size()}; "
                "RNG state is per rank, load with checkpoint.load_contents=[model, optimizer] instead"
            )
        extra = torch.load(root / f"extra_state_rank{dist.get_rank()}.pt", weights_only=False)
        step = int(extra["step"])
        if lr_scheduler is not None and extra["lr_scheduler"] is not None:
            lr_scheduler.load_state_dict(extra["lr_scheduler"])
        torch.set_rng_state(extra["cpu_rng"])
        if extra["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(extra["cuda_rng"])
    return step


def _last_line(error: Exception) -> str:
    """The most specific line of a (multi-rank) DCP error: its last non-empty line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
