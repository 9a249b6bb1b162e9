"""Diffusion model adapters (Qwen-Image, SD3, FLUX.1, Wan 2.1) and their registry."""

from verl_omni.models.base import DiffusionModelBase, adapter_for_folder, get_class, register, registered_names
from verl_omni.models.flux import FluxAdapter
from verl_omni.models.qwen_image import QwenImageAdapter
from verl_omni.models.sd3 import SD3Adapter
from verl_omni.models.wan import WanAdapter

__all__ = [
    "DiffusionModelBase",
    "FluxAdapter",
    "QwenImageAdapter",
    "SD3Adapter",
    "WanAdapter",
    "adapter_for_folder",
    "get_class",
    "register",
    "registered_names",
]
