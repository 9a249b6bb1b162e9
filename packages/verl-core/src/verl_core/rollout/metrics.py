"""`ServerMetrics`: counters and a latency window for `/metrics`."""

from __future__ import annotations

import collections
import threading
from typing import Any

__all__ = ["ServerMetrics"]


class ServerMetrics:
    """Thread-safe counters plus p50/p99 over the last `window` generate latencies."""

    def __init__(self, window: int = 2048) -> None:
        self._lock = threading.Lock()
        self._counters: collections.Counter[str] = collections.Counter()
        self._latencies: collections.deque[float] = collections.deque(maxlen=window)

    def count(self, name: str, n: int = 1) -> None:
        """Add `n` to counter `name`."""
        with self._lock:
            self._counters[name] += n

    def observe_latency(self, seconds: float) -> None:
        """Record one generate latency."""
        with self._lock:
            self._latencies.append(seconds)

    def snapshot(self) -> dict[str, Any]:
        """Counters and `generate_latency_s` percentiles."""
        with self._lock:
            counters = dict(self._counters)
            lat = sorted(self._latencies)
        out: dict[str, Any] = {"counters": counters}
        if lat:
            out["generate_latency_s"] = {
                "p50": lat[len(lat) // 2],
                "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                "n": len(lat),
            }
        return out
