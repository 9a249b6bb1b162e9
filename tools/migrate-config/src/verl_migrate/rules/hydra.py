"""Hydra settings.

Configs that extend verl's config tree name it in `hydra.searchpath` (`pkg://verl.trainer.config`,
`file://verl/trainer/config`); #6200 removed the diffusion groups from there (issue 9 item 6).
"""

from verl_migrate.kinds.hydra import FlagSearchpath
from verl_migrate.rule_base import register

register(
    FlagSearchpath(
        id="hydra-searchpath-verl",
        since="0.1.0",
        summary="`hydra.searchpath` entries pointing into `verl.*` are reported with the verl-omni path to use.",
        pattern=r"^(?:pkg://verl(?:[./]|$)|file://(?:.*/)?verl/trainer/config/?$)",
        message="points into verl's packages, whose diffusion config groups verl PR #6200 removed",
    )
)
