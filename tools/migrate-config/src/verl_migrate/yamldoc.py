"""`YamlDoc`: the `Doc` interface over a ruamel.yaml round-trip tree (comments and order kept)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from verl_migrate.comments import Gaps, reindent
from verl_migrate.doc import Doc, GroupEntry
from verl_migrate.errors import MigrationError
from verl_migrate.keys import is_old_key
from verl_migrate.report import FileReport
from verl_migrate.target import CONFIG_NAME

_OLD_TARGET_PREFIX = ("verl.workers.config.", "verl.trainer.config.Diffusion")


def _split(path: str) -> list[str]:
    return path.split(".") if path else []


class YamlDoc(Doc):
    """A YAML document; paths address nested mappings."""

    kind = "yaml"
    #: mapping indentation of the file (moved keys' end-of-line comments keep their distance)
    indent = 2

    def __init__(self, root: CommentedMap, report: FileReport, *, package: str = ""):
        """Wrap the loaded root mapping and work out whether it is a dump, layered on defaults, or legacy.

        `package` is the Hydra package of a config-group file (e.g. `actor_rollout_ref.rollout`): its keys are
        addressed below that path; its own `defaults:` list is left alone.
        """
        super().__init__(report)
        self.package = package
        self.skip_paths = {f"{package}.defaults"} if package else {"defaults", "hydra"}
        head = root.ca.comment[1] if package and root.ca.comment else None
        if package:
            root.ca.comment = None
            outer = CommentedMap()
            node = outer
            *parents, last = package.split(".")
            for part in parents:
                node[part] = CommentedMap()
                node = node[part]
            node[last] = root
            root = outer
        self.root = root
        self.gaps = Gaps(root)
        if head:
            from verl_migrate.comments import tokens_to_lines

            self.gaps.set_gap(self._node(package), 0, tokens_to_lines(head))
        self.gaps.set_top(self._node(package) if package else root)
        top = self.gaps.top
        gaps = [self.gaps.gap(top, i) for i in range(1, len(top))]
        #: the lines a new top-level section gets above it: a blank line when the file separates its sections so
        self._section_gap = [""] if gaps and all(g[:1] == [""] for g in gaps) else []
        self._shared = _shared_containers(root)
        self._created: dict[str, str] = {}
        self.full_dump = not package and any(
            self.has(p) for p in ("actor_rollout_ref.rollout._target_", "actor_rollout_ref.actor._target_")
        )
        entries = self.group_entries()
        on_trainer = any(e.group.lstrip("/") == CONFIG_NAME for e in entries)
        #: a root config: it composes the config groups itself (a defaults list with `group@package` entries)
        self.is_root = not package and not on_trainer and not self.full_dump and any(e.package for e in entries)
        self.root_based = self.full_dump or on_trainer or self.is_root
        self.legacy = self._looks_legacy([] if package else entries)

    def _looks_legacy(self, entries: list[GroupEntry]) -> bool:
        from verl_migrate.keys import is_head_key

        old_groups = {"model_engine", "actor", "ref", "rollout", "model", "critic", "legacy_reward_impl"}
        if any(e.group in old_groups for e in entries):
            return True
        for path, value in self.items():
            if is_old_key(path) and not is_head_key(path):
                return True
            if path.endswith("._target_") and str(value).startswith(_OLD_TARGET_PREFIX):
                return True
        return False

    # -- navigation -------------------------------------------------------------------------------------------
    def _locate(self, path: str) -> tuple[Any, str] | None:
        parts = _split(path)
        node: Any = self.root
        for part in parts[:-1]:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        if not isinstance(node, dict) or parts[-1] not in node:
            return None
        return node, parts[-1]

    def _node(self, path: str) -> Any:
        if not path:
            return self.root
        loc = self._locate(path)
        return None if loc is None else loc[0][loc[1]]

    def has(self, path: str) -> bool:
        """Return whether `path` is present (leaf or mapping)."""
        return not path or self._locate(path) is not None

    def is_map(self, path: str) -> bool:
        """Return whether `path` is a mapping with at least one key."""
        node = self._node(path)
        return isinstance(node, dict) and len(node) > 0

    def get(self, path: str) -> Any:
        """Return the raw ruamel value at `path` (None if absent)."""
        return self._node(path)

    def children(self, path: str) -> list[str]:
        """Return the keys directly below `path`."""
        node = self._node(path)
        return [str(k) for k in node] if isinstance(node, dict) else []

    def leaves(self, path: str = "") -> list[str]:
        """Return leaf paths at or below `path` (an empty mapping counts as a leaf), skipping `defaults`."""
        return [p for p, _ in self.items(path)]

    def items(self, path: str = "") -> list[tuple[str, Any]]:
        """Return `(leaf path, value)` pairs at or below `path`, in document order (one walk, no lookups)."""
        if path and not self.has(path):
            return []
        out: list[tuple[str, Any]] = []

        def walk(node: Any, prefix: str) -> None:
            if prefix and not (isinstance(node, dict) and len(node)):
                out.append((prefix, node))
                return
            for key, value in node.items():
                sub = f"{prefix}.{key}" if prefix else str(key)
                if sub in self.skip_paths:
                    continue
                walk(value, sub)

        walk(self._node(path), path)
        return out

    def line(self, path: str) -> int | None:
        """Return the 1-based line of the key at `path`."""
        loc = self._locate(path) if path else None
        if loc is None:
            return None
        try:
            return loc[0].lc.key(loc[1])[0] + 1
        except (KeyError, TypeError, AttributeError):
            return None

    # -- editing helpers -------------------------------------------------------------------------------------
    def _check_own(self, parent: CommentedMap, key: str) -> None:
        if id(parent) in self._shared:
            anchor = parent.anchor.value if getattr(parent, "anchor", None) is not None else None
            name = f"`&{anchor}`" if anchor else "an anchored mapping"
            raise MigrationError(
                f"key `{key}` has to move, but it sits in {name}, which is also used through an alias elsewhere; "
                "moving it would change every place that uses the alias. Write the mapping out where it is used "
                "instead of aliasing it, then run again",
                path=self.report.path,
                line=self.line_of_map(parent),
            )
        own = getattr(parent, "_ok", None)
        if own is not None and key not in own:
            raise MigrationError(
                f"key `{key}` comes from a YAML merge (`<<: *anchor`) and has to move; rename it in the anchored "
                "mapping or write it out instead of merging, then run again",
                path=self.report.path,
                line=self.line_of_map(parent),
            )

    def line_of_map(self, node: Any) -> int | None:
        """Return the 1-based first line of a mapping node, if known."""
        try:
            return node.lc.line + 1
        except (AttributeError, TypeError):
            return None

    def column(self, path: str) -> int:
        """Return the column a key at `path` is written at (the file's indentation times its depth)."""
        depth = len(_split(path)) - 1 - len(_split(self.package))
        return max(0, depth) * self.indent

    def _pop(self, parent: CommentedMap, key: str) -> tuple[Any, Any, list[str], list[str]]:
        """Remove `parent[key]`; return its value, comment entry, and the separator and comment lines above it."""
        self._check_own(parent, key)
        return self.gaps.remove(parent, key)

    def _top_emptied(self, path: str) -> str:
        """Return the highest ancestor of `path` (or `path`) that holds nothing else, below the file's top level."""
        parts = _split(path)
        floor = len(_split(self.package)) + 1
        while len(parts) > floor:
            parent = self._node(".".join(parts[:-1]))
            if not (isinstance(parent, dict) and len(parent) == 1):
                break
            parts = parts[:-1]
        return ".".join(parts)

    # -- writing ----------------------------------------------------------------------------------------------
    def delete(self, path: str) -> None:
        """Remove `path` and every mapping that becomes empty because of it (their comments go with them)."""
        if self._locate(path) is None:
            return
        loc = self._locate(self._top_emptied(path))
        assert loc is not None
        self._pop(loc[0], loc[1])

    def _ensure_map(
        self, parts: list[str], anchor: list[str] | None, anchor_pos: dict[str, int], lines: list[str]
    ) -> CommentedMap:
        """Return the mapping at `parts`, creating missing ones (with `lines` above them) next to where `anchor` was."""
        node: Any = self.root
        for i, part in enumerate(parts):
            if part not in node:
                pos = len(node)
                slot = ".".join(anchor[: i + 1]) if anchor is not None else ""
                if anchor is not None and len(anchor) > i and anchor[:i] == parts[:i]:
                    keys = list(node.keys())
                    if self._created.get(slot) in keys:
                        pos = keys.index(self._created[slot]) + 1
                    elif anchor[i] in keys:
                        pos = keys.index(anchor[i]) + 1
                    else:
                        pos = min(anchor_pos.get(slot, pos), len(node))
                    self._created[slot] = part
                above = reindent(lines, self.column(".".join(parts[: i + 1])))
                if node is self.gaps.top and pos == len(node) and not above:
                    above = list(self._section_gap)
                self.gaps.insert(node, pos, part, CommentedMap(), None, above)
            if node[part] is None:  # `key:` with no value is an empty mapping for our purpose
                node[part] = CommentedMap()
            node = node[part]
            if not isinstance(node, dict):
                where = ".".join(parts[: i + 1])
                raise MigrationError(
                    f"`{where}` holds a value, but verl-omni needs a mapping there (for `{'.'.join(parts)}`); "
                    "remove or rename it and run again",
                    path=self.report.path,
                    line=self.line(where),
                )
        return node

    def move(self, src: str, dst: str) -> None:
        """Move `src` to the absent `dst` with the comment lines above it; new mappings are created where `src` was."""
        loc = self._locate(src)
        if loc is None:
            return
        s_parts, d_parts = _split(src), _split(dst)
        anchor_pos: dict[str, int] = {}
        for i in range(1, len(s_parts) + 1):
            ploc = self._locate(".".join(s_parts[:i]))
            assert ploc is not None
            anchor_pos[".".join(s_parts[:i])] = list(ploc[0].keys()).index(ploc[1])
        tok = loc[0].ca.items.get(loc[1], [None, None, None])[2] if isinstance(loc[0], CommentedMap) else None
        own_eol = tok is not None and not self.gaps.borrowed(loc[0], loc[1], tok)
        value, entry, sep, lead = self._pop(*loc)
        parts = s_parts[:-1]
        while parts and parts != d_parts[: len(parts)] and len(parts) > len(_split(self.package)):
            node = self._node(".".join(parts))
            if not (isinstance(node, dict) and not node):
                break
            ploc = self._locate(".".join(parts))
            assert ploc is not None
            self._pop(*ploc)
            parts = parts[:-1]
        target = self._ensure_map(d_parts[:-1], s_parts, anchor_pos, sep)
        pos = min(anchor_pos[src], len(target)) if d_parts[:-1] == s_parts[:-1] else len(target)
        delta = self.column(dst) - self.column(src)
        self.gaps.shift_subtree(value, delta)
        if own_eol and entry is not None and len(entry) > 2 and entry[2] is not None:
            with contextlib.suppress(AttributeError, TypeError):
                entry[2].start_mark.column = max(
                    0, entry[2].start_mark.column + delta + len(d_parts[-1]) - len(s_parts[-1])
                )
        self.gaps.insert(target, pos, d_parts[-1], value, entry, reindent(sep + lead, self.column(dst)))

    def set(self, path: str, value: Any, first: bool = False) -> None:
        """Set `path` to `value` (Python data; lists in flow style); a new key goes last, or first if `first`."""
        if isinstance(value, list):
            seq = CommentedSeq(value)
            seq.fa.set_flow_style()
            value = seq
        loc = self._locate(path)
        if loc is not None:
            parent, key = loc
            if not isinstance(parent[key], (dict, list)):
                tok = self.gaps.own_token(parent, key)
                if tok is not None:
                    with contextlib.suppress(AttributeError, TypeError):
                        tok.start_mark.column = max(0, tok.start_mark.column + len(str(value)) - len(str(parent[key])))
            parent[key] = value
            return
        parts = _split(path)
        parent = self._ensure_map(parts[:-1], None, {}, [])
        self.gaps.insert(parent, 0 if first else len(parent), parts[-1], value, None, [])

    def strings(self) -> Iterator[tuple[str, str, Any]]:
        """Yield `(path, text, (container, key))` for every string scalar outside `defaults`."""

        def walk(node: Any, path: str) -> Iterator[tuple[str, str, Any]]:
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for k, v in items:
                p = f"{path}.{k}" if path else str(k)
                if p in self.skip_paths:
                    continue
                if isinstance(v, str):
                    yield p, str(v), (node, k)
                elif isinstance(v, (dict, list)):
                    yield from walk(v, p)

        yield from walk(self.root, "")

    def replace_string(self, handle: Any, text: str) -> None:
        """Replace a string value, keeping its scalar style (quotes)."""
        node, key = handle
        old = node[key]
        node[key] = type(old)(text) if type(old) is not str else text

    # -- defaults list ----------------------------------------------------------------------------------------
    def packaged_root(self) -> Any:
        """Return the mapping that is the file's top level (the package node for a config-group file)."""
        if not self.package:
            return self.root
        node = self._node(self.package)
        extra = [k for k in self.root if k != self.package.split(".")[0]] or [
            p for p in self.leaves() if not p.startswith(self.package + ".")
        ]
        if extra:
            raise MigrationError(
                f"migrating this `{self.package}` group file would move `{extra[0]}` outside its package; "
                "migrate the config that composes it instead",
                path=self.report.path,
            )
        if node is None:
            return CommentedMap()
        from verl_migrate.comments import lines_to_tokens

        head = self.gaps.gap(node, 0) if len(node) else []
        node.ca.comment = [None, lines_to_tokens(head)] if head else None
        return node

    def searchpath(self) -> list[tuple[str, int | None]]:
        """Return the entries of the file's `hydra.searchpath` list, with their lines."""
        seq = self.get("hydra.searchpath") if not self.package else None
        if not isinstance(seq, list):
            return []
        out = []
        for i, item in enumerate(seq):
            try:
                line = seq.lc.item(i)[0] + 1
            except (AttributeError, KeyError, TypeError, IndexError):
                line = None
            out.append((str(item), line))
        return out

    def owns(self, path: str) -> bool:
        """Return whether `path` lies in this file (below the package of a config-group file)."""
        return not self.package or path.startswith(self.package + ".")

    def defaults_seq(self) -> Any:
        """Return the file's own `defaults:` list (None if it has none)."""
        node = self._node(self.package) if self.package else self.root
        seq = node.get("defaults") if isinstance(node, dict) else None
        return seq if isinstance(seq, list) else None

    def insert_group(self, index: int, name: str, option: str | None) -> None:
        """Insert the defaults entry `name: option` (or `name`) at `index`, spaced like the entry it goes before."""
        seq = self.defaults_seq()
        if seq is None:
            return
        item: Any = name
        if option is not None:
            item = CommentedMap()
            item[name] = option
        from verl_migrate.comments import split_lead

        _, sep, _ = split_lead(self.gaps.gap(seq, min(index, len(seq))))
        self.gaps.insert(seq, index, index, item, None, list(sep))

    def group_entries(self) -> list[GroupEntry]:
        """Return the entries of the file's `defaults:` list (a config-group file's own list is relative to it)."""
        seq = self.defaults_seq()
        if not isinstance(seq, list):
            return []
        out = []
        for i, item in enumerate(seq):
            if isinstance(item, str):
                out.append(GroupEntry((seq, i), item, None, None, False))
            elif isinstance(item, dict) and len(item) == 1:
                ((name, option),) = item.items()
                override = str(name).startswith("override ")
                name = str(name)[len("override ") :] if override else str(name)
                group, _, package = name.partition("@")
                out.append(
                    GroupEntry((seq, i), group, package or None, None if option is None else str(option), override)
                )
        return out

    def replace_group(self, entry: GroupEntry, group: str, package: str | None, option: str | None) -> None:
        """Rewrite a defaults entry in place (same position, same comment)."""
        seq, i = entry.handle
        if option is None and entry.option is None:
            seq[i] = group
            return
        name = ("override " if entry.override else "") + (f"{group}@{package}" if package else group)
        item = seq[i]
        if not isinstance(item, CommentedMap):
            new = CommentedMap()
            new[name] = option
            seq[i] = new
            return
        (old_name,) = list(item.keys())
        tok = self.gaps.own_token(item, old_name)
        item.ca.items.pop(old_name, None)
        del item[old_name]
        item[name] = option
        if tok is not None:
            with contextlib.suppress(AttributeError, TypeError):
                tok.column = max(0, tok.column + len(name) - len(old_name) + len(str(option)) - len(str(entry.option)))
            item.ca.items[name] = [None, None, tok, None]

    def delete_group(self, entry: GroupEntry) -> None:
        """Remove a defaults entry (later handles are re-read by the caller)."""
        seq, i = entry.handle
        self.gaps.remove(seq, i)


def _shared_containers(root: Any) -> set[int]:
    """Return the ids of mappings and sequences reached more than once (an anchor used through aliases)."""
    seen: set[int] = set()
    shared: set[int] = set()

    def walk(node: Any) -> None:
        if not isinstance(node, (dict, list)):
            return
        if id(node) in seen:
            shared.add(id(node))
            return
        seen.add(id(node))
        for child in node.values() if isinstance(node, dict) else node:
            walk(child)

    walk(root)
    return shared
