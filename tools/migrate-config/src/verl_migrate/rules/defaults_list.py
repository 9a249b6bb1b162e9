"""Hydra config groups.

The diffusion groups moved under `diffusion/` in verl-omni; critic, legacy reward and the rollout-correction group
are gone from the defaults list (legacy_surface.md §3.1). Which group an old entry becomes is the one the target's
root composes at the same package (`verl_migrate.target`); an entry the target has no group for goes.
"""

from verl_migrate.kinds import RewriteDefaultsEntry
from verl_migrate.rule_base import register
from verl_migrate.target import new_group

_OPT = (("dp_actor", "dp_diffusion_actor"), ("dp_ref", "dp_diffusion_ref"))
for _id, _group, _package, _options in (
    ("defaults-model-engine", "model_engine", None, (("dp", "dp_diffusion"),)),
    (
        "defaults-actor-group",
        "actor",
        "actor_rollout_ref.actor",
        (*_OPT, ("${model_engine}_actor", "${diffusion/model_engine}_actor")),
    ),
    (
        "defaults-ref-group",
        "ref",
        "actor_rollout_ref.ref",
        (*_OPT, ("${model_engine}_ref", "${diffusion/model_engine}_ref")),
    ),
    ("defaults-rollout-group", "rollout", "actor_rollout_ref.rollout", ()),
    ("defaults-model-group", "model", "actor_rollout_ref.model", ()),
):
    # the new group is the one the target's root composes at the same package (verl_migrate.target)
    _new = new_group(_package, _group)
    register(
        RewriteDefaultsEntry(
            id=_id,
            since="0.1.0",
            summary=f"Config group `{_group}` is `{_new}` in verl-omni."
            if _new
            else f"Config group `{_group}` does not exist in verl-omni's config; its entry goes.",
            group=_group,
            new_group=_new,
            options=_options,
            drop_entry=_new is None,
            follow_target=True,
            package=_package,
        )
    )

for _id, _group in (
    ("defaults-drop-critic", "critic"),
    ("defaults-drop-legacy-reward-impl", "legacy_reward_impl"),
    ("defaults-drop-rollout-correction", "algorithm"),
):
    register(
        RewriteDefaultsEntry(
            id=_id,
            since="0.1.0",
            summary=f"The `{_group}` defaults entry is gone (verl-omni's diffusion_trainer does not compose it).",
            group=_group,
            drop_entry=True,
        )
    )
