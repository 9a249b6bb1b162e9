"""The two key trees shipped as package data: the old verl one (571 keys) and verl-omni's diffusion_trainer."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

_DATA = os.path.join(os.path.dirname(__file__), "data")


def _read_flat(name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(os.path.join(_DATA, name), encoding="utf-8") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition(" =")
            if sep:
                out[key] = value[1:] if value.startswith(" ") else value
    return out


@functools.cache
def old_defaults() -> dict[str, str]:
    """Return the old verl `diffusion_trainer` tree (verl 460ccf3c2) as `dotted.key -> default text`."""
    return _read_flat("old_diffusion_trainer.flat.txt")


@functools.cache
def head_defaults() -> dict[str, str]:
    """Return verl-omni's `diffusion_trainer` tree (a1139baf) as `dotted.key -> default text`."""
    return _read_flat("verl_omni_diffusion_trainer.flat.txt")


@functools.cache
def _head_extras() -> tuple[frozenset[str], tuple[str, ...]]:
    exact: set[str] = set()
    prefixes: list[str] = []
    with open(os.path.join(_DATA, "verl_omni_dataclass_only.txt"), encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.endswith(".*"):
                prefixes.append(line[:-1])
            else:
                exact.add(line)
    for key, value in head_defaults().items():
        if value == "{}":
            prefixes.append(key + ".")
    return frozenset(exact), tuple(prefixes)


@functools.cache
def _interior(tree: str) -> frozenset[str]:
    keys = head_defaults() if tree == "head" else old_defaults()
    out: set[str] = set()
    for key in keys:
        parts = key.split(".")
        for i in range(1, len(parts)):
            out.add(".".join(parts[:i]))
    return frozenset(out)


def is_head_yaml_key(path: str) -> bool:
    """Return whether `path` is a leaf or a mapping of verl-omni's generated YAML (no `+` needed)."""
    return path in head_defaults() or path in _interior("head")


def is_head_key(path: str) -> bool:
    """Return whether verl-omni accepts `path` (YAML key, mapping, dataclass-only field, free-form child)."""
    if is_head_yaml_key(path):
        return True
    exact, prefixes = _head_extras()
    return path in exact or any(path.startswith(p) or path + "." == p for p in prefixes)


def is_old_key(path: str) -> bool:
    """Return whether `path` is a leaf or a mapping of the old verl diffusion_trainer tree."""
    return path in old_defaults() or path in _interior("old")


def parse_text(text: str | None) -> Any:
    """Parse a flat-list default or a Hydra override value into a Python value (best effort)."""
    if text is None:
        return None
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if t in ("null", "~", ""):
        return None
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    if t[0] in "[{":
        try:
            return json.loads(t)
        except ValueError:
            return t
    return t


def normalize(value: Any) -> Any:
    """Return `value` as plain Python data (ruamel containers and scalar subclasses unwrapped)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and any(c.__name__ == "ScalarBoolean" for c in type(value).__mro__):
        return bool(value)  # a boolean that keeps its spelling (`True`) or anchor
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {str(k): normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    return value


def to_text(value: Any) -> str:
    """Render a Python value the way the flat lists and Hydra overrides spell it (`null`, `true`, `[1, 2]`)."""
    value = normalize(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def same_value(a: Any, b: Any) -> bool:
    """Return whether two values (Python data or override/default text) mean the same thing."""
    pa = parse_text(a) if isinstance(a, str) else normalize(a)
    pb = parse_text(b) if isinstance(b, str) else normalize(b)
    return (pa == pb and type(pa) is type(pb)) or (_num(pa) and _num(pb) and pa == pb)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
