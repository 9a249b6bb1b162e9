"""What a scorer receives (`RewardBatch`), what it returns (`RewardOutput`), and the `Scorer` protocol."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["RewardBatch", "RewardFunctionError", "RewardOutput", "Scorer"]


@dataclasses.dataclass
class RewardBatch:
    """A batch of generated images with the prompt rows they came from.

    Args:
        images (`torch.Tensor`): uint8 `(B, 3, H, W)`, or videos `(B, F, 3, H, W)` (a video model's samples).
        prompts (`list[str]`): the prompt of each image.
        data_sources (`list[str | None]`): reward routing key of each image (`data_source`).
        ground_truths (`list`): each image's ground truth (None where the row has none).
        extra_infos (`list[dict]`): each image's `extra_info` (copied before a function sees it).
        offset (`int`): index of the first image in the whole step's batch (set on chunks; errors name
            `offset + i`).

    Raises:
        ValueError: images of another dtype or shape, or list lengths that differ from `B`.
    """

    images: torch.Tensor
    prompts: list[str]
    data_sources: list[str | None]
    ground_truths: list[Any]
    extra_infos: list[dict[str, Any]]
    offset: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.images, torch.Tensor) or self.images.dtype != torch.uint8:
            got = self.images.dtype if isinstance(self.images, torch.Tensor) else type(self.images).__name__
            raise ValueError(f"images: expected a uint8 tensor (B, 3, H, W), got {got}")
        if self.images.dim() not in (4, 5) or self.images.shape[-3] != 3:
            raise ValueError(
                f"images: expected shape (B, 3, H, W) or videos (B, F, 3, H, W), got {tuple(self.images.shape)}"
            )
        n = self.images.shape[0]
        for name in ("prompts", "data_sources", "ground_truths", "extra_infos"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name}: expected {n} entries (one per image), got {len(getattr(self, name))}")

    def __len__(self) -> int:
        return self.images.shape[0]

    @classmethod
    def from_records(cls, images: torch.Tensor, records: Sequence[Any]) -> RewardBatch:
        """Build from images and one prompt row per image.

        A row is any object with `prompt`, `data_source`, `ground_truth` and `extra_info` attributes, such as
        `verl_omni.data.PromptRecord`. For groups, pass each row once per image of its group
        (`[records[i] for i in prompt_index]`).
        """
        return cls(
            images=images,
            prompts=[r.prompt for r in records],
            data_sources=[r.data_source for r in records],
            ground_truths=[r.ground_truth for r in records],
            extra_infos=[dict(r.extra_info or {}) for r in records],
        )

    def chunk(self, start: int, stop: int) -> RewardBatch:
        """Rows `[start, stop)` as a batch whose `offset` points into this one."""
        return RewardBatch(
            images=self.images[start:stop],
            prompts=self.prompts[start:stop],
            data_sources=self.data_sources[start:stop],
            ground_truths=self.ground_truths[start:stop],
            extra_infos=self.extra_infos[start:stop],
            offset=self.offset + start,
        )


@dataclasses.dataclass
class RewardOutput:
    """Scores of a batch.

    Args:
        scores (`torch.Tensor`): float32 `(B,)`, one finite reward per image.
        extra (`dict[str, list]`): per-image extra values by name (from reward functions that return a dict
            with more keys than `score`; a multi-reward term's as `<id>/<key>`); None where an image has no
            value for the key.
        terms (`dict[str, list[float]]`): per-image score of each multi-reward term by id (unweighted), in
            term order; empty for a single reward function.
    """

    scores: torch.Tensor
    extra: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    terms: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Per-step means: `<prefix><id>/mean` of each term, and every numeric extra key (None values skipped).

        Extra keys are prefixed by `prefix` unless they have it.
        """
        out = {f"{prefix}{tid}/mean": sum(v) / len(v) for tid, v in self.terms.items() if v}
        for key, values in self.extra.items():
            nums = [float(v) for v in values if _is_number(v)]
            if nums and all(v is None or _is_number(v) for v in values):
                out[key if key.startswith(prefix) else prefix + key] = sum(nums) / len(nums)
        return out

    @staticmethod
    def concat(parts: Sequence[RewardOutput]) -> RewardOutput:
        """Join chunk outputs in order (keys missing from a chunk are None for its images)."""
        keys = list(dict.fromkeys(k for p in parts for k in p.extra))
        extra = {k: [v for p in parts for v in p.extra.get(k, [None] * len(p.scores))] for k in keys}
        terms = {t: [v for p in parts for v in p.terms[t]] for t in (parts[0].terms if parts else {})}
        return RewardOutput(torch.cat([p.scores for p in parts]) if parts else torch.zeros(0), extra, terms)


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return True
    if isinstance(v, (int, float)):
        return math.isfinite(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return bool(torch.isfinite(v).all())
    return type(v).__module__ == "numpy" and getattr(v, "ndim", 1) == 0 and math.isfinite(float(v))


class RewardFunctionError(RuntimeError):
    """A reward function raised or returned an unusable value; training must stop.

    Attributes:
        function (`str`): which function (`name` and file / module).
        index (`int`): the image's index in the step's batch.
        data_source (`str`, *optional*): its `data_source`.
        step (`int`, *optional*): the training step (set by the reward manager).
        detail (`str`): what went wrong (the exception type and message, or the bad value).
    """

    def __init__(
        self, *, function: str, index: int, data_source: str | None, detail: str, step: int | None = None
    ) -> None:
        self.function, self.index, self.data_source, self.detail, self.step = function, index, data_source, detail, step
        super().__init__(str(self))

    def __str__(self) -> str:
        at = f"at step {self.step} " if self.step is not None else ""
        return (
            f"reward function {self.function} failed {at}on sample {self.index} "
            f"(data_source {self.data_source!r}): {self.detail}"
        )

    def __reduce__(self) -> Any:  # keyword-only __init__: pickle through a helper (Ray ships it back)
        return (_rebuild_error, (self.function, self.index, self.data_source, self.detail, self.step))

    def at_step(self, step: int | None) -> RewardFunctionError:
        """A copy with `step` set (the original's cause and traceback notes are kept)."""
        new = RewardFunctionError(
            function=self.function, index=self.index, data_source=self.data_source, detail=self.detail, step=step
        )
        new.__cause__ = self.__cause__
        for note in getattr(self, "__notes__", ()):
            _add_note(new, note)
        return new


def _rebuild_error(function: str, index: int, data_source: str | None, detail: str, step: int | None) -> Any:
    return RewardFunctionError(function=function, index=index, data_source=data_source, detail=detail, step=step)


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):  # Python >= 3.11
        exc.add_note(note)
    else:  # pragma: no cover - Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


@runtime_checkable
class Scorer(Protocol):
    """Scores a `RewardBatch`: `scorer(batch) -> RewardOutput` with float32 `(len(batch),)` scores.

    A scorer raises `RewardFunctionError` (naming `batch.offset + i`) when a sample cannot be scored; it
    never returns a placeholder score. `name` says which function it runs, for messages and metrics.
    """

    name: str

    def __call__(self, batch: RewardBatch) -> RewardOutput:
        """Score every image of `batch`."""
        ...
