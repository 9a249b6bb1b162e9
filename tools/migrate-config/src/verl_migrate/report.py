"""The migration report: every change with its rule id, every unknown key, every semantic change."""

from __future__ import annotations

import dataclasses
from typing import Any

#: Finding categories, in the order the text report prints them.
CATEGORIES = ("semantic", "unknown", "obsolete", "not-implemented", "warning", "note")


@dataclasses.dataclass
class Change:
    """One edit made by one rule on one key (or one defaults entry, one override, the entry point)."""

    rule_id: str
    action: str
    path: str
    new_path: str | None = None
    old: str | None = None
    new: str | None = None
    note: str = ""
    line: int | None = None


@dataclasses.dataclass
class Finding:
    """Something a human should read: a semantic change, an unknown key, an obsolete key, a warning."""

    category: str
    path: str
    message: str
    rule_id: str | None = None
    line: int | None = None


@dataclasses.dataclass
class FileReport:
    """Everything the tool did or noticed for one input (a file, a script or an override list)."""

    path: str
    kind: str = "yaml"
    changed: bool = False
    changes: list[Change] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    def add(self, change: Change) -> None:
        """Record a change."""
        self.changes.append(change)

    def find(self, category: str, path: str, message: str, *, rule_id: str | None = None, line: int | None = None):
        """Record a finding unless the same one is already recorded."""
        item = Finding(category, path, message, rule_id, line)
        if item not in self.findings:
            self.findings.append(item)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (the `--report json` schema of one file)."""
        return dataclasses.asdict(self)

    def to_text(self) -> str:
        """Return the human report: one line per change and per finding."""
        head = f"{self.path}: "
        if self.error:
            return f"{head}error: {self.error}"
        if self.skipped:
            return f"{head}skipped: {self.skipped}"
        lines = [head + ("migrated" if self.changed else "nothing to migrate") + f" ({len(self.changes)} changes)"]
        for c in self.changes:
            where = f":{c.line}" if c.line else ""
            what = c.path if c.new_path is None or c.new_path == c.path else f"{c.path} -> {c.new_path}"
            values = ""
            if c.old is not None or c.new is not None:
                values = f" [{c.old if c.old is not None else '-'} -> {c.new if c.new is not None else '-'}]"
            note = f" — {c.note}" if c.note else ""
            lines.append(f"  {c.action:<13} {what}{values} ({c.rule_id}{where}){note}")
        for cat in CATEGORIES:
            for f in (f for f in self.findings if f.category == cat):
                rid = f" ({f.rule_id})" if f.rule_id else ""
                where = f" line {f.line}" if f.line else ""
                lines.append(f"  {cat}: {f.path}{where}{rid}: {f.message}")
        return "\n".join(lines)


def reports_to_json(reports: list[FileReport]) -> str:
    """Serialise several file reports as the `--report json` document."""
    import json

    return json.dumps({"files": [r.to_dict() for r in reports]}, indent=2, sort_keys=False)
