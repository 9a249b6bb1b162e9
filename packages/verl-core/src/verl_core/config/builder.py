"""Build config dataclass trees from OmegaConf nodes or plain mappings, resolving `_target_`."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from verl_core.config.errors import ConfigError, ConfigKeyError, ConfigTypeError, ConfigValueError
from verl_core.config.typecheck import coerce_value

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


def build_dataclass(mapping: Mapping[str, Any], cls: type | None, *, path: str | None) -> Any:
    """Build `cls` (or the node's `_target_`) from a plain mapping; errors carry the dotted `path`."""
    target = mapping.get("_target_")
    if target is not None:
        target_cls = resolve_target(target, key=_join(path, "_target_"))
        if cls is not None and not (isinstance(target_cls, type) and issubclass(target_cls, cls)):
            raise ConfigTypeError(
                f"_target_ {target!r} is not a subclass of the expected {cls.__name__}", key=_join(path, "_target_")
            )
        cls = target_cls
    if cls is None:
        raise ConfigKeyError("has no _target_ and no dataclass_type was given", key=path or "<root>")
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ConfigTypeError(f"_target_ {cls!r} is not a dataclass", key=_join(path, "_target_"))

    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    public = [n for n in fields if not n.startswith("_")]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in mapping.items():
        if name == "_target_":
            continue
        if name not in fields or name.startswith("_"):
            close = difflib.get_close_matches(str(name), public, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigKeyError(
                f"unknown key for {cls.__name__}.{hint} Known keys: {', '.join(public)}", key=_join(path, str(name))
            )
        kwargs[name] = value
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigKeyError(f"missing required key for {cls.__name__}", key=_join(path, missing[0]))
    try:  # coerce here too, so plain (non-BaseConfig) dataclasses get typed values
        kwargs = {n: coerce_value(v, hints[n], key=n, owner=cls.__name__) for n, v in kwargs.items()}
        return cls(**kwargs)
    except ConfigError as e:
        raise e.with_prefix(path) from e


def resolve_target(target: Any, *, key: str) -> Any:
    """Import the object named by a dotted `_target_` path (`package.module.Name`)."""
    if not isinstance(target, str) or "." not in target:
        raise ConfigValueError(f"expected a dotted import path like 'pkg.module.Class', got {target!r}", key=key)
    module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigValueError(f"cannot import module {module_name!r} for _target_ {target!r}: {e}", key=key) from e
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigValueError(
            f"module {module_name!r} has no attribute {attr!r} (_target_ {target!r})", key=key
        ) from None


def _join(path: str | None, key: str) -> str:
    return f"{path}.{key}" if path else key


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
