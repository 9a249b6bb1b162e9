from verl_migrate_cases import noop, rewrite

_RENAMES = [
    ("defaults-model-engine", "model_engine: dp", "diffusion/model_engine: dp_diffusion"),
    (
        "defaults-actor-group",
        "actor@actor_rollout_ref.actor: dp_actor",
        "diffusion/actor@actor_rollout_ref.actor: dp_diffusion_actor",
    ),
    (
        "defaults-ref-group",
        "ref@actor_rollout_ref.ref: dp_ref",
        "diffusion/ref@actor_rollout_ref.ref: dp_diffusion_ref",
    ),
    (
        "defaults-rollout-group",
        "rollout@actor_rollout_ref.rollout: diffusion_rollout",
        "diffusion/rollout@actor_rollout_ref.rollout: diffusion_rollout",
    ),
    (
        "defaults-model-group",
        "model@actor_rollout_ref.model: diffusion_model",
        "diffusion/model@actor_rollout_ref.model: diffusion_model",
    ),
]
_DROPS = [
    ("defaults-drop-critic", "critic@critic: dp_critic"),
    ("defaults-drop-legacy-reward-impl", "legacy_reward_impl"),
    ("defaults-drop-rollout-correction", "algorithm@algorithm.rollout_correction: rollout_correction"),
]

CASES = []
for _id, _old, _new in _RENAMES:
    CASES.append(
        rewrite(
            _id,
            f"defaults:\n  - diffusion_trainer\n  - override {_old}\n  - _self_\n",
            f"defaults:\n  - diffusion_trainer\n  - override {_new}\n  - _self_\n",
        )
    )
    CASES.append(noop(_id, f"defaults:\n  - diffusion_trainer\n  - override {_new}\n  - _self_\n"))
for _id, _old in _DROPS:
    CASES.append(
        rewrite(
            _id,
            f"defaults:\n  - diffusion_trainer\n  - {_old}\n  - _self_\n",
            "defaults:\n  - diffusion_trainer\n  - _self_\n",
        )
    )
    CASES.append(noop(_id, "defaults:\n  - diffusion_trainer\n  - _self_\n"))
CASES.append(
    rewrite("defaults-model-engine", "model_engine=dp", "diffusion/model_engine=dp_diffusion", fmt="overrides")
)
