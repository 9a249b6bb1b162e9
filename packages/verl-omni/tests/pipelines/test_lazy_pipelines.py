"""The trainer's driver and actor worker modules import no diffusers pipeline (nor `transformers`) until one is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter imports torch

CODE = """
import sys
import verl_omni.trainer.flow_grpo_trainer, verl_omni.trainer.workers, verl_omni.rollout, verl_omni.pipelines
print("transformers" in sys.modules, "verl_omni.pipelines.logprob" in sys.modules)
from verl_omni.pipelines import LOGPROB_PIPELINES, QwenImagePipelineWithLogProb
print(LOGPROB_PIPELINES.get("qwen_image") is QwenImagePipelineWithLogProb, "transformers" in sys.modules)
"""


def test_driver_modules_load_the_logprob_pipelines_only_on_first_use():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == ["False False", "True True"], out.stdout


def test_an_unknown_pipelines_name_is_an_attribute_error():
    import verl_omni.pipelines

    with pytest.raises(AttributeError, match=r"'verl_omni\.pipelines' has no attribute 'NoSuchPipeline'"):
        verl_omni.pipelines.NoSuchPipeline  # noqa: B018
