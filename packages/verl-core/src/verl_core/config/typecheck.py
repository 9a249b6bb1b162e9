"""Check and coerce a value against a type annotation, naming the key on failure."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

from verl_core.config.errors import ConfigError, ConfigTypeError

__all__ = ["coerce_value", "type_name"]

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
            from verl_core.config.builder import build_dataclass

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
