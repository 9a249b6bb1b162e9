"""Rule-based rewards for diffusion RL."""

from verl_omni.reward.jpeg import jpeg_compressibility, jpeg_incompressibility, jpeg_sizes_kb

__all__ = ["jpeg_compressibility", "jpeg_incompressibility", "jpeg_sizes_kb"]
