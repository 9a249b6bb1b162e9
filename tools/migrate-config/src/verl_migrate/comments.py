"""Comment and blank lines of a ruamel.yaml round-trip tree, kept with the key they sit above.

ruamel.yaml stores the lines between two keys at the end of the previous key's last leaf (in the comment token
that starts with that leaf's end-of-line comment), and the lines above the first key of a mapping on the parent
key (or, for the top level, on the root). Deleting or moving a key with plain ruamel operations therefore leaves
its comment above the wrong neighbour. `Gaps` hides the storage: `gap(c, i)` is the list of lines above child `i`
of container `c` (`gap(c, len(c))`: the lines after its last child), and `remove` / `insert` keep every comment
block with the key below it and every blank line that separates sections.

A line is `""` (blank) or a comment line with its indentation (`"  # note"`).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken

Lines = list[str]


def split_lead(lines: Lines) -> tuple[Lines, Lines, Lines]:
    """Split the lines above a key into (floating, separator, lead).

    `lead` is the comment block right above the key (no blank line in it), `separator` the blank lines right above
    that block, `floating` everything above the lead, separator included (comments about something else).
    """
    n = len(lines)
    i = n
    while i > 0 and lines[i - 1].strip():
        i -= 1
    j = i
    while j > 0 and not lines[j - 1].strip():
        j -= 1
    return lines[:i], lines[j:i], lines[i:]


def join_gaps(above: Lines, below: Lines) -> Lines:
    """Concatenate two runs of lines, keeping as many blank lines at the seam as the larger side had.

    With nothing below (the end of the file), blank lines that ended `above` go too.
    """
    if not below:
        return _rstrip_blank(above)
    a = len(above) - len(_rstrip_blank(above))
    b = len(below) - len(_lstrip_blank(below))
    return _rstrip_blank(above) + [""] * max(a, b) + _lstrip_blank(below)


def _rstrip_blank(lines: Lines) -> Lines:
    k = len(lines)
    while k and not lines[k - 1].strip():
        k -= 1
    return lines[:k]


def _lstrip_blank(lines: Lines) -> Lines:
    k = 0
    while k < len(lines) and not lines[k].strip():
        k += 1
    return lines[k:]


def reindent(lines: Lines, column: int) -> Lines:
    """Return `lines` with every comment line starting at `column`."""
    return [ln.strip() and " " * column + ln.strip() for ln in lines]


def shift(lines: Lines, delta: int) -> Lines:
    """Return `lines` with every comment line moved right by `delta` columns (left if negative, never below 0)."""
    out = []
    for ln in lines:
        if not ln.strip():
            out.append("")
            continue
        ind = len(ln) - len(ln.lstrip(" "))
        out.append(" " * max(0, ind + delta) + ln.lstrip(" "))
    return out


def _slot(container: Any) -> int:
    return 0 if isinstance(container, CommentedSeq) else 2


def _keys(container: Any) -> list[Any]:
    return list(container.keys()) if isinstance(container, dict) else list(range(len(container)))


def _holds(container: Any, key: Any, value: Any) -> bool:
    try:
        return container[key] is value
    except (KeyError, IndexError, TypeError):
        return False


def _is_nonempty(value: Any) -> bool:
    """Return whether `value` is a block mapping or sequence with children (a flow one is written on one line)."""
    if not isinstance(value, (CommentedMap, CommentedSeq)) or len(value) == 0:
        return False
    try:
        return not value.fa.flow_style()
    except AttributeError:
        return True


def tokens_to_lines(tokens: list[Any] | None) -> Lines:
    """Return the lines held by a list of ruamel.yaml comment tokens (the form used above a first key)."""
    out: Lines = []
    for tok in tokens or ():
        if tok is None:
            continue
        col = getattr(tok, "column", 0) or 0
        parts = tok.value.split("\n")
        if parts and parts[-1] == "":
            parts = parts[:-1]
        for k, part in enumerate(parts):
            if not part.strip():
                out.append("")
            elif k == 0 and part.startswith("#"):
                out.append(" " * col + part)
            else:
                out.append(part)
    return out


def lines_to_tokens(lines: Lines) -> list[Any]:
    """Return one ruamel.yaml comment token per line (the inverse of `tokens_to_lines`)."""
    out = []
    for ln in lines:
        if not ln.strip():
            out.append(CommentToken("\n", CommentMark(0), None))
        else:
            ind = len(ln) - len(ln.lstrip(" "))
            out.append(CommentToken(ln.lstrip(" ") + "\n", CommentMark(ind), None))
    return out


class Gaps:
    """The comment/blank lines of one document tree, addressed by container and child position."""

    def __init__(self, root: Any):
        """Bind to the document's root mapping."""
        self.root = root
        self._parents: dict[int, tuple[Any, Any]] | None = None
        self._owners: dict[int, tuple[int, Any]] = self._scan_anchor_tokens()
        #: the mapping that is the file's top level (the package node of a config-group file)
        self.top = root
        #: the comment lines at the top of the file that are not the first key's comment (see `set_top`)
        self.header: Lines = []

    def set_top(self, top: Any) -> None:
        """Mark `top` as the file's top level and pin its header: the comment block at the very top of the file.

        The header is everything above the first key up to the last blank line, or, with no blank line there, all
        of it (`# @package ...` right above the first key is a header, not that key's comment). It stays on top
        whichever key ends up first.
        """
        self.top = top
        head = self.gap(top, 0) if len(top) else []
        floating, _, _ = split_lead(head)
        self.header = _rstrip_blank(floating) if any(not ln.strip() for ln in head) else list(head)

    def _split_head(self, container: Any, lines: Lines) -> tuple[Lines, Lines, Lines]:
        """`split_lead` for the lines above a first child; the file's header always stays floating."""
        if container is self.top and self.header and lines[: len(self.header)] == self.header:
            k = len(self.header)
            floating, sep, lead = split_lead(lines[k:])
            if not floating and not lead:
                return self.header + sep, [], []
            return self.header + floating, sep, lead
        return split_lead(lines)

    # -- parents ----------------------------------------------------------------------------------------------
    def parent(self, container: Any) -> tuple[Any, Any] | None:
        """Return `(parent, key)` holding `container` (None for the root or a node not in the tree)."""
        if container is self.root:
            return None
        if self._parents is None or id(container) not in self._parents:
            self._parents = self._walk_parents()
        up = self._parents.get(id(container))
        if up is not None and not _holds(up[0], up[1], container):
            self._parents = self._walk_parents()  # the tree changed behind our back (a value replaced in place)
            up = self._parents.get(id(container))
        return up

    def forget_parents(self) -> None:
        """Drop the cached parent links (call after replacing containers outside `insert`/`remove`)."""
        self._parents = None

    def _walk_parents(self) -> dict[int, tuple[Any, Any]]:
        out: dict[int, tuple[Any, Any]] = {}
        todo = [self.root]
        while todo:
            node = todo.pop()
            for k in _keys(node):
                child = node[k]
                if isinstance(child, (CommentedMap, CommentedSeq)) and id(child) not in out:
                    out[id(child)] = (node, k)
                    todo.append(child)
        return out

    def _register(self, container: Any) -> None:
        """Record the parent links of `container`'s children (after an insert or a removal shifted them)."""
        if self._parents is None:
            return
        for k in _keys(container):
            child = container[k]
            if isinstance(child, (CommentedMap, CommentedSeq)):
                self._parents[id(child)] = (container, k)

    # -- end-of-line tokens ---------------------------------------------------------------------------------
    def _token(self, container: Any, key: Any) -> Any:
        entry = container.ca.items.get(key)
        slot = _slot(container)
        if not entry or len(entry) <= slot:
            return None
        return entry[slot]

    def _scan_anchor_tokens(self) -> dict[int, tuple[int, Any]]:
        """Map each comment token that ruamel.yaml shares between an anchored scalar's occurrences to its owner.

        The owner is the occurrence on whose line the token starts (the anchor); found once, at load positions.
        """
        owners: dict[int, tuple[int, Any]] = {}
        todo = [self.root]
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for k in _keys(node):
                child = node[k]
                if isinstance(child, (CommentedMap, CommentedSeq)):
                    todo.append(child)
                    continue
                tok = self._token(node, k)
                if tok is None or getattr(getattr(child, "anchor", None), "value", None) is None:
                    continue
                try:
                    line = node.lc.key(k)[0] if isinstance(node, CommentedMap) else node.lc.item(k)[0]
                except (AttributeError, KeyError, TypeError, IndexError):
                    continue
                if tok.start_mark.line == line:
                    owners[id(tok)] = (id(node), k)
                else:
                    owners.setdefault(id(tok), (-1, None))
        return owners

    def borrowed(self, container: Any, key: Any, tok: Any) -> bool:
        """Return whether `tok` belongs to an anchored value's first occurrence, seen here through an alias.

        ruamel.yaml gives every occurrence of an anchored scalar the anchor's comment token, and writes the comment
        of the last occurrence it represents at the anchor; such a token must be left as it is.
        """
        owner = self._owners.get(id(tok))
        return owner is not None and owner != (id(container), key)

    def own_token(self, container: Any, key: Any) -> Any:
        """Return `container[key]`'s end-of-line token, copied when shared (None if absent or `borrowed`)."""
        tok = self._token(container, key)
        if tok is None or self.borrowed(container, key, tok):
            return None
        if id(tok) in self._owners:
            return tok  # the anchor's own token: its aliases must keep seeing the same object
        new = CommentToken(tok.value, copy.copy(tok.start_mark), None)
        container.ca.items[key][_slot(container)] = new
        return new

    def _last_leaf(self, container: Any, key: Any) -> tuple[Any, Any]:
        value = container[key]
        while _is_nonempty(value):
            container, key = value, _keys(value)[-1]
            value = container[key]
        return container, key

    def _rest(self, container: Any, key: Any) -> Lines:
        tok = self._token(container, key)
        if tok is None or self.borrowed(container, key, tok):
            return []
        _, _, rest = tok.value.partition("\n")
        return tokens_to_lines([CommentToken(rest, CommentMark(0), None)]) if rest else []

    def _set_rest(self, container: Any, key: Any, lines: Lines) -> None:
        tok = self._token(container, key)
        if tok is not None and self.borrowed(container, key, tok) and not lines:
            return
        tok = self.own_token(container, key)
        eol = tok.value.partition("\n")[0] if tok is not None else ""
        if not eol.strip() and not lines:
            if tok is not None:
                container.ca.items[key][_slot(container)] = None
            return
        text = eol + "\n" + "".join(ln + "\n" for ln in lines)
        if tok is not None:
            tok.value = text
            return
        entry = container.ca.items.setdefault(key, [None, None, None, None])
        entry[_slot(container)] = CommentToken(text, CommentMark(0), None)

    # -- the lines above the first child ----------------------------------------------------------------------
    def _head(self, container: Any) -> Lines:
        if container is self.root:
            return tokens_to_lines((container.ca.comment or [None, None])[1])
        up = self.parent(container)
        if up is None:
            return []
        parent, key = up
        if isinstance(parent, CommentedSeq):
            return self.gap(parent, key)
        entry = parent.ca.items.get(key)
        return tokens_to_lines(entry[3] if entry and len(entry) > 3 else None)

    def _set_head(self, container: Any, lines: Lines) -> None:
        tokens = lines_to_tokens(lines) if lines else None
        if container is self.root:
            if container.ca.comment is None:
                container.ca.comment = [None, None]
            container.ca.comment[1] = tokens
            return
        up = self.parent(container)
        if up is None:
            return
        parent, key = up
        if isinstance(parent, CommentedSeq):
            self.set_gap(parent, key, lines)
            return
        entry = parent.ca.items.setdefault(key, [None, None, None, None])
        while len(entry) < 4:
            entry.append(None)
        entry[3] = tokens
        container.ca.comment = [None, tokens] if tokens else None

    # -- gaps -------------------------------------------------------------------------------------------------
    def gap(self, container: Any, index: int) -> Lines:
        """Return the lines above child `index` (`index == len(container)`: the lines after the last child)."""
        if index == 0 and len(container) == 0:
            up = self.parent(container)
            return self._rest(*up) if up is not None else []
        if index == 0:
            return self._head(container)
        return self._rest(*self._last_leaf(container, _keys(container)[index - 1]))

    def set_gap(self, container: Any, index: int, lines: Lines) -> None:
        """Replace the lines above child `index` (see `gap`)."""
        if index == 0 and len(container) == 0:
            up = self.parent(container)
            if up is not None:
                self._set_rest(*up, lines)
            return
        if index == 0:
            self._set_head(container, lines)
            return
        self._set_rest(*self._last_leaf(container, _keys(container)[index - 1]), lines)

    # -- edits ------------------------------------------------------------------------------------------------
    def remove(self, container: Any, key: Any) -> tuple[Any, list[Any] | None, Lines, Lines]:
        """Remove `container[key]`; return its value, its comment entry, and its separator and lead lines.

        The lead comment block leaves with the key; lines above it that are not its lead stay, joined to the lines
        of the next child (or, for the last child, the lines after the container).
        """
        keys = _keys(container)
        i = keys.index(key)
        above = self.gap(container, i)
        floating, sep, lead = self._split_head(container, above) if i == 0 else split_lead(above)
        below = self.gap(container, i + 1)
        if i == 0:
            self._set_head(container, [])
        else:
            self._set_rest(*self._last_leaf(container, keys[i - 1]), [])
        self._set_rest(*self._last_leaf(container, key), [])
        value = container[key]
        entry = container.ca.items.get(key)
        if isinstance(container, CommentedMap):
            container.ca.items.pop(key, None)
        del container[key]  # a sequence shifts the comment entries of the later items itself
        if isinstance(container, CommentedSeq):
            self._register(container)
        joined = join_gaps(floating, below)
        if i == 0 and container is self.top and not any(ln.strip() for ln in floating):
            joined = _lstrip_blank(joined)  # no blank line at the start of the file
        self.set_gap(container, i, joined)
        return value, entry, sep, lead

    def insert(self, container: Any, index: int, key: Any, value: Any, entry: Any, lines: Lines) -> None:
        """Insert `key: value` (with its comment `entry`) at `index`, with `lines` above it.

        The lines that were at that position (above the old child `index`, or after the container) follow it.
        """
        below = self.gap(container, index)
        if len(container) == 0:
            self.set_gap(container, 0, [])
        elif index == 0:
            # lines about the container itself (the file header, say) stay on top; the old first child keeps its own
            floating, sep, lead = self._split_head(container, below)
            below = sep + lead if lead else []
            lines = join_gaps(floating, lines) if floating else lines
            self._set_head(container, [])
        else:
            self._set_rest(*self._last_leaf(container, _keys(container)[index - 1]), [])
        if isinstance(container, CommentedMap):
            container.insert(index, key, value)
            if entry is not None:
                container.ca.items[key] = entry
        else:
            container.insert(index, value)  # shifts the comment entries of the later items itself
            if entry is not None:
                container.ca.items[index] = entry
        if isinstance(container, CommentedSeq):
            self._register(container)
        elif self._parents is not None and isinstance(value, (CommentedMap, CommentedSeq)):
            self._parents[id(value)] = (container, key)
        self.set_gap(container, index + 1, below)
        self.set_gap(container, index, lines)

    def shift_subtree(self, value: Any, delta: int) -> None:
        """Move every comment inside `value` (a mapping or sequence) right by `delta` columns."""
        if not isinstance(value, (CommentedMap, CommentedSeq)) or delta == 0:
            return
        for k in _keys(value):
            tok = self.own_token(value, k)
            if tok is not None:
                eol, _, rest = tok.value.partition("\n")
                lines = shift(tokens_to_lines([CommentToken(rest, CommentMark(0), None)]) if rest else [], delta)
                tok.value = eol + "\n" + "".join(ln + "\n" for ln in lines)
                if eol.strip():
                    with contextlib.suppress(AttributeError, TypeError):
                        tok.start_mark.column = max(0, tok.start_mark.column + delta)
            entry = value.ca.items.get(k)
            if isinstance(value, CommentedMap) and entry and len(entry) > 3 and entry[3]:
                entry[3] = lines_to_tokens(shift(tokens_to_lines(entry[3]), delta))
                if isinstance(value[k], (CommentedMap, CommentedSeq)):
                    value[k].ca.comment = [None, entry[3]]
            self.shift_subtree(value[k], delta)
