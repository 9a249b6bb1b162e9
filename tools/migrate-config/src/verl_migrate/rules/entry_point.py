"""Launch scripts.

The old entry point and Hydra `+` prefixes (legacy_surface.md §3.1 and §4).
"""

from verl_migrate.kinds import FixPlusPrefix, ReplaceEntryPoint
from verl_migrate.rules.base import register

register(
    ReplaceEntryPoint(
        id="entry-point-verl-omni-train",
        since="0.1.0",
        summary="`python3 -m verl.trainer.main_flowgrpo` is the `verl-omni-train` console script.",
        modules=("verl.trainer.main_flowgrpo",),
        command="verl-omni-train",
    )
)

register(
    FixPlusPrefix(
        id="hydra-plus-prefix",
        since="0.1.0",
        summary="Overrides of dataclass-only keys need `+` in verl-omni; keys in its YAML must not have it.",
        refs=(17,),
    )
)
