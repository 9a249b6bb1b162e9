"""`_target_` classes and dotted class paths that moved from `verl.*` to `verl_omni.*`.

Sources: verl-omni REF0/E/9482d5c7, legacy_surface.md §2 and §3.4 row 32.
"""

from verl_migrate.kinds import RenameValue, ReplaceTarget
from verl_migrate.rules._targets import ACTOR, MODEL, REF, ROLLOUT, VAL
from verl_migrate.rules.base import register

_NEW = "verl_omni.workers.config.diffusion"
for _id, _path, _old, _new, _row in (
    ("target-actor-config", f"{ACTOR}._target_", "verl.workers.config.FSDPActorConfig", "FSDPDiffusionActorConfig", 32),
    ("target-ref-config", f"{REF}._target_", "verl.workers.config.FSDPActorConfig", "FSDPDiffusionActorConfig", 32),
    (
        "target-rollout-config",
        f"{ROLLOUT}._target_",
        "verl.workers.config.DiffusionRolloutConfig",
        "DiffusionRolloutConfig",
        0,
    ),
    (
        "target-val-kwargs-config",
        f"{VAL}._target_",
        "verl.workers.config.DiffusionSamplingConfig",
        "DiffusionSamplingConfig",
        0,
    ),
    ("target-model-config", f"{MODEL}._target_", "verl.workers.config.DiffusionModelConfig", "DiffusionModelConfig", 0),
):
    register(
        ReplaceTarget(
            id=_id,
            since="0.1.0",
            summary=f"`{_path.split('.', 1)[1]}` class moved to `{_NEW}.{_new}`.",
            refs=(_row,) if _row else (),
            path=_path,
            old=(_old, _old.replace("verl.workers.config.", "verl.workers.config.diffusion.")),
            new=f"{_NEW}.{_new}",
        )
    )

register(
    ReplaceTarget(
        id="target-algorithm-config",
        since="0.1.0",
        summary="`algorithm._target_` moved to `verl_omni.trainer.config.DiffusionAlgoConfig`.",
        path="algorithm._target_",
        old=("verl.trainer.config.DiffusionAlgoConfig",),
        new="verl_omni.trainer.config.DiffusionAlgoConfig",
    )
)

register(
    RenameValue(
        id="worker-extension-class-path",
        since="0.1.0",
        summary="The vLLM-Omni colocate worker extension moved to `verl_omni.workers.rollout.vllm_rollout.utils`.",
        path="**",
        old=("verl.workers.rollout.vllm_rollout.utils.vLLMOmniColocateWorkerExtension",),
        new="verl_omni.workers.rollout.vllm_rollout.utils.vLLMOmniColocateWorkerExtension",
    )
)
