"""Load and dump YAML with ruamel.yaml in round-trip mode, keeping the file's indentation, quotes and nulls."""

from __future__ import annotations

import io
import itertools
import re
from typing import Any

from verl_migrate.errors import MigrationError

_KEY_OPEN = re.compile(r"^( *)(?:- )?[^\s#-][^#]*:\s*(?:#.*)?$")


def guess_style(text: str) -> dict[str, Any]:
    """Guess mapping indent, sequence dash offset, null spelling and document start marker from `text`."""
    mapping: int | None = None
    offset: int | None = None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for cur, nxt in itertools.pairwise(lines):
        m = _KEY_OPEN.match(cur)
        if not m:
            continue
        base = len(m.group(1)) + (2 if cur.lstrip().startswith("- ") else 0)
        ind = len(nxt) - len(nxt.lstrip(" "))
        if ind < base or (ind == base and not nxt.lstrip().startswith("- ")):
            continue
        if nxt.lstrip().startswith("- "):
            offset = ind - base if offset is None else offset
        elif ind > base:
            mapping = ind - base if mapping is None else mapping
        if mapping is not None and offset is not None:
            break
    nulls = len(re.findall(r":[ \t]+null[ \t]*(?:#.*)?$", text, re.M))
    tildes = len(re.findall(r":[ \t]+~[ \t]*(?:#.*)?$", text, re.M))
    return {
        "mapping": mapping or 2,
        "offset": offset or 0,
        "null": "~" if tildes > nulls else "null",
        "explicit_start": text.lstrip().startswith("---"),
    }


_CLASSES: dict[str, tuple[Any, Any]] = {}


def _classes(null: str) -> tuple[Any, Any]:
    """Return the constructor and representer classes: booleans keep their spelling, nulls are spelled `null`.

    They are subclasses, so ruamel.yaml's own round-trip classes (used by other code in the process) are untouched.
    """
    if null in _CLASSES:
        return _CLASSES[null]
    from ruamel.yaml.constructor import RoundTripConstructor, SafeConstructor
    from ruamel.yaml.representer import RoundTripRepresenter
    from ruamel.yaml.scalarbool import ScalarBoolean

    class SpelledBool(ScalarBoolean):
        """A boolean written `True`, `FALSE`, ... (or anchored): dumped as it was written."""

        spelling = "true"

    class Constructor(RoundTripConstructor):
        def construct_yaml_sbool(self, node: Any) -> Any:
            value = SafeConstructor.construct_yaml_bool(self, node)
            if node.value in ("true", "false") and not node.anchor:
                return value
            out = SpelledBool(value, anchor=node.anchor) if node.anchor else SpelledBool(value)
            out.spelling = node.value
            return out

    Constructor.add_constructor("tag:yaml.org,2002:bool", Constructor.construct_yaml_sbool)

    class Representer(RoundTripRepresenter):
        def represent_spelled_bool(self, data: Any) -> Any:
            return self.represent_scalar("tag:yaml.org,2002:bool", data.spelling, anchor=data.yaml_anchor())

        def represent_spelled_none(self, data: Any) -> Any:
            return self.represent_scalar("tag:yaml.org,2002:null", null)

    Representer.add_representer(SpelledBool, Representer.represent_spelled_bool)
    Representer.add_representer(type(None), Representer.represent_spelled_none)
    _CLASSES[null] = (Constructor, Representer)
    return _CLASSES[null]


def _yaml(style: dict[str, Any] | None = None) -> Any:
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    y.Constructor, y.Representer = _classes(style["null"] if style is not None else "null")
    if style is not None:
        y.indent(mapping=style["mapping"], sequence=style["offset"] + 2, offset=style["offset"])
        y.explicit_start = style["explicit_start"] or None
    return y


def load(text: str, path: str) -> Any:
    """Parse `text` (round-trip); raise `MigrationError` with file:line:column for invalid YAML or duplicate keys."""
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        return _yaml().load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        context = e.context
        if context and e.context_mark is not None and mark is not None and e.context_mark.line != mark.line:
            context = f"{context} (from line {e.context_mark.line + 1})"
        problem = ", ".join(str(x) for x in (context, e.problem) if x)
        if type(e).__name__ == "DuplicateKeyError":
            problem = f"duplicate key {str(e.problem).removeprefix('found duplicate key ')}; keep one of them"
        line = mark.line + 1 if mark is not None else None
        col = mark.column + 1 if mark is not None else None
        raise MigrationError(f"invalid YAML: {problem}", path=path, line=line, column=col) from e
    except YAMLError as e:
        raise MigrationError(f"invalid YAML: {e}", path=path) from e


def dump(data: Any, original: str) -> str:
    """Serialise `data` in the style guessed from `original`."""
    buf = io.StringIO()
    _yaml(guess_style(original)).dump(data, buf)
    out = buf.getvalue()
    if not original.endswith("\n") and out.endswith("\n"):
        out = out[:-1]
    return out


def restore_spelling(original: str, new: str) -> str:
    """Give back the original text of lines the dump only respelled (`key:` vs `key: null`, `a:  b` vs `a: b`).

    Lines are aligned on exact text; inside each block of lines that differ, a new line is replaced by the original
    line at the same place when both are the same YAML data, with the same indentation and the same comment, and
    the new line does not open a nested block.
    """
    import difflib

    old_lines, new_lines = original.splitlines(True), new.splitlines(True)
    out = list(new_lines)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "replace":
            continue
        pairs = difflib.SequenceMatcher(
            None, [_loose(x) for x in old_lines[i1:i2]], [_loose(x) for x in new_lines[j1:j2]], autojunk=False
        )
        for op, a1, a2, b1, b2 in pairs.get_opcodes():
            if op not in ("equal", "replace") or a2 - a1 != b2 - b1:
                continue
            for k in range(b2 - b1):
                old, j = old_lines[i1 + a1 + k], j1 + b1 + k
                opener = j + 1 < len(new_lines) and _indent(new_lines[j + 1]) > _indent(new_lines[j])
                if not opener and _same_line(old, new_lines[j]):
                    out[j] = old if old.endswith("\n") or not new_lines[j].endswith("\n") else old + "\n"
    return "".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" ")) if line.strip() else -1


def _loose(line: str) -> str:
    """Return a line's text with the spacing and null spellings a dump may change folded away (for alignment)."""
    text = re.sub(r":[ \t]+", ": ", line.rstrip())
    return re.sub(r": (?:~|null|Null|NULL)?$", ": null", text + (" " if text.endswith(":") else ""))


def _same_line(a: str, b: str) -> bool:
    """Return whether two lines hold the same YAML data, indentation and comment."""
    if _indent(a) != _indent(b) or a.strip().startswith("#") or b.strip().startswith("#"):
        return False
    ca, cb = a.partition(" #")[2].strip(), b.partition(" #")[2].strip()
    if ca != cb:
        return False
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    y = YAML(typ="safe", pure=True)
    try:
        da, db = y.load(a.strip()), y.load(b.strip())
    except YAMLError:
        return False
    return da == db and type(da) is type(db)
