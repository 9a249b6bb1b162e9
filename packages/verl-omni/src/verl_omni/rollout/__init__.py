"""Rollout backends of verl-omni: the embedded diffusers engine."""

from verl_omni.rollout.diffusers_engine import DiffusersRolloutEngine

__all__ = ["DiffusersRolloutEngine"]
