"""Legacy top-level reward keys move into `reward.*`.

Old verl moved `reward_model.*`, `custom_reward_function.*` and `sandbox_fusion.*` into `reward.*` at start-up
(verl `migrate_legacy_reward_impl`; legacy_surface.md §3.4 row 38). A null legacy value meant "not set" and is
dropped; any other value wins over the dumped `reward.*` default.
`reward_loop_class_name` goes to `reward.reward_manager.name`: verl-omni has no `module.name` and takes the class
name from `name` when `source` is `importlib`.
"""

from verl_migrate.kinds import Drop, MoveSubtree, RenameKey
from verl_migrate.rule_base import register

for _id, _old, _new, _kind in (
    ("legacy-custom-reward-function", "custom_reward_function", "reward.custom_reward_function", MoveSubtree),
    ("legacy-reward-model-num-workers", "reward_model.num_workers", "reward.num_workers", RenameKey),
    ("legacy-reward-model-reward-manager", "reward_model.reward_manager", "reward.reward_manager.name", RenameKey),
    ("legacy-reward-loop-source", "reward_model.reward_loop_source", "reward.reward_manager.source", RenameKey),
    (
        "legacy-reward-loop-module-path",
        "reward_model.reward_loop_module_path",
        "reward.reward_manager.module.path",
        RenameKey,
    ),
    ("legacy-reward-loop-class-name", "reward_model.reward_loop_class_name", "reward.reward_manager.name", RenameKey),
    ("legacy-reward-model-enable", "reward_model.enable", "reward.reward_model.enable", RenameKey),
    (
        "legacy-reward-model-resource-pool",
        "reward_model.enable_resource_pool",
        "reward.reward_model.enable_resource_pool",
        RenameKey,
    ),
    ("legacy-reward-model-gpus", "reward_model.n_gpus_per_node", "reward.reward_model.n_gpus_per_node", RenameKey),
    ("legacy-reward-model-nnodes", "reward_model.nnodes", "reward.reward_model.nnodes", RenameKey),
    ("legacy-reward-model-path", "reward_model.model.path", "reward.reward_model.model_path", RenameKey),
    ("legacy-reward-kwargs", "reward_model.reward_kwargs", "reward.reward_kwargs", MoveSubtree),
    ("legacy-reward-model-rollout", "reward_model.rollout", "reward.reward_model.rollout", MoveSubtree),
    ("legacy-sandbox-fusion", "sandbox_fusion", "reward.sandbox_fusion", MoveSubtree),
):
    register(
        _kind(
            id=_id,
            since="0.1.0",
            summary=f"Legacy `{_old}` is `{_new}` (old verl applied this move at start-up).",
            refs=(38,),
            old=_old,
            new=_new,
            null_unset=True,
        )
    )

register(
    Drop(
        id="drop-legacy-reward-model-placeholders",
        since="0.1.0",
        summary="Null placeholders `reward_model.model.{external_lib,trust_remote_code}` are dropped.",
        refs=(38,),
        paths=("reward_model.model.external_lib", "reward_model.model.trust_remote_code"),
        when=(None,),
        note="null means unset; verl's legacy reward map has no destination for this key",
    )
)
