"""`python -m verl.trainer.main_flowgrpo --help` prints the trainer's help, not the migration notes of a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

OLD = [
    line
    for line in (Path(__file__).parent / "legacy" / "old_e2e_overrides.txt").read_text().splitlines()
    if line and not line.startswith("#")
]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_with_old_overrides_prints_no_migration_notes(flag: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "VERL_COMPAT_SILENT")}
    cmd = [sys.executable, "-m", "verl.trainer.main_flowgrpo", *OLD, flag]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.startswith("usage: ")
    assert "verl-compat:" not in proc.stderr, proc.stderr
    assert "requires torchvision" not in proc.stderr
    # the one deprecation warning still names the new command
    assert "VerlDeprecationWarning: `python -m verl.trainer.main_flowgrpo` is deprecated" in proc.stderr
