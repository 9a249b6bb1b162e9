"""Sample grids of videos: a PNG frame strip per video and an animated GIF of the grid (Pillow, no codec).

A batch of videos is uint8 `(B, F, 3, H, W)`. `frame_strips` lays each video's frames left to right, so the image
grid writers (`tracking.image_grid`, `report.write_sample_grid`) draw a video as one strip; `write_video_gif` plays
the grid rows over time (frame `t` of every video in each GIF frame).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import torch

__all__ = ["frame_strips", "is_video_batch", "write_video_gif"]


def is_video_batch(images: torch.Tensor) -> bool:
    """Whether `images` is uint8 videos `(B, F, 3, H, W)` rather than images `(B, 3, H, W)`."""
    return images.dim() == 5


def frame_strips(videos: torch.Tensor) -> torch.Tensor:
    """Each video `(F, 3, H, W)` as one image `(3, H, F·W)`, its frames left to right: `(B, 3, H, F·W)`.

    Raises:
        ValueError: not a batch of videos `(B, F, 3, H, W)`.
    """
    if videos.dim() != 5 or videos.shape[2] != 3:
        raise ValueError(f"videos: expected shape (B, F, 3, H, W), got {tuple(videos.shape)}")
    b, f, c, h, w = videos.shape
    return videos.permute(0, 2, 3, 1, 4).reshape(b, c, h, f * w)


def write_video_gif(
    rows: Sequence[torch.Tensor], path: pathlib.Path, *, scale: int = 2, fps: float = 8.0
) -> pathlib.Path:
    """An animated GIF whose frame `t` is a grid: one row per entry of `rows`, frame `t` of each of its videos.

    Args:
        rows (`list[torch.Tensor]`): uint8 videos `(B, F, 3, H, W)` per grid row (same `F`, `H`, `W`; the first
            `min(B)` videos of each row are drawn).
        path (`pathlib.Path`): the `.gif` to write.
        scale (`int`, defaults to 2): nearest-neighbour upscaling of each frame.
        fps (`float`, defaults to 8): playback rate (the GIF loops forever).

    Returns:
        `path`.

    Raises:
        ValueError: no rows, or rows whose videos differ in frames or size.
    """
    from verl_omni.trainer.tracking import image_grid

    if not rows:
        raise ValueError("rows: expected at least one batch of videos")
    shapes = {tuple(r.shape[1:]) for r in rows}
    if len(shapes) != 1 or any(r.dim() != 5 for r in rows):
        raise ValueError(f"rows: expected videos (B, F, 3, H, W) of one shape, got {[tuple(r.shape) for r in rows]}")
    count = min(r.shape[0] for r in rows)
    videos = torch.cat([r[:count] for r in rows])  # (rows·count, F, 3, H, W)
    frames = [image_grid(videos[:, t], cols=count, scale=scale) for t in range(videos.shape[1])]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    return path
