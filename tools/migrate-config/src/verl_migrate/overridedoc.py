"""`OverrideDoc`: the `Doc` interface over a list of Hydra command-line overrides (`key=value`, `+k=v`, `~k`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from verl_migrate.doc import Doc, GroupEntry
from verl_migrate.keys import is_head_yaml_key, to_text
from verl_migrate.report import FileReport
from verl_migrate.shellvars import reference

_OVERRIDE = re.compile(r"^(~|\+\+|\+)?([A-Za-z_][\w./@-]*)(?:=(.*))?$", re.S)


@dataclasses.dataclass
class Override:
    """One command-line word; `key` is None for words that are not overrides (`--cfg`, `$@`)."""

    raw: str
    prefix: str = ""
    key: str | None = None
    value: str | None = None
    index: int | None = None
    line: int | None = None
    deleted: bool = False
    #: the script variable the value is (`$NAME` / `${NAME}`), if any
    var: str | None = None

    def __post_init__(self) -> None:
        """Remember the original spelling so edits can be detected."""
        self.orig = (self.prefix, self.key, self.value)

    @property
    def is_group(self) -> bool:
        """Return whether this is a config-group override (`group@pkg=option`, `model_engine=dp`)."""
        if self.key is None:
            return False
        return "/" in self.key or "@" in self.key or "." not in self.key

    @property
    def is_config(self) -> bool:
        """Return whether this override sets or deletes a config value (not a group, not `hydra.*`)."""
        return self.key is not None and not self.is_group and not self.key.startswith("hydra.")

    @property
    def live(self) -> bool:
        """Return whether this override sets a value that is present after it is applied."""
        return self.is_config and not self.deleted and self.prefix != "~"

    @property
    def changed(self) -> bool:
        """Return whether a rule edited this override."""
        return self.deleted or (self.prefix, self.key, self.value) != self.orig

    def token(self) -> str:
        """Return the override as one argv word."""
        if self.key is None:
            return self.raw
        return self.prefix + self.key + ("" if self.value is None else "=" + self.value)


def parse_override(word: str, index: int | None = None) -> Override:
    """Parse one argv word (already shell-unquoted) into an `Override`."""
    m = _OVERRIDE.match(word)
    if m is None or (m.group(3) is None and m.group(1) != "~"):
        return Override(raw=word, index=index)
    return Override(raw=word, prefix=m.group(1) or "", key=m.group(2), value=m.group(3), index=index)


def plus_prefix(key: str, prefix: str) -> str:
    """Return the Hydra prefix `key` needs in verl-omni: none for YAML keys, `+` for the rest (`++`/`~` kept)."""
    if prefix in ("++", "~"):
        return prefix
    return "" if is_head_yaml_key(key) else "+"


class OverrideDoc(Doc):
    """A list of Hydra overrides layered on `diffusion_trainer` (a launch script or the compat shim's argv)."""

    kind = "overrides"
    root_based = True

    def __init__(
        self, words: list[str], report: FileReport, *, legacy: bool = True, variables: dict[str, Any] | None = None
    ):
        """Parse `words`; `legacy` says the command came from the old entry point.

        `variables` are the script's simple assignments (`verl_migrate.shellvars.Assignment` by name): a value that
        is exactly `$NAME` is read as the variable's literal, and a rule that rewrites it edits the assignment when
        the variable is used only there (`var_edits`).
        """
        super().__init__(report)
        self.entries = [parse_override(w, i) for i, w in enumerate(words)]
        self.legacy = legacy
        self.variables = variables or {}
        #: assignments to rewrite: name -> new literal
        self.var_edits: dict[str, str] = {}
        for e in self.entries:
            if e.value is not None:
                name = reference(e.value)
                if name in self.variables and self.variables[name].value is not None:
                    e.var = name

    def _value(self, e: Override) -> str | None:
        """Return what the override sets: its text, or the literal of the variable it names."""
        return self.variables[e.var].value if e.var else e.value

    def via(self, path: str) -> str | None:
        """Return "`$NAME` (line N)" when the value of `path` comes from a script variable."""
        found = [e for e in self._under(path) if e.key == path]
        if not found or not found[-1].var:
            return None
        a = self.variables[found[-1].var]
        return f"`${a.name}` (set on line {a.line})"

    def _under(self, path: str, *, live: bool = True) -> list[Override]:
        dotted = path + "."
        out = []
        for e in self.entries:
            key = e.key
            if key is None or e.deleted or (path and key != path and not key.startswith(dotted)):
                continue
            if e.is_config and (not live or e.prefix != "~"):
                out.append(e)
        return out

    def has(self, path: str) -> bool:
        """Return whether an override sets `path` or a key below it."""
        return bool(self._under(path))

    def is_map(self, path: str) -> bool:
        """Return whether an override sets a key below `path`."""
        return any(e.key != path for e in self._under(path))

    def get(self, path: str) -> Any:
        """Return the value text of the last override of `path` (None when absent)."""
        found = [e for e in self._under(path) if e.key == path]
        return self._value(found[-1]) if found else None

    def children(self, path: str) -> list[str]:
        """Return the distinct next key segments below `path`."""
        out: list[str] = []
        cut = len(path) + 1 if path else 0
        for e in self._under(path):
            if e.key == path:
                continue
            name = str(e.key)[cut:].split(".")[0]
            if name not in out:
                out.append(name)
        return out

    def leaves(self, path: str = "") -> list[str]:
        """Return the keys set at or below `path`, in command-line order."""
        out: list[str] = []
        for e in self._under(path):
            if e.key not in out:
                out.append(str(e.key))
        return out

    def line(self, path: str) -> int | None:
        """Return the script line of the override of `path`, if it came from a script."""
        found = [e for e in self._under(path, live=False) if e.key == path]
        return found[0].line if found else None

    def searchpath(self) -> list[tuple[str, int | None]]:
        """Return the entries of `hydra.searchpath=[...]` overrides, with their lines."""
        out = []
        for e in self.entries:
            if e.key == "hydra.searchpath" and e.value is not None and not e.deleted:
                items = e.value.strip().removeprefix("[").removesuffix("]")
                out.extend((i.strip().strip("'\""), e.line) for i in items.split(",") if i.strip())
        return out

    def deletions(self) -> list[str]:
        """Return the keys of the live `~key` overrides."""
        return [str(e.key) for e in self.entries if e.is_config and e.prefix == "~" and not e.deleted]

    def delete(self, path: str) -> None:
        """Drop every override of `path` or below it."""
        for e in self._under(path, live=False):
            e.deleted = True

    def move(self, src: str, dst: str) -> None:
        """Rename the overrides of `src` (and below) to `dst`, fixing the `+` prefix for verl-omni."""
        for e in self._under(src, live=False):
            e.key = dst + str(e.key)[len(src) :]
            e.prefix = plus_prefix(e.key, e.prefix)

    def move_deletions(self, src: str, dst: str) -> list[str]:
        """Rename `~src` (and `~src.x`) deletions to `~dst...`; return the old keys."""
        done = []
        for e in self.entries:
            if e.is_config and e.prefix == "~" and not e.deleted and (e.key == src or str(e.key).startswith(src + ".")):
                done.append(str(e.key))
                e.key = dst + str(e.key)[len(src) :]
        return done

    def set(self, path: str, value: Any, first: bool = False) -> None:
        """Set `path` (edit its last override or append a new one)."""
        text = value if isinstance(value, str) else to_text(value).replace(" ", "")
        found = [e for e in self._under(path) if e.key == path]
        if found:
            e = found[-1]
            if e.var:
                a = self.variables[e.var]
                if a.span is not None and a.uses == 1:
                    self.var_edits[a.name] = text  # the variable is used only here: rewrite its assignment
                    a.value = text
                    return
                e.var = None
            e.value = text
            return
        self.entries.append(Override(raw="", prefix=plus_prefix(path, ""), key=path, value=text))
        self.entries[-1].orig = ("", None, None)

    def strings(self) -> Iterator[tuple[str, str, Any]]:
        """Yield `(key, value, override)` for every live override with a value."""
        for e in self._under(""):
            if e.value is not None:
                yield str(e.key), e.value, e

    def replace_string(self, handle: Any, text: str) -> None:
        """Replace an override's value."""
        handle.value = text

    def group_entries(self) -> list[GroupEntry]:
        """Return the config-group overrides (`model_engine=dp`, `rollout@actor_rollout_ref.rollout=...`)."""
        out = []
        for e in self.entries:
            if e.is_group and not e.deleted:
                group, _, package = str(e.key).partition("@")
                out.append(GroupEntry(e, group, package or None, e.value, False))
        return out

    def replace_group(self, entry: GroupEntry, group: str, package: str | None, option: str | None) -> None:
        """Rewrite a group override."""
        e = entry.handle
        e.key = f"{group}@{package}" if package else group
        e.value = option

    def delete_group(self, entry: GroupEntry) -> None:
        """Drop a group override."""
        entry.handle.deleted = True

    def tokens(self) -> list[str]:
        """Return the migrated argv words."""
        return [e.token() for e in self.entries if not e.deleted]
