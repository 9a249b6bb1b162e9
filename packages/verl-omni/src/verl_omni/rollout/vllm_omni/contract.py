"""The vLLM-Omni / vLLM API contract: the releases checked and every symbol the backend relies on, per range.

Pure data with no imports from this project, so the CI checker `tools/vllm-omni-contract/contract_check.py`
can load it by path with nox's own interpreter (`nox -s vllm_omni-<version>`), the compat module can derive its
version branches from it, and the docs' support table is generated from it. Adding a release is adding a
`Release` row; an API change is a row with `since` / `before` bounds (half-open, compared on vllm-omni's
major.minor). A row with a `feature` name is a version branch: `compat.features()` turns it on exactly for the
releases the row covers, so the code and the check cannot disagree about where a behaviour starts.

Row kinds (`Expect.kind`):

- `module`: the module file exists.
- `symbol` / `no_symbol`: `name` (a qualname such as `Class.method`) is (is not) defined in `module`, directly,
  re-exported by an import, served by a module `__getattr__`, or inherited from a base class in the package.
- `signature`: the callable `name` takes every parameter in `names` by keyword, and `positional` in that order
  first (after `self`). Extra parameters are allowed (additive changes do not fail).
- `fields` / `no_fields`: the class `name` declares (does not declare) these annotated fields, itself or in a base.
- `attrs`: the class `name` has these attributes (annotated fields, assignments, methods or properties).
- `assigns`: the function `name` assigns each `self.<names>`.
- `calls`: the function `name` calls `callee` (a function or method name) with at least the keywords `names`.
- `unpacks`: the function `name` unpacks the result of calling `callee` into `len(names)` targets.
- `strings`: these string literals appear in `module`; `references`: these names, attributes or literals do.
- `bases`: the class `name` lists each of `names` (as written, e.g. `msgspec.Struct`) among its bases.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXPECTATIONS", "RELEASES", "Expect", "Release"]


@dataclass(frozen=True)
class Release:
    """One checked vLLM-Omni release and the vLLM release it pairs with (same major.minor).

    Args:
        omni (`str`): the vllm-omni version on PyPI.
        vllm (`str`): the vllm version whose sources are checked with it (newest patch of the same minor).
        torch (`str`): the torch pin of that vllm (documentation).
        diffusers (`str`): vllm-omni's diffusers requirement, as in its wheel METADATA (checked).
        python (`str`): vllm-omni's Requires-Python (checked).
        ran (`str`, *optional*, defaults to `"static"`): how far this project has run the release: `"static"` (the
            contract only), `"CPU"` (also its real code on the CPU, `nox -s vllm_omni_runtime-<v>`), `"GPU"` (also the
            server contract suite and the in-memory LoRA on a GPU, `gpu_suite.sh vllm`).
    """

    omni: str
    vllm: str
    torch: str
    diffusers: str
    python: str
    ran: str = "static"


@dataclass(frozen=True)
class Expect:
    """One expectation about the vllm-omni or vllm sources (see the module docstring for the kinds).

    Args:
        id (`str`): a stable kebab-case name, printed with every failure.
        package (`str`): `"vllm_omni"` or `"vllm"` (the paired release).
        kind (`str`): the row kind.
        module (`str`): dotted module path.
        name (`str`): qualname inside the module (class, function, `Class.method`).
        names (`tuple[str, ...]`): parameters, fields, attributes, keywords or literals, by kind.
        positional (`tuple[str, ...]`): for `signature`, parameters the backend passes positionally, in order.
        callee (`str`): for `calls` / `unpacks`, the called function or method name.
        since (`str`, *optional*): first vllm-omni major.minor the row holds for.
        before (`str`, *optional*): first vllm-omni major.minor it no longer holds for.
        feature (`str`, *optional*): the compat feature this row gates.
        why (`str`): what in verl-omni relies on it.
    """

    id: str
    package: str
    kind: str
    module: str
    name: str = ""
    names: tuple[str, ...] = ()
    positional: tuple[str, ...] = ()
    callee: str = ""
    since: str | None = None
    before: str | None = None
    feature: str | None = None
    why: str = ""


RELEASES: tuple[Release, ...] = (
    Release("0.18.0", vllm="0.18.1", torch="2.10.0", diffusers=">=0.36.0", python=">=3.10,<3.14"),
    Release("0.20.0", vllm="0.20.2", torch="2.11.0", diffusers=">=0.36.0", python=">=3.10,<3.14"),
    Release("0.22.0", vllm="0.22.1", torch="2.11.0", diffusers="==0.38.0", python=">=3.10,<3.14"),
    Release("0.24.0", vllm="0.24.0", torch="2.11.0", diffusers="==0.38.0", python=">=3.10,<3.14"),
    Release("0.26.0", vllm="0.26.0", torch="2.11.0", diffusers="==0.38.0", python=">=3.10,<3.14", ran="GPU"),
    Release("0.28.0", vllm="0.28.0", torch="2.13.0", diffusers="==0.40.0", python=">=3.10,<3.14"),
    Release("0.30.0", vllm="0.30.0", torch="2.13.0", diffusers="==0.40.0", python=">=3.10,<3.14", ran="CPU"),
)

_AO = "vllm_omni.entrypoints.async_omni"
_MANAGER = "vllm_omni.diffusion.lora.manager"
_FLUX = "vllm_omni.diffusion.models.flux.pipeline_flux"
_WAN = "vllm_omni.diffusion.models.wan2_2.pipeline_wan2_2"
_WORKER = "vllm_omni.diffusion.worker.diffusion_worker"
_DATA = "vllm_omni.diffusion.data"

EXPECTATIONS: tuple[Expect, ...] = (
    # ---- engine construction and control (vLLMOmniHttpServer) --------------------------------------------------
    Expect("async-omni", "vllm_omni", "symbol", _AO, "AsyncOmni", why="the engine the server builds"),
    Expect("async-omni-init", "vllm_omni", "signature", _AO, "AsyncOmni.__init__", ("model",),
           why="AsyncOmni(model=..., **engine kwargs)"),
    Expect("async-omni-generate", "vllm_omni", "signature", _AO, "AsyncOmni.generate",
           ("prompt", "request_id", "sampling_params_list"),
           why="generate(prompt=, request_id=, sampling_params_list=)"),
    Expect("async-omni-abort", "vllm_omni", "signature", _AO, "AsyncOmni.abort", ("request_id",),
           positional=("request_id",), why="abort(request_ids)"),
    Expect("async-omni-abort-timeout", "vllm_omni", "signature", _AO, "AsyncOmni.abort", ("timeout",), since="0.30",
           feature="abort_timeout", why="abort(request_ids, timeout=) bounds the abort inside the engine"),
    Expect("async-omni-collective-rpc", "vllm_omni", "signature", _AO, "AsyncOmni.collective_rpc",
           ("method", "timeout", "args", "kwargs"), positional=("method",),
           why="sleep, wake_up and weight sync go through collective_rpc(method, timeout=, kwargs=)"),
    Expect("async-omni-lora-rpcs", "vllm_omni", "symbol", _AO, "AsyncOmni.list_loras",
           why="list_loras() once per weight version"),
    Expect("async-omni-remove-lora", "vllm_omni", "signature", _AO, "AsyncOmni.remove_lora", ("adapter_id",),
           positional=("adapter_id",), why="remove_lora(old id) after a LoRA update"),
    Expect("async-omni-shutdown", "vllm_omni", "symbol", _AO, "AsyncOmni.shutdown", why="server shutdown"),
    Expect("stage-forwards-kwargs", "vllm_omni", "strings", "vllm_omni.engine.async_omni_engine", before="0.30",
           names=("custom_pipeline_args", "worker_extension_cls", "enable_sleep_mode"),
           why="the default diffusion stage forwards these AsyncOmni kwargs to the workers"),
    Expect("stage-forwards-kwargs-base", "vllm_omni", "strings", "vllm_omni.engine.omni_engine_base", since="0.30",
           names=("custom_pipeline_args", "worker_extension_cls", "enable_sleep_mode", "max_num_seqs"),
           why="the default diffusion stage forwards these AsyncOmni kwargs to the workers (moved in 0.30)"),
    Expect("stage-forwards-max-num-seqs", "vllm_omni", "strings", "vllm_omni.engine.async_omni_engine",
           names=("max_num_seqs", "step_execution"), since="0.20", before="0.30",
           why="max_num_seqs reaches the diffusion stage from 0.20 (0.18 hard-codes 1)"),
    Expect("diffusion-config-fields", "vllm_omni", "fields", _DATA, "OmniDiffusionConfig",
           ("worker_extension_cls", "custom_pipeline_args", "enable_sleep_mode", "step_execution"),
           why="what the stage builds the workers from"),
    Expect("diffusion-config-max-num-seqs", "vllm_omni", "fields", _DATA, "OmniDiffusionConfig", ("max_num_seqs",),
           since="0.20", feature="forwards_max_num_seqs",
           why="engine batch size of the diffusion stage (forwarded by the stage builder: rows above)"),
    Expect("diffusion-config-lora-backend", "vllm_omni", "fields", _DATA, "OmniDiffusionConfig", ("lora_backend",),
           since="0.28", feature="lora_backend", why="'peft' (a LoRA manager) or 'distill' (fused, no manager)"),
    Expect("stage-forwards-lora-backend", "vllm_omni", "strings", "vllm_omni.engine.async_omni_engine",
           names=("lora_backend",), since="0.28", before="0.30", why="AsyncOmni(lora_backend=...) reaches the stage"),
    Expect("stage-forwards-lora-backend-base", "vllm_omni", "strings", "vllm_omni.engine.omni_engine_base",
           names=("lora_backend",), since="0.30", why="AsyncOmni(lora_backend=...) reaches the stage"),
    Expect("engine-max-num-seqs-guard", "vllm_omni", "strings", "vllm_omni.diffusion.diffusion_engine",
           names=("supports_request_batch",), since="0.26", feature="max_num_seqs_guard",
           why="max_num_seqs > 1 on a pipeline without supports_request_batch raises at start-up from 0.26"),
    # ---- worker side (VerlOmniWorkerExtension, custom pipeline) ----------------------------------------------
    Expect("custom-pipeline-extension", "vllm_omni", "signature", _WORKER,
           "CustomPipelineWorkerExtension.re_init_pipeline", ("custom_pipeline_args",),
           why="the worker extension subclasses it so re_init_pipeline stays available"),
    Expect("worker-wrapper-extension", "vllm_omni", "calls", _WORKER, "WorkerWrapperBase.__init__",
           callee="re_init_pipeline", why="custom_pipeline_args={'pipeline_class': qualname} builds our pipeline"),
    Expect("worker-lora-methods", "vllm_omni", "signature", _WORKER, "DiffusionWorker.add_lora", ("lora_request",),
           positional=("lora_request",), why="the extension registers tensor adapters with self.add_lora(request)"),
    Expect("worker-remove-lora", "vllm_omni", "signature", _WORKER, "DiffusionWorker.remove_lora", ("adapter_id",),
           why="the extension drops old adapters"),
    Expect("worker-sleep-wake", "vllm_omni", "signature", _WORKER, "DiffusionWorker.wake_up", ("tags",),
           why="collective_rpc('wake_up', kwargs={'tags': None}) reaches the worker"),
    Expect("worker-sleep", "vllm_omni", "signature", _WORKER, "DiffusionWorker.sleep", ("level",),
           why="collective_rpc('sleep', kwargs={'level': 1}) reaches the worker"),
    Expect("worker-load-weights-removed", "vllm_omni", "no_symbol", _WORKER, "DiffusionWorker.load_weights",
           since="0.26", why="full weights go through model_runner.pipeline.load_weights (worker's removed in 0.26)"),
    Expect("worker-init-lora-manager", "vllm_omni", "symbol", _WORKER, "DiffusionWorker.init_lora_manager",
           why="re_init_pipeline rebuilds the LoRA manager on our pipeline"),
    # ---- LoRA manager (VLLMOmniHijack) ------------------------------------------------------------------------
    Expect("lora-manager", "vllm_omni", "signature", _MANAGER, "DiffusionLoRAManager.__init__",
           ("pipeline", "device", "dtype", "max_cached_adapters"), why="the hijack wraps this class"),
    Expect("lora-manager-state", "vllm_omni", "assigns", _MANAGER, "DiffusionLoRAManager.__init__",
           ("pipeline", "dtype", "_expected_lora_modules", "_registered_adapters", "_lora_modules"),
           why="the hijack reads these to build and check tensor adapters"),
    Expect("lora-manager-load-adapter", "vllm_omni", "signature", _MANAGER, "DiffusionLoRAManager._load_adapter",
           ("lora_request",), positional=("lora_request",),
           why="patched before 0.28 (returns (LoRAModel, PEFTHelper))"),
    Expect("lora-manager-add-adapter", "vllm_omni", "unpacks", _MANAGER, "DiffusionLoRAManager.add_adapter",
           ("lora_model", "peft_helper"), callee="_load_adapter", why="add_adapter unpacks _load_adapter's pair"),
    Expect("lora-manager-file-path", "vllm_omni", "calls", _MANAGER, "DiffusionLoRAManager._load_adapter",
           ("expected_lora_modules", "peft_helper", "lora_model_id", "device", "dtype"), callee="from_local_checkpoint",
           why="paths other than tensor requests keep the upstream file loader"),
    Expect("lora-manager-absolute-path", "vllm_omni", "calls", _MANAGER, "DiffusionLoRAManager._load_adapter",
           callee="get_adapter_absolute_path", why="the fake lora_path must be absolute (no hub lookup)"),
    Expect("lora-manager-replace", "vllm_omni", "signature", _MANAGER, "DiffusionLoRAManager._replace_layers_with_lora",
           ("peft_helper",), why="binding: target_modules select the layers to wrap"),
    Expect("lora-manager-activate", "vllm_omni", "signature", _MANAGER, "DiffusionLoRAManager.set_active_adapter",
           ("lora_request", "lora_scale"), why="requests carry LoRARequest(id) that set_active_adapter finds"),
    Expect("lora-manager-lookup", "vllm_omni", "signature", _MANAGER, "DiffusionLoRAManager._get_lora_weights",
           ("lora_model", "full_module_name"), why="the binding check mirrors this name lookup"),
    Expect("lora-pipeline-hook", "vllm_omni", "calls", _MANAGER, "DiffusionLoRAManager._load_adapter",
           ("lora_request", "lora_path", "dtype"), callee="_load_diffusion_lora_adapter", since="0.28",
           feature="lora_pipeline_hook", why="from 0.28 the pipeline hook loads tensor adapters, no patch needed"),
    Expect("lora-manager-binding-check", "vllm_omni", "symbol", _MANAGER, "DiffusionLoRAManager._bind_adapter_weights",
           since="0.30", feature="upstream_binding_check", why="0.30 itself refuses incomplete bindings at activation"),
    Expect("lora-manager-components", "vllm_omni", "strings", _MANAGER, names=("transformer", "transformer_2"),
           why="the binding check scans the same DiT components as the manager"),
    Expect("lora-manager-packed", "vllm_omni", "references", _MANAGER, names=("stacked_params_mapping",),
           why="packed layers bind their sub-projections through stacked_params_mapping"),
    Expect("lora-utils-match", "vllm_omni", "symbol", "vllm_omni.diffusion.lora.utils", "_match_target_modules",
           why="the binding check matches target modules like the manager"),
    Expect("lora-request-reexport", "vllm_omni", "symbol", "vllm_omni.lora.request", "LoRARequest",
           why="OmniTensorLoRARequest subclasses the LoRARequest vllm-omni uses"),
    # ---- custom pipeline input / output ------------------------------------------------------------------------
    Expect("sampling-params-fields", "vllm_omni", "fields", "vllm_omni.inputs.data", "OmniDiffusionSamplingParams",
           ("height", "width", "num_inference_steps", "seed", "num_outputs_per_prompt", "guidance_scale",
            "true_cfg_scale", "max_sequence_length", "extra_args", "lora_request", "lora_scale"),
           why="the server builds sampling params from these; RL keys go to extra_args"),
    Expect("request-prompts", "vllm_omni", "fields", "vllm_omni.diffusion.request", "OmniDiffusionRequest",
           ("prompts", "sampling_params"), before="0.24", why="forward(req) reads req.prompts / req.sampling_params"),
    Expect("request-batch", "vllm_omni", "attrs", "vllm_omni.diffusion.worker.request_batch", "DiffusionRequestBatch",
           ("prompts", "sampling_params_list", "requests"), since="0.24", feature="request_batch",
           why="from 0.24 forward() receives a DiffusionRequestBatch"),
    Expect("diffusion-output", "vllm_omni", "fields", _DATA, "DiffusionOutput", ("output",),
           why="the pipeline's return value"),
    Expect("diffusion-output-custom", "vllm_omni", "fields", _DATA, "DiffusionOutput", ("custom_output",),
           before="0.26", feature="custom_output", why="0.18-0.24 carry the trajectory in custom_output"),
    Expect("diffusion-output-no-custom", "vllm_omni", "no_fields", _DATA, "DiffusionOutput", ("custom_output",),
           since="0.26", why="0.26 removed custom_output; the trajectory travels in the output envelope"),
    Expect("diffusion-output-trajectory", "vllm_omni", "fields", _DATA, "DiffusionOutput",
           ("trajectory_latents", "trajectory_timesteps", "trajectory_log_probs"), since="0.20",
           feature="trajectory_fields", why="native trajectory fields"),
    Expect("diffusion-output-to-cpu", "vllm_omni", "fields", _DATA, "DiffusionOutput", ("to_cpu",), since="0.22",
           feature="output_to_cpu", why="to_cpu=True moves the outputs off the GPU in the worker"),
    Expect("output-envelope", "vllm_omni", "symbol", "vllm_omni.outputs.output_metadata", "DiffusionOutputEnvelope",
           since="0.26", feature="output_envelope", why="payload/metadata envelope surfaced as multimodal_output"),
    Expect("request-output-custom", "vllm_omni", "attrs", "vllm_omni.outputs", "OmniRequestOutput",
           ("images", "custom_output", "multimodal_output"), why="the server reads the final request output"),
    Expect("request-output-nested", "vllm_omni", "fields", "vllm_omni.outputs", "OmniRequestOutput",
           ("request_output",), before="0.28", feature="nested_request_output",
           why="finish reason lives in request_output before 0.28"),
    Expect("request-output-is-request-output", "vllm_omni", "no_fields", "vllm_omni.outputs", "OmniRequestOutput",
           ("request_output",), since="0.28", why="0.28 made OmniRequestOutput a vLLM RequestOutput"),
    Expect("qwen-image-pipeline", "vllm_omni", "signature", "vllm_omni.diffusion.models.qwen_image.pipeline_qwen_image",
           "QwenImagePipeline.__init__", ("od_config", "prefix"), why="QwenImageLogProbOmniPipeline subclasses it"),
    Expect("qwen-image-encode", "vllm_omni", "signature", "vllm_omni.diffusion.models.qwen_image.pipeline_qwen_image",
           "QwenImagePipeline.encode_prompt", ("prompt", "max_sequence_length"),
           why="the pipeline view encodes prompts with it"),
    Expect("qwen-image-load-weights", "vllm_omni", "signature",
           "vllm_omni.diffusion.models.qwen_image.pipeline_qwen_image", "QwenImagePipeline.load_weights", ("weights",),
           why="full weight sync: model_runner.pipeline.load_weights(weights)"),
    Expect("sd3-pipeline", "vllm_omni", "signature", "vllm_omni.diffusion.models.sd3.pipeline_sd3",
           "StableDiffusion3Pipeline.__init__", ("od_config", "prefix"), why="SD3LogProbOmniPipeline subclasses it"),
    Expect("sd3-encode", "vllm_omni", "signature", "vllm_omni.diffusion.models.sd3.pipeline_sd3",
           "StableDiffusion3Pipeline.encode_prompt", ("prompt", "prompt_2", "prompt_3", "max_sequence_length"),
           why="the pipeline view encodes prompts with it"),
    # FLUX.1 and Wan 2.1: written against 0.26.0's sources, not yet run on a GPU (docs/omni/vllm_omni.md)
    Expect("flux-pipeline", "vllm_omni", "signature", _FLUX, "FluxPipeline.__init__", ("od_config", "prefix"),
           since="0.26", why="FluxLogProbOmniPipeline subclasses it"),
    Expect("flux-pipeline-parts", "vllm_omni", "assigns", _FLUX, "FluxPipeline.__init__",
           ("vae", "transformer", "device", "vae_scale_factor"), since="0.26", why="the pipeline view reads them"),
    Expect("flux-encode", "vllm_omni", "signature", _FLUX, "FluxPipeline.encode_prompt",
           ("prompt", "prompt_2", "num_images_per_prompt", "max_sequence_length"), since="0.26",
           why="the pipeline view encodes prompts with it (no device keyword)"),
    Expect("flux-transformer-forward", "vllm_omni", "signature", "vllm_omni.diffusion.models.flux.flux_transformer",
           "FluxTransformer2DModel.forward", ("hidden_states", "encoder_hidden_states", "pooled_projections",
           "timestep", "img_ids", "txt_ids", "guidance", "return_dict"), since="0.26",
           why="FluxAdapter.velocity calls it with diffusers' keywords"),
    Expect("flux-transformer-packed", "vllm_omni", "attrs", "vllm_omni.diffusion.models.flux.flux_transformer",
           "FluxTransformer2DModel", ("packed_modules_mapping",), since="0.26",
           why="PackedLoRAMappingMixin derives the LoRA manager's stacked_params_mapping from it"),
    Expect("wan-pipeline", "vllm_omni", "signature", _WAN, "Wan22Pipeline.__init__", ("od_config", "prefix"),
           since="0.26", why="WanLogProbOmniPipeline subclasses it"),
    Expect("wan-pipeline-parts", "vllm_omni", "assigns", _WAN, "Wan22Pipeline.__init__",
           ("vae", "transformer", "transformer_2", "device", "boundary_ratio", "expand_timesteps",
            "vae_scale_factor_spatial"), since="0.26", why="the pipeline view reads them"),
    Expect("wan-encode", "vllm_omni", "signature", _WAN, "Wan22Pipeline.encode_prompt",
           ("prompt", "negative_prompt", "do_classifier_free_guidance", "num_videos_per_prompt",
            "max_sequence_length", "device"), since="0.26", why="WanAdapter.encode_prompts calls it"),
    Expect("wan-transformer-forward", "vllm_omni", "signature", "vllm_omni.diffusion.models.wan2_2.wan2_2_transformer",
           "WanTransformer3DModel.forward", ("hidden_states", "timestep", "encoder_hidden_states", "return_dict"),
           since="0.26", why="WanAdapter.velocity calls it with diffusers' keywords"),
    Expect("flux-wan-registry", "vllm_omni", "strings", "vllm_omni.diffusion.registry",
           names=("FluxPipeline", "WanPipeline", "Wan22Pipeline", "get_flux_post_process_func",
                  "get_wan22_post_process_func"), since="0.26",
           why="model_index class names served by the two pipelines; envelope_post_processing wraps their factories"),
    Expect("version-check", "vllm_omni", "symbol", "vllm_omni.version", "warn_if_misaligned_vllm_version", since="0.20",
           why="upstream only warns on a vllm major.minor mismatch; compat refuses it"),
    # ---- vLLM (the paired release): what BaseVLLMHttpServer, vLLMHttpServer and the LoRA path use --------------
    Expect("vllm-lora-request", "vllm", "fields", "vllm.lora.request", "LoRARequest",
           ("lora_name", "lora_int_id", "lora_path", "tensorizer_config_dict"),
           why="OmniTensorLoRARequest(lora_name, lora_int_id, lora_path) subclasses it"),
    Expect("vllm-lora-request-struct", "vllm", "bases", "vllm.lora.request", "LoRARequest", ("msgspec.Struct",),
           why="LoRARequest is a msgspec Struct, so the subclass adds msgspec fields"),
    Expect("vllm-lora-from-tensors", "vllm", "signature", "vllm.lora.lora_model", "LoRAModel.from_lora_tensors",
           ("lora_model_id", "tensors", "peft_helper", "device", "dtype", "weights_mapper"),
           why="the hijack builds adapters from in-memory tensors"),
    Expect("vllm-lora-from-checkpoint", "vllm", "signature", "vllm.lora.lora_model", "LoRAModel.from_local_checkpoint",
           ("lora_dir", "expected_lora_modules", "peft_helper", "lora_model_id", "device", "dtype"),
           why="the upstream file path vllm-omni keeps calling"),
    Expect("vllm-lora-model-loras", "vllm", "assigns", "vllm.lora.lora_model", "LoRAModel.__init__", ("loras", "id"),
           why="the binding check reads lora_model.loras"),
    Expect("vllm-peft-from-dict", "vllm", "signature", "vllm.lora.peft_helper", "PEFTHelper.from_dict",
           ("config_dict",), positional=("config_dict",), why="PEFTHelper.from_dict(peft_config)"),
    Expect("vllm-peft-fields", "vllm", "fields", "vllm.lora.peft_helper", "PEFTHelper",
           ("r", "lora_alpha", "target_modules"), why="rank and target modules of a tensor adapter"),
    Expect("vllm-lora-utils", "vllm", "symbol", "vllm.lora.utils", "get_adapter_absolute_path",
           why="resolves lora_path before the hook / patched loader"),
    Expect("vllm-lora-parse-name", "vllm", "symbol", "vllm.lora.utils", "parse_fine_tuned_lora_name",
           why="maps PEFT tensor names to module names (the binding check uses it)"),
    Expect("vllm-lora-layer-base", "vllm", "symbol", "vllm.lora.layers", "BaseLayerWithLoRA",
           why="the binding check recognises wrapped layers"),
    Expect("vllm-linear-base", "vllm", "symbol", "vllm.model_executor.layers.linear", "LinearBase",
           why="the layers the manager can wrap"),
    Expect("vllm-lora-optimize", "vllm", "symbol", "vllm.lora.lora_weights", "LoRALayerWeights.optimize",
           why="tensor adapters fold their scaling like file adapters"),
    Expect("vllm-max-lora-ranks", "vllm", "symbol", "vllm.config.lora", "MaxLoRARanks",
           why="max_lora_rank rounding (verl_core.rollout.vllm.engine_args)"),
    Expect("vllm-engine-args", "vllm", "fields", "vllm.engine.arg_utils", "EngineArgs",
           ("model", "tokenizer", "dtype", "trust_remote_code", "seed", "tensor_parallel_size",
            "gpu_memory_utilization", "max_num_seqs", "enforce_eager", "enable_prefix_caching", "load_format",
            "enable_sleep_mode", "disable_log_stats", "max_model_len", "max_num_batched_tokens", "enable_lora",
            "max_loras", "max_lora_rank", "worker_extension_cls"),
           why="build_engine_args (verl_core.rollout.vllm.engine_args) sets these"),
    Expect("vllm-async-engine-args", "vllm", "symbol", "vllm.engine.arg_utils", "AsyncEngineArgs",
           why="vLLMHttpServer builds AsyncEngineArgs(**engine_args)"),
    Expect("vllm-async-llm", "vllm", "symbol", "vllm.v1.engine.async_llm", "AsyncLLM.from_engine_args",
           why="vLLMHttpServer's engine"),
    Expect("vllm-async-llm-generate", "vllm", "signature", "vllm.v1.engine.async_llm", "AsyncLLM.generate",
           ("prompt", "sampling_params", "request_id", "lora_request"),
           positional=("prompt", "sampling_params", "request_id"),
           why="generate(prompt, sampling, request_id, lora_request=)"),
    Expect("vllm-async-llm-abort", "vllm", "signature", "vllm.v1.engine.async_llm", "AsyncLLM.abort", ("request_id",),
           positional=("request_id",), why="abort(request_ids)"),
    Expect("vllm-async-llm-sleep", "vllm", "signature", "vllm.v1.engine.async_llm", "AsyncLLM.sleep", ("level",),
           positional=("level",), why="sleep(level)"),
    Expect("vllm-async-llm-wake", "vllm", "signature", "vllm.v1.engine.async_llm", "AsyncLLM.wake_up", ("tags",),
           positional=("tags",), why="wake_up(tags)"),
    Expect("vllm-async-llm-rpc", "vllm", "signature", "vllm.v1.engine.async_llm", "AsyncLLM.collective_rpc",
           ("method", "timeout", "kwargs"), positional=("method",), why="collective_rpc(method, timeout=, kwargs=)"),
    Expect("vllm-async-llm-lora", "vllm", "signature", "vllm.v1.engine.async_llm", "AsyncLLM.add_lora",
           ("lora_request",), positional=("lora_request",), why="add_lora(request)"),
    Expect("vllm-async-llm-remove-lora", "vllm", "symbol", "vllm.v1.engine.async_llm", "AsyncLLM.remove_lora",
           why="remove_lora(id)"),
    Expect("vllm-async-llm-reset", "vllm", "symbol", "vllm.v1.engine.async_llm", "AsyncLLM.reset_prefix_cache",
           why="reset_prefix_cache() before sleep and after full weights"),
    Expect("vllm-async-llm-shutdown", "vllm", "symbol", "vllm.v1.engine.async_llm", "AsyncLLM.shutdown",
           why="server shutdown"),
    Expect("vllm-worker-extension", "vllm", "references", "vllm.v1.worker.worker_base", names=("worker_extension_cls",),
           why="worker_extension_cls mixes VerlWorkerExtension into the worker"),
    Expect("vllm-sampling-params", "vllm", "fields", "vllm.sampling_params", "SamplingParams",
           ("n", "temperature", "top_p", "top_k", "max_tokens", "min_tokens", "repetition_penalty", "stop_token_ids",
            "ignore_eos", "logprobs", "seed"), why="vLLMHttpServer's sampling parameters"),
    Expect("vllm-argparse", "vllm", "symbol", "vllm.utils.argparse_utils", "FlexibleArgumentParser",
           why="vLLM's CLI parser builds the OpenAI app's args"),
)  # fmt: skip
