"""The document interface the rules edit: a YAML tree or a list of Hydra overrides, addressed by dotted path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from verl_migrate.report import FileReport


class GroupEntry:
    """One Hydra defaults-list entry or group override: `[override ]group[@package]: option`."""

    __slots__ = ("group", "handle", "option", "override", "package")

    def __init__(self, handle: Any, group: str, package: str | None, option: str | None, override: bool):
        """Store the parsed parts; `handle` lets the document find the entry again."""
        self.handle = handle
        self.group = group
        self.package = package
        self.option = option
        self.override = override

    @property
    def name(self) -> str:
        """Return `group@package` (or `group`)."""
        return f"{self.group}@{self.package}" if self.package else self.group


class Doc:
    """Base of `YamlDoc` and `OverrideDoc`: dotted-path access plus the facts the rules ask about."""

    kind = "abstract"
    #: the document is layered on diffusion_trainer (full dump, `defaults: [diffusion_trainer]`, a launch script)
    root_based = False
    #: a full dump of the composed config (every key present, `_target_`s included)
    full_dump = False
    #: the document shows evidence of being written for the old verl schema
    legacy = False
    #: a root config that composes the config groups itself (its own defaults list), not layered on the target's
    is_root = False
    #: the Hydra package of a config-group file ("" for a root, a partial config or overrides)
    package = ""

    def __init__(self, report: FileReport):
        """Attach the report every rule writes to."""
        self.report = report
        #: semantic findings of input flags, reported at the end if the document turns out to be legacy
        self.pending: list[tuple[str, str, str, int | None]] = []

    def is_legacy(self) -> bool:
        """Return whether the document was written for old verl: old keys in the input, or a rule rewrote it."""
        return self.legacy or bool(self.report.changes)

    # -- reading ----------------------------------------------------------------------------------------------
    def has(self, path: str) -> bool:
        """Return whether `path` is present (leaf or mapping)."""
        raise NotImplementedError

    def is_map(self, path: str) -> bool:
        """Return whether `path` holds keys below it."""
        raise NotImplementedError

    def get(self, path: str) -> Any:
        """Return the value at `path` (Python data for YAML, the value string for overrides)."""
        raise NotImplementedError

    def children(self, path: str) -> list[str]:
        """Return the child names directly below `path` (`""` is the root)."""
        raise NotImplementedError

    def leaves(self, path: str = "") -> list[str]:
        """Return every leaf path at or below `path`, in document order."""
        raise NotImplementedError

    def items(self, path: str = "") -> list[tuple[str, Any]]:
        """Return `(leaf path, value)` pairs at or below `path`."""
        return [(p, self.get(p)) for p in self.leaves(path)]

    def line(self, path: str) -> int | None:
        """Return the 1-based line of `path` in the input, if known."""
        return None

    def searchpath(self) -> list[tuple[str, int | None]]:
        """Return the entries of `hydra.searchpath` the document sets, with their lines."""
        return []

    def owns(self, path: str) -> bool:
        """Return whether `path` lies in this document (a config-group file holds only its package)."""
        return True

    def via(self, path: str) -> str | None:
        """Return where the value of `path` really comes from (a launch script's variable), if elsewhere."""
        return None

    def deletions(self) -> list[str]:
        """Return the keys the document deletes (`~key` overrides; YAML has none)."""
        return []

    def expand(self, pattern: str) -> list[str]:
        """Return the present paths matching `pattern` (a `*` segment matches any one key)."""
        parts = pattern.split(".")
        found = [""]
        for part in parts:
            nxt = []
            for base in found:
                names = self.children(base) if part == "*" else [part]
                for name in names:
                    p = f"{base}.{name}" if base else name
                    if self.has(p):
                        nxt.append(p)
            found = nxt
        return found

    # -- writing ----------------------------------------------------------------------------------------------
    def delete(self, path: str) -> None:
        """Remove `path` (and mappings that become empty because of it)."""
        raise NotImplementedError

    def move(self, src: str, dst: str) -> None:
        """Move `src` (leaf or subtree) to the absent path `dst`, keeping its comment."""
        raise NotImplementedError

    def move_deletions(self, src: str, dst: str) -> list[str]:
        """Rename `~src` deletions to `~dst` (overrides only); return the renamed keys."""
        return []

    def set(self, path: str, value: Any, first: bool = False) -> None:
        """Set `path` to `value`, creating missing mappings (a new key goes first in its mapping if `first`)."""
        raise NotImplementedError

    def strings(self) -> Iterator[tuple[str, str, Any]]:
        """Yield `(path, text, handle)` for every string value (for interpolation rewriting)."""
        raise NotImplementedError

    def replace_string(self, handle: Any, text: str) -> None:
        """Replace the string found by `strings()` at `handle`, keeping its quoting."""
        raise NotImplementedError

    def group_entries(self) -> list[GroupEntry]:
        """Return the defaults-list entries (YAML) or group overrides (overrides)."""
        return []

    def replace_group(self, entry: GroupEntry, group: str, package: str | None, option: str | None) -> None:
        """Rewrite one group entry."""
        raise NotImplementedError

    def delete_group(self, entry: GroupEntry) -> None:
        """Remove one group entry."""
        raise NotImplementedError
