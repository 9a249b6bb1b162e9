"""verl-omni: diffusion RL (FlowGRPO) for verl, split out of verl by PR #6200."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("verl-omni")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

from verl_omni import log_filters

log_filters.install()  # other libraries' messages that say nothing to a verl-omni user (see log_filters)

__all__ = ["__version__"]
