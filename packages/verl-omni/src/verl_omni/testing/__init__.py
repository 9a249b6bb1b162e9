"""Test helpers: tiny random diffusers pipelines built offline, and weights for weight-sync tests."""

from verl_omni.testing.tiny import PRESETS, TinyPreset, build_tiny_pipeline
from verl_omni.testing.weights import TINY_LORA, perturbed_transformer_weights, random_transformer_lora

__all__ = [
    "PRESETS",
    "TINY_LORA",
    "TinyPreset",
    "build_tiny_pipeline",
    "perturbed_transformer_weights",
    "random_transformer_lora",
]
