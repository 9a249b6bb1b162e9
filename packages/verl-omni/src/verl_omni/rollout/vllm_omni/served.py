"""Which models the vLLM-Omni backend serves, and the refusal for the others (no vllm / vllm-omni import).

The trainer's preflight reads it to refuse `rollout.name=vllm_omni` with a model or folder the backend cannot serve
before any worker starts; the layering contracts keep the trainer away from the modules that import vLLM-Omni, so
this check lives apart from `pipelines.PIPELINE_CLASSES` (a test keeps the two equal).
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

__all__ = ["SERVED_MODELS", "SERVED_SINCE", "check_served_model"]

SERVED_MODELS: tuple[str, ...] = ("qwen_image", "sd3", "flux", "wan")
"""Model adapter names with a vLLM-Omni log-prob pipeline (the keys of `pipelines.PIPELINE_CLASSES`)."""

SERVED_SINCE: dict[str, tuple[int, int]] = {"flux": (0, 26), "wan": (0, 26)}
"""The first vllm-omni release a pipeline is written for: FLUX and Wan against 0.26.0's `FluxPipeline` /
`Wan22Pipeline` sources (not yet run on a GPU); older releases are refused for them."""


def check_served_model(adapter_name: str, class_name: str = "", path: str = "", installed: str | None = None) -> None:
    """Refuse a model the vLLM-Omni backend has no log-prob pipeline for, before any engine or Ray actor starts.

    The backend serves a model through a log-prob subclass of vLLM-Omni's own pipeline (`pipelines.PIPELINE_CLASSES`,
    keyed by `SERVED_MODELS`): Qwen-Image, SD3, FLUX.1 (`FluxPipeline`) and Wan 2.1 (`WanPipeline`, served by
    vLLM-Omni's `Wan22Pipeline`). FLUX and Wan need vllm-omni >= 0.26 (`SERVED_SINCE`). A Wan 2.2 folder is
    refused: its two experts (`transformer_2` / `boundary_ratio`) and TI2V's per-token timesteps
    (`expand_timesteps`) are not what the Wan adapter samples.

    Args:
        adapter_name (`str`): the model adapter's registered name (`"flux"`, `"wan"`, ...).
        class_name (`str`, *optional*): the folder's pipeline class or the adapter class, for the message.
        path (`str`, *optional*): the model folder; a Wan folder is checked for Wan 2.2's fields.
        installed (`str`, *optional*): the installed vllm-omni version; read from the package metadata when omitted.

    Raises:
        ValueError: no log-prob pipeline for that model, a vllm-omni release older than its pipeline, or a Wan 2.2
            folder; names the model, the served ones and the installed vllm-omni version.
    """
    if installed is None:
        try:
            installed = metadata.version("vllm-omni")
        except metadata.PackageNotFoundError:
            installed = ""
    version = f"vllm-omni {installed} is installed" if installed else "vllm-omni is not installed"
    what = ", ".join(filter(None, [class_name, path]))
    head = (
        f"actor_rollout_ref.rollout.name=vllm_omni: the vLLM-Omni backend cannot serve model {adapter_name!r}"
        f"{f' ({what})' if what else ''}"
    )
    if adapter_name not in SERVED_MODELS:
        raise ValueError(
            f"{head}: verl-omni has no vLLM-Omni log-prob pipeline for it; it serves {', '.join(SERVED_MODELS)} "
            f"({version}). Use actor_rollout_ref.rollout.name=diffusers for this model."
        )
    since = SERVED_SINCE.get(adapter_name)
    if since is not None and installed and _minor(installed) < since:
        raise ValueError(
            f"{head}: its log-prob pipeline is written for vllm-omni >= {since[0]}.{since[1]} ({version}). Install "
            f"vllm-omni {since[0]}.{since[1]} or later, or use actor_rollout_ref.rollout.name=diffusers."
        )
    if adapter_name == "wan" and path:
        reason = _wan22_reason(Path(path))
        if reason:
            raise ValueError(
                f"{head}: {reason}; the Wan pipeline samples Wan 2.1 folders (one `transformer`) only. Use a Wan 2.1 "
                "WanPipeline folder."
            )


def _minor(version: str) -> tuple[int, int]:
    parts = [*version.split("."), "0"][:2]
    digits = ["".join(ch for ch in part.split("+")[0] if ch.isdigit()) or "0" for part in parts]
    return int(digits[0]), int(digits[1])


def _wan22_reason(folder: Path) -> str:
    """Why `folder` is a Wan 2.2 folder the backend does not serve, or `""`."""
    try:
        index = json.loads((folder / "model_index.json").read_text())
    except (OSError, ValueError):
        index = {}
    expert = index.get("transformer_2")
    if (folder / "transformer_2").is_dir() or (isinstance(expert, list) and expert and expert[0] is not None):
        return "Wan 2.2's second expert (transformer_2) is not supported"
    if index.get("boundary_ratio") is not None:
        return f"Wan 2.2's expert switch (boundary_ratio={index['boundary_ratio']}) is not supported"
    if index.get("expand_timesteps"):
        return "Wan 2.2 TI2V's per-token timesteps (expand_timesteps) are not supported"
    return ""
