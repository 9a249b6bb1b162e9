"""`vLLMOmniHttpServer` without vllm-omni: registration, imports, refusals at construction, engine-free helpers."""

from __future__ import annotations

import asyncio
import importlib
import re

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.registry import get_backend
from verl_omni.rollout.vllm_omni import compat

MODULES = ["compat", "contract", "lora", "pipelines", "served", "server", "worker"]


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
    assert pipeline_qualname("flux").endswith("pipelines.FluxLogProbOmniPipeline")
    assert pipeline_qualname("wan").endswith("pipelines.WanLogProbOmniPipeline")
    want = r"^model name: unknown vLLM-Omni log-prob pipeline 'ltx'; registered: flux, qwen_image, sd3, wan$"
    with pytest.raises(KeyError, match=want):
        pipeline_qualname("ltx")


def test_check_served_model_serves_flux_and_wan_from_026_and_refuses_the_rest():
    from verl_omni.rollout.vllm_omni.pipelines import PIPELINE_CLASSES
    from verl_omni.rollout.vllm_omni.served import SERVED_MODELS, check_served_model

    assert tuple(PIPELINE_CLASSES) == SERVED_MODELS == ("qwen_image", "sd3", "flux", "wan")
    for served in SERVED_MODELS:
        check_served_model(served, installed="0.26.0")  # no error
        check_served_model(served, installed="")  # vllm-omni not installed: the server's import error says so
    check_served_model("qwen_image", installed="0.18.0")
    check_served_model("wan", installed="0.30.1rc1")
    with pytest.raises(
        ValueError,
        match=r"rollout\.name=vllm_omni: .* cannot serve model 'flux' \(Cls, /m\): its log-prob pipeline is written "
        r"for vllm-omni >= 0\.26 \(vllm-omni 0\.24\.0 is installed\)\. Install .*or use .*name=diffusers",
    ):
        check_served_model("flux", "Cls", "/m", installed="0.24.0")
    with pytest.raises(
        ValueError,
        match=r"cannot serve model 'ltx' \(Cls, /m\): verl-omni has no vLLM-Omni log-prob pipeline for it; it serves "
        r"qwen_image, sd3, flux, wan \(vllm-omni is not installed\)\. Use .*name=diffusers",
    ):
        check_served_model("ltx", "Cls", "/m", installed="")


@pytest.mark.parametrize(
    ("index", "folder", "reason"),
    [
        ({"transformer_2": ["diffusers", "WanTransformer3DModel"]}, False, r"second expert \(transformer_2\)"),
        ({}, True, r"second expert \(transformer_2\)"),
        ({"boundary_ratio": 0.875}, False, r"expert switch \(boundary_ratio=0\.875\)"),
        ({"expand_timesteps": True}, False, r"TI2V's per-token timesteps \(expand_timesteps\)"),
    ],
)
def test_check_served_model_refuses_wan22_folders_naming_why(index, folder, reason, tmp_path):
    import json

    from verl_omni.rollout.vllm_omni.served import check_served_model

    base = {"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"],
            "transformer_2": [None, None]}  # fmt: skip
    (tmp_path / "model_index.json").write_text(json.dumps(base))
    check_served_model("wan", "WanPipeline", str(tmp_path), installed="0.26.0")  # Wan 2.1: served
    (tmp_path / "model_index.json").write_text(json.dumps({**base, **index}))
    if folder:
        (tmp_path / "transformer_2").mkdir()
    with pytest.raises(ValueError, match=rf"cannot serve model 'wan' \(WanPipeline, .*\): Wan 2\.2('s)? {reason}.*not "
                       r"supported; the Wan pipeline samples Wan 2\.1 folders"):  # fmt: skip
        check_served_model("wan", "WanPipeline", str(tmp_path), installed="0.26.0")


@pytest.mark.parametrize(("fixture", "cls"), [("tiny_flux_path", "Flux"), ("tiny_wan_path", "Wan")])
def test_constructing_on_flux_or_wan_picks_its_pipeline_and_refuses_releases_before_026(fixture, cls, request,
                                                                                       monkeypatch):  # fmt: skip
    """With a supported pair installed (faked), FLUX / Wan get their log-prob pipeline on 0.26; on 0.24 the server
    refuses the model before building any engine, naming the installed version."""
    folder = request.getfixturevalue(fixture)
    config = RolloutConfig(model={"path": str(folder)}, name="vllm_omni")
    monkeypatch.setattr(compat, "_installed", {"vllm-omni": "0.26.0", "vllm": "0.26.0"}.__getitem__)
    compat.require.cache_clear()
    try:
        server = get_backend("vllm_omni")(config)
        pipeline = server.engine_args()["custom_pipeline_args"]["pipeline_class"]
        assert pipeline == f"verl_omni.rollout.vllm_omni.pipelines.{cls}LogProbOmniPipeline"
        monkeypatch.setattr(compat, "_installed", {"vllm-omni": "0.24.0", "vllm": "0.24.0"}.__getitem__)
        compat.require.cache_clear()
        with pytest.raises(ValueError, match=rf"cannot serve model '{cls.lower()}' \({cls}Pipeline, .*written for "
                           r"vllm-omni >= 0\.26 \(vllm-omni 0\.24\.0 is installed\)"):  # fmt: skip
            get_backend("vllm_omni")(config)
    finally:
        compat.require.cache_clear()


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


