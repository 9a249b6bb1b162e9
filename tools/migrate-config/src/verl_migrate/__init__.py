"""verl-migrate-config: rewrites pre-#6200 verl diffusion configs to the verl-omni schema."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("verl-migrate-config")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
