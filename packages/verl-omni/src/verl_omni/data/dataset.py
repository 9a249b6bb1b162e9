"""`PromptDataset`: prompt rows read from parquet, jsonl, plain text or a built-in set.

Every row becomes a `PromptRecord`: the prompt text, an optional negative prompt, the reward routing key
(`data_source`), the ground truth and `extra_info` that the reward function receives. Files are read and
checked completely when the dataset is built (at start-up), so a missing file, an unsupported extension
or a missing prompt column is reported before training, naming the config key and the path.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from verl_omni.data.builtin import BUILTIN_PREFIX, builtin_rows
from verl_omni.data.config import PROMPT_FILE_EXTENSIONS, DataConfig

__all__ = ["DataError", "DataFileNotFoundError", "PromptDataset", "PromptRecord", "prompt_text"]


class DataError(ValueError):
    """A prompt file or one of its rows cannot be used; the message names the config key and the path."""


class DataFileNotFoundError(DataError, FileNotFoundError):
    """A file named in `data.train_files` / `data.val_files` does not exist."""


@dataclasses.dataclass(frozen=True)
class PromptRecord:
    """One prompt row, as the trainer and the reward function see it.

    Args:
        index (`int`): position of the row in its dataset (0-based, over all files in order).
        prompt (`str`): the prompt text.
        negative_prompt (`str`, *optional*): the row's negative prompt; None = the pipeline's default.
        data_source (`str`, *optional*): the reward routing key (`data.reward_fn_key` column, or
            `data.default_data_source`).
        ground_truth (`Any`): `reward_model.ground_truth` (verl layout) or a top-level `ground_truth`
            column; None when the row has neither.
        extra_info (`dict`): the row's `extra_info` mapping (empty when absent).
        source (`str`): `"<file>:<row>"` (1-based line for jsonl / txt, 0-based row for parquet).
    """

    index: int
    prompt: str
    negative_prompt: str | None
    data_source: str | None
    ground_truth: Any
    extra_info: dict[str, Any]
    source: str


def prompt_text(value: Any, *, where: str) -> str:
    """The prompt string of a column value: a string, or verl's chat list of `{"role", "content"}` messages.

    In a chat list the `user` messages' text is joined with newlines and `system` / `assistant` messages
    are dropped (diffusion pipelines apply their own template). A message's `content` may itself be a list
    of parts; its `{"type": "text", "text": ...}` parts are used.

    Args:
        value: the column value.
        where (`str`): `"<key> in <file>:<row>"`, for error messages.

    Raises:
        DataError: the value is neither form, or a chat list has no user text.
    """
    if isinstance(value, str):
        return value
    if (isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray))) or _is_array(value):
        texts = []
        for message in list(value):
            if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
                raise DataError(
                    f"{where}: expected a string or a list of {{'role', 'content'}} messages, got {value!r}"
                )
            if message["role"] == "user":
                texts.append(_content_text(message["content"], where=where))
        if not texts:
            raise DataError(f"{where}: the chat list has no 'user' message: {value!r}")
        return "\n".join(texts)
    raise DataError(f"{where}: expected a string or a list of {{'role', 'content'}} messages, got {value!r}")


def _is_array(value: Any) -> bool:
    return type(value).__name__ == "ndarray"


def _content_text(content: Any, *, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) or _is_array(content):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        if parts and all(isinstance(p, str) for p in parts):
            return "".join(parts)
    raise DataError(f"{where}: a message's content must be a string or a list of text parts, got {content!r}")


class PromptDataset(Sequence[PromptRecord]):
    """Prompt rows of one split, read completely at construction.

    Args:
        records (`list[PromptRecord]`): the rows (use `from_config` or `from_files` to read files).
        columns (`dict[str, list[str]]`): file -> the columns found there (for messages).

    Use `PromptDataset.from_config(data_config, "train")` in the trainer; `len(ds)` and `ds[i]` index rows.
    """

    def __init__(self, records: list[PromptRecord], columns: dict[str, list[str]] | None = None) -> None:
        self._records = records
        self.columns = dict(columns or {})

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> PromptRecord:  # type: ignore[override]
        return self._records[index]

    def __iter__(self) -> Iterator[PromptRecord]:
        return iter(self._records)

    @classmethod
    def from_config(cls, config: DataConfig, split: Literal["train", "val"]) -> PromptDataset:
        """Read the files of `split` (`data.train_files` or `data.val_files`) as `config` says.

        Raises:
            DataFileNotFoundError: a file does not exist (names the key and the path).
            DataError: an unsupported extension, a missing prompt column (lists the columns found), an
                unreadable file or row, or no rows at all.
            ValueError: `val` asked for while `data.val_files` is null.
        """
        key = f"data.{split}_files"
        files = config.files(split)
        if not files:
            raise ValueError(f"{key} is null: there is no {split} dataset to read")
        max_samples = config.train_max_samples if split == "train" else config.val_max_samples
        return cls.from_files(
            files,
            key=key,
            prompt_key=config.prompt_key,
            negative_prompt_key=config.negative_prompt_key,
            reward_fn_key=config.reward_fn_key,
            default_data_source=config.default_data_source,
            max_samples=max_samples,
        )

    @classmethod
    def from_files(
        cls,
        files: str | Sequence[str],
        *,
        key: str = "data.train_files",
        prompt_key: str = "prompt",
        negative_prompt_key: str | None = "negative_prompt",
        reward_fn_key: str = "data_source",
        default_data_source: str | None = None,
        max_samples: int = -1,
    ) -> PromptDataset:
        """Read prompt rows from `files` (see `DataConfig` for the meaning of each argument).

        Args:
            files (`str` or `list[str]`): paths or `builtin://<name>`, read in order.
            key (`str`): config key the files came from, used in every error message.
            prompt_key (`str`): the prompt column (`data.prompt_key`).
            negative_prompt_key (`str`, *optional*): the negative prompt column (`data.negative_prompt_key`).
            reward_fn_key (`str`): the `data_source` column (`data.reward_fn_key`).
            default_data_source (`str`, *optional*): `data_source` of rows without that column.
            max_samples (`int`): keep the first N rows over all files (-1 = all).

        Raises:
            DataFileNotFoundError, DataError: as `from_config`.
        """
        paths = [files] if isinstance(files, str) else list(files)
        records: list[PromptRecord] = []
        columns: dict[str, list[str]] = {}
        for path in paths:
            rows, cols, label, positions = _read(path, key=key, prompt_key=prompt_key)
            columns[label] = cols
            if prompt_key not in cols:
                raise DataError(
                    f"{key}: {label} has no prompt column {prompt_key!r} (data.prompt_key); columns found: "
                    f"{', '.join(cols) or '(none)'}"
                )
            for row, pos in zip(rows, positions):
                if 0 <= max_samples <= len(records):
                    break
                records.append(
                    _record(
                        row,
                        index=len(records),
                        source=f"{label}:{pos}",
                        prompt_key=prompt_key,
                        negative_prompt_key=negative_prompt_key,
                        reward_fn_key=reward_fn_key,
                        default_data_source=default_data_source,
                    )
                )
        if not records:
            raise DataError(f"{key}: {', '.join(paths)} holds no prompt rows")
        return cls(records, columns)


def _read(path: str, *, key: str, prompt_key: str) -> tuple[list[dict[str, Any]], list[str], str, list[int]]:
    """Rows, column names, a display label and per-row positions of one file (or built-in set).

    Plain text files and built-in sets have one text column, named `prompt_key` here.
    """
    if path.startswith(BUILTIN_PREFIX):
        rows = builtin_rows(path[len(BUILTIN_PREFIX) :], key=key)
        rows = [{prompt_key: r.pop("prompt"), **r} for r in rows]
        return rows, list(rows[0]), path, list(range(len(rows)))
    full = os.path.expanduser(path)
    ext = os.path.splitext(full)[1].lower()
    if ext not in PROMPT_FILE_EXTENSIONS:
        raise DataError(
            f"{key}: {path} has extension {ext or '(none)'!r}; supported: {', '.join(PROMPT_FILE_EXTENSIONS)} "
            f"or {BUILTIN_PREFIX}<name>"
        )
    if not os.path.isfile(full):
        raise DataFileNotFoundError(f"{key}: no such file: {full}")
    try:
        if ext == ".parquet":
            return _read_parquet(full)
        if ext == ".jsonl":
            return _read_jsonl(full, key=key)
        return _read_txt(full, prompt_key=prompt_key)
    except DataError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{key}: cannot read {full}: {type(e).__name__}: {e}") from e


def _read_parquet(path: str) -> tuple[list[dict[str, Any]], list[str], str, list[int]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = table.to_pylist()
    return rows, list(table.column_names), path, list(range(len(rows)))


def _read_jsonl(path: str, *, key: str) -> tuple[list[dict[str, Any]], list[str], str, list[int]]:
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    columns: dict[str, None] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{key}: {path}:{lineno} is not valid JSON: {e.msg}") from e
            if not isinstance(row, dict):
                raise DataError(f"{key}: {path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
            rows.append(row)
            lines.append(lineno)
            columns.update(dict.fromkeys(row))
    # a column must be present in every row to count as found
    cols = [c for c in columns if all(c in r for r in rows)]
    return rows, cols, path, lines


def _read_txt(path: str, *, prompt_key: str) -> tuple[list[dict[str, Any]], list[str], str, list[int]]:
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.rstrip("\r\n")
            if text.strip():
                rows.append({prompt_key: text})
                lines.append(lineno)
    return rows, [prompt_key], path, lines


def _record(
    row: Mapping[str, Any],
    *,
    index: int,
    source: str,
    prompt_key: str,
    negative_prompt_key: str | None,
    reward_fn_key: str,
    default_data_source: str | None,
) -> PromptRecord:
    prompt = prompt_text(row[prompt_key], where=f"{prompt_key} in {source}")
    if not prompt.strip():
        raise DataError(f"{source}: empty prompt in column {prompt_key!r}")
    negative = None
    if negative_prompt_key is not None and row.get(negative_prompt_key) is not None:
        negative = prompt_text(row[negative_prompt_key], where=f"{negative_prompt_key} in {source}")
    data_source = row.get(reward_fn_key)
    if data_source is None:
        data_source = default_data_source
    if data_source is not None and not isinstance(data_source, str):
        raise DataError(
            f"{source}: column {reward_fn_key!r} (data.reward_fn_key) must hold strings, got {data_source!r}"
        )
    reward_model = row.get("reward_model")
    if isinstance(reward_model, Mapping) and "ground_truth" in reward_model:
        ground_truth = reward_model["ground_truth"]
    else:
        ground_truth = row.get("ground_truth")
    extra_info = row.get("extra_info")
    if extra_info is None:
        extra_info = {}
    elif not isinstance(extra_info, Mapping):
        raise DataError(f"{source}: column 'extra_info' must hold mappings, got {type(extra_info).__name__}")
    return PromptRecord(
        index=index,
        prompt=prompt,
        negative_prompt=negative,
        data_source=data_source,
        ground_truth=ground_truth,
        extra_info=dict(extra_info),
        source=source,
    )
