"""`resolve_device`: a rollout config's `device` string as a `torch.device`, shared by every backend."""

from __future__ import annotations

import torch

__all__ = ["resolve_device"]


def resolve_device(device: str) -> torch.device:
    """`rollout.device` as a `torch.device`: `auto` is CUDA when available, else the CPU.

    Raises:
        ValueError: `device` asks for CUDA and CUDA is not available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"rollout.device={device!r} but CUDA is not available; use 'cpu' or 'auto'")
    return resolved
