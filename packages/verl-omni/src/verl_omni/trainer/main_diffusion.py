"""`python -m verl_omni.trainer.main_diffusion`: upstream verl-omni's module; `verl-omni-train` on `diffusion_trainer`.

Where `verl-omni-train` uses the `quickstart` config unless `--config-name` names another, this module uses the full
recipe, `diffusion_trainer`, as upstream's does: migrated launch scripts and `python -m verl.trainer.main_flowgrpo`
run it. Everything else is `verl_omni.trainer.main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verl_omni.trainer import main as _main

__all__ = ["COMMAND", "main", "run"]

COMMAND = ("python", "-m", "verl_omni.trainer.main_diffusion")


def run(argv: Sequence[str]) -> int:
    """`verl_omni.trainer.main.run` with `diffusion_trainer` as the config when `--config-name` is not given."""
    return _main.run(argv, default_config=_main.FULL_RECIPE, command=COMMAND)


def main() -> None:
    """Entry point of `python -m verl_omni.trainer.main_diffusion`."""
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
