"""Build config dataclass trees from OmegaConf nodes or plain mappings, resolving `_target_`.

`build_dataclass` and `resolve_target` live in `verl_core.config.typecheck` (coercion and building recurse into each
other) and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from verl_core.config.errors import ConfigError, ConfigTypeError, ConfigValueError
from verl_core.config.typecheck import build_dataclass, resolve_target

__all__ = ["build_dataclass", "omega_conf_to_dataclass", "resolve_target"]

T = TypeVar("T")


def omega_conf_to_dataclass(config: Any, dataclass_type: type[T] | None = None, *, source: str | None = None) -> T:
    """Build a dataclass tree from an OmegaConf node (or plain mapping).

    Args:
        config (`DictConfig` or `Mapping`):
            The node. Interpolations are resolved first. A `_target_` key names the dataclass
            (dotted import path); nested nodes may carry their own `_target_`.
        dataclass_type (`type`, *optional*):
            The class to build when the node has no `_target_`; when both are given the target must
            be this class or a subclass of it.
        source (`str`, *optional*):
            Where the node came from (a file name), prepended to error messages.

    Returns:
        The built dataclass instance.

    Raises:
        ConfigKeyError: an unknown or missing key (the message names its dotted path and the known keys).
        ConfigTypeError: a value of the wrong type, or a `_target_` that is not a dataclass.
        ConfigValueError: a value rejected by the config's own validation, or an interpolation that fails.
    """
    mapping = _to_container(config, source)
    if not isinstance(mapping, Mapping):
        raise ConfigTypeError(f"expected a mapping node, got {type(mapping).__name__}", key="<root>", source=source)
    try:
        return build_dataclass(mapping, dataclass_type, path=None)
    except ConfigError as e:
        raise e.with_prefix(None, source=source) from e


def _to_container(config: Any, source: str | None) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        from omegaconf.errors import OmegaConfBaseException
    except ImportError:  # pragma: no cover - omegaconf is a declared dependency
        return config
    if isinstance(config, (DictConfig, ListConfig)):
        try:
            return OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
        except OmegaConfBaseException as e:
            key = getattr(e, "full_key", None) or "<root>"
            raise ConfigValueError(f"{type(e).__name__}: {getattr(e, 'msg', e)}", key=key, source=source) from e
    return config
