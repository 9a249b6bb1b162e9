"""Log-prob pipelines (Qwen-Image, SD3, FLUX.1, Wan 2.1) sharing one sampling loop that records trajectories.

The pipeline classes (`verl_omni.pipelines.logprob`) and `LOGPROB_PIPELINES` load on first use (PEP 562): they import
diffusers' pipelines and, through them, `transformers` (about a second of CPU), which a process that only needs
`DiffusionSamplingConfig` or the sampling loop (the trainer's driver, an actor worker) never uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.pipelines.sampling import (
    GenerationAborted,
    LogProbPipelineOutput,
    make_generators,
    sample_with_logprob,
)

if TYPE_CHECKING:
    from verl_core.registry import Registry
    from verl_omni.pipelines.logprob import (
        FluxPipelineWithLogProb,
        LogProbPipelineMixin,
        QwenImagePipelineWithLogProb,
        StableDiffusion3PipelineWithLogProb,
        WanPipelineWithLogProb,
    )

    LOGPROB_PIPELINES: Registry[type]

_LAZY = frozenset(
    {
        "LOGPROB_PIPELINES",
        "FluxPipelineWithLogProb",
        "LogProbPipelineMixin",
        "QwenImagePipelineWithLogProb",
        "StableDiffusion3PipelineWithLogProb",
        "WanPipelineWithLogProb",
    }
)


def __getattr__(name: str) -> Any:
    """The pipeline classes and `LOGPROB_PIPELINES`, imported from `verl_omni.pipelines.logprob` on first use."""
    if name in _LAZY:
        value = getattr(importlib.import_module("verl_omni.pipelines.logprob"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "LOGPROB_PIPELINES",
    "DiffusionSamplingConfig",
    "FluxPipelineWithLogProb",
    "GenerationAborted",
    "LogProbPipelineMixin",
    "LogProbPipelineOutput",
    "QwenImagePipelineWithLogProb",
    "StableDiffusion3PipelineWithLogProb",
    "WanPipelineWithLogProb",
    "make_generators",
    "sample_with_logprob",
]
