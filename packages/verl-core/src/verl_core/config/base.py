"""`BaseConfig`: the typed, validated, read-only dataclass base of every config in the project."""

from __future__ import annotations

import abc
import dataclasses
import difflib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from verl_core.config.errors import ConfigKeyError, ConfigValueError
from verl_core.config.typecheck import coerce_value

__all__ = ["BaseConfig"]

_Config = TypeVar("_Config", bound="BaseConfig")


class _FreezeAfterInit(abc.ABCMeta):
    """Metaclass that makes an instance read-only once its whole `__init__`/`__post_init__` chain ran."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be decorated with @dataclasses.dataclass")
        instance = super().__call__(*args, **kwargs)
        object.__setattr__(instance, "_frozen", True)
        return instance


class BaseConfig(Mapping, metaclass=_FreezeAfterInit):
    """Base of every config dataclass: typed fields, validation, read-only, mapping-style access.

    Subclasses are ordinary `@dataclasses.dataclass` classes. On construction every field value is
    checked against its annotation (ints widen to floats, dicts become nested configs); subclasses add
    range checks in `__post_init__` (calling `super().__post_init__()` first) through `self._require`.
    After construction the instance is read-only except for names listed in `_mutable_fields`; use
    `dataclasses.replace` or `evolve` to derive a changed copy. Like an OmegaConf node, it supports
    `cfg["key"]`, `cfg.get("key", default)`, `"key" in cfg`, `len(cfg)` and iteration over field names.

    Raises:
        ConfigTypeError: a field value does not match its annotation (names the key and the type).
        ConfigValueError: a `_require` check failed (names the key, the value and what is allowed).
    """

    _mutable_fields: ClassVar[frozenset[str]] = frozenset()
    _frozen: ClassVar[bool] = False  # shadowed per instance once construction finished
    #: keys a config file may still carry that this class has no field for: key -> why it has none. Building from
    #: a mapping (`build_dataclass`) hands each to `_retired_key`, which warns and drops it by default.
    _retired_keys: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def _retired_key(cls, key: str, value: Any, path: str) -> None:
        """Handle the retired `key` (dotted `path`) found with `value` while building: warn that it is ignored.

        Subclasses override it to refuse some values (raise a `ConfigError` naming `path`).
        """
        warnings.warn(
            f"{cls.__name__} ignores the key {path!r} ({cls._retired_keys[key]}); remove it", UserWarning, stacklevel=2
        )

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for field in dataclasses.fields(self):
            if field.name.startswith("_") or not field.init:
                continue
            value = getattr(self, field.name)
            coerced = coerce_value(value, hints[field.name], key=field.name, owner=type(self).__name__)
            if coerced is not value:
                object.__setattr__(self, field.name, coerced)

    # ---- validation helpers -------------------------------------------------------------------

    def _require(self, key: str, ok: bool, allowed: str) -> None:
        """Raise `ConfigValueError` naming `key`, its value and `allowed` unless `ok`."""
        if not ok:
            raise ConfigValueError(
                f"expected {allowed}, got {getattr(self, key)!r}", key=key, owner=type(self).__name__
            )

    # ---- read-only ----------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen and name not in self._mutable_fields:
            raise dataclasses.FrozenInstanceError(
                f"{type(self).__name__}.{name} is read-only after construction; "
                f"use dataclasses.replace(cfg, {name}=...) to derive a changed config"
            )
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete {type(self).__name__}.{name}")

    def evolve(self: _Config, **changes: Any) -> _Config:
        """Return a copy with `changes` applied and validated again (same as `dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)

    # ---- mapping-style access -----------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str) or key not in self._field_names():
            raise ConfigKeyError(_unknown_key_message(type(self), key), key=str(key))
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._field_names())

    def __len__(self) -> int:
        return len(self._field_names())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._field_names()

    def get(self, key: str, default: Any = None) -> Any:
        """Return the field `key`, or `default` when the config has no such field."""
        return getattr(self, key) if key in self else default

    def to_dict(self) -> dict[str, Any]:
        """Return a plain nested dict of the public fields (nested configs become dicts)."""
        return {name: _plain(getattr(self, name)) for name in self._field_names()}

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))

    # Mapping defines __eq__ by items; keep dataclass semantics (type + fields) instead.
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._field_names())

    __hash__ = None  # type: ignore[assignment]


def _plain(value: Any) -> Any:
    if isinstance(value, BaseConfig):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _unknown_key_message(cls: type, key: object) -> str:
    names = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
    close = difflib.get_close_matches(str(key), names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{cls.__name__} has no key {key!r}{hint}; known keys: {', '.join(names)}"


_HINT_CACHE: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type) -> dict[str, Any]:
    hints = _HINT_CACHE.get(cls)
    if hints is None:
        import typing

        hints = typing.get_type_hints(cls)
        _HINT_CACHE[cls] = hints
    return hints
