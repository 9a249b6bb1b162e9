"""`vLLMOmniHttpServer` without vllm-omni: registration, imports, refusals at construction, engine-free helpers."""

from __future__ import annotations

import asyncio
import importlib
import re

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.registry import get_backend
from verl_omni.rollout.vllm_omni import compat

MODULES = ["compat", "contract", "contract_check", "lora", "pipelines", "server", "wheel_sources", "worker"]


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_without_vllm_omni(name):
    module = importlib.import_module(f"verl_omni.rollout.vllm_omni.{name}")
    assert module.__doc__


def test_backend_is_registered_as_vllm_omni():
    from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer

    assert get_backend("vllm_omni") is vLLMOmniHttpServer


def test_lazy_classes_need_vllm_omni():
    from verl_omni.rollout.vllm_omni import pipelines, worker

    with pytest.raises(ModuleNotFoundError, match="vllm"):
        pipelines.QwenImageLogProbOmniPipeline  # noqa: B018
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        worker.VerlOmniWorkerExtension  # noqa: B018
    with pytest.raises(AttributeError, match="NoSuchPipeline"):
        pipelines.NoSuchPipeline  # noqa: B018


def test_pipeline_qualname_names_known_models():
    from verl_omni.rollout.vllm_omni.pipelines import pipeline_qualname

    assert pipeline_qualname("sd3").endswith("pipelines.SD3LogProbOmniPipeline")
    with pytest.raises(KeyError, match="known: \\['qwen_image', 'sd3'\\]"):
        pipeline_qualname("flux")


def test_constructing_without_vllm_omni_says_which_extra_to_install():
    server_cls = get_backend("vllm_omni")
    compat.require.cache_clear()
    with pytest.raises(ImportError, match=re.escape('pip install "verl-omni[vllm-omni]"')):
        server_cls(RolloutConfig(model={"path": "/models/qwen-image"}, name="vllm_omni"))


def test_constructing_with_an_unsupported_pair_lists_the_supported_ones(monkeypatch):
    versions = {"vllm-omni": "0.30.0", "vllm": "0.26.0"}
    monkeypatch.setattr(compat, "_installed", versions.__getitem__)
    compat.require.cache_clear()
    try:
        with pytest.raises(compat.UnsupportedVersionError, match=r"vllm 0\.26\.0 does not match.*0\.18\.x \+ vllm"):
            get_backend("vllm_omni")(RolloutConfig(model={"path": "/models/qwen-image"}, name="vllm_omni"))
    finally:
        compat.require.cache_clear()


def test_tensor_lora_request_checks_its_arguments_before_importing_vllm():
    from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

    with pytest.raises(ValueError, match="at least one tensor"):
        tensor_lora_request("a", 1, {}, {"r": 4})
    with pytest.raises(ValueError, match="peft_config"):
        tensor_lora_request("a", 1, {"x": 1}, {"lora_alpha": 4})
    with pytest.raises(ValueError, match="lora_int_id"):
        tensor_lora_request("a", 0, {"x": 1}, {"r": 4})
    with pytest.raises(ValueError, match="absolute"):
        tensor_lora_request("a", 1, {"x": 1}, {"r": 4}, path="relative/dir")


def test_last_unless_returns_the_last_item_or_none_on_abort():
    from verl_omni.rollout.vllm_omni.server import _last_unless

    async def finite():
        for i in range(3):
            yield i

    async def endless():
        closed.append(False)
        try:
            while True:
                await asyncio.sleep(0.01)
                yield 0
        finally:
            closed[0] = True

    async def main():
        assert await _last_unless(finite(), asyncio.Event()) == 2
        event = asyncio.Event()
        task = asyncio.ensure_future(_last_unless(endless(), event))
        await asyncio.sleep(0.05)
        event.set()
        return await asyncio.wait_for(task, 5)

    closed: list[bool] = []
    assert asyncio.run(main()) is None
    assert closed == [True]  # the engine stream was closed


@pytest.mark.parametrize(
    ("value", "want"),
    [(None, []), (3, [3]), ([1, 2], [1, 2]), ([[1], [2, [3]]], [1, 2, 3]), (object(), [])],
)
def test_flatten_list_loras_shapes(value, want):
    from verl_omni.rollout.vllm_omni.server import _flatten

    assert _flatten(value) == want


def test_request_without_verl_sampling_is_sampled_from_its_own_fields():
    """vLLM-Omni's start-up warm-up sends a request with no `verl_sampling` through the custom pipeline: it must be
    sampled (from its own height/width/steps/n/guidance/seed), not refused (a refusal stopped the engine's launch)."""
    from types import SimpleNamespace

    from verl_omni.pipelines import DiffusionSamplingConfig
    from verl_omni.rollout.vllm_omni.pipelines import request_sampling_config, sampling_extra_args

    warmup = SimpleNamespace(height=512, width=512, num_inference_steps=1, num_outputs_per_prompt=1,
                             guidance_scale=0.0, seed=None, extra_args={"cfg_text_scale": 1.0})  # fmt: skip
    config = request_sampling_config(warmup)
    assert (config.height, config.width, config.num_inference_steps, config.n) == (512, 512, 1, 1)
    assert config.guidance_scale == 0.0 and not config.do_cfg
    ours = DiffusionSamplingConfig(n=3, num_inference_steps=4, height=64, width=96, noise_level=0.5, seed=9)
    served = SimpleNamespace(height=1, width=1, num_inference_steps=1, extra_args=sampling_extra_args(ours))
    assert request_sampling_config(served) == ours
