"""verl-compat: keeps pre-#6200 verl diffusion imports and launch commands working."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("verl-compat")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
