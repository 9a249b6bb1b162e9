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

#: (id, upstream key, this project's key, `(old value, new value)` pairs: only these values move, renamed)
_V1_KEYS = (
    ("v1-separate-async-mode", "trainer.v1.trainer_mode", "trainer.mode", (("separate_async", "separate"),)),
    (
        "v1-parameter-sync-step",
        "trainer.v1.separate_async.parameter_sync_step",
        "trainer.separate.parameter_sync_step",
        (),
    ),
    (
        "v1-max-off-policy-threshold",
        "trainer.v1.sampler.max_off_policy_threshold",
        "trainer.separate.max_off_policy_threshold",
        (),
    ),
)

for _id, _old, _new, _values in _V1_KEYS:
    register(
        RenameKey(
            id=_id,
            since="0.2.0",
            summary=(
                "".join(f"`{_old}: {a}` becomes `{_new}: {b}`." for a, b in _values) or f"`{_old}` moved to `{_new}`."
            ),
            when_target=_PROJECT,
            old=_old,
            new=_new,
            values=_values,
        )
    )
