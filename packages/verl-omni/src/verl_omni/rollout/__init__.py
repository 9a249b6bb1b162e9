"""Rollout side of verl-omni: the embedded diffusers engine and server, the diffusion protocol, the agent loop.

The server is registered as rollout backend `diffusers` (entry point group `verl_core.rollout_backends`), so
`verl_core.rollout.replica.RolloutReplica` launches it from a `DiffusionRolloutConfig`.
"""

from verl_omni.rollout.agent_loop import (
    DiffusionAgentLoop,
    DiffusionRolloutOutput,
    get_agent_loop,
    pin_sde_window,
    register_agent_loop,
)
from verl_omni.rollout.diffusers_engine import DiffusersRolloutEngine
from verl_omni.rollout.diffusers_server import DiffusersHttpServer
from verl_omni.rollout.protocol import DiffusionGenerateRequest, DiffusionGenerateResponse

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
]
