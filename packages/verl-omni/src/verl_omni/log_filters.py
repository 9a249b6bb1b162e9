"""Logging filters for other libraries' messages that say nothing to a verl-omni user; installed on import.

Each filter sits on the one logger that emits its message and drops only records matching its text, so every
other record of those libraries (and every warning of Python's `warnings` module) still shows:

- transformers (`transformers.utils.import_utils`): "`CLIPImageProcessor` requires torchvision (not installed);
  falling back to `CLIPImageProcessorPil`", once per processor class when diffusers imports its pipelines. The PIL
  processor is the one the pipelines use; torchvision is not a dependency.
- Ray (`ray._private.authentication.authentication_token_setup`): "Token authentication is enabled for this Ray
  cluster", at every local `ray.init`. Ray's warning that token authentication is *disabled* is kept.

`verl_omni/__init__.py` calls `install()`, so the filters hold in the driver and in every Ray worker (a worker
imports `verl_omni` before the class it runs). Adding a filter imports neither library.
"""

from __future__ import annotations

import logging
import re

__all__ = ["NOISE", "MessageFilter", "install"]

NOISE: dict[str, re.Pattern[str]] = {
    "transformers.utils.import_utils": re.compile(r"requires torchvision \(not installed\); falling back to"),
    "ray._private.authentication.authentication_token_setup": re.compile(
        r"^Token authentication is enabled for this Ray cluster"
    ),
}
"""Logger name -> the message it emits that is dropped."""


class MessageFilter(logging.Filter):
    """Drop the records whose message matches `pattern`."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for a record whose message matches `pattern`."""
        return not self.pattern.search(record.getMessage())


def install() -> None:
    """Put one `MessageFilter` on each logger of `NOISE` (idempotent)."""
    for name, pattern in NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, MessageFilter) and f.pattern is pattern for f in logger.filters):
            logger.addFilter(MessageFilter(pattern))
