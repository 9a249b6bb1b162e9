"""Custom vLLM-Omni pipelines for Qwen-Image, SD3, FLUX.1 and Wan 2.1 that sample with the sampling core's one loop.

`QwenImageLogProbOmniPipeline`, `SD3LogProbOmniPipeline`, `FluxLogProbOmniPipeline` and `WanLogProbOmniPipeline`
subclass vLLM-Omni's own pipelines (their transformers are built from vLLM layers, which the LoRA manager can wrap)
and replace `forward`: each request runs `verl_omni.pipelines.sample_with_logprob` with the model adapter and
`FlowMatchSDEDiscreteScheduler` built from the model folder, so trajectories have exactly the layout of the embedded
diffusers backend. The output is packed in the `DiffusionOutput` layout of the installed release
(`compat.build_diffusion_output`; Wan's videos as a video payload).

The FLUX and Wan pipelines are written against vllm-omni 0.26.0's `FluxPipeline` and `Wan22Pipeline` sources and
have not yet run on a GPU (docs/omni/vllm_omni.md, "Known limits").

The classes are built on first attribute access (their bases live in vllm-omni), so this module imports without
vllm-omni; vLLM-Omni resolves them by qualname from `custom_pipeline_args={"pipeline_class": ...}`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from verl_core.registry import Registry
from verl_omni.rollout.vllm_omni import compat
from verl_omni.rollout.vllm_omni.lora import TensorLoRAPipelineMixin

__all__ = [
    "PIPELINE_CLASSES",
    "SAMPLING_KEY",
    "FluxLogProbOmniPipeline",
    "LogProbOmniPipelineMixin",
    "QwenImageLogProbOmniPipeline",
    "SD3LogProbOmniPipeline",
    "WanLogProbOmniPipeline",
    "pipeline_qualname",
    "request_sampling_config",
    "sampling_extra_args",
]

SAMPLING_KEY = "verl_sampling"
"""Key of `OmniDiffusionSamplingParams.extra_args` holding the request's `DiffusionSamplingConfig` (a dict)."""

PIPELINE_CLASSES: Registry[tuple[str, str, str]] = Registry("vLLM-Omni log-prob pipeline", key="model name", entries={
    "qwen_image": ("QwenImageLogProbOmniPipeline", "vllm_omni.diffusion.models.qwen_image.pipeline_qwen_image",
                   "QwenImagePipeline"),
    "sd3": ("SD3LogProbOmniPipeline", "vllm_omni.diffusion.models.sd3.pipeline_sd3", "StableDiffusion3Pipeline"),
    "flux": ("FluxLogProbOmniPipeline", "vllm_omni.diffusion.models.flux.pipeline_flux", "FluxPipeline"),
    "wan": ("WanLogProbOmniPipeline", "vllm_omni.diffusion.models.wan2_2.pipeline_wan2_2", "Wan22Pipeline"),
})  # fmt: skip
"""Adapter name -> (our class, vLLM-Omni's module, vLLM-Omni's pipeline class)."""
_BUILT: dict[str, type] = {}

# Built on first access by the module `__getattr__` below (annotations only: no value, so the lookup reaches it).
QwenImageLogProbOmniPipeline: type
"""`(TensorLoRAPipelineMixin, LogProbOmniPipelineMixin, vllm_omni ... QwenImagePipeline)`."""
SD3LogProbOmniPipeline: type
"""`(TensorLoRAPipelineMixin, LogProbOmniPipelineMixin, vllm_omni ... StableDiffusion3Pipeline)`."""
FluxLogProbOmniPipeline: type
"""`(TensorLoRAPipelineMixin, LogProbOmniPipelineMixin, PackedLoRAMappingMixin, vllm_omni ... FluxPipeline)`."""
WanLogProbOmniPipeline: type
"""`(TensorLoRAPipelineMixin, LogProbOmniPipelineMixin, vllm_omni ... Wan22Pipeline)` (Wan 2.1 folders only)."""


