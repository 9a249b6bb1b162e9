"""`EngineThread`: one daemon thread that runs a server's blocking engine work in order.

A daemon thread (unlike `ThreadPoolExecutor` workers, which the interpreter joins at exit) cannot keep
the process alive when an engine call hangs: the call times out, the server shuts down, the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["EngineThread"]

T = TypeVar("T")
_STOP = object()


class EngineThread:
    """Run callables one at a time on a daemon thread; `submit` returns an awaitable future."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the thread and await its result (cancelling the await does not stop `fn`)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._queue.put((fn, args, loop, future))
        return await future

    def stop(self) -> None:
        """Let the thread exit after the call it is running (if any)."""
        self._queue.put(_STOP)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, args, loop, future = item
            if future.cancelled():
                continue
            try:
                result, error = fn(*args), None
            except BaseException as e:  # handed to the awaiting coroutine
                result, error = None, e
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
