"""Algorithm selection.

`model.algorithm` drives the loss, the advantage estimator and the adapter lookup (verl-omni da8018b5,
legacy_surface.md §3.4 rows 25 and 33). verl-omni keeps `algorithm.adv_estimator` in its root config as
`${oc.select:actor_rollout_ref.model.algorithm,flow_grpo}` because its trainer still reads it; a migrated root config
keeps it the same way.
"""

from verl_migrate.kinds import RenameKey
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import MODEL

register(
    RenameKey(
        id="adv-estimator-to-model-algorithm",
        since="0.1.0",
        summary="`algorithm.adv_estimator` is derived from `actor_rollout_ref.model.algorithm`; the value moves there.",
        refs=(25, 33),
        old="algorithm.adv_estimator",
        new=f"{MODEL}.algorithm",
        alias=True,
    )
)
