"""Which models the vLLM-Omni backend serves, and the refusal for the others (no vllm / vllm-omni import).

The trainer's preflight reads it to refuse `rollout.name=vllm_omni` with FLUX or Wan before any worker starts; the
layering contracts keep the trainer away from the modules that import vLLM-Omni, so this check lives apart from
`pipelines.PIPELINE_CLASSES` (a test keeps the two equal).
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["SERVED_MODELS", "check_served_model"]

SERVED_MODELS: tuple[str, ...] = ("qwen_image", "sd3")
"""Model adapter names with a vLLM-Omni log-prob pipeline (the keys of `pipelines.PIPELINE_CLASSES`)."""


def check_served_model(adapter_name: str, class_name: str = "", path: str = "", installed: str | None = None) -> None:
    """Refuse a model the vLLM-Omni backend has no log-prob pipeline for, before any engine or Ray actor starts.

    The backend serves a model through a log-prob subclass of vLLM-Omni's own pipeline (`pipelines.PIPELINE_CLASSES`,
    keyed by `SERVED_MODELS`): Qwen-Image and SD3. vLLM-Omni's registry also maps `FluxPipeline`
    (`diffusion.models.flux.pipeline_flux`) and `WanPipeline` (`diffusion.models.wan2_2.pipeline_wan2_2.Wan22Pipeline`),
    but verl-omni has no log-prob subclass for them yet (docs/omni/models.md, "vLLM-Omni"); FLUX and Wan run on
    `rollout.name=diffusers`.

    Args:
        adapter_name (`str`): the model adapter's registered name (`"flux"`, `"wan"`, ...).
        class_name (`str`, *optional*): the folder's pipeline class or the adapter class, for the message.
        path (`str`, *optional*): the model folder, for the message.
        installed (`str`, *optional*): the installed vllm-omni version; read from the package metadata when omitted.

    Raises:
        ValueError: no log-prob pipeline for that model; names the model, the served ones and the installed
            vllm-omni version.
    """
    if adapter_name in SERVED_MODELS:
        return
    if installed is None:
        try:
            installed = metadata.version("vllm-omni")
        except metadata.PackageNotFoundError:
            installed = ""
    version = f"vllm-omni {installed} is installed" if installed else "vllm-omni is not installed"
    what = ", ".join(filter(None, [class_name, path]))
    raise ValueError(
        f"actor_rollout_ref.rollout.name=vllm_omni: the vLLM-Omni backend cannot serve model {adapter_name!r}"
        f"{f' ({what})' if what else ''}: verl-omni has no vLLM-Omni log-prob pipeline for it; it serves "
        f"{', '.join(SERVED_MODELS)} ({version}). Use "
        "actor_rollout_ref.rollout.name=diffusers for this model."
    )
