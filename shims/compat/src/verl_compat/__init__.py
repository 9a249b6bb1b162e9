"""verl-compat: keeps pre-#6200 verl diffusion imports and launch commands working.

The `verl_compat.pth` file of the wheel runs `verl_compat._startup` at interpreter start, which installs one
meta-path finder (`verl_compat._finder.LegacyFinder`). Nothing heavy is imported until an old name is used.
Each use of an old name warns once per call site with `VerlDeprecationWarning`; `VERL_COMPAT_SILENT=1`
silences them, `-W error::verl_compat.VerlDeprecationWarning` turns them into errors.
"""

from __future__ import annotations

from verl_compat._warning import VerlDeprecationWarning

__all__ = ["VerlDeprecationWarning", "__version__", "install", "uninstall"]


def install() -> bool:
    """Install the legacy import finder (idempotent); return whether it was newly installed."""
    from verl_compat._finder import install as _install

    return _install()


def uninstall() -> None:
    """Remove the legacy import finder (already imported old modules stay in `sys.modules`)."""
    from verl_compat._finder import uninstall as _uninstall

    _uninstall()


def __getattr__(name: str) -> str:
    if name == "__version__":  # computed on demand: importlib.metadata is too slow for interpreter start-up
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("verl-compat")
        except PackageNotFoundError:  # running from a source tree that is not installed
            return "0.0.0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
