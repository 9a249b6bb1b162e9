"""Moved to `verl_omni.rollout.diffusers.server`; kept so old imports work (`verl_omni.rollout.diffusers_server.X`).

Issue 34 grouped `verl_omni.rollout` by subsystem (`diffusers/`, `lora/`, `vllm_omni/`). This module re-exports the
public names (`__all__`) of its new home: the very same objects, so pickles and `"module:Class"` paths naming the
old module still resolve. Patch the new module, not this one.
"""

from verl_omni.rollout.diffusers.server import DiffusersHttpServer

__all__ = ["DiffusersHttpServer"]
