"""Rollout backend registry: `"hf"`, `"vllm"`, and backends other packages register.

Other packages register a backend either by calling `register_backend(name, "pkg.module:Class")` or,
without any import-time side effect, through an entry point in the group `verl_core.rollout_backends`::

    [project.entry-points."verl_core.rollout_backends"]
    diffusers = "verl_omni.rollout.diffusers_server:DiffusersHttpServer"
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl_core.rollout.server import RolloutHttpServer

__all__ = ["ENTRY_POINT_GROUP", "available_backends", "get_backend", "register_backend"]

ENTRY_POINT_GROUP = "verl_core.rollout_backends"
_BUILTIN: dict[str, str] = {
    "hf": "verl_core.rollout.hf:HFHttpServer",
    "vllm": "verl_core.rollout.vllm.llm:vLLMHttpServer",
}
_REGISTERED: dict[str, str | type] = {}


def register_backend(name: str, target: str | type, *, replace: bool = False) -> None:
    """Register a server class (or its `"module:Class"` path) under `name`.

    Raises:
        ValueError: `name` is taken by another target and `replace` is False.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"backend name must be a non-empty str, got {name!r}")
    current = _REGISTERED.get(name) or _BUILTIN.get(name)
    if current is not None and current != target and not replace:
        raise ValueError(f"rollout backend {name!r} is already registered as {current!r}; pass replace=True")
    _REGISTERED[name] = target


def available_backends() -> list[str]:
    """Names of every known backend (built-in, registered, and from entry points)."""
    names = set(_BUILTIN) | set(_REGISTERED) | {ep.name for ep in _entry_points()}
    return sorted(names)


def get_backend(name: str) -> type[RolloutHttpServer]:
    """The server class registered as `name` (importing it now).

    Raises:
        KeyError: no backend has that name (the message lists the known ones).
        TypeError: the target is not a `RolloutHttpServer` subclass.
    """
    from verl_core.rollout.server import RolloutHttpServer

    target = _REGISTERED.get(name) or _BUILTIN.get(name)
    if target is None:
        target = next((ep.value for ep in _entry_points() if ep.name == name), None)
    if target is None:
        raise KeyError(
            f"unknown rollout backend {name!r} (rollout.name); known: {', '.join(available_backends())}. "
            f"Packages add backends with register_backend() or the entry point group {ENTRY_POINT_GROUP!r}"
        )
    cls = _resolve(target, name) if isinstance(target, str) else target
    if not (isinstance(cls, type) and issubclass(cls, RolloutHttpServer)):
        raise TypeError(f"rollout backend {name!r} resolves to {cls!r}, which is not a RolloutHttpServer subclass")
    return cls


def _resolve(path: str, name: str) -> object:
    module_name, _, attr = path.partition(":")
    if not attr:
        module_name, _, attr = path.rpartition(".")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise KeyError(f"rollout backend {name!r}: cannot import {path!r}: {e}") from e
    return obj


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))
