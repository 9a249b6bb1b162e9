"""The migration rules.

Each module of this package declares the rules of one topic and registers them.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from verl_migrate.rule_base import Rule, registry


@functools.cache
def all_rules() -> tuple[Rule, ...]:
    """Import every rule module once and return the registered rules in execution order."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_") and info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")
    rules = list(registry().values())
    order = {rid: i for i, rid in enumerate(registry())}
    return tuple(sorted(rules, key=lambda r: (r.phase, order[r.id])))


__all__ = ["Rule", "all_rules"]
