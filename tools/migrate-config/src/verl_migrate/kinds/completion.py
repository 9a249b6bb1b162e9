"""Rule kinds that make a migrated root config stand on the target's config groups.

A root config (one that composes the groups itself, like verl's own `diffusion_trainer.yaml`) replaces the target's
root when it is used, so after the key moves it must also compose every group the target's root composes and define
every key the target's root defines itself (`CompleteRootDefaults`, `CompleteRootKeys`). A config-group file's own
defaults list names options of its group; options the target's group does not have go (`GroupFileDefaults`).
What the target looks like comes from `verl_migrate.target`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar

from verl_migrate import target
from verl_migrate.doc import Doc
from verl_migrate.keys import head_defaults, parse_text
from verl_migrate.rule_base import PHASE_EXPLICIT, Rule


def _root(doc: Doc) -> bool:
    return doc.kind == "yaml" and not doc.package and doc.is_root


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CompleteRootDefaults(Rule):
    """A root config composes every group the target's root composes, and only groups the target has.

    An entry naming one of verl's or verl-omni's groups that the target lacks goes (`CompleteRootKeys` then writes
    its keys); an entry naming a group or option the target does not know otherwise is reported (it may be the
    user's own).
    """

    kind: ClassVar[str] = "complete-defaults"
    phase: ClassVar[int] = PHASE_EXPLICIT + 2
    formats: ClassVar[tuple[str, ...]] = ("yaml",)

    def apply(self, doc: Doc) -> None:
        """Add the target's root entries this root lacks (before `_self_`); report entries naming no target group."""
        if not _root(doc):
            return
        if target.extends_root():
            self._extend(doc)
        while gone := [e for e in doc.group_entries() if _gone(e.group)]:  # handles shift: re-read after each
            doc.delete_group(gone[0])
            note = (
                f"the target's root (`{target.CONFIG_NAME}`) holds these keys"
                if target.extends_root()
                else "verl-omni has no such group; its keys are added"
            )
            self.change(doc, "drop-group", gone[0].name, old=gone[0].option, note=note)
        entries = doc.group_entries()
        packages = {e.package for e in entries if e.package} | {e.group for e in entries if not e.package}
        for group, package, option in target.ROOT_DEFAULTS:
            if (package or group) in packages:
                continue
            entries = doc.group_entries()
            at = next((i for i, e in enumerate(entries) if e.group == "_self_"), len(entries))
            name = f"{group}@{package}" if package else group
            doc.insert_group(at, name, option)
            self.change(doc, "add-group", name, new=option, note="the target's root config composes this group")
        for e in doc.group_entries():
            if e.group in ("_self_", target.CONFIG_NAME) or (e.option is None and "/" not in e.group):
                continue
            if e.group.lstrip("/") not in target.GROUP_OPTIONS:
                doc.report.find(
                    "warning",
                    f"defaults: {e.name}",
                    f"verl-omni has no config group `{e.group}`; it must come from your own config folder "
                    f"(verl-omni's groups: {', '.join(sorted(target.GROUP_OPTIONS))})",
                    rule_id=self.id,
                )
            elif e.option is not None and not target.option_exists(e.group, e.option):
                options = ", ".join(target.GROUP_OPTIONS[e.group.lstrip("/")])
                doc.report.find(
                    "warning",
                    f"defaults: {e.name}",
                    f"`{e.option}` is not an option of verl-omni's `{e.group}` group ({options}); it must be a file "
                    f"`{e.group}/{e.option}.yaml` in your own config folder",
                    rule_id=self.id,
                )

    def _extend(self, doc: Doc) -> None:
        """Make the root extend the target's root: the root entry first, and the search path that finds it."""
        if not any(e.group.lstrip("/") == target.CONFIG_NAME for e in doc.group_entries()):
            doc.insert_group(0, target.CONFIG_NAME, None)
            self.change(
                doc,
                "add-group",
                target.CONFIG_NAME,
                note="extends the target's root config: every key this file does not set comes from it",
            )
        if not any(entry.rstrip("/") == target.SEARCHPATH for entry, _ in doc.searchpath()):
            paths = [entry for entry, _ in doc.searchpath()] + [target.SEARCHPATH]
            doc.set("hydra.searchpath", paths, first=True)
            self.change(doc, "set", "hydra.searchpath", new=str(paths), note="where Hydra finds the target's root")
        folder, base = os.path.split(doc.report.path)
        name = os.path.splitext(base)[0]
        sibling = os.path.join(folder, f"{target.CONFIG_NAME}.yaml")
        if name == target.CONFIG_NAME:
            doc.report.find(
                "warning",
                "defaults",
                f"this file extends verl-omni's `{target.CONFIG_NAME}` but has the same name: Hydra finds a "
                f"`{target.CONFIG_NAME}.yaml` of the `--config-path` folder before verl-omni's. Write the result into "
                f"another folder, or under another name (`-o my_{target.CONFIG_NAME}.yaml`) and move this old file "
                f"out of the folder; run with `--config-name my_{target.CONFIG_NAME}`",
                rule_id=self.id,
            )
        elif os.path.isfile(sibling):
            doc.report.find(
                "warning",
                "defaults",
                f"`{sibling}` lies in this file's folder: run from there (`--config-path`), Hydra would load it for "
                f"`- {target.CONFIG_NAME}` instead of verl-omni's. Move it out of the folder (or run this file "
                "from another folder)",
                rule_id=self.id,
            )

    def describe(self) -> str:
        """Return what is added."""
        if target.extends_root():
            return (
                f"root configs: extend the target's root (`- {target.CONFIG_NAME}` first in the defaults list, "
                f"`hydra.searchpath: [{target.SEARCHPATH}]`); verl's groups go"
            )
        entries = ", ".join(f"`{g}@{p}: {o}`" if p else f"`{g}: {o}`" for g, p, o in target.ROOT_DEFAULTS)
        return f"root configs: adds the target's defaults entries they lack ({entries}); flags unknown groups"


#: config groups of old verl's and upstream verl-omni's diffusion_trainer (a user's own groups are not among them)
_KNOWN_GROUPS = frozenset(
    {"model_engine", "actor", "ref", "rollout", "model", "critic", "data", "reward", "legacy_reward_impl", "algorithm"}
    | {f"diffusion/{g}" for g in ("model_engine", "actor", "ref", "rollout", "model", "engine", "distillation")}
)


def _gone(group: str) -> bool:
    """Return whether `group` is a verl / verl-omni group that the target's config does not have."""
    name = group.lstrip("/")
    return name in _KNOWN_GROUPS and name not in target.GROUP_OPTIONS


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CompleteRootKeys(Rule):
    """A root config defines every key the target's root defines; a full dump holds every key of the target."""

    kind: ClassVar[str] = "complete-keys"
    phase: ClassVar[int] = PHASE_EXPLICIT + 3
    formats: ClassVar[tuple[str, ...]] = ("yaml",)

    def apply(self, doc: Doc) -> None:
        """Write each missing key with the target's default."""
        if doc.kind != "yaml" or doc.package:
            return
        if doc.full_dump:
            keys: tuple[str, ...] = tuple(head_defaults())
            why = "a full dump holds every key of the target's config"
        elif doc.is_root:
            keys = target.root_keys()
            why = "the target's root config defines it, and a migrated root config replaces that root"
        else:
            return
        for key in keys:
            if doc.has(key) or _blocked(doc, key):
                continue
            text = head_defaults()[key]
            doc.set(key, _value(text))
            self.change(doc, "add", key, new=text, note=why)

    def describe(self) -> str:
        """Return what is added."""
        return (
            "root configs: writes the keys the target's root defines that they lack; full dumps: every missing key "
            "of the target, each with the target's default"
        )


def _blocked(doc: Doc, key: str) -> bool:
    """Return whether a parent of `key` holds a value that is not a mapping (the user's choice: left alone)."""
    parts = key.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if doc.has(parent) and doc.get(parent) is not None and not isinstance(doc.get(parent), dict):
            return True
    return False


def _value(text: str) -> Any:
    """Return a key-tree default as the YAML value to write (an empty default is the empty string)."""
    if text == "":
        return ""
    value = parse_text(text)
    if isinstance(value, str) and value != text.strip() and text.strip()[:1] not in "'\"":
        return text.strip()
    return value


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class GroupFileDefaults(Rule):
    """A config-group file's own defaults list names options of its group; options the target's group lacks go.

    `notes` maps an old option to the reason it is gone (e.g. the LLM `rollout` config a diffusion rollout layered
    on).
    """

    notes: tuple[tuple[str, str], ...] = ()

    kind: ClassVar[str] = "group-defaults"
    phase: ClassVar[int] = PHASE_EXPLICIT + 2
    formats: ClassVar[tuple[str, ...]] = ("yaml",)

    def apply(self, doc: Doc) -> None:
        """Drop the entries naming an option the target's group does not have."""
        if doc.kind != "yaml" or not doc.package:
            return
        group = target.group_of_package(doc.package)
        if group is None:
            if target.extends_root():
                self._drop_verl_bases(doc)
            return
        while True:
            gone = [
                e
                for e in doc.group_entries()
                if e.group != "_self_"
                and e.package is None
                and e.option is None
                and not target.option_exists(group, e.group)
            ]
            if not gone:
                return
            e = gone[0]
            note = dict(self.notes).get(e.group, f"verl-omni's `{group}` group has no option `{e.group}`")
            doc.delete_group(e)
            self.change(doc, "drop-group", f"defaults: {e.group}", old=e.group, note=note)
            self.semantic(
                doc,
                doc.package,
                f"this file no longer layers on `{e.group}`: {note}. When it replaces verl-omni's "
                f"`{group}/{target.GROUP_OPTIONS.get(group, ('?',))[0]}.yaml` it must define every key that file "
                "defines; or keep only your changes, in a root config",
            )

    def _drop_verl_bases(self, doc: Doc) -> None:
        """The target has no groups: the file layers on its root; own entries naming verl's bases go."""
        notes = dict(self.notes)
        while gone := [e for e in doc.group_entries() if e.package is None and e.option is None and e.group in notes]:
            e = gone[0]
            doc.delete_group(e)
            self.change(doc, "drop-group", f"defaults: {e.group}", old=e.group, note=notes[e.group])
            self.semantic(
                doc,
                doc.package,
                f"this file no longer layers on `{e.group}`: {notes[e.group]}. verl-omni's config has no config "
                f"groups: list this file after `{target.CONFIG_NAME}` in your root config's defaults list "
                f"(`- <folder>@{doc.package}: <file name>`); its keys then override the installed config's",
            )

    def describe(self) -> str:
        """Return what is dropped."""
        olds = ", ".join(f"`{o}`" for o, _ in self.notes)
        return f"config-group files: drops own defaults entries the target's group lacks (e.g. {olds})"
