"""Built-in image scorers routed by `data_source` (the old `default_compute_score_image`).

Routing table (`BUILTIN_IMAGE_SCORERS`): `jpeg_compressibility` -> `jpeg_compressibility` (−kB / 500, higher =
smaller file), `jpeg_incompressibility` -> `jpeg_incompressibility` (+kB), and for videos
`video_jpeg_compressibility` (mean over every frame) and `video_temporal_smoothness` (−mean |Δframe| / 255). An image
scorer given videos `(B, F, 3, H, W)` scores their frames `0, k, 2k, ...` (`k = extra_info["frame_interval"]`,
default 1) and averages them per video (`verl_omni.reward.video.score_media`). Any other `data_source` (for example
verl's OCR data, `flow_grpo/ocr`) needs a custom reward function; scoring it here is an error naming it and
the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from verl_omni.reward.jpeg import jpeg_compressibility, jpeg_incompressibility
from verl_omni.reward.loader import batched_reward
from verl_omni.reward.video import score_media, temporal_smoothness, video_jpeg_compressibility

__all__ = [
    "BUILTIN_IMAGE_SCORERS",
    "BUILTIN_REWARD_FUNCTIONS",
    "check_builtin_data_sources",
    "default_compute_score_image",
    "default_compute_score_image_batch",
]

BUILTIN_IMAGE_SCORERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "jpeg_compressibility": jpeg_compressibility,
    "jpeg_incompressibility": jpeg_incompressibility,
    "video_jpeg_compressibility": video_jpeg_compressibility,
    "video_temporal_smoothness": temporal_smoothness,
}
"""`data_source` -> a batched scorer: uint8 `(B, 3, H, W)` images (or `(B, F, 3, H, W)` videos) -> `(B,)` rewards."""

BUILTIN_REWARD_FUNCTIONS: dict[str, tuple[str, str]] = {
    "jpeg_compressibility": ("pkg://verl_omni.reward.builtin", "jpeg_compressibility_reward"),
    "jpeg_incompressibility": ("pkg://verl_omni.reward.builtin", "jpeg_incompressibility_reward"),
    "video_temporal_smoothness": ("pkg://verl_omni.reward.builtin", "video_temporal_smoothness_reward"),
    "vlm_judge": ("pkg://verl_omni.reward.vlm_judge", "compute_score"),
    "http": ("pkg://verl_omni.reward.http_scorer", "compute_score"),
    "ocr": ("pkg://verl_omni.reward.ocr", "compute_score_ocr"),
}
"""`reward.reward_functions.<id>.builtin` name -> (`path`, `name`) of the reward function it loads."""


@batched_reward
def jpeg_compressibility_reward(solution_images: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """Batched reward function (`builtin: jpeg_compressibility`): `−size_kB / 500` per image, float64 `(B,)`.

    Videos `(B, F, 3, H, W)`: the mean over frames `0, k, 2k, ...` (`k` = each row's `extra_info["frame_interval"]`).
    """
    return score_media(jpeg_compressibility, solution_images, kwargs.get("extra_infos"))


@batched_reward
def jpeg_incompressibility_reward(solution_images: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """Batched reward function (`builtin: jpeg_incompressibility`): `+size_kB` per image (frames as above), `(B,)`."""
    return score_media(jpeg_incompressibility, solution_images, kwargs.get("extra_infos"))


@batched_reward
def video_temporal_smoothness_reward(solution_images: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """Batched reward function (`builtin: video_temporal_smoothness`): `−mean |Δframe| / 255` per video, `(B,)`."""
    return temporal_smoothness(solution_images)


def _route(data_source: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    fn = BUILTIN_IMAGE_SCORERS.get(data_source) if isinstance(data_source, str) else None
    if fn is None:
        raise ValueError(
            f"data_source {data_source!r} has no built-in image scorer; known: {', '.join(BUILTIN_IMAGE_SCORERS)}. "
            "Set reward.custom_reward_function.path/.name to score it, or fix the data's data_source column "
            "(data.reward_fn_key) or data.default_data_source"
        )
    return fn


def check_builtin_data_sources(data_sources: Iterable[str | None]) -> None:
    """Raise at start-up when a dataset holds a `data_source` the built-in scorers cannot score.

    Raises:
        ValueError: names the first unknown `data_source` and the known ones.
    """
    for ds in dict.fromkeys(data_sources):
        _route(ds)


def default_compute_score_image(
    data_source: str,
    solution_image: torch.Tensor | np.ndarray,
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """Score one image with the built-in scorer of its `data_source` (verl's old per-sample entry point).

    Args:
        data_source (`str`): routing key, see `BUILTIN_IMAGE_SCORERS`.
        solution_image: uint8 `(3, H, W)` tensor (float in [0, 1] and NHWC arrays are accepted too).
        ground_truth: accepted, unused by the built-in scorers.
        extra_info: accepted, unused.
        **kwargs: accepted, unused.

    Returns:
        The reward as a Python float.

    Raises:
        ValueError: `data_source` has no built-in scorer (names it and the known ones).
    """
    return float(_route(data_source)(solution_image)[0])


def default_compute_score_image_batch(
    data_sources: Sequence[str | None],
    solution_images: torch.Tensor,
    ground_truths: Sequence[Any] | None = None,
    extra_infos: Sequence[Any] | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """Batched `default_compute_score_image`: images of one `data_source` are scored in one call.

    Args:
        data_sources (`list[str]`): one routing key per image.
        solution_images (`torch.Tensor`): uint8 `(B, 3, H, W)`.
        ground_truths: accepted, unused by the built-in scorers.
        extra_infos: accepted, unused.
        **kwargs: accepted, unused.

    Returns:
        float64 `(B,)` rewards, in input order.

    Raises:
        ValueError: a `data_source` has no built-in scorer.
    """
    out = torch.empty(len(data_sources), dtype=torch.float64)
    for ds in dict.fromkeys(data_sources):
        idx = [i for i, d in enumerate(data_sources) if d == ds]
        infos = [extra_infos[i] for i in idx] if extra_infos is not None else None
        out[idx] = score_media(_route(ds), solution_images[idx], infos).to(torch.float64)
    return out
