"""`Rule`, the base of every rule kind, the rule phases, and the registry the rule modules add themselves to.

The rule kinds (`verl_migrate.kinds`: `.keys`, `.target`, `.hydra`, `.completion`) subclass `Rule`; the rule modules
(`verl_migrate.rules.<topic>`) declare rules of those kinds and `register` them. This module sits below both, so the
kinds never import the `rules` package. `verl_migrate.rules.base`, its former path, re-exports it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

from verl_migrate.doc import Doc
from verl_migrate.errors import ConflictError
from verl_migrate.keys import head_defaults, normalize, old_defaults, same_value, to_text
from verl_migrate.report import Change
from verl_migrate.target import target_class_or_none

_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_REGISTRY: dict[str, Rule] = {}

#: phases: rules run in phase order, then in registration order
PHASE_INPUT_FLAGS = 5
PHASE_DEFAULTS = 10
PHASE_LEGACY = 20
PHASE_MOVE = 30
PHASE_DROP = 40
PHASE_VALUES = 50
PHASE_EXPLICIT = 80
PHASE_PREFIX = 90


def register(rule: Rule) -> Rule:
    """Add `rule` to the registry (its id must be kebab-case and unique) and return it."""
    if not _ID.match(rule.id):
        raise ValueError(f"rule id {rule.id!r} is not kebab-case (lower-case words joined by '-')")
    if rule.id in _REGISTRY:
        raise ValueError(f"rule id {rule.id!r} is registered twice")
    _REGISTRY[rule.id] = rule
    return rule


def registry() -> dict[str, Rule]:
    """Return the registered rules by id (in registration order)."""
    return _REGISTRY


def text_of(doc: Doc, path: str) -> str | None:
    """Return the value at `path` as text (`null`, `true`, `[0, 5]`, `${...}`), None when absent."""
    if not doc.has(path):
        return None
    value = doc.get(path)
    return value if doc.kind == "overrides" and isinstance(value, str) else to_text(value)


def _states_targets(doc: Doc, path: str) -> bool:
    """Return whether the document writes `_target_`s: a full dump, or the node above `path` has one."""
    parent = path.rpartition(".")[0]
    return doc.full_dump or (bool(parent) and doc.has(f"{parent}._target_"))


def _default_of(path: str) -> str | None:
    return head_defaults().get(path, old_defaults().get(path))


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Rule:
    """Common fields: a stable kebab-case `id`, the verl-omni version `since`, a one-line `summary`.

    `refs` are the row numbers of legacy_surface.md §3.4 the rule implements. `when_target` lists `(key, default)`
    pairs the target's key tree must hold for the rule to run: a rule about a default of upstream verl-omni that this
    project's config does not share (e.g. upstream's importlib reward manager) is then skipped.
    """

    id: str
    since: str
    summary: str
    refs: tuple[int, ...] = ()
    when_target: tuple[tuple[str, str], ...] = ()

    kind: ClassVar[str] = "rule"

    def __repr__(self) -> str:
        """Return `<Kind id>`."""
        return f"<{type(self).__name__} {self.id}>"

    phase: ClassVar[int] = PHASE_MOVE
    formats: ClassVar[tuple[str, ...]] = ("yaml", "overrides")

    def apply(self, doc: Doc) -> None:
        """Rewrite `doc` in place and record what was done in `doc.report`."""
        raise NotImplementedError

    def fits_target(self) -> bool:
        """Return whether the target's key tree holds every `(key, default)` of `when_target`."""
        from verl_migrate.keys import head_defaults

        return all(head_defaults().get(key) == value for key, value in self.when_target)

    def path_map(self) -> list[tuple[str, str]]:
        """Return the `(old_path, new_path)` pairs interpolations must follow."""
        return []

    def describe(self) -> str:
        """Return the rule's effect in one line of Markdown (the rule table's middle column)."""
        return ""

    # -- shared helpers ---------------------------------------------------------------------------------------
    def change(self, doc: Doc, action: str, path: str, **kw: Any) -> None:
        """Record one change of this rule (saying so when the value came through a script variable)."""
        kw.setdefault("line", doc.line(path))
        via = doc.via(path)
        if via:
            kw["note"] = (kw.get("note", "") + "; " if kw.get("note") else "") + f"value from {via}"
        doc.report.add(Change(self.id, action, path, **kw))

    def semantic(self, doc: Doc, path: str, message: str) -> None:
        """Record a semantic change a human should review."""
        via = doc.via(path)
        message = f"{message} (value from {via})" if via else message
        doc.report.find("semantic", path, message, rule_id=self.id, line=doc.line(path))

    def move_path(self, doc: Doc, src: str, dst: str, *, null_unset: bool = False, creates: Any = ()) -> None:
        """Move `src` to `dst`; equal duplicates merge, different values raise `ConflictError`."""
        for old in doc.move_deletions(src, dst):
            self.change(doc, "move", "~" + old, new_path="~" + dst + old[len(src) :])
        if not doc.has(src):
            return
        if doc.is_map(src) and (null_unset or doc.has(dst)):
            for child in doc.children(src):
                self.move_path(doc, f"{src}.{child}", f"{dst}.{child}", null_unset=null_unset, creates=creates)
            return
        if null_unset and not doc.is_map(src) and normalize(doc.get(src)) is None:
            self.change(doc, "drop", src, old="null", note="null means unset in verl's legacy reward keys")
            doc.delete(src)
            return
        if not doc.has(dst):
            moved = [(leaf, text_of(doc, leaf), doc.line(leaf)) for leaf in doc.leaves(src)]
            missing = [p for p in creates if not doc.has(p)]
            doc.move(src, dst)
            for leaf, old, line in moved:
                self.change(doc, "move", leaf, new_path=dst + leaf[len(src) :], old=old, new=old, line=line)
            for p in missing:
                cls = target_class_or_none(p)
                if (
                    cls
                    and doc.kind == "yaml"
                    and doc.has(p)
                    and not doc.has(p + "._target_")
                    and _states_targets(doc, p)
                ):
                    doc.set(p + "._target_", cls, first=True)
                    self.change(doc, "add-target", p + "._target_", new=cls)
            return
        old_v, new_v = text_of(doc, src), text_of(doc, dst)
        if same_value(doc.get(src), doc.get(dst)):
            line = doc.line(src)
            doc.delete(src)
            self.change(doc, "move", src, new_path=dst, old=old_v, line=line, note=f"`{dst}` already had this value")
            return
        dflt = _default_of(dst)
        if doc.full_dump and dflt is not None and same_value(new_v, dflt):
            line = doc.line(src)
            doc.set(dst, doc.get(src))
            doc.delete(src)
            self.change(
                doc, "move", src, new_path=dst, old=old_v, line=line, note=f"replaces the dumped default {dflt}"
            )
            return
        raise ConflictError(
            f"`{src}` ({old_v}) and `{dst}` ({new_v}) are both set; verl-omni reads only `{dst}` "
            f"(rule {self.id}). Delete one of the two and run again.",
            path=doc.report.path,
            line=doc.line(src) or doc.line(dst),
        )

    def drop(self, doc: Doc, path: str, note: str, *, flag_non_default: bool = True) -> None:
        """Delete `path`; report each leaf with its value and flag values that differ from the old default.

        Leaves below `path` that the old schema does not know are kept (and later reported as unknown).
        """
        leaves = doc.leaves(path)
        known = [leaf for leaf in leaves if leaf == path or leaf in old_defaults()]
        for leaf in known:
            old = text_of(doc, leaf)
            self.change(doc, "drop", leaf, old=old, note=note)
            dflt = old_defaults().get(leaf)
            if flag_non_default and dflt is not None and old is not None and not same_value(old, dflt):
                self.semantic(doc, leaf, f"dropped non-default value {old} (old default {dflt}): {note}")
        if len(known) == len(leaves):
            doc.delete(path)
        else:
            for leaf in known:
                doc.delete(leaf)
