"""Rollout sampling keys.

The top-level diffusion keys and the free-form `extra_configs` become `rollout.pipeline.*` and `rollout.algo.*`
(verl-omni 70f38f01 and REF0, legacy_surface.md §3.4 rows 1-11, 19, 20).
"""

from verl_migrate.kinds import Drop, Flag, MoveSubtree, RenameKey, SplitDict
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import ALGO_KEYS, PIPELINE_KEYS, ROLLOUT

_CREATES = (f"{ROLLOUT}.pipeline", f"{ROLLOUT}.algo")

for _key, _row in (("height", 1), ("width", 2), ("num_inference_steps", 3)):
    register(
        RenameKey(
            id=f"rollout-{_key.replace('_', '-')}-to-pipeline",
            since="0.1.0",
            summary=f"`rollout.{_key}` moved under `rollout.pipeline`.",
            refs=(_row,),
            old=f"{ROLLOUT}.{_key}",
            new=f"{ROLLOUT}.pipeline.{_key}",
            creates=_CREATES,
        )
    )

register(
    SplitDict(
        id="rollout-extra-configs-split",
        since="0.1.0",
        summary="The free-form `rollout.extra_configs` is split into typed `rollout.pipeline.*` / `rollout.algo.*`.",
        refs=(4, 5, 6, 7, 8, 9, 10, 11),
        path=f"{ROLLOUT}.extra_configs",
        routes=tuple((k, f"{ROLLOUT}.pipeline.{k}") for k in PIPELINE_KEYS)
        + tuple((k, f"{ROLLOUT}.algo.{k}") for k in ALGO_KEYS),
        ignored=("height", "width", "num_inference_steps", "logprobs"),
        ignored_note="old verl overwrote this extra_configs key with the top-level rollout key, so it had no effect",
        creates=_CREATES,
    )
)

register(
    Drop(
        id="drop-builtin-custom-pipeline",
        since="0.1.0",
        summary="`engine_kwargs.vllm_omni.custom_pipeline` naming the built-in Qwen-Image pipeline is not needed.",
        refs=(19,),
        paths=(f"{ROLLOUT}.engine_kwargs.vllm_omni.custom_pipeline",),
        when=("examples.flowgrpo_trainer.vllm_omni.pipeline_qwenimage.QwenImagePipelineWithLogProb",),
        note="verl-omni picks the rollout pipeline from (model.architecture, model.algorithm)",
    )
)

register(
    Flag(
        id="custom-pipeline-needs-external-lib",
        since="0.1.0",
        summary="A custom vLLM-Omni pipeline must be registered by a module named in `rollout.external_lib`.",
        refs=(19,),
        path=f"{ROLLOUT}.engine_kwargs.vllm_omni.custom_pipeline",
        message="verl-omni ignores `custom_pipeline`; register the class as a VllmOmniPipelineBase for "
        "(model.architecture, model.algorithm) in a module and set `actor_rollout_ref.rollout.external_lib` to it",
        late=True,
    )
)

register(
    Drop(
        id="drop-llm-engine-kwargs",
        since="0.1.0",
        summary="`rollout.engine_kwargs.{vllm,sglang,trtllm}` are gone; only `engine_kwargs.vllm_omni` remains.",
        refs=(20,),
        paths=tuple(f"{ROLLOUT}.engine_kwargs.{e}" for e in ("vllm", "sglang", "trtllm")),
        note="LLM engines are not used for diffusion rollouts",
    )
)

register(
    MoveSubtree(
        id="rollout-skip-to-top-level",
        since="0.2.0",
        summary="`rollout.skip.{enable,dump_dir,action}` moved to the top-level `skip.rollout.*`.",
        refs=(40,),
        old=f"{ROLLOUT}.skip",
        new="skip.rollout",
        creates=("skip",),
    )
)

register(
    Drop(
        id="drop-rollout-skip-legacy-fields",
        since="0.2.0",
        summary="`rollout.skip._target_` and `rollout.skip.max_dump_step` have no verl-omni equivalent.",
        refs=(40,),
        paths=(f"{ROLLOUT}.skip._target_", f"{ROLLOUT}.skip.max_dump_step"),
        note="verl-omni's skip config selects steps with `skip.rollout.steps` (a list) instead of `max_dump_step`",
        early=True,
    )
)
