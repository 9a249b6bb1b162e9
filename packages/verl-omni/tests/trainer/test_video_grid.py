"""Video sample grids: PNG frame strips, and the animated GIF and MP4 beside the first/last validation grid."""

import logging

import numpy as np
import pytest
import torch
from PIL import Image

from verl_omni.trainer import report
from verl_omni.trainer.report import write_sample_grid
from verl_omni.trainer.tracking import image_grid
from verl_omni.trainer.video_grid import frame_strips, write_video_gif, write_video_mp4


def _videos(b: int = 2, f: int = 3, h: int = 4, w: int = 6) -> torch.Tensor:
    """Video `i`, frame `t` is a flat colour: red = 40·t, green = 100·i, blue = 7 (distinct per video and frame)."""
    v = torch.zeros(b, f, 3, h, w, dtype=torch.uint8)
    for i in range(b):
        for t in range(f):
            v[i, t, 0], v[i, t, 1], v[i, t, 2] = 40 * t, 100 * i, 7
    return v


def test_frame_strips_lay_frames_left_to_right():
    v = _videos()
    strips = frame_strips(v)
    assert strips.shape == (2, 3, 4, 18)
    for i in range(2):
        for t in range(3):
            assert torch.equal(strips[i, :, :, 6 * t : 6 * t + 6], v[i, t])
    grid = np.asarray(image_grid(v))  # tracking's grid draws each video as its strip
    assert grid.shape == (4, 36, 3) and grid[0, 6 * 2 + 18, :].tolist() == [80, 100, 7]


def test_gif_plays_frame_t_of_every_video(tmp_path):
    v = _videos()
    path = write_video_gif([v, v.flip(0)], tmp_path / "s.gif", scale=1)
    gif = Image.open(path)
    assert gif.n_frames == 3 and gif.size == (12, 8)
    for t in range(3):
        gif.seek(t)
        px = np.asarray(gif.convert("RGB"))
        assert px[0, 0].tolist() == [40 * t, 0, 7] and px[0, 6].tolist() == [40 * t, 100, 7]  # row 1: videos 0, 1
        assert px[4, 0].tolist() == [40 * t, 100, 7]  # row 2: the flipped batch


def test_write_sample_grid_writes_a_strip_png_a_gif_and_an_mp4_for_videos(tmp_path):
    v = _videos()
    png = write_sample_grid({0: v, 8: v.flip(0)}, tmp_path / "samples_first_last.png", scale=1)
    assert Image.open(png).size[1] == 8
    assert Image.open(tmp_path / "samples_first_last.gif").n_frames == 3
    assert read_mp4(tmp_path / "samples_first_last.mp4").shape == (3, 16, 24, 3)  # the GIF's grid
    with pytest.raises(ValueError, match=r"videos: expected shape \(B, F, 3, H, W\), got \(2, 3, 4, 6\)"):
        frame_strips(v[:, 0])


def read_mp4(path) -> np.ndarray:
    """Every frame of an MP4, decoded by imageio's ffmpeg plugin: uint8 `(F, H, W, 3)`."""
    import imageio.v2 as imageio

    return np.stack(imageio.mimread(str(path), format="FFMPEG", memtest=False))


def test_mp4_plays_frame_t_of_every_video_padded_to_even_sizes(tmp_path):
    """3 frames of a 2x2 grid of 4x6 videos at scale 1 (8x12); flat colours survive H.264 up to a small error."""
    v = _videos()
    frames = read_mp4(write_video_mp4([v, v.flip(0)], tmp_path / "s.mp4", scale=1, fps=4))
    assert frames.shape == (3, 8, 12, 3)
    for t in range(3):
        assert np.abs(frames[t, 1, 1].astype(int) - [40 * t, 0, 7]).max() <= 12, frames[t, 1, 1]
        assert np.abs(frames[t, 5, 7].astype(int) - [40 * t, 0, 7]).max() <= 12, frames[t, 5, 7]  # the flipped batch
    odd = read_mp4(write_video_mp4([_videos(1, 2, 3, 5)], tmp_path / "odd.mp4", scale=1))
    assert odd.shape == (2, 4, 6, 3)  # 3x5 padded with white to 4x6


def test_write_sample_grid_falls_back_to_gif_with_one_warning_without_imageio_ffmpeg(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(__import__("sys").modules, "imageio_ffmpeg", None)  # `import imageio_ffmpeg` raises
    monkeypatch.setattr(report, "_MP4_WARNED", [])
    v = _videos()
    with caplog.at_level(logging.WARNING, logger="verl_omni.trainer.report"):
        write_sample_grid({0: v, 8: v}, tmp_path / "a.png", scale=1)
        write_sample_grid({0: v, 8: v}, tmp_path / "b.png", scale=1)
    assert (tmp_path / "a.gif").exists() and not (tmp_path / "a.mp4").exists()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "`imageio-ffmpeg` package" in warned[0] and "verl-omni[video]" in warned[0], warned
