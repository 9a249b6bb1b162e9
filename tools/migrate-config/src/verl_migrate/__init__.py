"""verl-migrate-config: rewrites pre-#6200 verl diffusion configs and launch scripts to the verl-omni schema.

Imports are lazy so that `verl-migrate-config --help` starts fast; `translate_overrides` is what the compat shim's
`python -m verl.trainer.main_flowgrpo` calls.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConflictError",
    "MigrationError",
    "OverridesResult",
    "__version__",
    "migrate_script_text",
    "migrate_yaml_text",
    "translate_overrides",
]

_LAZY = {
    "translate_overrides": "verl_migrate.migrate",
    "migrate_yaml_text": "verl_migrate.migrate",
    "migrate_script_text": "verl_migrate.migrate",
    "OverridesResult": "verl_migrate.migrate",
    "MigrationError": "verl_migrate.errors",
    "ConflictError": "verl_migrate.errors",
}


def __getattr__(name: str) -> Any:
    """Import public names on first use (PEP 562)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("verl-migrate-config")
        except PackageNotFoundError:  # running from a source tree that is not installed
            return "0.0.0+unknown"
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'verl_migrate' has no attribute {name!r}")
