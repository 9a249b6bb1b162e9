"""Log-prob pipelines (Qwen-Image, SD3) sharing one sampling loop that records trajectories."""

from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.pipelines.logprob import (
    LogProbPipelineMixin,
    QwenImagePipelineWithLogProb,
    StableDiffusion3PipelineWithLogProb,
)
from verl_omni.pipelines.sampling import LogProbPipelineOutput, make_generators, sample_with_logprob

__all__ = [
    "DiffusionSamplingConfig",
    "LogProbPipelineMixin",
    "LogProbPipelineOutput",
    "QwenImagePipelineWithLogProb",
    "StableDiffusion3PipelineWithLogProb",
    "make_generators",
    "sample_with_logprob",
]
