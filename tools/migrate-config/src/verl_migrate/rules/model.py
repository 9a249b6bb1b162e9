"""Model keys.

The sampling mirrors move under `model.pipeline`/`model.algo`, LoRA is off by default, the example adapter module is
built in (verl-omni REF0, 70f38f01, dd260ab9; legacy_surface.md §3.4 rows 22-26, §3.6 items 1, 3, 4).
"""

from verl_migrate.kinds import Drop, Flag, RenameKey, SetExplicitDefault, SplitDict
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import MODEL, MODEL_ALGO_KEYS, PIPELINE_KEYS

_CREATES = (f"{MODEL}.pipeline", f"{MODEL}.algo")

for _key in ("height", "width", "num_inference_steps"):
    register(
        RenameKey(
            id=f"model-{_key.replace('_', '-')}-to-pipeline",
            since="0.1.0",
            summary=f"The mirror `model.{_key}` moved under `model.pipeline`.",
            refs=(22,),
            old=f"{MODEL}.{_key}",
            new=f"{MODEL}.pipeline.{_key}",
            creates=_CREATES,
        )
    )

register(
    SplitDict(
        id="model-extra-configs-split",
        since="0.1.0",
        summary="`model.extra_configs` (a rollout mirror) is replaced by typed `model.pipeline.*` / `model.algo.*`.",
        refs=(23,),
        path=f"{MODEL}.extra_configs",
        routes=tuple((k, f"{MODEL}.pipeline.{k}") for k in PIPELINE_KEYS if k != "aspect_ratio")
        + tuple((k, f"{MODEL}.algo.{k}") for k in MODEL_ALGO_KEYS),
        ignored=("height", "width", "num_inference_steps", "logprobs"),
        ignored_note="old verl overwrote this key from the top-level model keys, so it had no effect",
        creates=_CREATES,
    )
)

register(
    SetExplicitDefault(
        id="lora-rank-default",
        since="0.1.0",
        summary="`model.lora_rank` default changed 32 → 0 (full fine-tuning); configs relying on 32 get it written.",
        refs=(24,),
        path=f"{MODEL}.lora_rank",
        value=32,
        message="The default `lora_rank` changed from 32 (LoRA) to 0 (full-weight training).",
    )
)

register(
    Drop(
        id="drop-example-model-external-lib",
        since="0.1.0",
        summary="`model.external_lib` naming the old Qwen-Image example is not needed: the adapter is built in.",
        refs=(26,),
        paths=(f"{MODEL}.external_lib",),
        when=("examples.flowgrpo_trainer.diffusers.qwen_image", "examples.flowgrpo_trainer.diffusers_impl"),
        note="verl-omni registers the Qwen-Image adapter itself",
    )
)

register(
    Flag(
        id="tokenizer-path-fallback",
        since="0.1.0",
        summary="With `tokenizer_path: null` verl-omni uses the model folder if `<path>/tokenizer` is missing.",
        when_target=((f"{MODEL}.tokenizer_path", "null"),),
        path=f"{MODEL}.tokenizer_path",
        condition="equals",
        values=(None,),
        message="old verl always used `<model.path>/tokenizer`; verl-omni uses it if it exists, else `<model.path>` "
        "(and accepts Hugging Face hub ids for model.path)",
    )
)

register(
    Flag(
        id="attn-backend-fa3-default",
        since="0.1.0",
        summary="verl-omni defaults to FlashAttention-3 (`model.attn_backend`, `rollout.rollout_attn_backend`).",
        when_target=((f"{MODEL}.attn_backend", "_flash_3_varlen_hub"),),
        path=f"{MODEL}.attn_backend",
        condition="absent",
        message="old verl used the diffusers / vLLM-Omni default attention; verl-omni defaults to FA3 "
        "(`_flash_3_varlen_hub` / `FLASH_ATTN_3_HUB`) and falls back to SDPA without FA3. To pin the old behaviour set "
        "`actor_rollout_ref.model.attn_backend: native` and "
        "`actor_rollout_ref.rollout.rollout_attn_backend: TORCH_SDPA`",
    )
)
