"""`Registry[T]`: one name -> object table with a decorator, aliases, and errors that name the config key.

Every registry of the project (rollout backends here; losses, model adapters, log-prob pipelines, reward managers and
agent loops in verl-omni) is an instance of this class, so they share one lookup and one error text::

    LOSSES: Registry[PolicyLossFn] = Registry("loss", key="actor.diffusion_loss.loss_mode")

    @LOSSES.register("flow_grpo")
    def flow_grpo_loss(inputs, config): ...

    LOSSES.get("flow_grpo")   # the function
    LOSSES.get("flow_grop")   # UnknownNameError: actor.diffusion_loss.loss_mode: unknown loss 'flow_grop';
                              #   did you mean 'flow_grpo'? registered: flow_grpo, ...
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["DuplicateNameError", "Registry", "UnknownNameError"]

T = TypeVar("T")
ObjT = TypeVar("ObjT")


class UnknownNameError(KeyError):
    """A name that is not registered; `str()` is the message (no quotes, unlike a bare `KeyError`)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(ValueError):
    """A name already registered to another object."""


def _label(obj: object) -> str:
    return getattr(obj, "__qualname__", None) or repr(obj)


class Registry(Generic[T]):
    """A table of named objects: `register(name, *aliases)` adds, `get(name)` looks up, `names()` lists.

    Args:
        kind (`str`): what one entry is, in messages ("loss", "rollout backend").
        key (`str`): the dotted config key whose value is looked up here, first in every message
            (`"actor.diffusion_loss.loss_mode"`).
        hint (`str`, *optional*): appended to the unknown-name message (how to register one).
        notes (`Mapping[str, str]`, *optional*): why a name that is deliberately absent is absent; shown in brackets
            after the name when it is looked up.
        entries (`Mapping[str, T]`, *optional*): entries registered at construction.

    The registry is read like a mapping (`name in reg`, `reg[name]`, `iter(reg)`, `len(reg)`, `reg.items()`) but
    is changed only through `register` / `add`.
    """

    def __init__(
        self,
        kind: str,
        *,
        key: str,
        hint: str = "",
        notes: Mapping[str, str] | None = None,
        entries: Mapping[str, T] | None = None,
    ) -> None:
        self.kind = kind
        self.key = key
        self.hint = hint
        self.notes = dict(notes or {})
        self._entries: dict[str, T] = {}
        self._imported: set[str] = set()
        for name, obj in (entries or {}).items():
            self.add(name, obj)

    def add(self, name: str, obj: T, *aliases: str, replace: bool = False) -> T:
        """Register `obj` under `name` and each alias; registering the same object again is a no-op.

        Raises:
            ValueError: a name is empty or not a str.
            DuplicateNameError: a name is taken by another object and `replace` is False (nothing is registered).
        """
        names = (name, *aliases)
        for each in names:
            if not isinstance(each, str) or not each:
                raise ValueError(f"{self.key}: a {self.kind} name must be a non-empty str, got {each!r}")
            other = self._entries.get(each)
            if other is not None and other is not obj and other != obj and not replace:
                raise DuplicateNameError(
                    f"{self.key}: {each!r} is already registered to {_label(other)}; "
                    "register under another name (or pass replace=True)"
                )
        for each in names:
            self._entries[each] = obj
        return obj

    def register(self, name: str, *aliases: str) -> Callable[[ObjT], ObjT]:
        """Decorator: register the decorated object under `name` and each alias (see `add`)."""

        def deco(obj: ObjT) -> ObjT:
            self.add(name, obj, *aliases)  # type: ignore[arg-type]
            return obj

        return deco

    def get(self, name: str, *, import_module: str | None = None) -> T:
        """Return the object registered as `name`.

        Args:
            name (`str`): the config value.
            import_module (`str`, *optional*): a module that registers more entries; imported (once per registry)
                when `name` is not registered yet, then the lookup is retried.

        Raises:
            UnknownNameError: `name` is not registered (the message names `key`, suggests a close name and lists
                every registered one).
            ImportError: `import_module` cannot be imported.
        """
        if name not in self._entries and import_module and import_module not in self._imported:
            importlib.import_module(import_module)
            self._imported.add(import_module)
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            note = f" (after importing {import_module!r})" if import_module else ""
            raise self.unknown(name, note=note) from None

    def names(self) -> list[str]:
        """Every registered name and alias, sorted."""
        return sorted(self._entries)

    def unknown_text(self, name: object, *, known: Iterable[str] | None = None, note: str = "") -> str:
        """The unknown-name message without the key: `unknown <kind> 'x' (why); did you mean 'y'? registered: ...`.

        Args:
            name (`object`): the value that was looked up.
            known (`Iterable[str]`, *optional*): the names to list and suggest from; defaults to `names()`.
            note (`str`, *optional*): added after the name (e.g. which module was imported first).
        """
        known = sorted(self.names() if known is None else known)
        why = f" ({self.notes[name]})" if isinstance(name, str) and name in self.notes else ""
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.7) if isinstance(name, str) else []
        suggest = f"did you mean {close[0]!r}? " if close else ""
        return (
            f"unknown {self.kind} {name!r}{note}{why}; {suggest}registered: {', '.join(known) or '(none)'}{self.hint}"
        )

    def unknown(self, name: object, *, known: Iterable[str] | None = None, note: str = "") -> UnknownNameError:
        """The `UnknownNameError` for `name`: `<key>: ` + `unknown_text(...)` (returned, for the caller to raise)."""
        return UnknownNameError(f"{self.key}: {self.unknown_text(name, known=known, note=note)}")

    def copy(self) -> Registry[T]:
        """A registry with the same settings and entries (tests register into a copy and drop it)."""
        new: Registry[T] = Registry(self.kind, key=self.key, hint=self.hint, notes=self.notes)
        new._entries = dict(self._entries)
        new._imported = set(self._imported)
        return new

    def items(self) -> list[tuple[str, T]]:
        """`(name, object)` pairs in registration order."""
        return list(self._entries.items())

    def keys(self) -> list[str]:
        """Registered names in registration order (so `dict(registry)` works)."""
        return list(self._entries)

    def values(self) -> list[T]:
        """Registered objects in registration order (an object with aliases appears once per name)."""
        return list(self._entries.values())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, key={self.key!r}, names={self.names()})"
