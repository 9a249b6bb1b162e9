"""The stock Qwen-Image, SD3, FLUX and Wan pipelines plus `generate_with_logprob` (log-prob sampling)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from diffusers import FluxPipeline, QwenImagePipeline, StableDiffusion3Pipeline, WanPipeline

from verl_core.registry import Registry
from verl_omni.models.base import DiffusionModelBase
from verl_omni.models.flux import FluxAdapter
from verl_omni.models.qwen_image import QwenImageAdapter
from verl_omni.models.sd3 import SD3Adapter
from verl_omni.models.wan import WanAdapter
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.pipelines.sampling import LogProbPipelineOutput, sample_with_logprob
from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler

__all__ = [
    "LOGPROB_PIPELINES",
    "FluxPipelineWithLogProb",
    "LogProbPipelineMixin",
    "QwenImagePipelineWithLogProb",
    "StableDiffusion3PipelineWithLogProb",
    "WanPipelineWithLogProb",
]


class LogProbPipelineMixin:
    """Adds `generate_with_logprob` to a diffusers pipeline; the stock `__call__` stays unchanged."""

    adapter_class: ClassVar[type[DiffusionModelBase]]

    @property
    def adapter(self) -> DiffusionModelBase:
        """The model adapter built from this pipeline's component configs (cached)."""
        cached = self.__dict__.get("_verl_adapter")
        if cached is None:
            cached = self.adapter_class.from_pipeline(self)
            self.__dict__["_verl_adapter"] = cached
        return cached

    @property
    def sde_scheduler(self) -> FlowMatchSDEDiscreteScheduler:
        """A `FlowMatchSDEDiscreteScheduler` with the pipeline scheduler's config (the stock one is kept)."""
        if isinstance(self.scheduler, FlowMatchSDEDiscreteScheduler):
            return self.scheduler
        cached = self.__dict__.get("_verl_sde_scheduler")
        if cached is None:
            cached = FlowMatchSDEDiscreteScheduler.from_config(self.scheduler.config)
            self.__dict__["_verl_sde_scheduler"] = cached
        return cached

    @torch.no_grad()
    def generate_with_logprob(
        self,
        prompts: list[str],
        config: DiffusionSamplingConfig | None = None,
        generator: torch.Generator | list[torch.Generator] | None = None,
        *,
        should_abort: Callable[[], bool] | None = None,
        **overrides: Any,
    ) -> LogProbPipelineOutput:
        """Generate `n` images per prompt and return them with the trajectory (see `sample_with_logprob`).

        Args:
            prompts (`list[str]`): prompts.
            config (`DiffusionSamplingConfig`, *optional*): sampling parameters (defaults when None).
            generator (`torch.Generator` or list, *optional*): noise source, one per row when a list.
            should_abort (`Callable[[], bool]`, *optional*): checked before every step; True raises
                `GenerationAborted` (see `sample_with_logprob`).
            **overrides: fields of `DiffusionSamplingConfig` replacing those of `config`.

        Returns:
            [`LogProbPipelineOutput`] with uint8 `images` `(B, 3, H, W)` and the `trajectory` TensorDict.
        """
        config = config or DiffusionSamplingConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        return sample_with_logprob(
            self, self.adapter, self.sde_scheduler, prompts, config, generator, should_abort=should_abort
        )


class QwenImagePipelineWithLogProb(LogProbPipelineMixin, QwenImagePipeline):
    """`QwenImagePipeline` with `generate_with_logprob` (true CFG with norm rescaling, packed latents)."""

    adapter_class = QwenImageAdapter


class StableDiffusion3PipelineWithLogProb(LogProbPipelineMixin, StableDiffusion3Pipeline):
    """`StableDiffusion3Pipeline` with `generate_with_logprob` (plain CFG)."""

    adapter_class = SD3Adapter


class FluxPipelineWithLogProb(LogProbPipelineMixin, FluxPipeline):
    """`FluxPipeline` with `generate_with_logprob` (distilled guidance embedding, one forward per step)."""

    adapter_class = FluxAdapter


class WanPipelineWithLogProb(LogProbPipelineMixin, WanPipeline):
    """`WanPipeline` with `generate_with_logprob` (videos `(B, F, 3, H, W)`, plain CFG in two forwards)."""

    adapter_class = WanAdapter

    @property
    def sde_scheduler(self) -> FlowMatchSDEDiscreteScheduler:
        """A `FlowMatchSDEDiscreteScheduler` with Wan's fixed shift (also from a UniPC scheduler's `flow_shift`)."""
        if isinstance(self.scheduler, FlowMatchSDEDiscreteScheduler):
            return self.scheduler
        cached = self.__dict__.get("_verl_sde_scheduler")
        if cached is None:
            cached = self.adapter.build_scheduler()
            self.__dict__["_verl_sde_scheduler"] = cached
        return cached


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
