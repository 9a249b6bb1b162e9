"""The mapping table (verl_migrate.imports_map): every row resolves, every §1 name has a row."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from verl_migrate import imports_map

LEGACY_NAMES = Path(__file__).parent / "legacy" / "legacy_surface_names.txt"


def _resolves(target: str) -> bool:
    """`module:attr` imports; an attribute built on first access (needs vllm/vllm-omni) must be declared."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    if not attr:
        return True
    return attr in vars(module) or attr in getattr(module, "__annotations__", {})


@pytest.mark.parametrize("row", [r for r in imports_map.ROWS if r.target or r.new], ids=lambda r: r.old)
def test_every_row_resolves(row: imports_map.Row) -> None:
    for target in {row.target, row.new} - {None}:
        assert _resolves(target), f"{row.old}: {target} does not resolve"


def test_every_legacy_surface_name_has_a_row() -> None:
    wanted = [line.strip() for line in LEGACY_NAMES.read_text().splitlines() if line and not line.startswith("#")]
    rows = {r.old for r in imports_map.ROWS}
    missing = [w for w in wanted if w not in rows]
    assert not missing, missing
    assert len(wanted) > 60


def test_rows_are_consistent() -> None:
    olds = [r.old for r in imports_map.ROWS]
    assert len(olds) == len(set(olds)), "duplicate rows"
    modules = imports_map.module_rows()
    for r in imports_map.ROWS:
        assert r.kind in ("", "removed", "trimmed", "registry")
        if not r.kind:
            assert r.old_module in modules, f"{r.old}: its module has no module row"
            assert bool(r.missing) != bool(r.target), f"{r.old}: served and missing at once (or neither)"
