"""`_target_` classes and dotted class paths that moved from `verl.*` to `verl_omni.*`.

The new class of each node is the one the target's config names (`verl_migrate.target.target_class`), so the rules
follow the target when it switches. Sources: verl-omni REF0/E/9482d5c7, legacy_surface.md §2 and §3.4 row 32.
"""

from verl_migrate.kinds import RenameValue, ReplaceTarget
from verl_migrate.kinds.target import FollowTargetClasses
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import ACTOR, MODEL, REF, ROLLOUT, VAL
from verl_migrate.target import target_class_or_none

for _id, _node, _old, _row in (
    ("target-actor-config", ACTOR, "verl.workers.config.FSDPActorConfig", 32),
    ("target-ref-config", REF, "verl.workers.config.FSDPActorConfig", 32),
    ("target-rollout-config", ROLLOUT, "verl.workers.config.DiffusionRolloutConfig", 0),
    ("target-val-kwargs-config", VAL, "verl.workers.config.DiffusionSamplingConfig", 0),
    ("target-model-config", MODEL, "verl.workers.config.DiffusionModelConfig", 0),
    ("target-algorithm-config", "algorithm", "verl.trainer.config.DiffusionAlgoConfig", 0),
):
    _new = target_class_or_none(_node) or ""
    _where = f"moved to `{_new}`" if _new else "is not named by verl-omni's config"
    register(
        ReplaceTarget(
            id=_id,
            since="0.1.0",
            summary=f"`{_node.split('.', 1)[-1]}._target_` class {_where}.",
            refs=(_row,) if _row else (),
            path=f"{_node}._target_",
            old=tuple(dict.fromkeys((_old, _old.replace("verl.workers.config.", "verl.workers.config.diffusion.")))),
            new=_new,
            node=_node,
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

register(
    FollowTargetClasses(
        id="target-classes-follow",
        since="0.2.0",
        summary="Any other `_target_` naming a `verl.*` class becomes the class the target's config names there.",
    )
)
