"""Start-up stays light: no torch / verl_core ever, and `--help` does not even load ruamel.yaml."""

import os
import subprocess
import sys

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "old_full_dump.yaml")

_PROBE = """
import sys
from verl_migrate.cli import main
try:
    code = main({argv!r})
except SystemExit as e:
    code = e.code
roots = {{'torch', 'verl_core', 'verl_omni', 'hydra', 'omegaconf', 'ruamel'}}
heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots)
print(code, ','.join(heavy), file=sys.stderr)
"""


def _probe(argv: list[str]) -> tuple[str, set[str]]:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE.format(argv=argv)], capture_output=True, text=True, check=True, timeout=60
    )
    code, _, mods = res.stderr.strip().splitlines()[-1].partition(" ")
    return code, {m.split(".")[0] for m in mods.split(",") if m}


def test_help_loads_no_yaml_library() -> None:
    code, mods = _probe(["--help"])
    assert code == "0" and mods == set()


def test_migration_imports_only_ruamel() -> None:
    code, mods = _probe(["--check", GOLDEN])
    assert code == "1" and mods == {"ruamel"}


def test_importing_the_package_is_free() -> None:
    res = subprocess.run(
        [sys.executable, "-c", "import sys, verl_migrate; print(sorted(m for m in sys.modules if 'ruamel' in m))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert res.stdout.strip() == "[]"
