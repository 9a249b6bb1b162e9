"""`load_pipeline`: the pipeline comes back in the requested dtype whichever keyword the installed diffusers reads."""

from __future__ import annotations

import logging

import torch
from diffusers.utils import deprecation_utils

from verl_omni.pipelines import StableDiffusion3PipelineWithLogProb
from verl_omni.pipelines import load as load_module
from verl_omni.pipelines.load import dtype_keyword, load_pipeline
from verl_omni.rollout.diffusers.engine import DiffusersRolloutEngine


def _ours(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == load_module.__name__]


def test_dtype_keyword_follows_the_installed_diffusers(monkeypatch):
    assert dtype_keyword() == "dtype"  # the renamed keyword, where `_resolve_dtype` maps `torch_dtype` onto it
    monkeypatch.delattr(deprecation_utils, "_resolve_dtype")  # a release before huggingface/diffusers#14205
    assert dtype_keyword() == "torch_dtype"


def test_load_pipeline_and_the_rollout_engine_give_the_requested_dtype(tiny_sd3_path, caplog):
    with caplog.at_level(logging.WARNING, logger=load_module.__name__):
        pipe = load_pipeline(StableDiffusion3PipelineWithLogProb, tiny_sd3_path, torch.bfloat16)
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.text_encoder.dtype == torch.bfloat16
    assert not _ours(caplog)  # loaded in bf16 directly: nothing to cast
    engine = DiffusersRolloutEngine(tiny_sd3_path, dtype=torch.bfloat16)
    assert engine.transformer.dtype == torch.bfloat16


def test_a_loader_that_ignores_the_keyword_is_caught_and_cast(tiny_sd3_path, monkeypatch, caplog):
    """diffusers before the rename ignores `dtype=` (a warning only) and loads float32: simulated with a keyword the
    installed release does not read."""
    monkeypatch.setattr(load_module, "dtype_keyword", lambda: "not_a_dtype_keyword")
    with caplog.at_level(logging.WARNING, logger=load_module.__name__):
        pipe = load_pipeline(StableDiffusion3PipelineWithLogProb, tiny_sd3_path, torch.bfloat16)
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.bfloat16
    (record,) = _ours(caplog)
    assert "torch.float32, not the requested torch.bfloat16" in record.getMessage()
