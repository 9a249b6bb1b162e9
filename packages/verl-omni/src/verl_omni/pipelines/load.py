"""Load a diffusers pipeline in a given dtype on every diffusers release the project supports.

diffusers renamed `from_pretrained(torch_dtype=...)` to `dtype=...` (huggingface/diffusers#14205, 2026-07). A
release before the rename ignores `dtype=` with only a warning and loads float32 weights: the rollout then samples
in float32 while the actor trains in bfloat16 — several times slower on a GPU (10x on an H200 with diffusers 0.38,
the release vLLM-Omni 0.26 pins) and off-policy by the precision gap. `load_pipeline` passes the keyword the
installed release reads and checks the denoiser's dtype afterwards.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["dtype_keyword", "load_pipeline"]

logger = logging.getLogger(__name__)


def dtype_keyword() -> str:
    """`"dtype"` where the installed diffusers reads it in `from_pretrained`, else `"torch_dtype"`."""
    from diffusers.utils import deprecation_utils

    # the rename added `_resolve_dtype` (maps the deprecated `torch_dtype` onto `dtype`); older releases lack it
    return "dtype" if hasattr(deprecation_utils, "_resolve_dtype") else "torch_dtype"


def load_pipeline(pipeline_cls: type, path: Any, dtype: torch.dtype, **kwargs: Any) -> Any:
    """`pipeline_cls.from_pretrained(path, <dtype keyword>=dtype, **kwargs)`, its denoiser checked to be in `dtype`.

    A denoiser left in another floating dtype (a loader that ignored the keyword) is cast to `dtype` with the rest
    of the pipeline, and a warning names both dtypes.
    """
    pipeline = pipeline_cls.from_pretrained(path, **{dtype_keyword(): dtype}, **kwargs)
    denoiser = getattr(pipeline, "transformer", None) or getattr(pipeline, "unet", None)
    loaded = next((p.dtype for p in denoiser.parameters() if p.is_floating_point()), dtype) if denoiser else dtype
    if loaded != dtype:
        import diffusers

        logger.warning(
            "diffusers %s loaded the denoiser of %s in %s, not the requested %s: casting the pipeline",
            diffusers.__version__, path, loaded, dtype,
        )  # fmt: skip
        pipeline = pipeline.to(dtype=dtype)
    return pipeline
