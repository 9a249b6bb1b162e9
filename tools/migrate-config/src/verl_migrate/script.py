"""Launch scripts: find `python3 -m verl.trainer.main_flowgrpo ...` commands and rewrite them in place.

Words are located with a small shell scanner (`verl_migrate.shellwords`: quotes, `$(...)`, `${...}`, backslash
continuations) and decoded with `shlex`; edits replace only the words that change, so the script's layout and shell
variables stay.
"""

from __future__ import annotations

import re
import shlex

from verl_migrate import engine
from verl_migrate.overridedoc import Override, OverrideDoc
from verl_migrate.report import Change, FileReport
from verl_migrate.shellvars import assignments
from verl_migrate.shellwords import Word, scan_words

__all__ = ["Word", "commands", "migrate_script_text", "scan_words"]

_ENTRY = re.compile(
    r"(?<![\w./$-])(?:[\w.$/{}-]*/)?python3?(?:\.\d+)?((?:[ \t]+-[A-Za-z]+)*)[ \t]+-m[ \t]+(?P<mod>[\w.]+)"
)


def _decode(word: Word) -> str:
    try:
        parts = shlex.split(word.raw, comments=False, posix=True)
    except ValueError:
        return word.raw
    return parts[0] if len(parts) == 1 else word.raw


def _requote(raw: str, old: Override, new_token: str) -> str:
    """Return `raw` edited to decode to `new_token`, touching only the key / value text that changed."""
    old_head = old.orig[0] + str(old.orig[1])
    cand = raw
    off = 1 if raw[:1] in "'\"" else 0
    if raw[off:].startswith(old_head):
        head = new_token.split("=", 1)[0]
        cand = raw[:off] + head + raw[off + len(old_head) :]
    old_value = old.orig[2]
    new_value = new_token.split("=", 1)[1] if "=" in new_token else None
    if old_value is not None and new_value is not None and old_value != new_value:
        eq = cand.find("=")
        if eq >= 0 and old_value in cand[eq + 1 :]:
            cand = cand[: eq + 1] + cand[eq + 1 :].replace(old_value, new_value, 1)
    try:
        if shlex.split(cand) == [new_token]:
            return cand
    except ValueError:
        pass
    if "$" in new_token and not set('"`\\') & set(new_token):
        return f'"{new_token}"'
    return shlex.quote(new_token)


def _line_span(text: str, pos: int) -> tuple[int, int]:
    """Return the start and end (before the newline) of the line holding `pos`."""
    ls = text.rfind("\n", 0, pos) + 1
    le = text.find("\n", pos)
    return ls, len(text) if le < 0 else le


def migrate_script_text(text: str, path: str, rules_only=None, rules_skip=None) -> tuple[str, FileReport]:
    """Rewrite every old-entry-point command of a launch script; return the new text and the report.

    Values reached through simple `NAME=value` assignments of the script are seen by the rules; a rewritten value
    edits its assignment when the variable is used once, otherwise the override gets the literal.
    """
    report = FileReport(path, kind="script")
    entry_rules = engine.select_rules("script", rules_only, rules_skip)
    rules = engine.select_rules("overrides", rules_only, rules_skip)
    modules = {m: r for r in engine.select_rules("script") for m in getattr(r, "modules", ())}
    edits: list[tuple[int, int, str]] = []
    for m in _ENTRY.finditer(text):
        ls = text.rfind("\n", 0, m.start()) + 1
        if "#" in text[ls : m.start()] or m.group("mod") not in modules:
            continue
        rule = modules[m.group("mod")]
        line = text.count("\n", 0, m.start()) + 1
        if rule in entry_rules:
            edits.append((m.start("mod"), m.end("mod"), rule.module))
            report.add(
                Change(
                    rule.id, "entry-point", f"python3 -m {m.group('mod')}", new=f"python3 -m {rule.module}", line=line
                )
            )
        words = scan_words(text, m.end(), path)
        variables = assignments(text, path, ls)
        doc = OverrideDoc([_decode(w) for w in words], report, legacy=True, variables=variables)
        for e, w in zip(doc.entries, words):
            e.line = text.count("\n", 0, w.start) + 1
        engine.run(doc, rules)
        edits.extend(_word_edits(text, m.start(), words, doc))
        for name, value in doc.var_edits.items():
            a = variables[name]
            assert a.span is not None
            edits.append((a.span[0], a.span[1], _shell_literal(value)))
    if not edits:
        return text, report
    out = text
    for start, end, new in sorted(set(edits), key=lambda x: (x[0], x[1]), reverse=True):
        out = out[:start] + new + out[end:]
    report.changed = out != text
    return out, report


