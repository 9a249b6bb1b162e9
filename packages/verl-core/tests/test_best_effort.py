"""`verl_core.best_effort`: suppresses the listed errors and logs their cause."""

from __future__ import annotations

import asyncio
import logging

import pytest

from verl_core.best_effort import best_effort

logger = logging.getLogger("test_best_effort")


def test_best_effort_suppresses_and_logs_the_cause(caplog):
    with caplog.at_level(logging.DEBUG, logger=logger.name), best_effort(logger, "closing the pipe"):
        raise OSError("broken pipe")
    (record,) = caplog.records
    assert "best effort: closing the pipe failed: OSError: broken pipe" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is OSError


def test_best_effort_lets_other_errors_through(caplog):
    with pytest.raises(KeyboardInterrupt), best_effort(logger, "x"):
        raise KeyboardInterrupt
    with pytest.raises(ValueError, match="bad"), best_effort(logger, "x", OSError):
        raise ValueError("bad")
    assert not caplog.records


def test_best_effort_with_listed_types_suppresses_them(caplog):
    cancelled = best_effort(logger, "await the task", Exception, asyncio.CancelledError, level=logging.WARNING)
    with caplog.at_level(logging.WARNING, logger=logger.name), cancelled:
        raise asyncio.CancelledError
    assert "CancelledError" in caplog.text
