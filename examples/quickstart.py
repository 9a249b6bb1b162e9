"""Quickstart: runs what verl-omni can do today on its embedded default (CPU is fine).

The FlowGRPO trainer is not implemented yet; until it lands this script shows the pieces that exist
and says so. It downloads nothing.
"""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

import verl_omni
from verl_core.config import BaseConfig, omega_conf_to_dataclass


@dataclasses.dataclass
class QuickstartConfig(BaseConfig):
    prompts: list[str] = dataclasses.field(default_factory=lambda: ["a red cube"])
    n: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("n", self.n >= 1, "int >= 1")


def main() -> None:
    print(f"verl-omni {verl_omni.__version__}")
    cfg = omega_conf_to_dataclass(OmegaConf.create({"prompts": ["a cat", "a dog"], "n": 2}), QuickstartConfig)
    print(f"built {cfg!r} from an OmegaConf node")
    print(
        "NOTE: the FlowGRPO trainer is not implemented yet; this quickstart only exercises the config "
        "layer. `nox -s quickstart` becomes the FlowGRPO run once the trainer lands."
    )


if __name__ == "__main__":
    main()
