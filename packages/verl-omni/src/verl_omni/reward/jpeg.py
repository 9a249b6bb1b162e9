"""`jpeg_compressibility`: rule-based reward from the JPEG file size (ddpo-pytorch / FlowGRPO definition)."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

__all__ = ["compute_score", "jpeg_compressibility", "jpeg_incompressibility", "jpeg_sizes_kb"]


def _to_uint8_nhwc(images: torch.Tensor | np.ndarray) -> np.ndarray:
    """uint8 `(B, H, W, 3)` from uint8 or float-in-[0, 1] images, NCHW (torch) or NHWC (numpy)."""
    if isinstance(images, torch.Tensor):
        t = images.detach().cpu()
        if t.dim() == 3:
            t = t.unsqueeze(0)
        if t.dim() != 4 or t.shape[1] != 3:
            raise ValueError(f"images: expected a tensor of shape (B, 3, H, W) or (3, H, W), got {tuple(images.shape)}")
        if t.dtype != torch.uint8:
            t = (t.float() * 255).round().clamp(0, 255).to(torch.uint8)
        return t.permute(0, 2, 3, 1).numpy()
    pixels = np.asarray(images)
    if pixels.ndim == 3:
        pixels = pixels[None]
    if pixels.ndim != 4 or pixels.shape[-1] != 3:
        raise ValueError(f"images: expected an array of shape (B, H, W, 3) or (H, W, 3), got {pixels.shape}")
    if pixels.dtype != np.uint8:
        pixels = np.clip(np.round(pixels.astype(np.float64) * 255), 0, 255).astype(np.uint8)
    return pixels


def jpeg_sizes_kb(images: torch.Tensor | np.ndarray, quality: int = 95) -> torch.Tensor:
    """JPEG size of each image in decimal kB (bytes / 1000), PIL encoder at `quality`, float64 `(B,)`."""
    sizes = []
    for img in _to_uint8_nhwc(images):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=quality)
        sizes.append(buf.tell() / 1000.0)
    return torch.tensor(sizes, dtype=torch.float64)


def jpeg_compressibility(images: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Reward `-size_kB / 500` per image (higher = smaller file), float64 `(B,)`.

    Args:
        images: uint8, or float in [0, 1] (rounded half to even after ×255); `(B, 3, H, W)` tensors or
            `(B, H, W, 3)` arrays; a single image without the batch dim is accepted.

    Raises:
        ValueError: an unsupported shape.
    """
    return -jpeg_sizes_kb(images) / 500.0


def jpeg_incompressibility(images: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Reward `+size_kB` per image (higher = larger file), float64 `(B,)`."""
    return jpeg_sizes_kb(images)


def compute_score(solution_image: torch.Tensor | np.ndarray, **_: object) -> float:
    """Legacy reward-function entry point: `jpeg_compressibility` of one image as a float."""
    return float(jpeg_compressibility(solution_image)[0])
