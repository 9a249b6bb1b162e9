"""Shared helpers of the reward tests: real images (smooth and noisy) and reward files written to disk."""

from __future__ import annotations

import textwrap

import pytest
import torch


def smooth_and_noise(n_smooth: int = 1, n_noise: int = 1, size: int = 32, seed: int = 0) -> torch.Tensor:
    """uint8 `(n_smooth + n_noise, 3, size, size)`: horizontal gradients first, then uniform noise."""
    ramp = torch.linspace(0, 255, size).round().to(torch.uint8)
    smooth = ramp.view(1, 1, 1, size).expand(n_smooth, 3, size, size)
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 256, (n_noise, 3, size, size), generator=g, dtype=torch.uint8)
    return torch.cat([smooth, noise]).contiguous()


@pytest.fixture
def make_images():
    """`make_images(n_smooth=1, n_noise=1, size=32, seed=0)`: see `smooth_and_noise`."""
    return smooth_and_noise


@pytest.fixture
def write_reward_file(tmp_path):
    """`write_reward_file(source, name="r.py") -> str`: a dedented reward file under tmp_path, its path."""

    def write(source: str, name: str = "r.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write
