"""verl-omni config keys of features this project does not implement: ignored when off, rejected when on.

A config written for verl-omni (or migrated to its schema) may carry keys such as `global_profiler.*`,
`trainer.use_v1` or `actor_rollout_ref.actor.use_distill_loss`. `prune_unsupported` walks a plain config tree
beside the dataclass tree it will be built into; a key that is not a field of its dataclass and is listed in
`UNSUPPORTED` is removed when its value leaves the feature off (verl-omni's default), and rejected with a message
naming the key and the feature otherwise. Keys in neither place are left for the builder, which reports them as
unknown with a "did you mean".
"""

from __future__ import annotations

import dataclasses
import fnmatch
import typing
from collections.abc import Callable, Mapping
from typing import Any

from verl_core.config import ConfigError, ConfigKeyError, resolve_target

__all__ = ["UNSUPPORTED", "Unsupported", "prune_unsupported"]


def _falsy(value: Any) -> bool:
    return value in (None, False, 0, "", [], {})


def _key_off(key: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return not isinstance(value, Mapping) or _falsy(value.get(key))

    return check


def _equals(*allowed: Any) -> Callable[[Any], bool]:
    return lambda value: value in allowed


def _always(_: Any) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Unsupported:
    """One verl-omni key (glob pattern over dotted paths) whose feature is not implemented.

    Args:
        pattern (`str`): dotted path; `*` matches one path segment.
        feature (`str`): what the key turns on, for the message.
        is_off (`Callable`): True when the value leaves the feature off (then the key is dropped).
        instead (`str`, *optional*): what to use instead.
    """

    pattern: str
    feature: str
    is_off: Callable[[Any], bool]
    instead: str = ""


UNSUPPORTED: tuple[Unsupported, ...] = (
    Unsupported("global_profiler", "the profiler", _key_off("tool")),
    Unsupported("actor_rollout_ref.*.profiler", "the profiler", _key_off("enable")),
    Unsupported("transfer_queue", "the TransferQueue data plane", _key_off("enable")),
    Unsupported("skip", "rollout skipping (replaying dumped rollouts)", lambda v: not _nested(v, "rollout", "enable")),
    Unsupported("distillation", "diffusion distillation", _key_off("enabled")),
    Unsupported("trainer.v1", "verl-omni's v1 (TransferQueue / async) trainer", _always),
    Unsupported("trainer.rollout_data_dir", "dumping rollouts to disk", _falsy),
    Unsupported("trainer.validation_data_dir", "dumping validation generations to disk", _falsy),
    Unsupported("trainer.video_fps", "video generation", _always),
    Unsupported("trainer.rollout_data_save_freq", "dumping rollouts to disk", _always),
    Unsupported("trainer.rollout_data_max_samples", "dumping rollouts to disk", _always),
    Unsupported("trainer.validation_data_max_samples", "dumping validation generations to disk", _always),
    Unsupported("trainer.esi_redundant_time", "elastic (ESI) checkpointing", _falsy),
    Unsupported("trainer.default_hdfs_dir", "copying checkpoints to HDFS", _falsy),
    Unsupported("trainer.del_local_ckpt_after_load", "deleting checkpoints after loading", _falsy),
    Unsupported("trainer.balance_batch", "sequence-length balancing (an LLM feature)", _always),
    Unsupported("trainer.critic_warmup", "a critic", _falsy),
    Unsupported("trainer.max_critic_ckpt_to_keep", "a critic", _always),
    Unsupported("actor_rollout_ref.actor.use_distill_loss", "diffusion distillation", _falsy),
    Unsupported("actor_rollout_ref.actor.distill_loss_mode", "diffusion distillation", _always),
    Unsupported("actor_rollout_ref.actor.distill_loss_coef", "diffusion distillation", _always),
    Unsupported(
        "actor_rollout_ref.actor.rollout_correction",
        "the actor's copy of the rollout correction",
        lambda v: not _nested(v, "bypass_mode") and not _nested(v, "rollout_is") and not _nested(v, "rollout_rs"),
        instead="set algorithm.rollout_correction.* (the actor reads it from there)",
    ),
    Unsupported("actor_rollout_ref.model.pipeline", "the model's copy of the sampling settings", _always),
    Unsupported("actor_rollout_ref.model.algo", "the model's copy of the SDE settings", _always),
    # upstream's DiffusionNFT recipe names its model type and keeps θ_old as a second LoRA adapter the rollout samples
    # with; here θ_old is a copy of the trained tensors and the rollout always samples with it (docs/omni/math.md §10)
    Unsupported(
        "actor_rollout_ref.model.model_type",
        "non-diffusion model types",
        _equals("diffusion_model", "diffusion_nft_model", "diffusion_dpo_model"),
    ),
    Unsupported(
        "actor_rollout_ref.rollout.rollout_adapter", "sampling with a named LoRA adapter", _equals("default", "old")
    ),
    Unsupported("actor_rollout_ref.model.mtp", "multi-token prediction (an LLM feature)", _key_off("enable")),
    Unsupported("actor_rollout_ref.model.use_shm", "loading the model through shared memory", _falsy),
    Unsupported("actor_rollout_ref.model.tokenizer_path", "a separate tokenizer path", _falsy),
    Unsupported("actor_rollout_ref.model.extra_tokenizers", "extra tokenizers", _falsy),
    Unsupported("actor_rollout_ref.model.trust_remote_code", "remote model code", _falsy),
    Unsupported("actor_rollout_ref.model.custom_chat_template", "chat templates", _falsy),
    Unsupported("actor_rollout_ref.model.config_path", "a separate model config path", _falsy),
    Unsupported("actor_rollout_ref.model.target_parameters", "LoRA on raw parameters", _falsy),
    Unsupported(
        "actor_rollout_ref.model.policy_state_adapters",
        "several named policy adapters",
        _equals(["default"], ["default", "old"]),
    ),
    Unsupported("actor_rollout_ref.model.lora_dtype", "a separate LoRA dtype", _falsy),
    Unsupported("actor_rollout_ref.model.external_lib", "external model libraries", _falsy),
)


def _nested(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _find(path: str) -> Unsupported | None:
    return next((u for u in UNSUPPORTED if fnmatch.fnmatchcase(path, u.pattern)), None)


def _dataclass_of(annotation: Any) -> type | None:
    """The dataclass inside `annotation` (`X`, `X | None`), if any."""
    candidates = typing.get_args(annotation) or (annotation,)
    for cand in candidates:
        if isinstance(cand, type) and dataclasses.is_dataclass(cand):
            return cand
    return None


def prune_unsupported(tree: dict[str, Any], cls: type, path: str = "") -> list[str]:
    """Drop listed keys whose feature is off, reject listed keys whose feature is on; in place.

    Args:
        tree (`dict`): a plain (resolved) config mapping, changed in place.
        cls (`type`): the dataclass `tree` is built into (a `_target_` in the node wins).
        path (`str`): dotted path of `tree` (for messages).

    Returns:
        The dotted keys that were dropped because their feature is off.

    Raises:
        ConfigKeyError: a listed key turns on a feature that is not implemented (names the key and the feature).
    """
    target = tree.get("_target_")
    if isinstance(target, str):
        try:
            resolved = resolve_target(target, key=f"{path}._target_" if path else "_target_")
        except ConfigError:  # a bad _target_: the builder reports it with its own message
            resolved = None
        if isinstance(resolved, type) and dataclasses.is_dataclass(resolved):
            cls = resolved
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    hints = typing.get_type_hints(cls) if fields else {}
    dropped: list[str] = []
    for key in list(tree):
        if key == "_target_":
            continue
        dotted = f"{path}.{key}" if path else key
        if key in fields:
            sub = _dataclass_of(hints.get(key))
            if sub is not None and isinstance(tree[key], dict):
                dropped += prune_unsupported(tree[key], sub, dotted)
            continue
        entry = _find(dotted)
        if entry is None:
            continue
        if entry.is_off(tree[key]):
            del tree[key]
            dropped.append(dotted)
            continue
        instead = f"; {entry.instead}" if entry.instead else "; remove the key"
        raise ConfigKeyError(
            f"{entry.feature} is not implemented in verl-omni-train (got {_short(tree[key])}){instead}", key=dotted
        )
    return dropped


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
