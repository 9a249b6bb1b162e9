"""Serving old names: resolve a mapping row, warn once per call site, build the module `__getattr__`.

The mapping is `verl_migrate.imports_map` (loaded on the first old import, never at start-up).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from verl_compat._warning import VerlDeprecationWarning

INSTALL_HINT = (
    "upstream verl is not installed: verl-compat only provides the old diffusion paths of verl "
    "(see `verl-migrate-config --imports` for their verl-omni homes). Install verl itself with `pip install verl`."
)
_SEEN: set[tuple[str, int, str]] = set()


class NotProvidedError(ImportError):
    """An old name that verl-compat deliberately does not serve; the message says why and what replaces it."""


def table() -> Any:
    """The mapping module (`verl_migrate.imports_map`)."""
    from verl_migrate import imports_map

    return imports_map


def resolve(target: str) -> Any:
    """Import `module:attr` (or a module) and return the object."""
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def _import_line(target: str | None) -> str:
    if target is None:
        return ""
    module, _, attr = target.partition(":")
    return f"from {module} import {attr}" if attr else f"import {module}"


def message(row: Any) -> str:
    """The warning text of one name row: old import line -> new import line (+ the note)."""
    old = f"from {row.old_module} import {row.old_name}"
    if row.new:
        text = f"`{old}` is deprecated (verl moved its diffusion stack to verl-omni): use `{_import_line(row.new)}`"
    else:
        text = f"`{old}` is deprecated (verl moved its diffusion stack to verl-omni); verl-compat keeps it working"
    return f"{text}. {row.note}" if row.note else f"{text}."


def _is_star_import(frame: Any) -> bool:
    import dis

    code, i = frame.f_code.co_code, frame.f_lasti
    if i < 0 or i + 1 >= len(code):
        return False
    op = code[i]
    star = dis.opmap.get("IMPORT_STAR")
    intrinsic = dis.opmap.get("CALL_INTRINSIC_1")
    return (star is not None and op == star) or (intrinsic is not None and op == intrinsic and code[i + 1] == 2)


def warn(row: Any, depth: int) -> None:
    """Warn about `row` once per call site; `depth` = frames between this function and the user's code."""
    if os.environ.get("VERL_COMPAT_SILENT", "") not in ("", "0"):
        return
    try:
        frame = sys._getframe(depth)
    except ValueError:  # no such frame: called from the top
        frame = None
    # `from pkg import X` first probes `hasattr(pkg, X)` inside importlib; like `warnings`, skip those frames so
    # the probe and the import count as one site (the user's line)
    while frame is not None and "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is not None and _is_star_import(frame):
        key_name, text = (
            "*",
            (
                f"`from {row.old_module} import *` is deprecated (verl moved its diffusion stack to verl-omni): "
                f"import the names from their verl-omni homes (`verl-migrate-config --imports` rewrites this line)."
            ),
        )
    else:
        key_name, text = row.old, message(row)
    site = (frame.f_code.co_filename, frame.f_lineno, key_name) if frame is not None else ("", 0, key_name)
    if site in _SEEN:
        return
    _SEEN.add(site)
    warnings.warn(text, VerlDeprecationWarning, stacklevel=depth + 1)


def serve_name(module_name: str, name: str, depth: int) -> Any:
    """The object served for `module_name.name`, with its warning; AttributeError when the name has no row."""
    row = table().name_rows().get(module_name, {}).get(name)
    if row is None:
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
    if row.missing:
        instead = f" Its verl-omni counterpart: `{_import_line(row.new)}`." if row.new else ""
        raise NotProvidedError(
            f"`from {module_name} import {name}` is not provided by verl-compat, because {row.missing}.{instead}",
            name=module_name,
        )
    warn(row, depth + 1)
    try:
        return resolve(row.target)
    except ModuleNotFoundError as e:  # built on first access from vllm / vllm-omni classes
        top = (e.name or "").partition(".")[0]
        if top not in ("vllm", "vllm_omni"):
            raise
        raise ModuleNotFoundError(
            f"`from {module_name} import {name}` needs {top.replace('_', '-')}, which is not installed: "
            f'pip install "verl-omni[vllm-omni]" ({e})',
            name=e.name,
        ) from e


def provided_names(module_name: str) -> list[str]:
    """The old names of a module that the shim serves (its `__all__` for `from … import *`)."""
    rows = table().name_rows().get(module_name, {})
    return sorted(n for n, r in rows.items() if not r.missing and not n.startswith("_"))


def make_getattr(module_name: str, fallback: Callable[[str], Any] | None, missing_hint: str = "") -> Callable:
    """A module `__getattr__` serving the old names of `module_name`, then `fallback`, else AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in table().name_rows().get(module_name, {}):
            return serve_name(module_name, name, 2)
        if fallback is not None:
            return fallback(name)
        hint = f" ({missing_hint})" if missing_hint and not name.startswith("__") else ""
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}{hint}")

    __getattr__.__verl_compat__ = True  # type: ignore[attr-defined]
    return __getattr__


def patch_module(module: ModuleType) -> None:
    """Add the old names of a trimmed upstream verl module through a module `__getattr__` (idempotent)."""
    prev = module.__dict__.get("__getattr__")
    if getattr(prev, "__verl_compat__", False):
        return
    module.__getattr__ = make_getattr(module.__name__, prev)  # type: ignore[method-assign]
    if "__dir__" not in module.__dict__:  # dir() lists the old names too
        names = provided_names(module.__name__)
        module.__dir__ = lambda: sorted(set(module.__dict__) | set(names))  # type: ignore[method-assign]
