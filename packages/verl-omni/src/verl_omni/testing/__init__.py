"""Test helpers: tiny random diffusers pipelines built offline."""

from verl_omni.testing.tiny import PRESETS, TinyPreset, build_tiny_pipeline

__all__ = ["PRESETS", "TinyPreset", "build_tiny_pipeline"]
