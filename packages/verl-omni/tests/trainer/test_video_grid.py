"""Video sample grids: PNG frame strips and the animated GIF beside the first/last validation grid."""

import numpy as np
import pytest
import torch
from PIL import Image

from verl_omni.trainer.report import write_sample_grid
from verl_omni.trainer.tracking import image_grid
from verl_omni.trainer.video_grid import frame_strips, write_video_gif


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


def test_write_sample_grid_writes_a_strip_png_and_a_gif_for_videos(tmp_path):
    v = _videos()
    png = write_sample_grid({0: v, 8: v.flip(0)}, tmp_path / "samples_first_last.png", scale=1)
    assert Image.open(png).size[1] == 8
    assert Image.open(tmp_path / "samples_first_last.gif").n_frames == 3
    with pytest.raises(ValueError, match=r"videos: expected shape \(B, F, 3, H, W\), got \(2, 3, 4, 6\)"):
        frame_strips(v[:, 0])
