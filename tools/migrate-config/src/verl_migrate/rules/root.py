"""Root configs and config-group files stand on the target's groups.

A migrated root config replaces the target's root: it gets the target's defaults entries and root keys it lacks
(`algorithm.trainer_type`, `algorithm.sample_source`, ... that the target's entry point reads). A config-group file
loses defaults entries naming options the target's group does not have (legacy_surface.md §3.1, §3.5; issue 13).
"""

from verl_migrate.kinds.completion import CompleteRootDefaults, CompleteRootKeys, GroupFileDefaults
from verl_migrate.rule_base import register

register(
    CompleteRootDefaults(
        id="root-defaults-complete",
        since="0.1.0",
        summary="A root config composes every group verl-omni's root composes (e.g. `diffusion/distillation`).",
    )
)

register(
    CompleteRootKeys(
        id="root-keys-complete",
        since="0.1.0",
        summary="A root config defines the root keys verl-omni's trainer reads (`algorithm.trainer_type`, ...).",
    )
)

register(
    GroupFileDefaults(
        id="group-file-defaults",
        since="0.1.0",
        summary="A group file's defaults list names only options of verl-omni's group (no LLM `rollout` base).",
        notes=(
            (
                "rollout",
                "verl-omni's diffusion rollout config stands alone; it does not layer on verl's LLM rollout config",
            ),
            ("actor", "verl-omni's diffusion actor configs do not layer on verl's LLM actor config"),
            ("ref", "verl-omni's diffusion ref configs do not layer on verl's LLM ref config"),
        ),
    )
)
