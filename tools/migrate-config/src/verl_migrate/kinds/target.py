"""The rule kind that fits a migrated document to what the target implements (`rules/unsupported.py`).

The key-move rules follow upstream verl-omni (a1139baf). This project's trainer config has a subset of upstream's
keys, and accepts some of the keys it has only at their default value (a feature that exists in the schema but not
in the trainer, e.g. `reward.reward_model.enable`). The trainer rejects anything else, so a migrated document must
not carry it: `FitTarget` removes such keys and reports each by key, as a `not-implemented` finding when its value
turned a feature on (a user must decide what to do), as a plain change when it held upstream's default.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from verl_migrate.doc import Doc
from verl_migrate.keys import head_defaults, is_head_key, is_upstream_key, same_value, upstream_defaults
from verl_migrate.rule_base import PHASE_EXPLICIT, Rule, text_of


def _off(value: Any) -> bool:
    from verl_migrate.keys import normalize, parse_text

    value = parse_text(value) if isinstance(value, str) else normalize(value)
    return value in (None, False, "", [], {})


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class FitTarget(Rule):
    """Remove keys the target lacks (upstream verl-omni keys) or accepts only at their default (`only_default`).

    `features` maps key prefixes to the feature they belong to (for the report); `only_default` lists the target's
    keys whose feature the trainer does not implement, each with that feature.
    """

    features: tuple[tuple[str, str], ...] = ()
    only_default: tuple[tuple[str, str], ...] = ()

    kind: ClassVar[str] = "fit-target"
    phase: ClassVar[int] = PHASE_EXPLICIT + 1  # before the root completion writes the target's defaults

    def _feature(self, path: str) -> str:
        for prefix, feature in self.features:
            if path == prefix or path.startswith(prefix + "."):
                return feature
        return ""

    def apply(self, doc: Doc) -> None:
        """Drop each key the target lacks or refuses; report the ones that were switched on."""
        for path, value in doc.items():
            if path.split(".")[0] in ("defaults", "hydra") or not doc.has(path):
                continue
            only = dict(self.only_default).get(path)
            if only is not None:
                dflt = head_defaults().get(path)
                if dflt is None or same_value(value, dflt) or "$" in str(value):
                    continue
                self._remove(doc, path, only, dflt, on=True)
            elif not self.only_default and not is_head_key(path) and is_upstream_key(path):
                dflt = upstream_defaults().get(path)
                mirror = isinstance(value, str) and value.startswith("${")  # mirrors another key: not a choice
                on = not mirror and not (same_value(value, dflt) if dflt is not None else _off(value))
                self._remove(doc, path, self._feature(path), dflt, on=on)

    def _remove(self, doc: Doc, path: str, feature: str, dflt: str | None, *, on: bool) -> None:
        old = text_of(doc, path)
        if not is_head_key(path):
            what = f": {feature}" if feature else ""
            note = f"upstream verl-omni's key is not in this project's trainer config{what}"
        else:
            note = f"this project's trainer does not implement {feature}"
        if not on:
            note += f"; the value is the default ({dflt}), so removing it changes nothing"
        self.change(doc, "drop", path, old=old, note=note)
        if on:
            msg = f"removed `{path}` = {old} (default {dflt}); {note}. Decide by hand what replaces it"
            via = doc.via(path)
            doc.report.find(
                "not-implemented",
                path,
                msg + (f" (value from {via})" if via else ""),
                rule_id=self.id,
                line=doc.line(path),
            )
        doc.delete(path)

    def describe(self) -> str:
        """Return what is removed."""
        if not self.only_default:
            return "keys of upstream verl-omni that the target's config lacks: removed, non-default ones reported"
        return (
            "keys the target accepts only at their default ("
            + ", ".join(f"`{k}`" for k, _ in self.only_default)
            + "): removed when set otherwise, and reported"
        )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ScalarToList(Rule):
    """A key whose old value could be one string (`trainer.logger=console`) and is now a list: wrap the string."""

    path: str = ""

    kind: ClassVar[str] = "scalar-to-list"

    def apply(self, doc: Doc) -> None:
        """Replace a plain string value (not a list, not an interpolation or shell variable) by a one-item list."""
        if not doc.has(self.path) or doc.is_map(self.path):
            return
        value = doc.get(self.path)
        text = value.strip().strip("'\"") if isinstance(value, str) else ""
        if not text or text[:1] in "[$" or "${" in text:
            return
        doc.set(self.path, f"[{text}]" if doc.kind == "overrides" else [text])
        self.change(doc, "rename-value", self.path, old=value, new=f"[{text}]", note="the key takes a list")

    def describe(self) -> str:
        """Return the rewrite."""
        return f"`{self.path}`: a single string `x` becomes the list `[x]`"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class FollowTargetClasses(Rule):
    """Every `_target_` naming one of verl's classes becomes the class the target names at that node (or goes).

    Upstream verl-omni kept some of verl's classes (`verl.workers.config.FSDPOptimizerConfig`, ...); this project's
    trainer cannot import `verl`, and names its own classes.
    """

    kind: ClassVar[str] = "follow-target-classes"
    phase: ClassVar[int] = PHASE_EXPLICIT + 4
    formats: ClassVar[tuple[str, ...]] = ("yaml",)

    def apply(self, doc: Doc) -> None:
        """Rename each `verl.*` `_target_` to the target's class at its node; drop it where the target names none."""
        for path, value in doc.items():
            if not path.endswith("._target_") or not isinstance(value, str) or not value.startswith("verl."):
                continue
            new = head_defaults().get(path)
            if new == value:
                continue
            if new:
                doc.set(path, new)
                self.change(doc, "rename-value", path, old=value, new=new, note="the class the target names here")
            else:
                self.change(doc, "drop", path, old=value, note="the target names no class here")
                doc.delete(path)

    def describe(self) -> str:
        """Return the rewrite."""
        return "`*._target_` naming a `verl.*` class: the class the target's config names at that node (or dropped)"
