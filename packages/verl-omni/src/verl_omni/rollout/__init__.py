"""Rollout side of verl-omni, by subsystem: the `diffusers/` and `vllm_omni/` backends, `lora/`, shared pieces.

Shared beside them: `protocol` (the diffusion request / response), `agent_loop`. The flat `diffusers_*`,
`lora_merge*`, ... modules are re-exports of their new homes, kept so old imports work.

The server is registered as rollout backend `diffusers` (entry point group `verl_core.rollout_backends`), so
`verl_core.rollout.replica.RolloutReplica` launches it from a `DiffusionRolloutConfig`.
"""

from verl_core.rollout.registry import register_backend
from verl_omni.rollout.agent_loop import (
    DiffusionAgentLoop,
    DiffusionRolloutOutput,
    get_agent_loop,
    pin_sde_window,
    register_agent_loop,
    sde_window_start,
)
from verl_omni.rollout.diffusers.engine import DiffusersRolloutEngine
from verl_omni.rollout.diffusers.server import DiffusersHttpServer
from verl_omni.rollout.protocol import DiffusionGenerateRequest, DiffusionGenerateResponse

# The entry points in pyproject register both backends for installed dists; registering the same targets on import
# as well lets a source checkout on PYTHONPATH (no package metadata, e.g. a cluster image) launch them by name.
register_backend("diffusers", "verl_omni.rollout.diffusers.server:DiffusersHttpServer")
register_backend("vllm_omni", "verl_omni.rollout.vllm_omni.server:vLLMOmniHttpServer")

__all__ = [
    "DiffusersHttpServer",
    "DiffusersRolloutEngine",
    "DiffusionAgentLoop",
    "DiffusionGenerateRequest",
    "DiffusionGenerateResponse",
    "DiffusionRolloutOutput",
    "get_agent_loop",
    "pin_sde_window",
    "register_agent_loop",
    "sde_window_start",
]
