"""The import mapping of pre-#6200 verl diffusion code: old dotted path -> verl-omni home (data, one table).

Read by the `verl-compat` import shim (which serves old names) and by `verl-migrate-config --imports` (which
rewrites old imports). Pure data plus lookups: no torch, no verl_omni import here.

A module row (`old` without `:`) says what kind of old module it is:

- `removed`: deleted from verl by #6200; the shim serves it whole (with or without upstream verl installed);
- `trimmed`: still exists in upstream verl, only the listed names were removed; with upstream verl the shim adds
  a module `__getattr__` serving them, without it the shim serves just these names;
- `registry`: an upstream verl registry module; the old diffusion registry names resolve through it.

A name row (`old.module:Name`) gives `new` (the verl-omni home, what `--imports` writes; `None` when there is
none), `served` (what the shim serves when that is not `new`: an adapter keeping the old call working), `note`
(signature or behaviour change) and `missing` (why nothing is served; the shim raises an ImportError saying so).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

__all__ = ["ROWS", "Row", "module_rows", "name_rows", "old_modules"]


@dataclasses.dataclass(frozen=True)
class Row:
    """One mapping row: an old module (`kind` set) or an old name (`old` holds `module:Name`)."""

    old: str
    new: str | None = None
    served: str | None = None
    note: str = ""
    missing: str = ""
    kind: str = ""

    @property
    def old_module(self) -> str:
        """The old dotted module of the row."""
        return self.old.partition(":")[0]

    @property
    def old_name(self) -> str | None:
        """The old attribute name (None for a module row)."""
        return self.old.partition(":")[2] or None

    @property
    def target(self) -> str | None:
        """What the shim serves: `served`, else `new`; None when the name is not provided."""
        return None if self.missing else (self.served or self.new)


def _m(old: str, kind: str, new: str | None = None, note: str = "") -> Row:
    return Row(old, new, kind=kind, note=note)


def _n(old: str, new: str | None, *, served: str | None = None, note: str = "") -> Row:
    return Row(old, new, served=served, note=note)


def _x(old: str, because: str, new: str | None = None) -> Row:
    return Row(old, new, missing=because)


_A = "verl_compat.adapters"
_R = "verl_compat.registries"
_NO_RAY_TRAINER = (
    "verl-omni's trainer is built from one config: FlowGRPOTrainer(config) (verl_omni.trainer.flow_grpo_trainer); "
    "run it with verl_omni.trainer.main.run(argv)"
)
_NO_AGENT_WORKER = (
    "verl-omni has no Ray agent-loop worker; verl_omni.rollout.agent_loop.DiffusionAgentLoop turns prompt groups "
    "into requests"
)

ROWS: tuple[Row, ...] = (
    # --- the old trainer entry point
    _m("verl.trainer.main_flowgrpo", "removed", "verl_compat.main_flowgrpo",
       "`python -m verl.trainer.main_flowgrpo` translates old overrides and runs verl_omni.trainer.main.run"),
    _n("verl.trainer.main_flowgrpo:main", "verl_omni.trainer.main:run", served="verl_compat.main_flowgrpo:main",
       note="takes old Hydra overrides (argv words), translated with verl-migrate-config's rules"),
    _x("verl.trainer.main_flowgrpo:run_flowgrpo", _NO_RAY_TRAINER, "verl_omni.trainer.main:run"),
    _x("verl.trainer.main_flowgrpo:TaskRunner",
       "verl-omni places its Ray workers itself (verl_omni.trainer.placement), so there is no TaskRunner to "
       "subclass; run the trainer with verl_omni.trainer.main.run(argv)", "verl_omni.trainer.main:run"),
    # --- algorithm
    _m("verl.trainer.diffusion", "removed", "verl_omni.trainer"),
    _m("verl.trainer.diffusion.diffusion_algos", "removed", "verl_omni.algos"),
    _n("verl.trainer.diffusion.diffusion_algos:DiffusionAdvantageEstimator", None,
       served=f"{_A}:DiffusionAdvantageEstimator",
       note="verl-omni picks the estimator by the string `algorithm.adv_estimator`; the enum is kept by the shim"),
    _n("verl.trainer.diffusion.diffusion_algos:compute_flow_grpo_outcome_advantage",
       "verl_omni.algos:compute_flow_grpo_advantages", served=f"{_A}:compute_flow_grpo_outcome_advantage",
       note="new: compute_flow_grpo_advantages(rewards, group_ids, *, norm_adv_by_std_in_grpo, global_std, "
            "epsilon) -> advantages (B,); the old `response_mask` argument and the (advantages, returns) pair "
            "are kept by the adapter"),
    _n("verl.trainer.diffusion.diffusion_algos:compute_policy_loss_flow_grpo", "verl_omni.algos:flow_grpo_policy_loss",
       served=f"{_A}:compute_policy_loss_flow_grpo",
       note="new: flow_grpo_policy_loss(log_prob, old_log_prob, advantages, *, clip_ratio, adv_clip_max) -> "
            "PolicyLossOutput; the adapter reads config.clip_ratio / config.clip_ratio_high as the old one did"),
    _n("verl.trainer.diffusion.diffusion_algos:kl_penalty_image", "verl_omni.algos:kl_penalty_historical",
       note="same arguments (prev_sample_mean, ref_prev_sample_mean, std_dev_t)"),
    _m("verl.trainer.diffusion.diffusion_metric_utils", "removed"),
    *(
        _x(f"verl.trainer.diffusion.diffusion_metric_utils:{n}",
           "verl-omni's trainer computes and logs its metrics itself (verl_omni.trainer); no batch-level helper")
        for n in ("compute_data_metrics_diffusion", "compute_timing_metrics_diffusion",
                  "compute_throughput_metrics_diffusion")
    ),
    _m("verl.trainer.diffusion.ray_diffusion_trainer", "removed"),
    _x("verl.trainer.diffusion.ray_diffusion_trainer:compute_response_mask",
       "diffusion trajectories have no response mask (already dropped by verl-omni's first refactor)"),
    _x("verl.trainer.diffusion.ray_diffusion_trainer:compute_advantage",
       "advantages are computed on tensors by verl_omni.algos.compute_flow_grpo_advantages (no DataProto)",
       "verl_omni.algos:compute_flow_grpo_advantages"),
    _x("verl.trainer.diffusion.ray_diffusion_trainer:RayFlowGRPOTrainer", _NO_RAY_TRAINER,
       "verl_omni.trainer.flow_grpo_trainer:FlowGRPOTrainer"),
    # --- agent loop
    _m("verl.experimental.agent_loop.diffusion_agent_loop", "removed", "verl_omni.rollout.agent_loop"),
    _x("verl.experimental.agent_loop.diffusion_agent_loop:DiffusionAgentLoopOutput",
       "rollout results are TensorDict trajectories: verl_omni.rollout.agent_loop.DiffusionRolloutOutput has "
       "different fields", "verl_omni.rollout.agent_loop:DiffusionRolloutOutput"),
    _x("verl.experimental.agent_loop.diffusion_agent_loop:_InternalDiffusionAgentLoopOutput",
       "private in verl; no counterpart"),
    _x("verl.experimental.agent_loop.diffusion_agent_loop:DiffusionAgentLoopWorker", _NO_AGENT_WORKER,
       "verl_omni.rollout.agent_loop:DiffusionAgentLoop"),
    _m("verl.experimental.agent_loop", "trimmed"),
    _x("verl.experimental.agent_loop:DiffusionAgentLoopWorker", _NO_AGENT_WORKER,
       "verl_omni.rollout.agent_loop:DiffusionAgentLoop"),
    _m("verl.experimental.agent_loop.single_turn_agent_loop", "trimmed"),
    _n("verl.experimental.agent_loop.single_turn_agent_loop:DiffusionSingleTurnAgentLoop",
       "verl_omni.rollout.agent_loop:DiffusionAgentLoop",
       note="registered as `diffusion_single_turn_agent`; constructor and `run` differ from verl's AgentLoopBase"),
    # --- reward
    _m("verl.experimental.reward_loop.reward_manager.visual", "removed", "verl_omni.reward.manager"),
    _n("verl.experimental.reward_loop.reward_manager.visual:VisualRewardManager",
       "verl_omni.reward:VisualRewardManager",
       note="new constructor: VisualRewardManager(config: RewardConfig, *, pool=None, actor_options=None)"),
    _m("verl.experimental.reward_loop.reward_manager", "registry"),
    _n("verl.experimental.reward_loop.reward_manager:VisualRewardManager", "verl_omni.reward:VisualRewardManager",
       note="new constructor: VisualRewardManager(config: RewardConfig, *, pool=None, actor_options=None)"),
    _n("verl.experimental.reward_loop.reward_manager:get_reward_manager_cls",
       "verl_omni.reward:get_reward_manager_class", served=f"{_R}:get_reward_manager_cls",
       note="the shim resolves the old name `visual`"),
    _m("verl.utils.reward_score.jpeg_compressibility", "removed", "verl_omni.reward.jpeg"),
    _n("verl.utils.reward_score.jpeg_compressibility:jpeg_compressibility",
       "verl_omni.reward.jpeg:jpeg_compressibility",
       note="a batch function (images -> rewards) instead of a factory returning one"),
    _n("verl.utils.reward_score.jpeg_compressibility:jpeg_incompressibility",
       "verl_omni.reward.jpeg:jpeg_incompressibility",
       note="a batch function (images -> rewards) instead of a factory returning one"),
    _n("verl.utils.reward_score.jpeg_compressibility:compute_score", "verl_omni.reward.jpeg:compute_score"),
    _m("verl.utils.reward_score", "trimmed"),
    _n("verl.utils.reward_score:default_compute_score_image", "verl_omni.reward:default_compute_score_image",
       note="sandbox_fusion_url, concurrent_semaphore, memory_limit_mb go into **kwargs and are ignored"),
    _m("verl.utils.experimental", "removed"),
    _m("verl.utils.experimental.reward_utils", "removed"),
    _x("verl.utils.experimental.reward_utils:pil_image_to_base64",
       "verl-omni has no generative reward model client; encode with PIL and base64 directly"),
    _x("verl.utils.experimental.reward_utils:prepare_query_for_multi_modal",
       "removed from verl-omni too (8ff5326b)"),
    _m("examples.flowgrpo_trainer.reward_fn", "removed"),
    _x("examples.flowgrpo_trainer.reward_fn:compute_score_ocr",
       "verl-omni ships no OCR reward (it needs a served vision-language model); point "
       "reward.custom_reward_function at your own file"),
    # --- models
    _m("verl.models.diffusers_model", "removed", "verl_omni.models"),
    _n("verl.models.diffusers_model:DiffusionModelBase", "verl_omni.models:DiffusionModelBase",
       note="registry functions are module-level: verl_omni.models.register(name), get_class(name, external_lib)"),
    _m("verl.models.diffusers_model.base", "removed", "verl_omni.models.base"),
    _n("verl.models.diffusers_model.base:DiffusionModelBase", "verl_omni.models:DiffusionModelBase",
       note="registry functions are module-level: verl_omni.models.register(name), get_class(name, external_lib)"),
    _m("verl.models.diffusers_model.utils", "removed"),
    *(
        _x(f"verl.models.diffusers_model{sub}:{n}",
           "these dispatchers became methods of the model adapter: verl_omni.models.get_class(name)().<method>",
           "verl_omni.models:DiffusionModelBase")
        for sub in ("", ".utils")
        for n in ("build_scheduler", "set_timesteps", "prepare_model_inputs", "forward_and_sample_previous_step")
    ),
    # --- rollout
    _m("verl.workers.rollout.vllm_rollout.vllm_omni_async_server", "removed", "verl_omni.rollout.vllm_omni.server"),
    _n("verl.workers.rollout.vllm_rollout.vllm_omni_async_server:vLLMOmniHttpServer",
       "verl_omni.rollout.vllm_omni.server:vLLMOmniHttpServer",
       note="a verl_core.rollout.vllm.BaseVLLMHttpServer; launched by verl_core.rollout.replica.RolloutReplica"),
    _x("verl.workers.rollout.vllm_rollout.vllm_omni_async_server:vLLMOmniReplica",
       "replicas are verl_core.rollout.replica.RolloutReplica with backend `vllm_omni`",
       "verl_core.rollout.replica:RolloutReplica"),
    _m("verl.workers.rollout.vllm_rollout.utils", "trimmed"),
    _n("verl.workers.rollout.vllm_rollout.utils:vLLMOmniColocateWorkerExtension",
       "verl_omni.rollout.vllm_omni.worker:VerlOmniWorkerExtension",
       note="built on first access (needs vllm-omni); weight sync goes through verl_omni_load_weights/add_lora"),
    _m("verl.utils.vllm_omni", "removed", "verl_omni.rollout.vllm_omni.lora"),
    _m("verl.utils.vllm_omni.utils", "removed", "verl_omni.rollout.vllm_omni.lora"),
    *(
        _n(f"verl.utils.vllm_omni{sub}:{n}", f"verl_omni.rollout.vllm_omni.lora:{n}",
           note="OmniTensorLoRARequest is built on first access (needs vllm)" if n[0] == "O" else "")
        for sub in ("", ".utils")
        for n in ("OmniTensorLoRARequest", "VLLMOmniHijack")
    ),
    _m("verl.workers.rollout.replica", "registry"),
    _x("verl.workers.rollout.replica:DiffusionOutput",
       "a server returns a verl_omni.rollout.protocol.DiffusionGenerateResponse (different fields)",
       "verl_omni.rollout.protocol:DiffusionGenerateResponse"),
    _n("verl.workers.rollout.replica:RolloutReplicaRegistry", "verl_core.rollout.registry:get_backend",
       served=f"{_R}:RolloutReplicaRegistry", note="the shim resolves `vllm_omni` to verl-omni's server class"),
    _n("verl.workers.rollout.replica:get_rollout_replica_class", "verl_core.rollout.registry:get_backend",
       served=f"{_R}:get_rollout_replica_class", note="returns verl-omni's server class for `vllm_omni`"),
    _m("verl.workers.rollout.base", "registry"),
    _n("verl.workers.rollout.base:get_rollout_class", "verl_core.rollout.registry:get_backend",
       served=f"{_R}:get_rollout_class", note="returns verl-omni's server class for ('vllm_omni', 'async')"),
    # --- configs
    _m("verl.workers.config", "trimmed"),
    _m("verl.workers.config.model", "trimmed"),
    _m("verl.workers.config.rollout", "trimmed"),
    *(
        _n(f"verl.workers.config{sub}:DiffusionModelConfig", "verl_omni.config:DiffusionModelConfig",
           note="height/width/num_inference_steps moved under `pipeline`; lora_rank default 32 -> 0")
        for sub in ("", ".model")
    ),
    *(
        _n(f"verl.workers.config{sub}:DiffusionRolloutConfig", "verl_omni.config:DiffusionRolloutConfig",
           note="height/width/num_inference_steps moved under `pipeline`, extra_configs split into "
                "`pipeline`/`algo`")
        for sub in ("", ".rollout")
    ),
    *(
        _n(f"verl.workers.config{sub}:DiffusionSamplingConfig", "verl_omni.pipelines:DiffusionSamplingConfig",
           note="no `extra_configs`: typed sampling fields")
        for sub in ("", ".rollout")
    ),
    _m("verl.trainer.config", "trimmed"),
    _m("verl.trainer.config.algorithm", "trimmed"),
    *(
        _n(f"verl.trainer.config{sub}:DiffusionAlgoConfig", "verl_omni.trainer.config:DiffusionAlgoConfig")
        for sub in ("", ".algorithm")
    ),
    # --- engine and losses
    _m("verl.workers.engine.fsdp.diffusers_impl", "removed", "verl_omni.engine.fsdp_engine"),
    _n("verl.workers.engine.fsdp.diffusers_impl:DiffusersFSDPEngine", "verl_omni.engine:DiffusersFSDPEngine",
       note="constructor and methods follow verl-omni's engine (no verl BaseEngine)"),
    *(
        _x(f"verl.workers.engine.fsdp.diffusers_impl:{n}", "verl-omni's engine switches modes itself")
        for n in ("EngineEvalModeCtx", "EngineTrainModeCtx")
    ),
    *(
        _x(f"verl.workers.engine.fsdp.diffusers_impl:{n}", "module internals of the old engine")
        for n in ("logger", "device_name")
    ),
    _m("verl.workers.engine", "registry"),
    _m("verl.workers.engine.fsdp", "trimmed"),
    _n("verl.workers.engine:DiffusersFSDPEngine", "verl_omni.engine:DiffusersFSDPEngine"),
    _n("verl.workers.engine.fsdp:DiffusersFSDPEngine", "verl_omni.engine:DiffusersFSDPEngine"),
    _n("verl.workers.engine:EngineRegistry", None, served=f"{_R}:EngineRegistry",
       note="the shim resolves model_type `diffusion_model` to verl_omni.engine.DiffusersFSDPEngine"),
    _m("verl.workers.utils.losses", "trimmed"),
    _x("verl.workers.utils.losses:diffusion_loss",
       "the engine takes its loss from a registry: verl_omni.algos.get_loss(actor.diffusion_loss.loss_mode)",
       "verl_omni.algos:get_loss"),
    _m("verl.utils.fsdp_utils", "trimmed"),
    *(
        _x(f"verl.utils.fsdp_utils:{n}", "verl-omni exports LoRA weights from its engine (peft state dict)")
        for n in ("layered_summon_lora_params", "collect_lora_params")
    ),
    _m("verl.trainer.ppo.core_algos", "registry"),
    _n("verl.trainer.ppo.core_algos:get_policy_loss_fn", "verl_omni.algos:get_loss",
       served=f"{_R}:get_policy_loss_fn", note="the shim resolves `flow_grpo` to the old-signature adapter"),
    _n("verl.trainer.ppo.core_algos:get_adv_estimator_fn", "verl_omni.algos:compute_flow_grpo_advantages",
       served=f"{_R}:get_adv_estimator_fn", note="the shim resolves `flow_grpo` to the old-signature adapter"),
    _m("verl.experimental.agent_loop.agent_loop", "registry"),
    _n("verl.experimental.agent_loop.agent_loop:_agent_loop_registry", "verl_omni.rollout.agent_loop:get_agent_loop",
       served=f"{_R}:agent_loop_registry", note="the shim resolves `diffusion_single_turn_agent`"),
    # --- old example modules named in configs
    _m("examples", "removed"),
    _m("examples.flowgrpo_trainer", "removed"),
    _m("examples.flowgrpo_trainer.scheduler", "removed", "verl_omni.schedulers"),
    _n("examples.flowgrpo_trainer.scheduler:FlowMatchSDEDiscreteScheduler",
       "verl_omni.schedulers:FlowMatchSDEDiscreteScheduler"),
    _n("examples.flowgrpo_trainer.scheduler:FlowMatchSDEDiscreteSchedulerOutput",
       "verl_omni.schedulers:FlowMatchSDESchedulerOutput"),
    _m("examples.flowgrpo_trainer.vllm_omni", "removed"),
    _m("examples.flowgrpo_trainer.vllm_omni.pipeline_qwenimage", "removed", "verl_omni.rollout.vllm_omni.pipelines"),
    _n("examples.flowgrpo_trainer.vllm_omni.pipeline_qwenimage:QwenImagePipelineWithLogProb",
       "verl_omni.rollout.vllm_omni.pipelines:QwenImageLogProbOmniPipeline",
       note="built on first access (needs vllm-omni); verl-omni picks it itself, drop `custom_pipeline`"),
    _m("examples.flowgrpo_trainer.diffusers", "removed"),
    _m("examples.flowgrpo_trainer.diffusers.qwen_image", "removed", "verl_omni.models.qwen_image"),
    _n("examples.flowgrpo_trainer.diffusers.qwen_image:QwenImage", "verl_omni.models:QwenImageAdapter",
       note="registered as `qwen_image`; drop `model.external_lib`"),
)  # fmt: skip
"""Every old module and name of legacy_surface.md §1 (+ the registries of §2 and the example paths)."""


@lru_cache(maxsize=1)
def module_rows() -> dict[str, Row]:
    """Old module -> its module row."""
    return {r.old: r for r in ROWS if r.kind}


@lru_cache(maxsize=1)
def name_rows() -> dict[str, dict[str, Row]]:
    """Old module -> {old name -> its row}."""
    out: dict[str, dict[str, Row]] = {}
    for r in ROWS:
        if not r.kind:
            out.setdefault(r.old_module, {})[r.old_name or ""] = r
    return out


@lru_cache(maxsize=1)
def old_modules() -> frozenset[str]:
    """Every old module path and every package above one (`verl`, `verl.trainer`, ...)."""
    out: set[str] = set()
    for name in module_rows():
        parts = name.split(".")
        out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return frozenset(out)
