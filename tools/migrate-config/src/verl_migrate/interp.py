"""Find and rewrite the config paths that `${...}` interpolations reference."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A dotted absolute path inside an interpolation: after `${`, `:` or `,`, before `}` or `,`.
# Resolver names such as `oc.select` are followed by `:` and therefore never match.
_REF = re.compile(r"(?<=[{:,])\s*([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+)(?=\s*[},])")


def references(text: str) -> list[tuple[str, bool]]:
    """Return `(path, has_default)` for each absolute path referenced by interpolations in `text`."""
    if "${" not in text:
        return []
    out = []
    for m in _REF.finditer(text):
        before = text[: m.start(1)].rstrip()
        has_default = before.endswith("oc.select:") and text[m.end(1) :].lstrip().startswith(",")
        out.append((m.group(1), has_default))
    return out


def rewrite(text: str, mapping: Iterable[tuple[str, str, str]]) -> tuple[str, list[tuple[str, str, str]]]:
    """Rewrite referenced paths by the longest matching `(old_prefix, new_prefix, rule_id)` of `mapping`.

    Returns the new text and one `(old_path, new_path, rule_id)` per rewritten reference.
    """
    if "${" not in text:
        return text, []
    table = sorted(mapping, key=lambda row: -len(row[0]))
    done: list[tuple[str, str, str]] = []

    def _sub(m: re.Match[str]) -> str:
        path = m.group(1)
        for old, new, rule_id in table:
            if path == old or path.startswith(old + "."):
                moved = new + path[len(old) :]
                done.append((path, moved, rule_id))
                return m.group(0).replace(path, moved)
        return m.group(0)

    return _REF.sub(_sub, text), done
