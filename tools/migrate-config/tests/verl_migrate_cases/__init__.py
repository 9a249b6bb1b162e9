"""Before/after cases per rule id (a `noop` and a `rewrite` case for every registered rule)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import textwrap


@dataclasses.dataclass
class Case:
    """One rule case: `fmt` is yaml, overrides (one override per line) or script; `finding`: the category a flag
    rule reports ("semantic", "warning"), empty for rules that edit."""

    rule_id: str
    kind: str
    fmt: str
    before: str
    after: str
    finding: str = ""
    #: the target the case runs against: upstream verl-omni's frozen tree, or this project's config ("project")
    target: str = "upstream"

    def text(self, which: str) -> str:
        """Return the dedented before/after text."""
        return textwrap.dedent(getattr(self, which)).lstrip("\n")

    def words(self, which: str) -> list[str]:
        """Return the overrides of an `overrides` case, one per non-empty line."""
        return [ln.strip() for ln in self.text(which).splitlines() if ln.strip()]


def rewrite(rule_id: str, before: str, after: str, fmt: str = "yaml") -> Case:
    """Declare a case where `rule_id` turns `before` into `after`."""
    return Case(rule_id, "rewrite", fmt, before, after)


def noop(rule_id: str, before: str, fmt: str = "yaml") -> Case:
    """Declare a case `rule_id` must leave unchanged."""
    return Case(rule_id, "noop", fmt, before, before)


def flagged(rule_id: str, before: str, fmt: str = "overrides") -> Case:
    """Declare a case where the flag rule `rule_id` reports a semantic change and edits nothing."""
    return Case(rule_id, "rewrite", fmt, before, before, finding="semantic")


def warned(rule_id: str, before: str, fmt: str = "yaml") -> Case:
    """Declare a case where `rule_id` adds a warning and edits nothing."""
    return Case(rule_id, "rewrite", fmt, before, before, finding="warning")


def all_cases() -> list[Case]:
    """Collect `CASES` from every module of this package."""
    out: list[Case] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        out.extend(importlib.import_module(f"{__name__}.{info.name}").CASES)
    return out
