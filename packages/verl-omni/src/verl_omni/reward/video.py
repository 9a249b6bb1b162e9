"""Rewards on videos: the frame-subsampling adapter that lets image rewards score videos, and video-native scores.

A video is uint8 `(F, 3, H, W)`; a batch of them `(B, F, 3, H, W)`. An image reward scores a video through
`score_video_frames`: frames `0, k, 2k, ...` with `k = extra_info["frame_interval"]` (upstream verl-omni passes it
there; default 1, every frame) are scored as one batch of images and averaged per video. Video-native scorers
(`temporal_smoothness`, marked with `video_scorer`) get the whole videos.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from verl_omni.reward.jpeg import jpeg_compressibility

__all__ = [
    "FRAME_INTERVAL_KEY",
    "frame_intervals",
    "is_video",
    "score_media",
    "score_video_frames",
    "subsample_frames",
    "temporal_smoothness",
    "video_jpeg_compressibility",
    "video_scorer",
]

FRAME_INTERVAL_KEY = "frame_interval"
"""The `extra_info` key giving the stride between the frames an image reward scores."""

_VIDEO_NATIVE = "_verl_video_scorer"


def video_scorer(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Mark a scorer as video-native: `score_media` hands it whole videos `(B, F, 3, H, W)`, not frames."""
    setattr(fn, _VIDEO_NATIVE, True)
    return fn


def is_video(images: torch.Tensor) -> bool:
    """Whether `images` is a batch of videos `(B, F, 3, H, W)` (else images `(B, 3, H, W)`)."""
    return images.dim() == 5


def _check_videos(videos: torch.Tensor) -> None:
    if not isinstance(videos, torch.Tensor) or videos.dim() != 5 or videos.shape[2] != 3:
        got = tuple(videos.shape) if isinstance(videos, torch.Tensor) else type(videos).__name__
        raise ValueError(f"videos: expected a tensor of shape (B, F, 3, H, W), got {got}")


def frame_intervals(extra_infos: Sequence[Mapping[str, Any] | None] | None, count: int) -> list[int]:
    """Each video's `extra_info["frame_interval"]` (1 where absent).

    Raises:
        ValueError: a value that is not an int >= 1 (names the key and the row).
    """
    rows = list(extra_infos) if extra_infos is not None else [None] * count
    out = []
    for i, info in enumerate(rows):
        value = (info or {}).get(FRAME_INTERVAL_KEY, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"extra_info[{FRAME_INTERVAL_KEY!r}] of row {i}: expected an int >= 1, got {value!r}")
        out.append(value)
    return out


def subsample_frames(videos: torch.Tensor, frame_interval: int) -> torch.Tensor:
    """Frames `0, k, 2k, ...` of each video: `(B, ceil(F / k), 3, H, W)`.

    Raises:
        ValueError: not a batch of videos, or `frame_interval < 1`.
    """
    _check_videos(videos)
    if frame_interval < 1:
        raise ValueError(f"frame_interval: expected an int >= 1, got {frame_interval}")
    return videos[:, ::frame_interval]


def score_video_frames(
    image_scorer: Callable[[torch.Tensor], torch.Tensor],
    videos: torch.Tensor,
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
) -> torch.Tensor:
    """Score videos with an image scorer: the mean of its scores over each video's subsampled frames.

    Args:
        image_scorer (`Callable`): uint8 images `(N, 3, H, W)` -> `(N,)` scores.
        videos (`torch.Tensor`): uint8 `(B, F, 3, H, W)`.
        extra_infos (`list[dict]`, *optional*): per video; `frame_interval` sets the stride (default 1).

    Returns:
        float64 `(B,)`; each video's frames are scored in one call per stride and never pooled with another video's.

    Raises:
        ValueError: not a batch of videos, a bad `frame_interval`, or a scorer that returns another count.
    """
    _check_videos(videos)
    b = videos.shape[0]
    strides = frame_intervals(extra_infos, b)
    out = torch.empty(b, dtype=torch.float64)
    for k in dict.fromkeys(strides):
        rows = [i for i, s in enumerate(strides) if s == k]
        frames = subsample_frames(videos[rows], k)
        per = frames.shape[1]
        scores = torch.as_tensor(image_scorer(frames.reshape(len(rows) * per, *frames.shape[2:])))
        if scores.shape != (len(rows) * per,):
            raise ValueError(f"image scorer: returned {tuple(scores.shape)} scores for {len(rows) * per} frames")
        out[rows] = scores.to(torch.float64).view(len(rows), per).mean(dim=1)
    return out


def score_media(
    scorer: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
) -> torch.Tensor:
    """`scorer(images)` for images; for videos the whole videos to a `video_scorer`, else `score_video_frames`."""
    if not is_video(images) or getattr(scorer, _VIDEO_NATIVE, False):
        return scorer(images)
    return score_video_frames(scorer, images, extra_infos)


@video_scorer
def temporal_smoothness(videos: torch.Tensor) -> torch.Tensor:
    """`−mean |frame_{t+1} − frame_t| / 255` per video, float64 `(B,)`: 0 for a still video, lower when it flickers.

    Raises:
        ValueError: not a batch of videos, or a video of one frame (no consecutive pair).
    """
    _check_videos(videos)
    if videos.shape[1] < 2:
        raise ValueError(f"videos: temporal_smoothness needs >= 2 frames per video, got {videos.shape[1]}")
    diff = (videos[:, 1:].double() - videos[:, :-1].double()).abs()
    return -diff.mean(dim=(1, 2, 3, 4)) / 255.0


@video_scorer
def video_jpeg_compressibility(videos: torch.Tensor) -> torch.Tensor:
    """The mean `jpeg_compressibility` (−kB / 500) over every frame of each video, float64 `(B,)`."""
    return score_video_frames(jpeg_compressibility, videos)
