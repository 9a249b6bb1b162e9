"""Key and value rewrite kinds (re-exported by `verl_migrate.kinds`).

RenameKey, MoveSubtree, SplitDict, RenameValue, ReplaceTarget, Drop, Flag, SetExplicitDefault, RewriteDefaultsEntry,
FixPlusPrefix and ReplaceEntryPoint. Each is a frozen dataclass holding data only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from verl_migrate.doc import Doc
from verl_migrate.keys import head_defaults, is_head_key, is_head_yaml_key, normalize, same_value, to_text
from verl_migrate.rule_base import (
    PHASE_DEFAULTS,
    PHASE_DROP,
    PHASE_EXPLICIT,
    PHASE_INPUT_FLAGS,
    PHASE_LEGACY,
    PHASE_MOVE,
    PHASE_PREFIX,
    PHASE_VALUES,
    Rule,
    text_of,
)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class RenameKey(Rule):
    """`old` (a leaf) is now spelled `new`; interpolations that reference `old` follow."""

    old: str = ""
    new: str = ""
    creates: tuple[str, ...] = ()
    null_unset: bool = False
    #: the target keeps `old` as an alias of `new` (its default in the target's tree): a root config or a dump
    #: keeps the key, with that alias as its value, where it was
    alias: bool = False
    #: `(old value, new value)` pairs: only a leaf holding one of the old values moves, and takes the new value
    #: (others stay for the rules after, e.g. the target's fit)
    values: tuple[tuple[Any, Any], ...] = ()

    kind: ClassVar[str] = "rename-key"

    @property
    def phase(self) -> int:  # type: ignore[override]
        """Legacy top-level reward keys move before everything else touches `reward.*`."""
        return PHASE_LEGACY if self.null_unset else PHASE_MOVE

    def apply(self, doc: Doc) -> None:
        """Move `old` to `new` (conflicts raise, equal duplicates merge); keep `old` as the target's alias."""
        if self.values:
            self._move_value(doc)
            return
        if self.alias and doc.kind == "yaml" and (doc.is_root or doc.full_dump) and self._keep_alias(doc):
            return
        if self.alias and doc.kind == "yaml" and self._holds_alias(doc):
            return  # the alias a migration wrote (a migrated root extends the target's root): already migrated
        self.move_path(doc, self.old, self.new, null_unset=self.null_unset, creates=self.creates)

    def _move_value(self, doc: Doc) -> None:
        """Move `old` to `new` only when it holds an old value of `values`, and rename that value."""
        if not doc.has(self.old) or doc.is_map(self.old):
            return
        for old_value, new_value in self.values:
            if same_value(doc.get(self.old), old_value):
                self.move_path(doc, self.old, self.new, creates=self.creates)
                doc.set(self.new, new_value)
                self.change(doc, "rename-value", self.new, old=to_text(old_value), new=to_text(new_value))
                return

    def _holds_alias(self, doc: Doc) -> bool:
        """Whether `old` is exactly the target's alias of `new`."""
        alias = head_defaults().get(self.old)
        return (
            alias is not None
            and doc.has(self.old)
            and not doc.is_map(self.old)
            and same_value(doc.get(self.old), alias)
        )

    def _keep_alias(self, doc: Doc) -> bool:
        """Copy the value of `old` to `new` and make `old` the target's alias; return False if `old` is absent."""
        alias = head_defaults().get(self.old)
        if alias is None or not doc.has(self.old) or doc.is_map(self.old):
            return False
        if same_value(doc.get(self.old), alias):
            return True  # already the alias
        old_text = text_of(doc, self.old)
        if not doc.has(self.new):
            doc.set(self.new, doc.get(self.old))
            self.change(doc, "move", self.old, new_path=self.new, old=old_text, new=old_text, line=doc.line(self.old))
        elif not same_value(doc.get(self.new), doc.get(self.old)):
            self.move_path(doc, self.old, self.new)  # raises the usual conflict error
        doc.set(self.old, alias)
        self.change(
            doc,
            "alias",
            self.old,
            old=old_text,
            new=alias,
            note=f"verl-omni keeps `{self.old}` as an alias of `{self.new}`",
        )
        return True

    def path_map(self) -> list[tuple[str, str]]:
        """Return `[(old, new)]`."""
        return [(self.old, self.new)]

    def describe(self) -> str:
        """Return "`old` → `new`"."""
        alias = f"; a root config keeps `{self.old}: {head_defaults().get(self.old)}`" if self.alias else ""
        if self.values:
            pairs = ", ".join(f"`{to_text(o)}` → `{to_text(n)}`" for o, n in self.values)
            return f"`{self.old}` → `{self.new}` when {pairs} (other values stay)"
        return f"`{self.old}` → `{self.new}`{alias}"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class MoveSubtree(RenameKey):
    """The mapping `old` and everything below it moved to `new`."""

    kind: ClassVar[str] = "move-subtree"

    def describe(self) -> str:
        """Return "`old.*` → `new.*`"."""
        return f"`{self.old}.*` → `{self.new}.*`"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SplitDict(Rule):
    """The free-form dict `path` is gone; its known keys move to typed keys (`routes`), `ignored` ones are dropped.

    Keys neither routed nor ignored stay in place and are reported as unknown.
    """

    path: str = ""
    routes: tuple[tuple[str, str], ...] = ()
    ignored: tuple[str, ...] = ()
    ignored_note: str = ""
    creates: tuple[str, ...] = ()

    kind: ClassVar[str] = "split-dict"

    def apply(self, doc: Doc) -> None:
        """Split `path` into its typed destinations."""
        if not doc.has(self.path):
            return
        if not doc.is_map(self.path):
            text = text_of(doc, self.path) or ""
            if text.replace(" ", "") in ("{}", "null") or "${" in text:
                self.drop(doc, self.path, "verl-omni has no free-form dict here; typed keys replace it")
            else:
                doc.report.find(
                    "unknown",
                    self.path,
                    f"inline dict {text} cannot be split automatically; set the typed keys instead "
                    f"({', '.join(sorted({d.rsplit('.', 1)[0] + '.<key>' for _, d in self.routes}))})",
                    rule_id=self.id,
                    line=doc.line(self.path),
                )
            return
        routes = dict(self.routes)
        for child in doc.children(self.path):
            src = f"{self.path}.{child}"
            if child in routes:
                self.move_path(doc, src, routes[child], creates=self.creates)
            elif child in self.ignored:
                self.drop(doc, src, self.ignored_note)
        if doc.has(self.path) and not doc.is_map(self.path) and (text_of(doc, self.path) or "").strip() in ("{}",):
            self.drop(doc, self.path, "empty free-form dict removed")

    def path_map(self) -> list[tuple[str, str]]:
        """Return the routed `(path.child, destination)` pairs."""
        return [(f"{self.path}.{child}", dst) for child, dst in self.routes]

    def describe(self) -> str:
        """List the routes."""
        routes = ", ".join(f"`{c}` → `{d}`" for c, d in self.routes)
        extra = f"; dropped: {', '.join(f'`{c}`' for c in self.ignored)}" if self.ignored else ""
        return f"`{self.path}.*`: {routes}{extra}"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class RenameValue(Rule):
    """A registry name or dotted class path changed: `path == old` becomes `new` (plus keys in `also_set`).

    `path` may contain `*` segments; `path = "**"` matches every string value of the document.
    """

    path: str = ""
    old: tuple[str, ...] = ()
    new: str = ""
    also_set: tuple[tuple[str, Any], ...] = ()

    kind: ClassVar[str] = "rename-value"
    phase: ClassVar[int] = PHASE_VALUES

    def _targets(self, doc: Doc) -> list[str]:
        if self.path == "**":
            return [p for p, text, _ in doc.strings() if text in self.old]
        return doc.expand(self.path)

    def apply(self, doc: Doc) -> None:
        """Rename matching values and set the companion keys."""
        for path in self._targets(doc):
            if doc.is_map(path) or not any(same_value(doc.get(path), o) for o in self.old):
                continue
            old = text_of(doc, path)
            doc.set(path, self.new)
            self.change(doc, "rename-value", path, old=old, new=self.new)
            for key, value in self.also_set:
                if not doc.owns(key):
                    continue
                if doc.has(key):
                    if not same_value(doc.get(key), value):
                        prev = text_of(doc, key)
                        doc.set(key, value)
                        self.change(doc, "set", key, old=prev, new=to_text(value), note=f"goes with {self.new}")
                elif not (doc.root_based and same_value(head_defaults().get(key), value)):
                    doc.set(key, value)
                    self.change(doc, "set", key, new=to_text(value), note=f"goes with {self.new}")

    def describe(self) -> str:
        """Return "`path`: `old` → `new`"."""
        olds = " / ".join(f"`{o}`" for o in self.old)
        extra = "".join(f"; sets `{k}: {to_text(v)}`" for k, v in self.also_set)
        return (
            f"`{self.path}`: {olds} → `{self.new}`{extra}" if self.path != "**" else f"any value {olds} → `{self.new}`"
        )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ReplaceTarget(RenameValue):
    """The `_target_` class of a config node moved (e.g. `verl.workers.config.*` → `verl_omni.*`).

    With `node`, the new class is the one the target's config names for that node (read when the rule runs, from
    `verl_migrate.target`); an empty result means the target names no class there: the old `_target_` is dropped.
    """

    node: str = ""

    kind: ClassVar[str] = "replace-target"

    def _resolved(self) -> ReplaceTarget:
        if not self.node:
            return self
        from verl_migrate.target import target_class_or_none

        return dataclasses.replace(self, new=target_class_or_none(self.node) or "")

    def apply(self, doc: Doc) -> None:
        """Rename the class, or drop the key when the target names none."""
        rule = self._resolved()
        if rule.new:
            RenameValue.apply(rule, doc)
            return
        for path in rule._targets(doc):
            if not doc.is_map(path) and any(same_value(doc.get(path), o) for o in rule.old):
                rule.change(doc, "drop", path, old=text_of(doc, path), note="verl-omni's config names no class here")
                doc.delete(path)

    def describe(self) -> str:
        """Return "`path`: `old` → `new`" (or "dropped")."""
        rule = self._resolved()
        if rule.new:
            return RenameValue.describe(rule)
        return f"`{rule.path}`: {' / '.join(f'`{o}`' for o in rule.old)} dropped"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Drop(Rule):
    """Keys with no verl-omni equivalent are removed; the report lists each with its value and `note`.

    With `when`, a key is dropped only if its value is one of `when` (other values stay for a human). With `unless_set`,
    a non-null key is dropped only while that other key is null: set to null, or absent from a document that is not
    a config-group file (the installed config's default, null, then applies); a group file keeps the key, since the
    config that lists it may set the other key.
    """

    paths: tuple[str, ...] = ()
    note: str = ""
    when: tuple[Any, ...] | None = None
    unless_set: str | None = None
    early: bool = False

    kind: ClassVar[str] = "drop"

    @property
    def phase(self) -> int:  # type: ignore[override]
        """`early` drops run before the moves (fields that must not travel with a moved subtree)."""
        return PHASE_MOVE - 1 if self.early else PHASE_DROP

    def apply(self, doc: Doc) -> None:
        """Drop the matching keys."""
        if self.unless_set is not None:
            other = self.unless_set
            if (doc.has(other) and not same_value(doc.get(other), None)) or (not doc.has(other) and doc.package):
                return
        for pattern in self.paths:
            for path in doc.expand(pattern):
                if self.when is not None and (
                    doc.is_map(path) or not any(same_value(doc.get(path), w) for w in self.when)
                ):
                    continue
                if self.unless_set is not None and same_value(doc.get(path), None):
                    continue  # already null: nothing to drop
                self.drop(doc, path, self.note, flag_non_default=self.when is None and self.unless_set is None)

    def describe(self) -> str:
        """List the dropped keys."""
        when = f" when {' / '.join(f'`{to_text(w)}`' for w in self.when)}" if self.when is not None else ""
        unless = f" while `{self.unless_set}` is null or unset" if self.unless_set is not None else ""
        return ", ".join(f"`{p}`" for p in self.paths) + when + unless


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Flag(Rule):
    """A semantic change that needs a human: report `message` when `path` matches `condition`; edits nothing.

    `condition`: "present", "absent" (only for documents layered on diffusion_trainer) or "equals" (`values`).
    """

    path: str = ""
    condition: str = "present"
    values: tuple[Any, ...] = ()
    message: str = ""
    late: bool = False

    kind: ClassVar[str] = "flag"

    @property
    def phase(self) -> int:  # type: ignore[override]
        """Flags read the input before any rule edits it, unless `late`."""
        return PHASE_EXPLICIT + 1 if self.late else PHASE_INPUT_FLAGS

    def apply(self, doc: Doc) -> None:
        """Report the semantic change if the condition holds and the document is a legacy one."""
        present = doc.has(self.path)
        hit = {
            "present": present,
            "absent": (not present) and doc.root_based,
            "equals": present and any(same_value(doc.get(self.path), v) for v in self.values),
        }[self.condition]
        if hit:
            via = doc.via(self.path) if present else None
            message = f"{self.message} (value from {via})" if via else self.message
            doc.pending.append((self.path, message, self.id, doc.line(self.path)))

    def describe(self) -> str:
        """Return the condition."""
        vals = " / ".join(f"`{to_text(v)}`" for v in self.values)
        return f"`{self.path}` {self.condition}{' ' + vals if vals else ''}: report only"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class SetExplicitDefault(Rule):
    """A default changed: when the old config relied on it (`path` and `aliases` absent), write the old value.

    `value_from` copies another key's value instead of a constant; `requires` must be present and non-null.
    Only documents that are layered on diffusion_trainer (or `requires`-gated rules) are changed.
    """

    path: str = ""
    value: Any = None
    value_from: str | None = None
    aliases: tuple[str, ...] = ()
    requires: str | None = None
    message: str = ""

    kind: ClassVar[str] = "set-explicit-default"
    phase: ClassVar[int] = PHASE_EXPLICIT

    def apply(self, doc: Doc) -> None:
        """Write the old default explicitly and report the semantic change."""
        if doc.has(self.path) or any(doc.has(a) for a in self.aliases) or not doc.owns(self.path):
            return
        if self.requires is not None and (not doc.has(self.requires) or normalize(doc.get(self.requires)) is None):
            return
        if self.requires is None and not doc.root_based:
            return
        value = self.value
        if self.value_from is not None:
            if not doc.has(self.value_from) or doc.is_map(self.value_from):
                return
            value = doc.get(self.value_from)
        if not doc.is_legacy():
            self.semantic(
                doc,
                self.path,
                f"{self.message} If this config was written for verl before #6200, "
                f"set `{self.path}: {to_text(value)}`.",
            )
            return
        doc.set(self.path, normalize(value) if doc.kind == "yaml" else value)
        self.change(doc, "set-default", self.path, new=text_of(doc, self.path), note=self.message)
        self.semantic(
            doc, self.path, f"{self.message} Wrote `{self.path}: {text_of(doc, self.path)}` to keep the old behaviour."
        )

    def describe(self) -> str:
        """Return what is written."""
        src = f"value of `{self.value_from}`" if self.value_from else f"`{to_text(self.value)}`"
        return f"writes `{self.path}` = {src} when absent"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class RewriteDefaultsEntry(Rule):
    """An old Hydra config group is renamed (`new_group`, options mapped by `options`) or gone (`drop`).

    With `follow_target`, the new group is the one the target's root composes at `package` (read when the rule runs,
    from `verl_migrate.target.new_group`); the entry goes when the target has none.
    """

    group: str = ""
    new_group: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    drop_entry: bool = False
    follow_target: bool = False
    package: str | None = None

    kind: ClassVar[str] = "defaults-entry"
    phase: ClassVar[int] = PHASE_DEFAULTS

    def _resolved(self) -> RewriteDefaultsEntry:
        if not self.follow_target:
            return self
        from verl_migrate.target import new_group

        new = new_group(self.package, self.group)
        return dataclasses.replace(self, new_group=new, drop_entry=new is None, follow_target=False)

    def apply(self, doc: Doc) -> None:
        """Rewrite or drop every matching defaults entry / group override (not a config-group file's own list)."""
        if doc.package:
            return
        if self.follow_target:
            self._resolved().apply(doc)
            return
        while True:
            match = [e for e in doc.group_entries() if e.group == self.group]
            if not match:
                return
            entry = match[0]
            if self.drop_entry:
                doc.delete_group(entry)
                self.change(doc, "drop-group", entry.name, old=entry.option, note=self.summary)
                continue
            option = dict(self.options).get(entry.option or "", entry.option)
            doc.replace_group(entry, str(self.new_group), entry.package, option)
            new_name = f"{self.new_group}@{entry.package}" if entry.package else str(self.new_group)
            self.change(doc, "rename-group", entry.name, new_path=new_name, old=entry.option, new=option)

    def describe(self) -> str:
        """Return the group mapping."""
        if self.follow_target:
            return self._resolved().describe()
        if self.drop_entry:
            return f"defaults entry `{self.group}` removed"
        opts = "".join(f"; `{a}` → `{b}`" for a, b in self.options)
        return f"group `{self.group}` → `{self.new_group}`{opts}"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class FixPlusPrefix(Rule):
    """Overrides of keys that verl-omni keeps only as dataclass fields need `+`; YAML keys must not have it."""

    kind: ClassVar[str] = "hydra-prefix"
    phase: ClassVar[int] = PHASE_PREFIX
    formats: ClassVar[tuple[str, ...]] = ("overrides",)

    def apply(self, doc: Doc) -> None:
        """Add or remove `+` where verl-omni needs it."""
        for e in getattr(doc, "entries", []):
            if not e.live or e.prefix == "++":
                continue
            key = str(e.key)
            want = "" if is_head_yaml_key(key) else ("+" if is_head_key(key) else e.prefix)
            if want != e.prefix:
                old = e.token()
                e.prefix = want
                self.change(doc, "prefix", key, old=old, new=e.token())

    def describe(self) -> str:
        """Describe the prefix fix."""
        return "adds `+` to overrides of dataclass-only keys, removes it from keys in verl-omni's YAML"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ReplaceEntryPoint(Rule):
    """Launch scripts: `python3 -m <old module>` runs `module` instead (only the module name is rewritten)."""

    modules: tuple[str, ...] = ()
    module: str = ""

    kind: ClassVar[str] = "entry-point"
    phase: ClassVar[int] = PHASE_DEFAULTS
    formats: ClassVar[tuple[str, ...]] = ("script",)

    def apply(self, doc: Doc) -> None:
        """Entry points are rewritten by `verl_migrate.script`; nothing to do on config documents."""

    def describe(self) -> str:
        """Return the command mapping."""
        return " / ".join(f"`python3 -m {m}`" for m in self.modules) + f" → `python3 -m {self.module}`"
