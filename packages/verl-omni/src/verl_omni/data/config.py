"""`data.*`: where the prompts come from and how they are batched (verl-omni's `data` key names).

Keys of verl's LLM data pipeline that have no meaning for text-to-image prompts are accepted at their
inert values so that configs written for verl / verl-omni still load; setting one to a value that would
ask for a feature this project lacks (a custom dataset class, a sampler class, a data generator,
prompt filtering, chat-template arguments, a tokenizer) is rejected with a message naming the key.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

from verl_core.config import BaseConfig

__all__ = [
    "PROMPT_FILE_EXTENSIONS",
    "CustomDatasetClassConfig",
    "DataConfig",
    "DataGenConfig",
    "SamplerClassConfig",
]

PROMPT_FILE_EXTENSIONS = (".parquet", ".jsonl", ".txt")
"""File extensions `data.train_files` / `data.val_files` accept (plus `builtin://<name>`)."""


def _not_implemented(what: str) -> str:
    return f"null ({what} is not implemented in verl-omni; prompts are read by verl_omni.data.PromptDataset)"


@dataclasses.dataclass
class CustomDatasetClassConfig(BaseConfig):
    """`data.custom_cls.*`: a user dataset class. Not implemented: every key must stay null."""

    path: str | None = None
    name: str | None = None
    collate_fn: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("path", "name", "collate_fn"):
            self._require(key, getattr(self, key) is None, _not_implemented("a custom dataset class"))


@dataclasses.dataclass
class SamplerClassConfig(BaseConfig):
    """`data.sampler.*`: a user sampler class. Not implemented: every key must stay null."""

    class_path: str | None = None
    class_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("class_path", "class_name"):
            self._require(key, getattr(self, key) is None, _not_implemented("a custom sampler class"))


@dataclasses.dataclass
class DataGenConfig(BaseConfig):
    """`data.datagen.*`: a dynamic data generator. Not implemented: every key must stay null."""

    path: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("path", "name"):
            self._require(key, getattr(self, key) is None, _not_implemented("a data generator"))


@dataclasses.dataclass
class DataConfig(BaseConfig):
    """`data.*`: prompt files, the prompt / reward columns, batch sizes and the sampling order.

    Args:
        train_files (`str` or `list[str]`): training prompt files (`.parquet`, `.jsonl`, `.txt` with one
            prompt a line) or a built-in set `builtin://quickstart`; a list is read in order and concatenated.
            `~` is expanded.
        val_files (`str` or `list[str]`, *optional*): validation prompt files, same forms (the quickstart's
            set is `builtin://quickstart_val`); null = no validation set.
        prompt_key (`str`): column holding the prompt: a string, or verl's chat list
            `[{"role": "user", "content": ...}]` (the user messages' text is the prompt; system messages are
            dropped because the diffusion pipeline applies its own template).
        negative_prompt_key (`str`, *optional*): column holding a per-row negative prompt (same two forms);
            rows without it (or files without the column) get none. Null = never read one.
        reward_fn_key (`str`): column naming the reward routing key (`data_source`).
        default_data_source (`str`, *optional*): `data_source` of rows whose `reward_fn_key` column is missing
            or null (plain text files, jsonl without it). Null leaves it None, which the built-in scorer rejects.
        train_batch_size (`int`): prompts per training step (each becomes a group of `rollout.n` images).
        val_batch_size (`int`, *optional*): prompts per validation request batch; null = the whole
            validation set in one batch.
        train_max_samples (`int`): keep only the first N training rows (-1 = all).
        val_max_samples (`int`): keep only the first N validation rows (-1 = all).
        shuffle (`bool`): reshuffle the training prompts every epoch (seeded by `seed` and the epoch).
        validation_shuffle (`bool`): shuffle the validation prompts once (seeded by `seed`).
        seed (`int`, *optional*): seed of the prompt order; null = 1 (verl's fallback).
        max_prompt_length (`int`): accepted for compatibility and checked to be >= 1; the dataset never
            truncates prompts. The text encoder's own limit is `actor_rollout_ref.rollout.pipeline.
            max_sequence_length` (verl-omni's `rollout.prompt_length` interpolates this key).

    Compatibility keys (verl's LLM data pipeline; accepted, not used): `max_response_length`,
    `return_raw_input_ids`, `return_raw_chat`, `return_full_prompt`, `dataloader_num_workers` (prompts are
    read in the driver), `image_patch_size`, `filter_overlong_prompts_workers`, `truncation`, `image_key`,
    `video_key`, `trust_remote_code`, `return_multi_modal_inputs`. Accepted only at their inert value:
    `tokenizer` and `tool_config_path` (null), `use_shm` and `filter_overlong_prompts` (false),
    `apply_chat_template_kwargs` (empty), `custom_cls.*`, `sampler.*`, `datagen.*` (null).

    Raises:
        ConfigValueError: a file with an unsupported extension, an empty file list, a batch size < 1, or
            a compatibility key set to a value that asks for a missing feature (the message names the key).
    """

    train_files: str | list[str] = "builtin://quickstart"
    val_files: str | list[str] | None = None
    prompt_key: str = "prompt"
    negative_prompt_key: str | None = "negative_prompt"
    reward_fn_key: str = "data_source"
    default_data_source: str | None = None
    train_batch_size: int = 32
    val_batch_size: int | None = None
    train_max_samples: int = -1
    val_max_samples: int = -1
    shuffle: bool = True
    validation_shuffle: bool = False
    seed: int | None = None
    max_prompt_length: int = 512
    # ---- compatibility keys of verl's LLM data pipeline -------------------------------------
    tokenizer: str | None = None
    use_shm: bool = False
    max_response_length: int = 512
    tool_config_path: str | None = None
    return_raw_input_ids: bool = False
    return_raw_chat: bool = True
    return_full_prompt: bool = False
    dataloader_num_workers: int = 8
    image_patch_size: int = 14
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = 1
    truncation: Literal["error", "left", "right", "middle"] = "error"
    image_key: str = "images"
    video_key: str = "videos"
    trust_remote_code: bool = False
    return_multi_modal_inputs: bool = True
    apply_chat_template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    custom_cls: CustomDatasetClassConfig = dataclasses.field(default_factory=CustomDatasetClassConfig)
    sampler: SamplerClassConfig = dataclasses.field(default_factory=SamplerClassConfig)
    datagen: DataGenConfig = dataclasses.field(default_factory=DataGenConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("train_files", "val_files"):
            self._check_files(key)
        for key in ("prompt_key", "reward_fn_key"):
            self._require(key, bool(getattr(self, key)), "a non-empty column name")
        self._require("negative_prompt_key", self.negative_prompt_key != "", "a column name or null")
        self._require("train_batch_size", self.train_batch_size >= 1, "an int >= 1 (prompts per step)")
        self._require("val_batch_size", self.val_batch_size is None or self.val_batch_size >= 1, "null or >= 1")
        for key in ("train_max_samples", "val_max_samples"):
            value = getattr(self, key)
            self._require(key, value == -1 or value >= 1, "-1 (all rows) or an int >= 1")
        self._require("max_prompt_length", self.max_prompt_length >= 1, "an int >= 1")
        self._require("tokenizer", self.tokenizer is None, "null (the diffusion pipeline brings its own tokenizer)")
        self._require("tool_config_path", self.tool_config_path is None, "null (tool calling is not implemented)")
        self._require("use_shm", not self.use_shm, "false (shared-memory datasets are not implemented)")
        self._require(
            "filter_overlong_prompts",
            not self.filter_overlong_prompts,
            "false (prompt filtering is not implemented; the text encoder truncates at "
            "actor_rollout_ref.rollout.pipeline.max_sequence_length)",
        )
        self._require(
            "apply_chat_template_kwargs",
            not self.apply_chat_template_kwargs,
            "an empty mapping (prompts are not rendered through a chat template here)",
        )

    def _check_files(self, key: str) -> None:
        value = getattr(self, key)
        if value is None:
            return
        paths = [value] if isinstance(value, str) else value
        self._require(key, len(paths) > 0 and all(paths), "a path or a non-empty list of paths")
        for path in paths:
            if path.startswith("builtin://"):
                continue
            ext = os.path.splitext(path)[1].lower()
            self._require(
                key,
                ext in PROMPT_FILE_EXTENSIONS,
                f"files ending in {', '.join(PROMPT_FILE_EXTENSIONS)} or builtin://<name>; {path!r} has "
                f"extension {ext or '(none)'!r}",
            )

    @property
    def resolved_seed(self) -> int:
        """`seed`, or 1 when it is null (verl's fallback)."""
        return 1 if self.seed is None else self.seed

    def files(self, split: Literal["train", "val"]) -> list[str]:
        """The file list of `split` as a list (empty for `val` when `val_files` is null)."""
        value = self.train_files if split == "train" else self.val_files
        if value is None:
            return []
        return [value] if isinstance(value, str) else list(value)
