"""Validation sampling.

`val_kwargs` gains typed `pipeline`/`algo` blocks; its defaults changed (verl-omni REF0 and 70f38f01,
legacy_surface.md §3.4 rows 12-18 and §3.6 item 2).
"""

from verl_migrate.kinds import Drop, Flag, RenameKey, SetExplicitDefault, SplitDict
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import ALGO_KEYS, PIPELINE_KEYS, ROLLOUT, VAL

_CREATES = (f"{VAL}.pipeline", f"{VAL}.algo")

register(
    RenameKey(
        id="val-num-inference-steps-to-pipeline",
        since="0.1.0",
        summary="`val_kwargs.num_inference_steps` moved under `val_kwargs.pipeline`.",
        refs=(12,),
        old=f"{VAL}.num_inference_steps",
        new=f"{VAL}.pipeline.num_inference_steps",
        creates=_CREATES,
    )
)

register(
    SplitDict(
        id="val-extra-configs-split",
        since="0.1.0",
        summary="The free-form `val_kwargs.extra_configs` is split into `val_kwargs.pipeline.*` / `val_kwargs.algo.*`.",
        refs=(13, 14, 15, 16),
        path=f"{VAL}.extra_configs",
        routes=tuple((k, f"{VAL}.pipeline.{k}") for k in PIPELINE_KEYS)
        + tuple((k, f"{VAL}.algo.{k}") for k in ALGO_KEYS),
        ignored=("height", "width", "num_inference_steps", "logprobs", "seed"),
        ignored_note="old verl overwrote this key from the top-level rollout / val_kwargs keys, so it had no effect",
        creates=_CREATES,
    )
)

register(
    Drop(
        id="drop-val-llm-sampling",
        since="0.1.0",
        summary="LLM sampling knobs `val_kwargs.{temperature,top_k,top_p,do_sample}` are gone.",
        refs=(18,),
        paths=tuple(f"{VAL}.{k}" for k in ("temperature", "top_k", "top_p", "do_sample")),
        note="diffusion validation never read these LLM sampling knobs",
    )
)

register(
    SetExplicitDefault(
        id="val-num-inference-steps-default",
        since="0.1.0",
        summary="Validation steps default changed 40 → 50; configs relying on 40 get it written explicitly.",
        refs=(12,),
        path=f"{VAL}.pipeline.num_inference_steps",
        value=40,
        aliases=(f"{VAL}.num_inference_steps",),
        message="The default number of validation denoising steps changed from 40 to 50.",
    )
)

register(
    SetExplicitDefault(
        id="val-noise-level-inherits-train",
        since="0.1.0",
        summary="Old validation reused the training noise level; verl-omni validates at 0.0 by default.",
        refs=(13,),
        path=f"{VAL}.algo.noise_level",
        value_from=f"{ROLLOUT}.algo.noise_level",
        requires=f"{ROLLOUT}.algo.noise_level",
        message="Old validation sampled with the training `noise_level`; verl-omni's validation default is 0.0.",
    )
)

register(
    Flag(
        id="val-noise-level-default",
        since="0.1.0",
        summary="Validation noise level default is now 0.0 (deterministic); old validation used the pipeline default.",
        refs=(13,),
        path=f"{VAL}.algo.noise_level",
        condition="absent",
        message="old validation sampled with the pipeline's default noise level (no noise_level was set); "
        "verl-omni validates at `val_kwargs.algo.noise_level: 0.0`. Set it if you need the old behaviour.",
        late=True,
    )
)
