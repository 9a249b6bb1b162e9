"""Log-prob pipelines (Qwen-Image, SD3, FLUX.1, Wan 2.1) sharing one sampling loop that records trajectories."""

from verl_core.registry import Registry
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.pipelines.logprob import (
    FluxPipelineWithLogProb,
    LogProbPipelineMixin,
    QwenImagePipelineWithLogProb,
    StableDiffusion3PipelineWithLogProb,
    WanPipelineWithLogProb,
)
from verl_omni.pipelines.sampling import (
    GenerationAborted,
    LogProbPipelineOutput,
    make_generators,
    sample_with_logprob,
)

LOGPROB_PIPELINES: Registry[type] = Registry(
    "log-prob pipeline",
    key="model name",
    entries={
        "qwen_image": QwenImagePipelineWithLogProb,
        "sd3": StableDiffusion3PipelineWithLogProb,
        "flux": FluxPipelineWithLogProb,
        "wan": WanPipelineWithLogProb,
    },
)
"""Log-prob pipeline class per registered adapter name (`LOGPROB_PIPELINES.add(name, cls)` adds one)."""

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
