"""Rule kinds about Hydra's own settings (`hydra.*`), which the key rules never touch."""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

from verl_migrate import target
from verl_migrate.doc import Doc
from verl_migrate.rule_base import PHASE_INPUT_FLAGS, Rule


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class FlagSearchpath(Rule):
    """Warn about `hydra.searchpath` entries matching `pattern` (they point into packages that lost their configs)."""

    pattern: str = ""
    message: str = ""

    kind: ClassVar[str] = "searchpath"
    phase: ClassVar[int] = PHASE_INPUT_FLAGS

    def apply(self, doc: Doc) -> None:
        """Add a warning per matching entry; the entry is kept (which configs it should name is the user's call)."""
        for entry, line in doc.searchpath():
            if re.search(self.pattern, entry):
                doc.report.find(
                    "warning",
                    "hydra.searchpath",
                    f"entry `{entry}` {self.message}; use `{target.SEARCHPATH}` instead",
                    rule_id=self.id,
                    line=line,
                )

    def describe(self) -> str:
        """Return what is reported."""
        return f"`hydra.searchpath` entries matching `{self.pattern}`: warns, suggests `{target.SEARCHPATH}`"
