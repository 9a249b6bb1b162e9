"""Simple `NAME=value` assignments of a launch script, so rules can see values reached through `$NAME`.

Only plain assignments on a line of their own count (`NAME=value`, `export NAME=value`, `NAME=${NAME:-value}`);
a name assigned twice before the command, or set from a command substitution, is not followed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from verl_migrate.errors import MigrationError
from verl_migrate.shellwords import scan_words

_ASSIGN = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<raw>.*)\Z", re.S)
_WITH_DEFAULT = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*):?-(?P<dflt>[^$`{}\"'\\\s]*)\}\Z")
_REFERENCE = re.compile(r"\$(?:\{(?P<a>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<b>[A-Za-z_][A-Za-z0-9_]*))\Z")


@dataclass
class Assignment:
    """One variable of a launch script: its literal value and where that literal sits."""

    name: str
    #: the value the command sees by default (None: assigned more than once, or not a literal)
    value: str | None
    #: 1-based line of the assignment
    line: int
    #: where the literal is in the script text, so a rule can rewrite it (None: not editable in place)
    span: tuple[int, int] | None
    #: how many times the script refers to the variable (`$NAME`, `${NAME...}`)
    uses: int = 0


def reference(value: str | None) -> str | None:
    """Return `NAME` when an override value is exactly `$NAME` or `${NAME}`."""
    if not value:
        return None
    m = _REFERENCE.match(value)
    return (m.group("a") or m.group("b")) if m else None


def assignments(text: str, path: str, end: int) -> dict[str, Assignment]:
    """Return the simple assignments made on the lines of `text` before offset `end`."""
    found: dict[str, Assignment] = {}
    own: dict[str, int] = {}  # references inside the assignments themselves (`X=${X:-1}`)
    pos = 0
    while pos < end:
        le = text.find("\n", pos)
        le = len(text) if le < 0 else le
        stripped = text[pos:le].strip()
        if stripped and not stripped.startswith("#") and "=" in stripped:
            try:
                words = [w for w in scan_words(text, pos, path) if w.start < le]
            except MigrationError:
                words = []
            if words and words[0].raw == "export":
                words = words[1:]
            m = _ASSIGN.match(words[0].raw) if len(words) == 1 else None
            if m is not None:
                name = m.group("name")
                line = text.count("\n", 0, pos) + 1
                value, span = _literal(m.group("raw"), words[0].start + len(name) + 1, name)
                if name in found:
                    value, span = None, None  # assigned twice: which one applies depends on the control flow
                found[name] = Assignment(name, value, line, span)
                own[name] = own.get(name, 0) + len(_refs(name).findall(m.group("raw")))
        pos = le + 1
    for a in found.values():
        a.uses = len(_refs(a.name).findall(text)) - own.get(a.name, 0)
    return found


def _refs(name: str) -> re.Pattern[str]:
    return re.compile(r"\$\{?" + re.escape(name) + r"(?![A-Za-z0-9_])")


def _literal(raw: str, start: int, name: str) -> tuple[str | None, tuple[int, int] | None]:
    """Return the literal value of an assignment's right-hand side and its span (None when it is not literal)."""
    inner, off = raw, 0
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        inner, off = raw[1:-1], 1
    m = _WITH_DEFAULT.match(inner)
    if m is not None:
        if m.group("name") != name:
            return None, None
        return m.group("dflt"), (start + off + m.start("dflt"), start + off + m.end("dflt"))
    if any(c in raw for c in "$`"):
        return None, None
    try:
        parts = shlex.split(raw)
    except ValueError:
        return None, None
    if len(parts) != 1:
        return ("", None) if not parts else (None, None)
    if raw[:1] in "'\"" and raw[-1:] == raw[:1]:
        return parts[0], (start + 1, start + len(raw) - 1)
    return parts[0], (start, start + len(raw)) if parts[0] == raw else None
