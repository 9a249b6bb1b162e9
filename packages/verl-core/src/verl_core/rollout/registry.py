"""Rollout backend registry: `"hf"`, `"vllm"`, and backends other packages register.

Other packages register a backend either by calling `register_backend(name, "pkg.module:Class")` or,
without any import-time side effect, through an entry point in the group `verl_core.rollout_backends`::

    [project.entry-points."verl_core.rollout_backends"]
    diffusers = "verl_omni.rollout.diffusers.server:DiffusersHttpServer"
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING

from verl_core.registry import Registry

if TYPE_CHECKING:
    from verl_core.rollout.server import RolloutHttpServer

__all__ = ["ENTRY_POINT_GROUP", "available_backends", "get_backend", "register_backend"]

ENTRY_POINT_GROUP = "verl_core.rollout_backends"
_BACKENDS: Registry[str | type] = Registry(
    "rollout backend",
    key="rollout.name",
    hint=f". Packages add backends with register_backend() or the entry point group {ENTRY_POINT_GROUP!r}",
    entries={
        "hf": "verl_core.rollout.hf:HFHttpServer",
        "vllm": "verl_core.rollout.vllm.llm:vLLMHttpServer",
    },
)
"""Backend name -> server class or its `"module:Class"` path (entry points are read on lookup)."""


def register_backend(name: str, target: str | type, *, replace: bool = False) -> None:
    """Register a server class (or its `"module:Class"` path) under `name`.

    Raises:
        ValueError: `name` is empty, or taken by another target and `replace` is False.
    """
    _BACKENDS.add(name, target, replace=replace)


def available_backends() -> list[str]:
    """Names of every known backend (built-in, registered, and from entry points)."""
    return sorted(set(_BACKENDS) | {ep.name for ep in _entry_points()})


def get_backend(name: str) -> type[RolloutHttpServer]:
    """The server class registered as `name` (importing it now).

    Raises:
        KeyError: no backend has that name (the message names `rollout.name` and lists the known ones).
        TypeError: the target is not a `RolloutHttpServer` subclass.
    """
    from verl_core.rollout.server import RolloutHttpServer

    if name in _BACKENDS:
        target = _BACKENDS.get(name)
    else:
        target = next((ep.value for ep in _entry_points() if ep.name == name), None)
        if target is None:
            raise _BACKENDS.unknown(name, known=available_backends())
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
