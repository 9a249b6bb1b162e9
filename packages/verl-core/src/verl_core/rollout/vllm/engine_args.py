"""Pure helpers of the vLLM family: engine arguments from `RolloutConfig`, LoRA rank rounding, sleep level."""

from __future__ import annotations

from typing import Any

from verl_core.config.rollout import RolloutConfig
from verl_core.rollout.vllm._adapter import lora_ranks

__all__ = ["build_engine_args", "round_up_lora_rank", "sleep_level_for"]


def round_up_lora_rank(rank: int, allowed: tuple[int, ...] | None = None) -> int:
    """Smallest `max_lora_rank` vLLM accepts that holds `rank`.

    Raises:
        ValueError: `rank` is larger than the largest allowed rank (names `rollout.lora.rank`).
    """
    ranks = allowed or lora_ranks()
    for r in ranks:
        if r >= rank:
            return r
    raise ValueError(f"rollout.lora.rank: expected at most {ranks[-1]} (vLLM's largest max_lora_rank), got {rank}")


def build_engine_args(
    config: RolloutConfig,
    *,
    rank: int = 0,
    worker_extension_cls: str | None = None,
    engine_kwargs_key: str = "vllm",
) -> dict[str, Any]:
    """The engine-argument dict (AsyncEngineArgs fields) for a server of `rank`.

    `config.engine_kwargs[engine_kwargs_key]` is merged last and wins.

    Raises:
        ValueError: `engine_kwargs.<key>` is not a mapping, or the LoRA rank is too large.
    """
    model = config.model
    args: dict[str, Any] = {
        "model": model.path,
        "tokenizer": model.tokenizer_path or model.path,
        "dtype": model.dtype,
        "trust_remote_code": model.trust_remote_code,
        "seed": config.seed + rank,
        "tensor_parallel_size": config.tensor_model_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_num_seqs": config.max_num_seqs,
        "enforce_eager": config.enforce_eager,
        "enable_prefix_caching": config.enable_prefix_caching,
        "load_format": config.load_format,
        "enable_sleep_mode": True,
        "disable_log_stats": True,
    }
    if config.max_model_len is not None:
        args["max_model_len"] = config.max_model_len
    if config.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = config.max_num_batched_tokens
    if config.lora.enabled:
        args["enable_lora"] = True
        args["max_loras"] = config.lora.max_loras
        args["max_lora_rank"] = round_up_lora_rank(config.lora.rank)
    if worker_extension_cls:
        args["worker_extension_cls"] = worker_extension_cls
    overrides = config.engine_kwargs.get(engine_kwargs_key, {})
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise ValueError(
            f"rollout.engine_kwargs.{engine_kwargs_key}: expected a mapping of engine arguments, "
            f"got {type(overrides).__name__}"
        )
    args.update(overrides)
    return args


def sleep_level_for(config: RolloutConfig, requested: int | None) -> int:
    """The sleep level to use: the requested one, else 1 when serving LoRA on checkpoint weights, else config's.

    With LoRA adapters over base weights loaded from the checkpoint, only adapters are ever synced, so
    level 2 (which drops the base weights) would lose them; level 1 keeps them in host memory.
    """
    if requested is not None:
        return requested
    if config.lora.enabled and config.load_format != "dummy":
        return 1
    return config.sleep_level
