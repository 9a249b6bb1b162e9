"""A small shell scanner: the words of one command of a launch script, with their spans in the text.

It follows quotes, `$(...)`, `${...}`, backticks and backslash-newline continuations, and stops at the end of the
command (newline, `;`, `&`, `|`, `)`, `#`, redirections). `verl_migrate.script` (which re-exports `Word` and
`scan_words`) and `verl_migrate.shellvars` use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_migrate.errors import MigrationError

__all__ = ["Word", "scan_words"]

_WORD_END = " \t\n;&|<>"


@dataclass
class Word:
    """One shell word of a command: its span in the script and its raw text."""

    start: int
    end: int
    raw: str


def _skip_balanced(text: str, j: int, open_: str, close: str, path: str) -> int:
    start = j
    depth = 0
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and open_ == "(":
            j = _closing_quote(text, j, "'", path)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise MigrationError(
        f"unterminated `${open_}` (no matching `{close}`)", path=path, line=text.count("\n", 0, start) + 1
    )


def _closing_quote(text: str, j: int, q: str, path: str) -> int:
    k = j + 1
    while k < len(text):
        if text[k] == "\\" and q == '"':
            k += 2
            continue
        if text[k] == q:
            return k + 1
        k += 1
    raise MigrationError(f"unterminated {q} quote", path=path, line=text.count("\n", 0, j) + 1)


def scan_words(text: str, pos: int, path: str) -> list[Word]:
    """Return the words of the command starting at `pos`, following backslash-newline continuations."""
    words: list[Word] = []
    i, n = pos, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
            continue
        if c == "\\" and text[i + 1 : i + 2] == "\n":
            i += 2
            continue
        if c in "\n;&|)#<>":
            break
        j = i
        while j < n and text[j] not in _WORD_END:
            c = text[j]
            if c == "\\":
                j += 2
            elif c in "'\"":
                j = _closing_quote(text, j, c, path)
            elif c == "$" and text[j + 1 : j + 2] in ("(", "{"):
                j = _skip_balanced(text, j + 1, text[j + 1], ")" if text[j + 1] == "(" else "}", path)
            elif c == "`":
                j = _closing_quote(text, j, "`", path)
            else:
                j += 1
        words.append(Word(i, j, text[i:j]))
        i = j
    return words
