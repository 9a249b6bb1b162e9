"""Compose the `diffusion_trainer` config with Hydra and build it into `DiffusionTrainerConfig`, checking every key.

`load_config` is what `verl-omni-train` runs before anything else (no Ray, no model): an unknown key gets a
"did you mean", a verl-omni key of a feature this project lacks says so, a wrong type names the key and the type.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Sequence
from typing import Any

from verl_core.config import ConfigValueError, omega_conf_to_dataclass
from verl_omni.trainer.config.root import DiffusionTrainerConfig
from verl_omni.trainer.config.unsupported import prune_unsupported

__all__ = ["CONFIG_DIR", "compose_config", "load_config"]

CONFIG_DIR = pathlib.Path(__file__).parent
"""Folder of the shipped configs (`diffusion_trainer.yaml`, `quickstart.yaml`); Hydra: `pkg://verl_omni.trainer.config`."""

logger = logging.getLogger(__name__)
_SEARCHPATH = "pkg://verl_omni.trainer.config"


def compose_config(
    overrides: Sequence[str] = (), *, config_name: str = "diffusion_trainer", config_dir: str | None = None
) -> Any:
    """Compose a config with Hydra (no job is run) and return the `DictConfig`.

    Overrides of keys the config does not have are passed to Hydra as additions (`+key=value`), so that the
    dataclass builder, not Hydra's struct check, reports them (with a suggestion).

    Args:
        overrides (`Sequence[str]`): Hydra overrides, e.g. `["trainer.total_training_steps=3"]`.
        config_name (`str`, *optional*, defaults to `"diffusion_trainer"`): the primary config.
        config_dir (`str`, *optional*): folder of the primary config; defaults to the shipped configs. A config of
            your own may list `diffusion_trainer` in its defaults: the shipped folder is on the search path.

    Raises:
        ConfigValueError: Hydra cannot compose the config (names the config or override).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    folder = str(pathlib.Path(config_dir).expanduser().resolve()) if config_dir else str(CONFIG_DIR)
    extra = [] if folder == str(CONFIG_DIR) else [f"hydra.searchpath=[{_SEARCHPATH}]"]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=folder, version_base=None):
            base = compose(config_name=config_name, overrides=extra)
            rewritten = [_as_addition(o, base, OmegaConf) for o in overrides]
            return compose(config_name=config_name, overrides=[*extra, *rewritten])
    except HydraException as e:
        raise ConfigValueError(f"{type(e).__name__}: {e}", key=f"<config {config_name!r} in {folder}>") from e
    finally:
        GlobalHydra.instance().clear()


def _as_addition(override: str, base: Any, omegaconf: Any) -> str:
    """`key=value` for a key `base` lacks becomes `+key=value`; everything else is returned unchanged."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides([override])[0]
    except HydraException:  # OverrideParseException: Hydra's compose reports it with its own message
        return override
    key = parsed.key_or_group
    if parsed.type is not OverrideType.CHANGE or parsed.package is not None or key.startswith("hydra."):
        return override
    missing = object()
    if omegaconf.select(base, key, default=missing, throw_on_missing=False) is missing:
        return "+" + override
    return override


def load_config(
    overrides: Sequence[str] = (), *, config_name: str = "diffusion_trainer", config_dir: str | None = None
) -> DiffusionTrainerConfig:
    """Compose (see `compose_config`), resolve and build the typed config; nothing else starts.

    Returns:
        The validated `DiffusionTrainerConfig`.

    Raises:
        ConfigKeyError: an unknown key (with a "did you mean"), or a verl-omni key whose feature is not implemented.
        ConfigTypeError: a value of the wrong type (names the key and the expected type).
        ConfigValueError: a value out of range, a missing mandatory value (`???`), keys that disagree.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    cfg = compose_config(overrides, config_name=config_name, config_dir=config_dir)
    try:
        tree = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "<root>"
        raise ConfigValueError(f"{type(e).__name__}: {getattr(e, 'msg', e)}", key=key) from e
    dropped = prune_unsupported(tree, DiffusionTrainerConfig)
    if dropped:
        logger.info("ignored %d verl-omni keys of features left off: %s", len(dropped), ", ".join(dropped))
    return omega_conf_to_dataclass(tree, DiffusionTrainerConfig)
