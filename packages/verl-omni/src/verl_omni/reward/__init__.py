"""Rule-based rewards for diffusion RL."""

from verl_omni.reward.jpeg import compute_score, jpeg_compressibility, jpeg_incompressibility, jpeg_sizes_kb

__all__ = ["compute_score", "jpeg_compressibility", "jpeg_incompressibility", "jpeg_sizes_kb"]
