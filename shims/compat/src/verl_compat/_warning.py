"""`VerlDeprecationWarning`, the one warning category of verl-compat (public as `verl_compat.VerlDeprecationWarning`).

It lives in this leaf module so the finder and the serving code can raise it without importing the package root,
which imports them (no import circle).
"""

from __future__ import annotations

__all__ = ["VerlDeprecationWarning"]


class VerlDeprecationWarning(DeprecationWarning):
    """An old `verl.*` diffusion name was used; the message names the verl-omni replacement.

    Shown by default (verl-compat adds a `default` filter at start-up, below any `-W` / `PYTHONWARNINGS` option
    naming this category).
    """


VerlDeprecationWarning.__module__ = "verl_compat"  # its public path: tracebacks and `-W error::verl_compat.…` use it
