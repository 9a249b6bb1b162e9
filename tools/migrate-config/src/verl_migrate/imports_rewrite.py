"""`verl-migrate-config --imports PATH…`: rewrite old `verl.*` diffusion imports in Python files to verl-omni.

Reads the same table as the verl-compat shim (`verl_migrate.imports_map`). Round-trips the code with libcst, so
comments and formatting outside the rewritten statements are kept byte for byte. Per imported name:

- a row with a verl-omni home and no signature adapter: `from old import X` -> `from new import Y as X`
  (the local name stays, so call sites keep working);
- a row whose call signature changed (the shim serves an adapter), a name verl-compat does not provide, a
  `from old import *` or a plain `import old.module`: left as it is and reported as `manual`, with the note.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from verl_migrate import imports_map

__all__ = ["ImportEdit", "rewrite_imports", "run"]


@dataclasses.dataclass
class ImportEdit:
    """One finding of the import rewrite: `rewrite` (done) or `manual` (left for a human), with its line."""

    action: str
    line: int
    old: str
    message: str


def _dotted(node: Any) -> str:
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _manual_reason(row: imports_map.Row) -> str:
    if row.missing:
        return f"not provided by verl-compat: {row.missing}"
    return f"the call signature changed: {row.note}" if row.note else "no verl-omni home; verl-compat keeps it"


def rewrite_imports(code: str) -> tuple[str, list[ImportEdit]]:
    """Rewrite the old diffusion imports of one module's source; return the new source and the findings.

    Raises:
        libcst.ParserSyntaxError: the code does not parse.
    """
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    modules = imports_map.module_rows()
    names = imports_map.name_rows()
    edits: list[ImportEdit] = []

    class Rewriter(cst.CSTTransformer):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def leave_SimpleStatementLine(self, original: Any, updated: Any) -> Any:
            if len(updated.body) != 1:
                return updated
            stmt = updated.body[0]
            line = self.get_metadata(PositionProvider, original).start.line
            if isinstance(stmt, cst.Import):
                for alias in stmt.names:
                    mod = _dotted(alias.name)
                    if mod in modules or mod in names:
                        row = modules.get(mod)
                        new = f" (verl-omni: `{row.new}`)" if row is not None and row.new else ""
                        edits.append(ImportEdit("manual", line, f"import {mod}", f"import the used names{new}"))
                return updated
            if not isinstance(stmt, cst.ImportFrom) or stmt.relative or stmt.module is None:
                return updated
            mod = _dotted(stmt.module)
            if mod not in modules:
                return updated
            if isinstance(stmt.names, cst.ImportStar):
                edits.append(ImportEdit("manual", line, f"from {mod} import *", "import the used names one by one"))
                return updated
            keep: list[Any] = []
            moved: dict[str, list[Any]] = {}
            for alias in stmt.names:
                name = _dotted(alias.name)
                local = alias.asname.name.value if alias.asname else name
                row = names.get(mod, {}).get(name)
                if row is None or row.missing or row.served or not row.new:
                    keep.append(alias)
                    why = _manual_reason(row) if row is not None else "not in the mapping"
                    edits.append(ImportEdit("manual", line, f"from {mod} import {name}", why))
                    continue
                new_mod, _, new_name = row.new.partition(":")
                as_ = None if new_name == local else cst.AsName(name=cst.Name(local))
                moved.setdefault(new_mod, []).append(cst.ImportAlias(name=cst.Name(new_name), asname=as_))
                text = f"from {new_mod} import {new_name}" + (f" as {local}" if as_ else "")
                note = f" ({row.note})" if row.note else ""
                edits.append(ImportEdit("rewrite", line, f"from {mod} import {name}", f"-> {text}{note}"))
            if not moved:
                return updated
            lines = []
            if keep:
                # a parenthesized import keeps its commas (and the comments after them); else drop the last one
                last = keep[-1] if stmt.lpar else keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                lines.append(cst.SimpleStatementLine(body=[stmt.with_changes(names=[*keep[:-1], last])]))
            for new_mod, aliases in moved.items():
                aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                new_stmt = cst.ImportFrom(module=cst.parse_expression(new_mod), names=aliases)
                lines.append(cst.SimpleStatementLine(body=[new_stmt]))
            # comments above the statement stay above it; a trailing comment stays on the last line
            lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
            lines[-1] = lines[-1].with_changes(trailing_whitespace=updated.trailing_whitespace)
            return cst.FlattenSentinel(lines)

    wrapper = MetadataWrapper(cst.parse_module(code))
    new = wrapper.visit(Rewriter()).code
    return new, edits


def _python_files(paths: Sequence[str]) -> Iterator[Path]:
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.py") if ".venv" not in q.parts and ".git" not in q.parts)
        else:
            yield p


def run(args: Any) -> int:
    """The `--imports` mode of the CLI: print / diff / check / rewrite in place; exit 1 on `--check` changes."""
    import libcst as cst

    changed_any = False
    status = 0
    files = list(_python_files(args.paths))
    if not files:
        print("verl-migrate-config --imports: give Python files or folders", file=sys.stderr)
        return 2
    for path in files:
        try:
            old = path.read_text(encoding="utf-8")
            new, edits = rewrite_imports(old)
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError) as e:
            print(f"{path}: error: {e}", file=sys.stderr)
            status = 2
            continue
        for e in edits:
            print(f"{path}:{e.line}: {e.action}: {e.old} {e.message}", file=sys.stderr)
        changed = new != old
        changed_any |= changed
        if args.check:
            continue
        if args.diff:
            sys.stdout.writelines(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), str(path))
            )
        elif args.in_place:
            if changed:
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(new, encoding="utf-8")
                if not args.no_backup:
                    path.with_name(path.name + ".bak").write_text(old, encoding="utf-8")
                tmp.replace(path)
        elif args.output:
            Path(args.output).write_text(new, encoding="utf-8")
        else:
            sys.stdout.write(new)
    if status:
        return status
    return 1 if (args.check and changed_any) else 0
