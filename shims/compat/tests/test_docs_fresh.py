"""The generated mapping page and its JSON export match `verl_migrate.imports_map`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gen_import_table.py"


def test_generated_mapping_is_fresh() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
