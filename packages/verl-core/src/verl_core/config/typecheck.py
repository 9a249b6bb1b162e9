"""Check and coerce a value against a type annotation, naming the key on failure; build dataclasses from mappings.

`coerce_value` turns a mapping into the annotated dataclass with `build_dataclass`, and `build_dataclass` coerces
each field with `coerce_value`: the two recurse into each other, so they share this module (the bottom of
`verl_core.config` above `errors`). `verl_core.config.builder` re-exports `build_dataclass` and `resolve_target`.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import importlib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

from verl_core.config.errors import ConfigError, ConfigKeyError, ConfigTypeError, ConfigValueError

__all__ = ["build_dataclass", "coerce_value", "resolve_target", "type_name"]

_NONE = type(None)


def type_name(annotation: Any) -> str:
    """Readable name of an annotation: `int`, `list[str]`, `'a' | 'b'`, `RolloutConfig | None`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return "any value"
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join("None" if a is _NONE else type_name(a) for a in args)
    if origin is not None:
        inner = ", ".join(type_name(a) for a in args if a is not Ellipsis)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))


def coerce_value(value: Any, annotation: Any, *, key: str, owner: str | None = None) -> Any:
    """Return `value` checked against `annotation`, with lossless widening.

    Ints widen to floats, lists to tuples where a tuple is annotated, mappings become the annotated
    `BaseConfig`/dataclass. Returns the same object when nothing changed.

    Raises:
        ConfigTypeError: the value cannot be taken as `annotation`; the message names `key`.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)

    def fail() -> typing.NoReturn:
        shown = f"{type(value).__name__} {value!r}"
        if len(shown) > 120:
            shown = shown[:117] + "..."
        raise ConfigTypeError(f"expected {type_name(annotation)}, got {shown}", key=key, owner=owner)

    if annotation is Any or annotation is object:
        return value
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise ConfigTypeError(
            f"expected one of {', '.join(repr(a) for a in args)}, got {value!r}", key=key, owner=owner
        )
    if origin in (Union, types.UnionType):
        if value is None:
            if _NONE in args:
                return None
            fail()
        candidates = [a for a in args if a is not _NONE]
        for cand in candidates:  # an exact match first, so `int | str` keeps "3" a str
            if _matches_exactly(value, cand):
                return coerce_value(value, cand, key=key, owner=owner)
        for cand in candidates:
            try:
                return coerce_value(value, cand, key=key, owner=owner)
            except ConfigTypeError:
                continue
        fail()
    if annotation is bool:
        if isinstance(value, bool):
            return value
        fail()
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        fail()
    if annotation is float:
        if isinstance(value, float):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        fail()
    if annotation is str:
        if isinstance(value, str):
            return value
        fail()
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if isinstance(value, annotation):
            return value
        try:
            return annotation(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in annotation)
            raise ConfigTypeError(f"expected one of {allowed}, got {value!r}", key=key, owner=owner) from None
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            fail()
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigTypeError(
                    f"expected {len(args)} items ({type_name(annotation)}), got {len(value)}", key=key, owner=owner
                )
            items = [coerce_value(v, a, key=f"{key}[{i}]", owner=owner) for i, (a, v) in enumerate(zip(args, value))]
        else:
            item_t = args[0] if args else Any
            items = [coerce_value(v, item_t, key=f"{key}[{i}]", owner=owner) for i, v in enumerate(value)]
        want_tuple = origin is tuple or annotation is tuple
        out = tuple(items) if want_tuple else list(items)
        same = type(out) is type(value) and all(a is b for a, b in zip(out, value))
        return value if same else out
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        if not isinstance(value, Mapping):
            fail()
        key_t, val_t = args if args else (Any, Any)
        out = {
            coerce_value(k, key_t, key=f"{key}.<key {k!r}>", owner=owner): coerce_value(
                v, val_t, key=f"{key}.{k}", owner=owner
            )
            for k, v in value.items()
        }
        same = type(value) is dict and all(out[k] is value[k] for k in value)
        return value if same else out
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if isinstance(value, Mapping):
            try:
                return build_dataclass(value, annotation, path=None)
            except ConfigError as e:
                raise e.with_prefix(key) from e
        fail()
    if isinstance(annotation, type):
        if isinstance(value, annotation):
            return value
        fail()
    return value  # unsupported typing construct: accept as is


def _matches_exactly(value: Any, annotation: Any) -> bool:
    if annotation in (int, float, str, bool):
        return type(value) is annotation
    origin = typing.get_origin(annotation) or annotation
    if origin is Literal:
        return value in typing.get_args(annotation)
    return isinstance(origin, type) and isinstance(value, origin)


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
        if name not in fields and name in getattr(cls, "_retired_keys", {}):
            cls._retired_key(name, value, _join(path, str(name)))
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
