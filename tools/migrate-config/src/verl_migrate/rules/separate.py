"""Upstream verl-omni's v1 separate-async knobs become this project's `trainer.mode: separate` (issue 31).

Upstream (a1139baf) runs its v1 trainer with `trainer.use_v1: true` and `trainer.v1.trainer_mode: separate_async`,
pushing weights every `trainer.v1.separate_async.parameter_sync_step` steps and dropping groups more than
`trainer.v1.sampler.max_off_policy_threshold` versions old. This project runs the same schedule as the mode of its
one trainer: `trainer.mode: separate` with `trainer.separate.*` (docs/omni/async.md). The rules run only when the
target is this project's config (upstream's own tree has no `trainer.mode`); `trainer.use_v1` is then dropped by
`target-default-only`, and the v1 keys without an equivalent by `target-unsupported`.
"""

from verl_migrate.kinds import RenameKey
from verl_migrate.rule_base import register

#: the rules run against this project's config only
_PROJECT = (("trainer.mode", "colocated"),)

register(
    RenameKey(
        id="v1-separate-async-mode",
        since="0.2.0",
        summary="`trainer.v1.trainer_mode: separate_async` becomes `trainer.mode: separate`.",
        when_target=_PROJECT,
        old="trainer.v1.trainer_mode",
        new="trainer.mode",
        values=(("separate_async", "separate"),),
    )
)

register(
    RenameKey(
        id="v1-parameter-sync-step",
        since="0.2.0",
        summary="`trainer.v1.separate_async.parameter_sync_step` moved to `trainer.separate.parameter_sync_step`.",
        when_target=_PROJECT,
        old="trainer.v1.separate_async.parameter_sync_step",
        new="trainer.separate.parameter_sync_step",
    )
)

register(
    RenameKey(
        id="v1-max-off-policy-threshold",
        since="0.2.0",
        summary="`trainer.v1.sampler.max_off_policy_threshold` moved to `trainer.separate.max_off_policy_threshold`.",
        when_target=_PROJECT,
        old="trainer.v1.sampler.max_off_policy_threshold",
        new="trainer.separate.max_off_policy_threshold",
    )
)
