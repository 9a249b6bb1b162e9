"""Hydra config groups.

The diffusion groups moved under `diffusion/` in verl-omni; critic, legacy reward and the rollout-correction group
are gone from the defaults list (legacy_surface.md §3.1).
"""

from verl_migrate.kinds import RewriteDefaultsEntry
from verl_migrate.rules.base import register

_OPT = (("dp_actor", "dp_diffusion_actor"), ("dp_ref", "dp_diffusion_ref"))
for _id, _group, _new, _options in (
    ("defaults-model-engine", "model_engine", "diffusion/model_engine", (("dp", "dp_diffusion"),)),
    (
        "defaults-actor-group",
        "actor",
        "diffusion/actor",
        (*_OPT, ("${model_engine}_actor", "${diffusion/model_engine}_actor")),
    ),
    ("defaults-ref-group", "ref", "diffusion/ref", (*_OPT, ("${model_engine}_ref", "${diffusion/model_engine}_ref"))),
    ("defaults-rollout-group", "rollout", "diffusion/rollout", ()),
    ("defaults-model-group", "model", "diffusion/model", ()),
):
    register(
        RewriteDefaultsEntry(
            id=_id,
            since="0.1.0",
            summary=f"Config group `{_group}` is `{_new}` in verl-omni.",
            group=_group,
            new_group=_new,
            options=_options,
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