def _shell_literal(value: str) -> str:
    """Return `value` as shell text for an assignment (quoted only when it needs it)."""
    return value if re.fullmatch(r"[\w./:@%+,-]*", value) else shlex.quote(value)


def _word_edits(text: str, entry_start: int, words: list[Word], doc: OverrideDoc) -> list[tuple[int, int, str]]:
    """Plan the edits of one command.

    Rewritten words are replaced in place, removed words go (with their line when it empties), new overrides are
    added; every line but the command's last keeps its backslash continuation.
    """
    edits: list[tuple[int, int, str]] = []
    deleted = {e.index for e in doc.entries if e.index is not None and e.deleted}
    for e in doc.entries:
        if e.index is not None and e.changed and not e.deleted:
            w = words[e.index]
            edits.append((w.start, w.end, _requote(w.raw, e, e.token())))
    entry_line = _line_span(text, entry_start)
    lines: dict[tuple[int, int], list[int]] = {entry_line: []}
    for i, w in enumerate(words):
        lines.setdefault(_line_span(text, w.start), []).append(i)
    order = sorted(lines)
    kept_lines = [ln for ln in order if ln == entry_line or any(i not in deleted for i in lines[ln])]
    for ln in order:
        if ln not in kept_lines:
            edits.append((ln[0], min(ln[1] + 1, len(text)), ""))  # the whole line goes
            continue
        for i in lines[ln]:
            if i in deleted:
                k = words[i].start
                while k > ln[0] and text[k - 1] in " \t":
                    k -= 1
                edits.append((k, words[i].end, ""))
    last = kept_lines[-1]
    if last != order[-1]:  # the old last line(s) went: the new last line must not continue
        k = last[1]
        while k > last[0] and text[k - 1] in " \t\\":
            k -= 1
        edits.append((k, last[1], ""))
    new = [shlex.quote(e.token()) for e in doc.entries if e.index is None and not e.deleted]
    if not new:
        return edits
    if last == entry_line:
        kept = [w for i, w in enumerate(words) if i not in deleted and _line_span(text, w.start) == last]
        override_words = [w for w, e in zip(words, doc.entries) if e.key is not None and w in kept]
        at = (override_words or kept or [None])[-1]
        pos = at.end if at is not None else _entry_end(text, entry_start)
        edits.append((pos, pos, "".join(" " + t for t in new)))
    else:
        indent = text[last[0] : last[0] + len(text[last[0] : last[1]]) - len(text[last[0] : last[1]].lstrip())]
        edits.append((last[0], last[0], "".join(f"{indent}{t} \\\n" for t in new)))
    return edits


def _entry_end(text: str, entry_start: int) -> int:
    m = _ENTRY.match(text, entry_start) or _NEW_ENTRY.match(text, entry_start)
    return m.end() if m else entry_start


_NEW_ENTRY = re.compile(r"(?<![\w./-])verl-omni-train(?![\w.-])")


def commands(text: str, path: str) -> list[list[str]]:
    """Return the decoded argument words of every trainer command in `text` (old or new entry point)."""
    from verl_migrate.target import ENTRY_MODULE

    known = {ENTRY_MODULE} | {m for r in engine.select_rules("script") for m in getattr(r, "modules", ())}
    out = []
    for rx in (_NEW_ENTRY, _ENTRY):
        for m in rx.finditer(text):
            ls = text.rfind("\n", 0, m.start()) + 1
            if "#" in text[ls : m.start()] or (rx is _ENTRY and m.group("mod") not in known):
                continue
            out.append([_decode(w) for w in scan_words(text, m.end(), path)])
    return out