def test_envelope_factory_unwraps_the_output_envelope_for_a_tensor_only_post_processing():
    """vLLM-Omni 0.26's SD3 post-processing takes tensors only; the log-prob pipelines return an envelope."""
    import inspect

    import torch

    calls = []

    def sd3_like_factory(od_config):  # the shape of vllm_omni's get_sd3_image_post_process_func
        def post_process_func(images: torch.Tensor):
            if not isinstance(images, torch.Tensor):
                raise ValueError(f"Input for postprocessing is in incorrect format: {type(images)}")
            calls.append(od_config)
            return images * 2

        return post_process_func

    make = compat._envelope_factory(sd3_like_factory)
    func = make("cfg")
    assert list(inspect.signature(func).parameters) == ["images"]  # the engine passes sampling_params only if named
    envelope = {"payload": {"image": torch.ones(1, 3, 2, 2)}, "metadata": {"rl": {"latents": 1}}}
    out = func(envelope)
    assert torch.equal(out["payload"]["image"], torch.full((1, 3, 2, 2), 2.0)) and out["metadata"] == {
        "rl": {"latents": 1}
    }
    assert torch.equal(func(torch.ones(2)), torch.full((2,), 2.0))  # plain tensors still pass
    assert getattr(make, "__verl_envelope__", False) and calls == ["cfg", "cfg"]

    def with_params_factory(od_config):
        return lambda images, sampling_params=None: (images, sampling_params)

    func = compat._envelope_factory(with_params_factory)("cfg")
    assert "sampling_params" in inspect.signature(func).parameters
    assert func({"payload": {"image": 1}}, sampling_params="sp")["payload"]["image"] == (1, "sp")


def test_refused_lora_adapter_is_checked_before_the_manager_can_evict_the_served_one(monkeypatch):
    """On the GPU a zero-binding adapter was refused only after vLLM-Omni's manager had evicted the served adapter
    (cache of 1), so the next generate failed: the worker must check the adapter before calling `add_lora`."""
    from types import SimpleNamespace

    import torch

    from verl_omni.rollout.vllm_omni import lora, worker

    added = []

    def refuse(pipeline, request, dtype, expected):
        raise ValueError(f"LoRA adapter {request.lora_int_id} binds zero modules of the pipeline")

    monkeypatch.setattr(lora, "load_tensor_adapter", refuse)
    monkeypatch.setattr(
        lora, "tensor_lora_request", lambda name, int_id, tensors, peft: SimpleNamespace(lora_int_id=int_id)
    )
    fake = worker.WorkerMethods()
    fake.lora_manager = SimpleNamespace(pipeline=object(), dtype=torch.float32, _expected_lora_modules=["to_q"])
    fake.add_lora = lambda request: added.append(request.lora_int_id) or True
    fake.list_loras = lambda: list(added)
    reply = fake.verl_omni_add_lora(
        3, "v3", {"a.lora_A.weight": torch.zeros(1, 1)}, {"r": 1, "target_modules": ["to_q"]}
    )
    assert reply["ok"] is False and "binds zero modules" in reply["errors"][0]["message"]
    assert added == []  # add_lora (which evicts first) was never called
    monkeypatch.setattr(lora, "load_tensor_adapter", lambda *args: None)
    assert fake.verl_omni_add_lora(4, "v4", {}, {"r": 1})["ok"] is True and added == [4]


def test_align_adapter_renames_list_children_and_expands_all_linear(monkeypatch):
    """diffusers' `attn.to_out.0` binds vLLM-Omni's `attn.to_out`; `all-linear` becomes the adapter's suffixes."""
    from verl_omni.rollout.vllm_omni import lora

    served = {"img_in", "transformer_blocks.0.attn.to_out", "transformer_blocks.0.attn.to_q",
              "transformer_blocks.0.img_mod.1", "transformer_blocks.0.img_mlp.net.0.proj"}  # fmt: skip
    monkeypatch.setattr(lora, "_layer_names", lambda pipeline: served)
    tensors = {f"{m}.lora_{ab}.weight": object() for m in ["img_in", "transformer_blocks.0.attn.to_out.0",
               "transformer_blocks.0.attn.to_q", "transformer_blocks.0.img_mod.1",
               "transformer_blocks.0.img_mlp.net.0.proj", "unknown.0"] for ab in "AB"}  # fmt: skip
    renamed, config = lora.align_adapter(object(), tensors, {"r": 4, "target_modules": "all-linear"})
    modules = {k.rsplit(".lora_", 1)[0] for k in renamed}
    assert modules == served | {"unknown.0"}  # `unknown.0` binds nothing: left for check_binding to name
    assert config["target_modules"] == ["img_in", "img_mod.1", "proj", "to_out", "to_q", "unknown.0"]
    assert set(renamed.values()) == set(tensors.values())  # same tensors, not copies
    _, explicit = lora.align_adapter(object(), tensors, {"r": 4, "target_modules": ["to_q"]})
    assert explicit["target_modules"] == ["to_q"]  # an explicit list is the user's: kept
