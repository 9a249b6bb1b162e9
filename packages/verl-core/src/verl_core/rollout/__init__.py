"""Rollout servers: the engine-agnostic `RolloutHttpServer`, its backends, weight sync, replicas on Ray.

Backends live in submodules so that importing this package stays light: `verl_core.rollout.hf`
(transformers), `verl_core.rollout.vllm` (vLLM, optional extra), `verl_core.rollout.replica` (Ray).
"""

from verl_core.rollout.errors import (
    BadRequestError,
    ConflictError,
    EngineError,
    EngineTimeoutError,
    NotReadyError,
    PayloadTooLargeError,
    RolloutError,
    ServerDeadError,
    WeightSyncError,
)
from verl_core.rollout.protocol import GenerateRequest, GenerateResponse, TokenGenerateResponse
from verl_core.rollout.server import RolloutHttpServer, ServerState

__all__ = [
    "BadRequestError",
    "ConflictError",
    "EngineError",
    "EngineTimeoutError",
    "GenerateRequest",
    "GenerateResponse",
    "NotReadyError",
    "PayloadTooLargeError",
    "RolloutError",
    "RolloutHttpServer",
    "ServerDeadError",
    "ServerState",
    "TokenGenerateResponse",
    "WeightSyncError",
]
