"""Launch scripts.

The old entry point and Hydra `+` prefixes (legacy_surface.md §3.1 and §4).
"""

from verl_migrate.kinds import FixPlusPrefix, ReplaceEntryPoint
from verl_migrate.rule_base import register
from verl_migrate.target import ENTRY_MODULE

register(
    ReplaceEntryPoint(
        id="entry-point-main-diffusion",
        since="0.1.0",
        summary=f"`python3 -m verl.trainer.main_flowgrpo` becomes `python3 -m {ENTRY_MODULE}`.",
        modules=("verl.trainer.main_flowgrpo",),
        module=ENTRY_MODULE,
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
