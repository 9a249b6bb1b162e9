"""What `benchmarks/*.py` write by default (their `--out` / `--out-dir` folders) is ignored by git."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_OUT_ARG = re.compile(
    r"add_argument\(\s*\"--out(?:-dir)?\",\s*default=(?:os\.environ\.get\(\"OUT\",\s*)?\"(?P<folder>[^\"]+)\""
)


def default_out_folders() -> dict[str, str]:
    """Script name -> the folder its `--out`/`--out-dir` argument defaults to (scripts without one are left out)."""
    found = {}
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        match = _OUT_ARG.search(script.read_text(encoding="utf-8"))
        if match:
            found[script.name] = match["folder"]
    return found


def test_default_out_folders_are_found():
    folders = default_out_folders()
    assert folders.get("bench_trainer_run.py") == "benchmarks/results"
    assert folders.get("bench_compat_import.py") == "outputs"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_benchmark_results_are_ignored_by_git():
    paths = sorted({f"{folder}/bench_result.json" for folder in default_out_folders().values()})
    proc = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    ignored = set(proc.stdout.split())
    assert not set(paths) - ignored, f"not in .gitignore: {sorted(set(paths) - ignored)}"
