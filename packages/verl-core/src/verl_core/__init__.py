"""verl-core: the LLM rollout core of verl (config base, rollout servers, replicas, weight sync)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("verl-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
