"""`LoRARequestCache`: which adapter id serves which weight version, and which ids to unload."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["LoRAEntry", "LoRARequestCache"]


@dataclasses.dataclass(frozen=True)
class LoRAEntry:
    """One loaded adapter: its engine id and name, the weight version it carries, and the engine request."""

    int_id: int
    name: str
    version: int
    request: Any


class LoRARequestCache:
    """Per-weight-version cache of engine LoRA requests.

    Each weight version gets a fresh adapter id (engines cache adapters by id, so a reused id would
    serve stale tensors). `add` returns the entries that fall out (oldest first) and must be unloaded.

    Args:
        max_loras (`int`, *optional*, defaults to `1`): adapters kept loaded at once (`rollout.lora.max_loras`).
    """

    def __init__(self, max_loras: int = 1) -> None:
        if max_loras < 1:
            raise ValueError(f"rollout.lora.max_loras: expected int >= 1, got {max_loras}")
        self.max_loras = max_loras
        self._entries: list[LoRAEntry] = []
        self._next_id = 1

    def new_id(self, version: int) -> tuple[int, str]:
        """A fresh `(int_id, name)` for an adapter of `version`."""
        int_id = self._next_id
        self._next_id += 1
        return int_id, f"verl-lora-v{version}-{int_id}"

    def add(self, entry: LoRAEntry) -> list[LoRAEntry]:
        """Make `entry` current; return the entries to unload (same version or over `max_loras`)."""
        evicted = [e for e in self._entries if e.version == entry.version]
        kept = [e for e in self._entries if e.version != entry.version]
        kept.append(entry)
        while len(kept) > self.max_loras:
            evicted.append(kept.pop(0))
        self._entries = kept
        return evicted

    def get(self, version: int) -> LoRAEntry | None:
        """The adapter that carries `version`, if loaded."""
        return next((e for e in self._entries if e.version == version), None)

    def current(self) -> LoRAEntry | None:
        """The most recently added adapter."""
        return self._entries[-1] if self._entries else None

    def clear(self) -> list[LoRAEntry]:
        """Forget every adapter (after the engine dropped them); return what was there."""
        entries, self._entries = self._entries, []
        return entries

    def __len__(self) -> int:
        return len(self._entries)