def pipeline_qualname(adapter_name: str) -> str:
    """The `custom_pipeline_args["pipeline_class"]` of the log-prob pipeline for a model adapter.

    Raises:
        KeyError: no vLLM-Omni log-prob pipeline for that model (lists the known ones).
    """
    return f"{__name__}.{PIPELINE_CLASSES.get(adapter_name)[0]}"


def __getattr__(name: str) -> Any:
    for adapter_name, (cls_name, module, base) in PIPELINE_CLASSES.items():
        if name == cls_name:
            if name not in _BUILT:
                import importlib

                parent = getattr(importlib.import_module(module), base)
                bases = (TensorLoRAPipelineMixin, LogProbOmniPipelineMixin, *_EXTRA_BASES.get(adapter_name, ()), parent)
                cls = type(name, bases, {"adapter_name": adapter_name, "__module__": __name__, "__qualname__": name})
                _BUILT[name] = cls
            return _BUILT[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _QwenTransformerCall:
    """Calls vLLM-Omni's Qwen-Image transformer with the diffusers keywords the adapter uses.

    vLLM-Omni's forward also needs `txt_seq_lens` (text RoPE positions); the text sequence given is already
    trimmed to the longest prompt of the batch, and its padded width is used, as diffusers does.
    """

    def __init__(self, transformer: Any) -> None:
        self.module = transformer

    def __call__(self, *, encoder_hidden_states: torch.Tensor, **kwargs: Any) -> Any:
        lens = [int(encoder_hidden_states.shape[1])] * int(encoder_hidden_states.shape[0])
        return self.module(encoder_hidden_states=encoder_hidden_states, txt_seq_lens=lens, **kwargs)

    def parameters(self) -> Any:
        return self.module.parameters()


class PackedLoRAMappingMixin:
    """Expose the transformer's fused projections to vLLM-Omni's LoRA manager (FLUX on vllm-omni 0.26).

    The manager learns that `to_qkv` holds `to_q`/`to_k`/`to_v` from a model's `stacked_params_mapping` attribute,
    which vLLM-Omni's Qwen-Image, SD3 and Wan transformers set in `load_weights`; its FLUX transformer keeps that list
    local and declares only `packed_modules_mapping`, so an adapter on diffusers' `to_q`/`to_k`/`to_v` (or
    `add_q_proj`/...) would bind nothing. After construction (before the worker builds the manager) the mapping is
    set from `packed_modules_mapping`, unless the transformer already has one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        expose_packed_mapping(getattr(self, "transformer", None))


def expose_packed_mapping(transformer: Any) -> bool:
    """Set `transformer.stacked_params_mapping` from its class's `packed_modules_mapping`; whether it was set."""
    packed = getattr(type(transformer), "packed_modules_mapping", None) or {}
    if transformer is None or getattr(transformer, "stacked_params_mapping", None) or not packed:
        return False
    # (fused, part, shard id) rows as the transformers' `load_weights` write them: `to_q` / `add_q_proj` -> "q"
    rows = [(f".{fused}", f".{sub}", sub.removesuffix("_proj")[-1]) for fused, subs in packed.items() for sub in subs]
    transformer.stacked_params_mapping = rows
    return True


_EXTRA_BASES: dict[str, tuple[type, ...]] = {"flux": (PackedLoRAMappingMixin,)}
"""Adapter name -> mixins placed between `LogProbOmniPipelineMixin` and vLLM-Omni's pipeline."""


class _PipeView:
    """What `sample_with_logprob` and the model adapters read from a diffusers pipeline, over a vLLM-Omni one.

    Per model, the differences from diffusers' pipelines (vllm-omni 0.26 sources):

    - Qwen-Image: the transformer needs `txt_seq_lens` (`_QwenTransformerCall`); prompts are encoded at the
      tokenizer's limit and cut (see `encode_prompt`).
    - SD3: `encode_prompt` returns `(embeds, pooled)` per call; the negatives are a second call.
    - FLUX: `encode_prompt` takes no `device` and returns `(embeds, pooled, text_ids)` as diffusers; the pipeline
      has no `image_processor` (its VAE scale factor is doubled for the 2x2 packing, as diffusers'). The
      transformer's forward takes diffusers' keywords (`guidance`, `pooled_projections`, `txt_ids`, `img_ids`).
    - Wan: `encode_prompt` has diffusers' signature; the pipeline has no `video_processor` and no diffusers
      `config`: the two-expert fields the adapter refuses (`transformer_2`, `boundary_ratio`, `expand_timesteps`)
      are read from the pipeline's attributes. The transformer's forward takes diffusers' keywords, 5-D latents.
    """

    def __init__(self, pipe: Any, adapter_name: str) -> None:
        from diffusers.image_processor import VaeImageProcessor

        self._pipe, self._name = pipe, adapter_name
        self.vae = pipe.vae
        self._execution_device = pipe.device
        self.transformer: Any = (
            _QwenTransformerCall(pipe.transformer) if adapter_name == "qwen_image" else pipe.transformer
        )
        if adapter_name == "qwen_image":
            self.image_processor = VaeImageProcessor(vae_scale_factor=pipe.vae_scale_factor * 2)
        elif adapter_name == "wan":
            from diffusers.video_processor import VideoProcessor

            self.video_processor = VideoProcessor(vae_scale_factor=pipe.vae_scale_factor_spatial)
            self.transformer_2 = getattr(pipe, "transformer_2", None)
            self.config = {"boundary_ratio": getattr(pipe, "boundary_ratio", None),
                           "expand_timesteps": getattr(pipe, "expand_timesteps", False)}  # fmt: skip
        else:
            packing = 2 if adapter_name == "flux" else 1
            self.image_processor = getattr(pipe, "image_processor", None) or VaeImageProcessor(
                vae_scale_factor=pipe.vae_scale_factor * packing
            )

    def encode_prompt(self, *, prompt: list[str], max_sequence_length: int, **kwargs: Any) -> Any:
        """What the adapter's diffusers call returns.

        Qwen-Image `(embeds, mask)`; SD3 `(embeds, negative, pooled, negative pooled)`; FLUX `(embeds, pooled,
        text_ids)`; Wan `(embeds, negative or None)`.
        """
        if self._name == "qwen_image":
            # vLLM-Omni refuses a prompt longer than `max_sequence_length`; diffusers (the actor's encoder)
            # truncates it. Encode at the tokenizer's limit and cut here, so both sides see the same tokens.
            limit = max(int(getattr(self._pipe, "tokenizer_max_length", 1024)), max_sequence_length)
            embeds, mask = self._pipe.encode_prompt(prompt=prompt, max_sequence_length=limit)
            return embeds[:, :max_sequence_length], mask[:, :max_sequence_length]
        if self._name == "flux":
            return self._pipe.encode_prompt(prompt=prompt, prompt_2=kwargs.get("prompt_2"),
                                            num_images_per_prompt=kwargs.get("num_images_per_prompt", 1),
                                            max_sequence_length=max_sequence_length)  # fmt: skip
        if self._name == "wan":
            return self._pipe.encode_prompt(prompt=prompt, max_sequence_length=max_sequence_length, **kwargs)
        pe, pooled = self._pipe.encode_prompt(prompt=prompt, prompt_2=None, prompt_3=None,
                                              max_sequence_length=max_sequence_length)  # fmt: skip
        npe = npooled = None
        if kwargs.get("do_classifier_free_guidance"):
            negative = [kwargs.get("negative_prompt") or ""] * len(prompt)
            npe, npooled = self._pipe.encode_prompt(prompt=negative, prompt_2=None, prompt_3=None,
                                                    max_sequence_length=max_sequence_length)  # fmt: skip
        return pe, npe, pooled, npooled

    def maybe_free_model_hooks(self) -> None:
        """Nothing to free: vLLM-Omni owns placement."""


class LogProbOmniPipelineMixin:
    """`forward` of the log-prob pipelines: one `sample_with_logprob` call per request.

    The request's sampling config travels in `sampling_params.extra_args["verl_sampling"]` (written by
    `vLLMOmniHttpServer`); rows are seeded `seed + r`, exactly as in the embedded backend. A request without it
    (vLLM-Omni's start-up warm-up, a plain vLLM-Omni client) is sampled from its own fields
    (`request_sampling_config`).
    """

    adapter_name: ClassVar[str]
    supports_request_batch: ClassVar[bool] = False  # one request per forward (compat refuses max_num_seqs > 1)

    def _verl_parts(self) -> tuple[Any, Any]:
        cached = self.__dict__.get("_verl_parts_cache")
        if cached is None:
            from verl_omni.models.base import get_class

            adapter = get_class(self.adapter_name).from_pretrained(self.od_config.model)  # type: ignore[attr-defined]
            cached = (adapter, adapter.build_scheduler())
            self.__dict__["_verl_parts_cache"] = cached
        return cached

    @torch.no_grad()
    def forward(self, req: Any, *args: Any, **kwargs: Any) -> Any:
        """Sample each request of `req` (an `OmniDiffusionRequest` or a `DiffusionRequestBatch`)."""
        from verl_omni.pipelines import sample_with_logprob

        runtime = compat.require("the vLLM-Omni log-prob pipeline")
        adapter, scheduler = self._verl_parts()
        view = _PipeView(self, self.adapter_name)
        outputs = []
        for prompt, params in compat.request_items(runtime, req):
            text = prompt if isinstance(prompt, str) else (prompt or {}).get("prompt")
            if not isinstance(text, str):
                raise ValueError(f"prompt: the log-prob pipelines take a text prompt, got {type(prompt).__name__}")
            config = request_sampling_config(params)
            result = sample_with_logprob(view, adapter, scheduler, [text], config)
            trajectory = {k: v.cpu() for k, v in result.trajectory.items()}
            video = bool(getattr(adapter, "is_video", False))
            outputs.append(compat.build_diffusion_output(runtime, result.images.cpu(), trajectory, video=video))
        return outputs[0] if len(outputs) == 1 else outputs


def sampling_extra_args(config: Any) -> dict[str, Any]:
    """`extra_args` entry carrying a `DiffusionSamplingConfig` to the pipeline (JSON-able dict)."""
    return {SAMPLING_KEY: dataclasses.asdict(config)}


def request_sampling_config(params: Any) -> Any:
    """The `DiffusionSamplingConfig` of one request's `OmniDiffusionSamplingParams`.

    Requests from `vLLMOmniHttpServer` carry the whole config in `extra_args["verl_sampling"]`. Others (vLLM-Omni
    runs a one-step warm-up request through the pipeline at start-up) are sampled from their standard fields
    (`height`, `width`, `num_frames`, `num_inference_steps`, `num_outputs_per_prompt`, `guidance_scale`, `seed`)
    with the config's defaults for the rest.
    """
    from verl_omni.pipelines import DiffusionSamplingConfig

    extra = getattr(params, "extra_args", None) or {}
    if SAMPLING_KEY in extra:
        return DiffusionSamplingConfig(**extra[SAMPLING_KEY])
    fields = {"height": "height", "width": "width", "num_frames": "num_frames",
              "num_inference_steps": "num_inference_steps", "n": "num_outputs_per_prompt",
              "guidance_scale": "guidance_scale", "seed": "seed"}  # fmt: skip
    given = {ours: getattr(params, theirs, None) for ours, theirs in fields.items()}
    return DiffusionSamplingConfig(**{k: v for k, v in given.items() if v is not None})
