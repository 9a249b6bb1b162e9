"""`best_effort`: run a cleanup step whose failure must not stop the caller, and log why it failed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["best_effort"]


@contextlib.contextmanager
def best_effort(
    logger: logging.Logger, what: str, *types: type[BaseException], level: int = logging.DEBUG
) -> Iterator[None]:
    """Like `contextlib.suppress(*types)`, but the suppressed error is logged with its traceback.

    For steps that may fail for an expected reason (a peer already gone, an actor already dead) and must
    not stop a shutdown: the failure is not worth a warning, yet `--log-level debug` still shows its cause.

    Args:
        logger (`logging.Logger`): the caller's module logger.
        what (`str`): the step, as it reads in "best effort: {what} failed".
        *types (`type[BaseException]`, *optional*, defaults to `(Exception,)`): the errors to suppress;
            anything else propagates.
        level (`int`, *optional*, defaults to `logging.DEBUG`): the level of the log record.
    """
    suppressed = types or (Exception,)
    try:
        yield
    except suppressed as e:
        logger.log(level, "best effort: %s failed: %s: %s", what, type(e).__name__, e, exc_info=True)
