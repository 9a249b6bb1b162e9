"""Sample grids: `image_grid` of images, a PNG frame strip per video, the grid played as an animated GIF and an MP4.

A batch of videos is uint8 `(B, F, 3, H, W)`. `frame_strips` lays each video's frames left to right, so `image_grid`
(used by `tracking` and `report.write_sample_grid`) draws a video as one strip; `write_video_gif` (Pillow, no codec)
and `write_video_mp4` (H.264 through imageio and the ffmpeg binary of `imageio-ffmpeg`, verl-omni's `video` extra)
play the grid rows over time (frame `t` of every video in each frame). Nothing here imports the rest of the trainer.
"""

from __future__ import annotations

import importlib
import pathlib
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["frame_strips", "image_grid", "is_video_batch", "write_video_gif", "write_video_mp4"]


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


def image_grid(images: torch.Tensor, cols: int | None = None, scale: int = 1) -> Any:
    """uint8 images `(B, 3, H, W)` as one PIL image, `cols` per row (default: all in one row).

    Videos `(B, F, 3, H, W)` are drawn as frame strips (`frame_strips`), one per cell.

    Kept by hand (ten lines of PIL pastes) rather than `torchvision.utils.make_grid`: torchvision would be a
    dependency pinned to one torch release (0.28.0 requires exactly `torch==2.13.0`, so pip replaces any other
    torch, and verl-omni accepts `torch>=2.6`), and PyPI's Linux wheel is the CUDA build: beside the CPU torch
    that README's set-up installs first it fails at `import torchvision` (`operator torchvision::nms does not
    exist`; its `_C` links `libtorch_cuda.so`). docs/architecture.md, "Libraries we use and why".
    """
    from PIL import Image

    if is_video_batch(images):
        images = frame_strips(images)
    b, _, h, w = images.shape
    cols = max(1, min(cols or b, b))
    rows = (b + cols - 1) // cols
    grid = Image.new("RGB", (cols * w, rows * h), "white")
    for i, img in enumerate(images):
        grid.paste(Image.fromarray(img.permute(1, 2, 0).cpu().numpy()), ((i % cols) * w, (i // cols) * h))
    if scale > 1:
        grid = grid.resize((grid.width * scale, grid.height * scale), Image.NEAREST)
    return grid


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
    frames = _grid_frames(rows, scale)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    return path


def write_video_mp4(
    rows: Sequence[torch.Tensor], path: pathlib.Path, *, scale: int = 2, fps: float = 8.0
) -> pathlib.Path:
    """The grid video of `write_video_gif` as an H.264 MP4 (yuv420p, plays in browsers and common players).

    Args:
        rows (`list[torch.Tensor]`): as `write_video_gif`.
        path (`pathlib.Path`): the `.mp4` to write.
        scale (`int`, defaults to 2): nearest-neighbour upscaling of each frame; a frame of odd width or height is
            padded with white by one pixel (H.264 in yuv420p needs even sizes).
        fps (`float`, defaults to 8): playback rate.

    Returns:
        `path`.

    Raises:
        ImportError: `imageio` or `imageio-ffmpeg` is not installed (the message names the missing package and
            `pip install 'verl-omni[video]'`).
        ValueError: no rows, or rows whose videos differ in frames or size.
    """
    import numpy as np

    imageio = _import_video_writer()
    frames = []
    for frame in _grid_frames(rows, scale):
        px = np.asarray(frame)
        h, w = px.shape[:2]
        frames.append(np.pad(px, ((0, h % 2), (0, w % 2), (0, 0)), constant_values=255))
    writer = imageio.get_writer(
        str(path), format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=1
    )
    try:
        for px in frames:
            writer.append_data(px)
    finally:
        writer.close()
    return path


def _import_video_writer() -> Any:
    """`imageio.v2` with its ffmpeg plugin's binary; ImportError naming the missing package otherwise."""
    for package, module in (("imageio", "imageio.v2"), ("imageio-ffmpeg", "imageio_ffmpeg")):
        try:
            loaded = importlib.import_module(module)
        except ImportError as e:
            raise ImportError(
                f"writing MP4 videos needs the `{package}` package; install it with pip install 'verl-omni[video]'"
            ) from e
        if package == "imageio":
            imageio = loaded
    return imageio


def _grid_frames(rows: Sequence[torch.Tensor], scale: int) -> list[Any]:
    """PIL grid images, one per frame `t`: row `i` holds frame `t` of the first `min(B)` videos of `rows[i]`."""
    if not rows:
        raise ValueError("rows: expected at least one batch of videos")
    shapes = {tuple(r.shape[1:]) for r in rows}
    if len(shapes) != 1 or any(r.dim() != 5 for r in rows):
        raise ValueError(f"rows: expected videos (B, F, 3, H, W) of one shape, got {[tuple(r.shape) for r in rows]}")
    count = min(r.shape[0] for r in rows)
    videos = torch.cat([r[:count] for r in rows])  # (rows·count, F, 3, H, W)
    return [image_grid(videos[:, t], cols=count, scale=scale) for t in range(videos.shape[1])]
